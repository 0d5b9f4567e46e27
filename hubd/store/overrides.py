"""The `device_overrides` table (0011_owner.sql, 0012_exposed_by_owner.sql): the owner's name, room, exposure (and
what hubd keeps back by rule that the owner exposed) and doorbell event per endpointId.

Every SQL statement on it. The registry reads it at start and writes it only through the outbox writer's
transaction (`write_overrides_blocking`, called by `hubd.store.devices.write_rows_blocking`), so an override and
the AddOrUpdateReport or DeleteReport it causes are durable together; a new grant's AddOrUpdateReport reads it in
the grant's transaction (`hubd.store.devices.platform_endpoints_blocking`). A row whose values are all unset is
kept, with the time it was cleared.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from hubd.devices.overrides import Override

OverrideRow = tuple[str, Override, float]  # endpoint id, the override (empty: cleared), when


def load_overrides_blocking(conn: sqlite3.Connection) -> dict[str, Override]:
    """Every override that sets something, by endpointId."""
    out: dict[str, Override] = {}
    for endpoint_id, name, room, hidden, doorbell, revealed in conn.execute(
            "SELECT endpoint_id, name, room, hidden, doorbell, revealed FROM device_overrides"):
        override = Override(name, room, bool(hidden), doorbell, bool(revealed))
        if not override.empty:
            out[str(endpoint_id)] = override
    return out


def write_overrides_blocking(conn: sqlite3.Connection, rows: Sequence[OverrideRow]) -> None:
    """Upsert overrides (inside the caller's transaction); an empty one is kept as a row of unset values."""
    conn.executemany(
        "INSERT INTO device_overrides (endpoint_id, name, room, hidden, doorbell, revealed, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(endpoint_id) DO UPDATE SET name=excluded.name, room=excluded.room, hidden=excluded.hidden, "
        "doorbell=excluded.doorbell, revealed=excluded.revealed, updated_at=excluded.updated_at",
        [(endpoint_id, o.name, o.room, int(o.hidden), o.doorbell, int(o.revealed), at) for endpoint_id, o, at in rows])
