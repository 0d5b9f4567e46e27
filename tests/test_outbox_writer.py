"""The outbox writer and the sender share the feed: rows committed go to the sender in memory, and rows delivered
are deleted in the writer's next commit (not in a transaction of their own)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from outbox_helpers import change, press, running_sender
from unit_helpers import eventually

from hubd.errors import StoreError
from hubd.metrics import Metrics
from hubd.outbox.feed import OutboxFeed
from hubd.outbox.writer import OutboxWriter
from hubd.store import outbox as outbox_store
from hubd.store.devices import DeviceRows

NOTHING = DeviceRows((), ())


async def test_rows_a_commit_writes_reach_the_sender_and_delivered_ones_go_with_the_next_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own_deletes: list[list[int]] = []
    real_delete = outbox_store.delete_blocking

    def counted(conn: sqlite3.Connection, ids: list[int]) -> None:
        own_deletes.append(list(ids))
        real_delete(conn, ids)

    monkeypatch.setattr(outbox_store, "delete_blocking", counted)
    monkeypatch.setattr("hubd.outbox.sender.DELETE_EVERY_S", 3600.0)  # the sender would wait an hour
    async with running_sender(tmp_path) as rig:
        assert rig.feed is not None
        writer = OutboxWriter(rig.db, namespace="Service", metrics=Metrics(), outbox_wakeup=rig.wakeup, feed=rig.feed)
        rig.tokens.tokens["alice"] = "alice:1"
        assert await writer.enqueue([press("bell"), change("lamp", "On")], ["alice"]) == 2
        feed = rig.feed
        await eventually(lambda: feed.delivered_count == 2, "both delivered and waiting to be deleted")
        assert len(await rig.rows()) == 2  # delivered, not deleted yet
        await writer.commit([], NOTHING)  # the next device commit deletes them in its transaction
        assert await rig.rows() == [] and rig.feed.delivered_count == 0
        assert own_deletes == []


async def test_delivered_rows_no_commit_took_are_deleted_by_the_sender(tmp_path: Path) -> None:
    async with running_sender(tmp_path) as rig:
        assert rig.feed is not None
        writer = OutboxWriter(rig.db, namespace="Service", metrics=Metrics(), outbox_wakeup=rig.wakeup, feed=rig.feed)
        rig.tokens.tokens["alice"] = "alice:1"
        await writer.enqueue([press("bell")], ["alice"])
        await eventually(lambda: len(rig.api.accepted) == 1, "delivered")

        async def gone() -> bool:
            return await rig.rows() == []

        await eventually(gone, "the delivered row deleted by the sender, no commit coming")


async def test_a_failed_commit_gives_the_delivered_rows_back(tmp_path: Path) -> None:
    async with running_sender(tmp_path) as rig:
        assert rig.feed is not None
        writer = OutboxWriter(rig.db, namespace="Service", metrics=Metrics(), outbox_wakeup=rig.wakeup, feed=rig.feed)
        rig.feed.delivered(41, 1.0)
        rig.feed.delivered(42, 2.0)
        broken = DeviceRows((("x",),), ())  # a row of the wrong shape: the transaction fails and rolls back
        with pytest.raises(StoreError):
            await writer.commit([], broken)
        assert rig.feed.take_delivered() == [41, 42]


def test_the_sender_takes_only_delivered_rows_that_waited_for_a_commit_long_enough() -> None:
    feed = OutboxFeed()
    for row_id, at in ((1, 10.0), (2, 10.02), (3, 10.05)):
        feed.delivered(row_id, at)
    assert feed.take_delivered(until=10.02) == [1, 2]  # the sender, at 10.07 with a 50 ms wait
    assert feed.delivered_count == 1
    feed.delivered_again([1, 2])  # a failed delete: they go first
    assert feed.take_delivered() == [1, 2, 3]  # the writer takes everything
    assert feed.take_delivered() == []
