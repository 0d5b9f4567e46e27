"""The outbox sender's discovery windows (`hubd.outbox.sender`): AddOrUpdateReports (and DeleteReports) committed
within DISCOVERY_WINDOW_S go as one message per user, made one row before the first try; nothing else waits.

In-process on a real SQLite file, with the fake platform, tokens and clock of tests/outbox_helpers.py: a window
closes only when the test moves the clock, so "not sent yet" is a state the test holds, not a race it times.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from outbox_helpers import FakeTokens, Posted, SenderRig, change, endpoint, insert_rows, running_sender
from unit_helpers import eventually

from hubd.cloud import messages
from hubd.config.model import StorageConfig
from hubd.errors import CloudUnavailable
from hubd.events import PendingEvent
from hubd.outbox import sender as outbox
from hubd.outbox.decide import DISCOVERY_BATCH, discovery_events
from hubd.store import outbox as outbox_store
from hubd.store.db import Database


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[SenderRig]:
    async with running_sender(tmp_path) as rig:
        yield rig


def report(*ids: str) -> PendingEvent:
    """One AddOrUpdateReport of these endpoints, as a commit of new configs makes it."""
    [event] = discovery_events("Service", [endpoint(i) for i in ids])
    return event


def deleted(*ids: str) -> PendingEvent:
    return PendingEvent("DeleteReport", ids, messages.delete_report("Service", "", list(ids)))


def reports(rig: SenderRig, user: str, name: str = "AddOrUpdateReport") -> list[Posted]:
    return [p for p in rig.api.posted if p.user == user and p.name == name]


async def test_reports_committed_apart_within_a_window_go_in_one_message_per_user_and_nothing_else_waits(
        rig: SenderRig) -> None:
    rig.tokens.tokens.update({"alice": "alice:1", "bob": "bob:1"})
    for user in ("alice", "bob"):  # three commits, as three configs in three MQTT batches make them
        await rig.queue(user, report("lamp"))
    for user in ("alice", "bob"):
        await rig.queue(user, report("door", "hall"), deleted("old"))
    await rig.queue("alice", change("fan", "On"))
    await eventually(lambda: len(rig.api.of("alice", "fan")) == 1, "the fan's change, without waiting")
    assert reports(rig, "alice") == [] and reports(rig, "bob") == []  # the clock stands still: the window is open
    first_ids = {r["user_id"]: r["message_id"] for r in reversed(await rig.rows())
                 if r["name"] == "AddOrUpdateReport"}
    await rig.close_windows(6)
    for user in ("alice", "bob"):
        await eventually(lambda u=user: len(reports(rig, u)) == 1 and len(reports(rig, u, "DeleteReport")) == 1,
                         f"{user}'s reports")
        [added] = reports(rig, user)
        assert added.endpoints == ("lamp", "door", "hall")
        assert [e["endpointId"] for e in added.body["payload"]["endpoints"]] == ["lamp", "door", "hall"]
        assert added.message_id == first_ids[user]  # the first row's, which had never been sent
        assert reports(rig, user, "DeleteReport")[0].endpoints == ("old",)  # never in an AddOrUpdateReport's message
    await eventually(lambda: rig.sender.depth() == 0, "an empty index")
    assert rig.metrics.counter("hubd_events_merged_total", "").get() == 2  # bob's and alice's second report


async def test_a_devices_events_wait_behind_its_report_and_other_devices_do_not(rig: SenderRig) -> None:
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", report("lamp"))
    await rig.queue("alice", change("lamp", "On"), change("fan", "On"), report("door"))
    await eventually(lambda: len(rig.api.of("alice", "fan")) == 1, "the fan's change")
    assert rig.api.of("alice", "lamp") == []  # the lamp's change waits behind the lamp's report
    await rig.close_windows(3)
    await eventually(lambda: len(rig.api.of("alice", "lamp")) == 2, "the lamp's report, then its change")
    assert [(p.name, p.endpoints) for p in rig.api.of("alice", "lamp")] == [
        ("AddOrUpdateReport", ("lamp", "door")), ("ChangeReport", ("lamp",))]


async def test_a_merged_report_is_one_row_before_its_first_try_and_keeps_its_message_id_after_a_restart(
        tmp_path: Path) -> None:
    tokens = FakeTokens(tokens={"alice": "alice:1"})
    async with running_sender(tmp_path, tokens=tokens) as rig:
        async def down(post: Posted) -> None:
            raise CloudUnavailable("platform answered 503")

        rig.api.behaviour["alice"] = down
        await rig.queue("alice", report("lamp"))
        await rig.queue("alice", report("door"))
        await rig.close_windows(2)

        async def tried() -> bool:
            return [r["attempts"] for r in await rig.rows()] == [1]
        await eventually(tried, "one row, tried once")
        [row] = await rig.rows()
        [post] = rig.api.posted
        assert json.loads(row["lanes"]) == ["lamp", "door"] and post.endpoints == ("lamp", "door")
        assert row["message_id"] == post.message_id == json.loads(row["body"])["header"]["messageId"]
    # hubd stops (or dies) before the platform took it: the row goes again as it is, same messageId.
    async with running_sender(tmp_path, tokens=tokens) as again:
        await again.later(outbox.RETRY_CAP_S)  # its retry time
        await eventually(lambda: len(again.api.accepted) == 1, "the report after the restart")
        assert (again.api.accepted[0].message_id, again.api.accepted[0].endpoints) == (
            post.message_id, ("lamp", "door"))


async def test_rows_read_back_after_a_restart_go_as_they_are_without_waiting(tmp_path: Path) -> None:
    # Nothing tells whether a row read back had been sent before the restart: its messageId may be on the wire,
    # so it is never merged (a crash inside a window sends that window's reports one by one).
    tokens = FakeTokens()
    async with running_sender(tmp_path, tokens=tokens) as rig:  # alice has no grant yet: nothing goes
        await rig.queue("alice", report("lamp"))
        await rig.queue("alice", report("door"))
        stored = sorted((tuple(json.loads(r["lanes"])), r["message_id"]) for r in await rig.rows())
    tokens.tokens["alice"] = "alice:1"
    async with running_sender(tmp_path, tokens=tokens) as again:
        await eventually(lambda: len(again.api.accepted) == 2, "both reports, with the clock standing still")
        assert sorted((p.endpoints, p.message_id) for p in again.api.accepted) == stored


async def test_a_window_beyond_one_messages_endpoints_goes_in_several_in_order(rig: SenderRig) -> None:
    rig.tokens.tokens["alice"] = "alice:1"
    count = DISCOVERY_BATCH + 50
    for i in range(count):
        await rig.queue("alice", report(f"d{i}"))
    await rig.close_windows(count)
    await eventually(lambda: sum(len(p.endpoints) for p in reports(rig, "alice")) == count, "every endpoint")
    first, rest = sorted(reports(rig, "alice"), key=lambda p: -len(p.endpoints))
    assert (len(first.endpoints), len(rest.endpoints)) == (DISCOVERY_BATCH, 50)
    assert [*first.endpoints, *rest.endpoints] == [f"d{i}" for i in range(count)]  # split in order


async def test_a_merge_the_disk_refuses_sends_the_reports_one_by_one(
        rig: SenderRig, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(conn: sqlite3.Connection, row_id: int, others: list[int], delivered: list[int]) -> None:
        err = sqlite3.OperationalError("database or disk is full")
        err.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
        raise err

    monkeypatch.setattr(outbox_store, "merge_blocking", full)
    probe = asyncio.create_task(rig.db.run())  # the database's probe: writes go again after the refusal
    try:
        rig.tokens.tokens["alice"] = "alice:1"
        await rig.queue("alice", report("lamp"))
        await rig.queue("alice", report("door"))
        await rig.close_windows(2)
        await eventually(lambda: len(rig.api.accepted) == 2, "both reports, each alone")
        assert sorted(p.endpoints for p in rig.api.accepted) == [("door",), ("lamp",)]
        assert len({p.message_id for p in rig.api.accepted}) == 2
    finally:
        probe.cancel()


def named(endpoint_id: str, name: str) -> PendingEvent:
    """An AddOrUpdateReport of one endpoint under this displayName."""
    [event] = discovery_events("Service", [{**endpoint(endpoint_id), "displayName": name}])
    return event


async def test_a_device_described_again_within_its_window_is_heard_once_as_it_ended_up(rig: SenderRig) -> None:
    """A device whose entities arrive one by one is described at each (its name, its parts): within one window
    the platform gets one message with each endpoint's last description, in its first place."""
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", named("relay", "Switch Two"))
    await rig.queue("alice", named("relay", "Switch One"), named("relay-2", "Switch Two"))
    await rig.queue("alice", named("relay", "Switch One"), report("lamp"))
    first = next(r["message_id"] for r in await rig.rows() if r["name"] == "AddOrUpdateReport")
    await rig.close_windows(3)
    await eventually(lambda: rig.sender.depth() == 0, "every report sent")
    [added] = reports(rig, "alice")
    assert [(e["endpointId"], e["displayName"]) for e in added.body["payload"]["endpoints"]] == \
        [("relay", "Switch One"), ("relay-2", "Switch Two"), ("lamp", "Lamp")]
    assert added.message_id == first


