"""Receipts of committed device messages: a redelivery of a message already stored is recognised."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hubd.store.db import Database
from hubd.store.receipts import KEEP_BATCHES, ReceiptBook, receipt, record_receipts_blocking


async def _commit(db: Database, receipts: list[tuple[int, str, int]]) -> None:
    def write(conn: sqlite3.Connection) -> None:
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            record_receipts_blocking(conn, receipts)
    await db.call(write)


async def test_a_committed_message_is_found_by_packet_id_topic_and_payload(tmp_path: Path) -> None:
    db = Database(tmp_path / "hubd.db")
    await db.start()
    try:
        stored = receipt(7, "hubd/device/lamp/state", b'{"Switch": "On"}')
        await _commit(db, [stored, receipt(8, "hubd/device/lamp/state", b'{"Switch": "Off"}')])
        book = ReceiptBook(db)
        same_id_other_payload = receipt(7, "hubd/device/lamp/state", b'{"Switch": "Off"}')
        same_id_other_topic = receipt(7, "hubd/device/fan/state", b'{"Switch": "On"}')
        never = receipt(9, "hubd/device/lamp/state", b'{"Switch": "On"}')
        assert await book.stored([stored, same_id_other_payload, same_id_other_topic, never]) == {stored}
        assert await book.stored([]) == set()
    finally:
        await db.stop()


async def test_only_the_last_batches_are_kept_and_a_reused_packet_id_replaces_the_old_receipt(
        tmp_path: Path) -> None:
    db = Database(tmp_path / "hubd.db")
    await db.start()
    try:
        first = receipt(1, "t", b"a")
        await _commit(db, [first])
        for n in range(KEEP_BATCHES):
            await _commit(db, [receipt(100 + n, "t", b"x")])
        book = ReceiptBook(db)
        assert await book.stored([first]) == set()  # its batch is older than the last KEEP_BATCHES
        assert await book.stored([receipt(100, "t", b"x")]) == {receipt(100, "t", b"x")}
        await _commit(db, [receipt(100, "t", b"y")])  # the broker reuses a packet id: the newer receipt wins
        assert await book.stored([receipt(100, "t", b"x"), receipt(100, "t", b"y")]) == {receipt(100, "t", b"y")}
        rows = await db.call(lambda conn: conn.execute("SELECT COUNT(*) FROM mqtt_receipts").fetchone()[0])
        assert rows <= KEEP_BATCHES
    finally:
        await db.stop()
