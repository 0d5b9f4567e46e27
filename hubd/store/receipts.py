"""The mqtt_receipts table: which QoS 1 device messages the last committed batches came from.

hubd acknowledges a device message (PUBACK) only once what it caused is committed, so a crash between the
commit and the PUBACK makes the broker send the message again, with its packet id and the DUP flag. Applied
again, an older value would come back over a newer one and be reported as a new change. So every commit of
the registry's changes also records a `Receipt` (packet id, topic, CRC-32 of the payload) of each QoS 1
message of its batch, in the same transaction; the bridge looks a redelivered message up here and only
acknowledges it if it is found. The receipts of the last KEEP_BATCHES commits are kept (a packet id is reused
by the broker only after 65,535 others). A restored database forgets them all (`clear_receipts_blocking`): they
describe the broker session of the backup's time.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterable, Sequence

from hubd.store.db import Database
from hubd.store.snapshot import table_names_blocking

Receipt = tuple[int, str, int]  # packet id, topic, CRC-32 of the payload
KEEP_BATCHES = 4


def receipt(mid: int, topic: str, payload: bytes) -> Receipt:
    """The receipt of one message."""
    return (mid, topic, zlib.crc32(payload))


def record_receipts_blocking(conn: sqlite3.Connection, receipts: Sequence[Receipt]) -> None:
    """Inside the caller's transaction: note this batch's receipts, forget those of older batches."""
    if not receipts:
        return
    batch = int(conn.execute("SELECT COALESCE(MAX(batch), 0) + 1 FROM mqtt_receipts").fetchone()[0])
    conn.executemany("INSERT OR REPLACE INTO mqtt_receipts (mid, topic, digest, batch) VALUES (?, ?, ?, ?)",
                     [(mid, topic, digest, batch) for mid, topic, digest in receipts])
    conn.execute("DELETE FROM mqtt_receipts WHERE batch <= ?", (batch - KEEP_BATCHES,))


def clear_receipts_blocking(conn: sqlite3.Connection) -> None:
    """Forget every receipt (a database of a schema without the table has none)."""
    if "mqtt_receipts" in table_names_blocking(conn):
        conn.execute("DELETE FROM mqtt_receipts")


def _stored_blocking(conn: sqlite3.Connection, receipts: list[Receipt]) -> set[Receipt]:
    found: set[Receipt] = set()
    for start in range(0, len(receipts), 500):
        chunk = receipts[start:start + 500]
        marks = ",".join("?" * len(chunk))
        found.update((int(r[0]), str(r[1]), int(r[2])) for r in conn.execute(
            f"SELECT mid, topic, digest FROM mqtt_receipts WHERE mid IN ({marks})",  # noqa: S608 (only "?" marks)
            [mid for mid, _, _ in chunk]))
    return found & set(receipts)


class ReceiptBook:
    """Answers the bridge: which of these redelivered messages were already committed."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def stored(self, receipts: Iterable[Receipt]) -> set[Receipt]:
        """The receipts among `receipts` that a committed batch recorded."""
        wanted = list(receipts)
        if not wanted:
            return set()
        return await self._db.call(_stored_blocking, wanted)
