"""The `devices` table: one row per known device (its config, states, availability, route and origin).

Every SQL statement on it, and the row's encoding both ways (`device_row`, `load_devices_blocking`). The
registry is its only writer, and writes only through the outbox writer's transaction (`write_rows_blocking`,
inside the caller's transaction), so device rows and the events they cause are durable together; the
registry reads it at start, and a new grant's AddOrUpdateReport reads it in the grant's transaction
(`platform_endpoints_blocking`, with the owner's overrides of `hubd.store.overrides`, written in the same
transaction as the rows). A config is stored as its `canonical()` text: the device's own, as its dialect described
it, never with the owner's name or room (those are applied when it is loaded); states as
{interface: [value, timeOfSample]}.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from hubd.devices.device import Device
from hubd.devices.model import EntityNote, Origin, Route, StateSample, load_config
from hubd.store.overrides import OverrideRow, load_overrides_blocking, write_overrides_blocking

DeviceRow = tuple[str, str, str, int | None, str, str, str]  # id, config, states, online, dialect, address, origin


@dataclass(frozen=True, slots=True)
class DeviceRows:
    """What to persist for a batch: rows to upsert and ids to delete (and the owner's overrides that changed)."""

    upserts: tuple[DeviceRow, ...]
    deletes: tuple[str, ...]
    overrides: tuple[OverrideRow, ...] = ()


def device_row(device: Device) -> DeviceRow:
    """The device's `devices` table row."""
    states = {k: [s.value, s.time_of_sample] for k, s in device.states.items()}
    online = None if device.online is None else int(device.online)
    return (device.device_id, device.described.canonical(), json.dumps(states, separators=(",", ":")), online,
            device.route.dialect, device.route.address, _origin_json(device.origin))


def load_devices_blocking(conn: sqlite3.Connection) -> list[Device]:
    """Every device in the `devices` table, sorted by id (the registry at start; a new grant's devices)."""
    devices = []
    for device_id, config_json, states_json, online, dialect, address, origin_json in conn.execute(
            "SELECT id, config, states, online, dialect, address, origin FROM devices ORDER BY id"):
        states = {k: StateSample(k, v[0], v[1]) for k, v in json.loads(states_json).items()}
        devices.append(Device(device_id, load_config(config_json), states,
                              None if online is None else bool(online), Route(dialect, address),
                              _load_origin(dialect, origin_json)))
    return devices


def write_rows_blocking(conn: sqlite3.Connection, rows: DeviceRows) -> None:
    """Upsert and delete device rows (inside the caller's transaction)."""
    conn.executemany(
        "INSERT INTO devices (id, config, states, online, dialect, address, origin) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET config=excluded.config, states=excluded.states, online=excluded.online, "
        "dialect=excluded.dialect, address=excluded.address, origin=excluded.origin",
        rows.upserts,
    )
    conn.executemany("DELETE FROM devices WHERE id = ?", [(d,) for d in rows.deletes])
    if rows.overrides:
        write_overrides_blocking(conn, rows.overrides)


def platform_endpoints_blocking(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """The platform's Endpoint (with states) of every device the owner did not hide, with the owner's name and room:
    what a new grant's AddOrUpdateReport carries (read in the grant's transaction)."""
    overrides = load_overrides_blocking(conn)
    out = []
    for device in load_devices_blocking(conn):
        override = overrides.get(device.device_id)
        if override is not None:
            if override.hidden:
                continue
            device.config = override.apply(device.config)
        out.append(device.endpoint())
    return out


def _origin_json(origin: Origin) -> str:
    data: dict[str, object] = {}
    if origin.entities:
        data["entities"] = [[e.name, e.exported, e.reason] for e in origin.entities]
    if origin.naming:
        data["naming"] = origin.naming
    return json.dumps(data, separators=(",", ":")) if data else "{}"


def _load_origin(dialect: str, text: str) -> Origin:
    data = json.loads(text) if text else {}
    return Origin(dialect, tuple(EntityNote(str(n), bool(x), str(r)) for n, x, r in data.get("entities", ())),
                  str(data.get("naming", "")))