async def test_a_report_behind_a_change_of_its_device_waits_for_it(rig: SenderRig) -> None:
    """A description never jumps ahead of a state of its device: it goes after that ChangeReport, in order."""
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", named("relay", "Switch Two"))
    await rig.queue("alice", change("relay", "On"))
    await rig.queue("alice", named("relay", "Switch One"))
    await rig.close_windows(3)
    await eventually(lambda: rig.sender.depth() == 0, "every event sent")
    sent = [(p.name, p.body["payload"]["endpoints"][0]["displayName"] if p.name == "AddOrUpdateReport" else "")
            for p in rig.api.posted]
    assert sent == [("AddOrUpdateReport", "Switch Two"), ("ChangeReport", ""), ("AddOrUpdateReport", "Switch One")]


async def test_a_merge_deletes_the_delivered_rows_that_could_stand_between_its_endpoints(tmp_path: Path) -> None:
    """A delivered DeleteReport of a device, not deleted yet, sits between the window's first report and a newer
    one re-adding that device: read back after a crash it would go again after the re-add. The merge deletes it."""
    db = Database.of(StorageConfig(path=tmp_path / "hubd.db"))
    [added, removed, again] = db.call_blocking(
        lambda conn: insert_rows(conn, [report("lamp"), deleted("door"), report("door")], "alice"))
    merged = db.call_blocking(outbox_store.merge_blocking, added.id, [again.id], [removed.id])
    assert merged is not None and merged[1] == [again.id]
    left = db.call_blocking(lambda conn: [r[0] for r in conn.execute("SELECT id FROM outbox ORDER BY id")])
    assert left == [added.id]  # the re-add went into the first row; the delivered DeleteReport is gone
