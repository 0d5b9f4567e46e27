"""OutboxSender in-process: real SQLite, a fake PlatformApi and TokenSource, a clock the test moves.

Nothing here waits on wall-clock time: conditions are polled with a generous deadline, and retries are
made due by moving the fake clock and waking the sender.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from outbox_helpers import Posted, SenderRig, change, endpoint, held, insert_rows, press, running_sender
from unit_helpers import NOW, eventually

from hubd.cloud import messages
from hubd.errors import CloudAuthError, CloudRejected, CloudUnavailable
from hubd.events import BARRIER_LANE, PendingEvent
from hubd.outbox import sender as outbox
from hubd.outbox.decide import discovery_events
from hubd.store import outbox as outbox_store
from hubd.store.outbox import insert_events_blocking


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[SenderRig]:
    async with running_sender(tmp_path) as rig:
        yield rig


@pytest.fixture
async def unfed(tmp_path: Path) -> AsyncIterator[SenderRig]:
    """A sender without the writer's feed: it reads every new row back from the outbox."""
    async with running_sender(tmp_path, fed=False) as rig:
        yield rig


async def test_in_order_per_device_and_devices_in_parallel(rig: SenderRig) -> None:
    gate = asyncio.Event()
    rig.api.behaviour["alice"] = held(gate, "lamp")
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", change("lamp", "On"), change("lamp", "Off"), change("fan", "On"), change("lamp", "On"),
                    change("fan", "Off"))
    # The fan's events go while the lamp's first one hangs; the lamp's second waits for its first.
    await eventually(lambda: len(rig.api.of("alice", "fan")) == 2, "the fan's two events")
    assert [p.endpoints for p in rig.api.posted if "lamp" in p.endpoints] == [("lamp",)]
    gate.set()
    await eventually(lambda: len(rig.api.of("alice", "lamp")) == 3, "the lamp's three events")
    values = [p.body["payload"]["change"]["states"][0]["value"] for p in rig.api.of("alice", "lamp")]
    assert values == ["On", "Off", "On"]
    await eventually(lambda: rig.sender.depth() == 0, "an empty outbox")
    await eventually(lambda: rig.metrics.counter("hubd_events_sent_total", "", "name").get("ChangeReport") == 5,
                     "five sent")


async def test_a_long_backlog_of_one_device_hides_no_other_device(rig: SenderRig) -> None:
    gate = asyncio.Event()
    rig.api.behaviour["alice"] = held(gate, "lamp")
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", *[change("lamp", "On" if i % 2 else "Off") for i in range(2100)], change("fan", "On"))
    await eventually(lambda: len(rig.api.of("alice", "fan")) == 1, "the fan's event behind 2,100 of the lamp's")
    gate.set()
    await eventually(lambda: len(rig.api.of("alice", "lamp")) == 2100, "the lamp's backlog", timeout_s=60)


async def test_retry_keeps_the_message_id_and_order(rig: SenderRig) -> None:
    failures = [CloudUnavailable("platform answered 503"), CloudUnavailable("event API answered 404 (...)")]

    async def flaky(post: Posted) -> None:
        if failures:
            raise failures.pop(0)

    rig.api.behaviour["alice"] = flaky
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", press("bell"), press("bell"))

    async def attempts(*expected: int) -> bool:
        return [r["attempts"] for r in await rig.rows()] == list(expected)

    await eventually(lambda: attempts(1, 0), "the first try noted")
    assert len(rig.api.posted) == 1  # backing off: nothing more goes until the retry is due
    await rig.later(120)
    await eventually(lambda: attempts(2, 0), "the second try noted")
    assert len(rig.api.posted) == 2
    await rig.later(120)
    await eventually(lambda: len(rig.api.accepted) == 2, "both presses")
    first_id = rig.api.posted[0].message_id
    assert [p.message_id for p in rig.api.posted[:3]] == [first_id] * 3
    assert rig.api.accepted[0].message_id == first_id
    assert rig.api.accepted[1].message_id != first_id


async def test_400_and_422_are_dead_lettered_with_the_answer(rig: SenderRig) -> None:
    async def refuse(post: Posted) -> None:
        if post.endpoints == ("ghost",):
            raise CloudRejected(422, '{"error": "endpoint.endpointId: unknown"}')
        if post.endpoints == ("broken",):
            raise CloudRejected(400, '{"error": "payload.cause: missing"}')

    rig.api.behaviour["alice"] = refuse
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", press("ghost"), press("broken"), press("bell"))
    dead_total = rig.metrics.counter("hubd_events_dead_lettered_total", "")
    await eventually(lambda: dead_total.get() == 2 and len(rig.api.accepted) == 1, "every row handled")
    dead = await rig.rows("dead_letters")
    assert [(d["http_status"], json.loads(d["response"])["error"]) for d in dead] == [
        (422, "endpoint.endpointId: unknown"), (400, "payload.cause: missing")]
    assert [p.endpoints for p in rig.api.posted] == [("ghost",), ("broken",), ("bell",)]  # never retried
    await eventually(lambda: rig.sender.depth() == 0, "an empty outbox")


async def test_a_refused_batch_is_split_so_one_bad_endpoint_dead_letters_only_itself(rig: SenderRig) -> None:
    async def strict(post: Posted) -> None:
        if "bad" in post.endpoints:
            raise CloudRejected(400, '{"error": "payload.endpoints[1].displayName: digits"}')

    rig.api.behaviour["alice"] = strict
    rig.tokens.tokens["alice"] = "alice:1"
    [batch] = discovery_events("Service", [endpoint("good"), endpoint("bad"), endpoint("also")])
    await rig.queue("alice", batch, change("good", "On"), change("also", "Off"))
    await rig.close_windows(3)
    await eventually(lambda: len([p for p in rig.api.accepted if p.name == "ChangeReport"]) == 2, "both changes")
    await eventually(lambda: rig.sender.depth() == 0, "every row handled")
    names = [(p.name, p.endpoints) for p in rig.api.accepted]
    # Each endpoint's AddOrUpdateReport before its ChangeReport; the batch itself never accepted.
    assert names.index(("AddOrUpdateReport", ("good",))) < names.index(("ChangeReport", ("good",)))
    assert names.index(("AddOrUpdateReport", ("also",))) < names.index(("ChangeReport", ("also",)))
    assert ("AddOrUpdateReport", ("good", "bad", "also")) not in names
    dead = await rig.rows("dead_letters")
    assert len(dead) == 1 and json.loads(dead[0]["body"])["payload"]["endpoints"] == [endpoint("bad")]
    ids = [p.message_id for p in rig.api.posted if p.name == "AddOrUpdateReport"]
    assert len(set(ids)) == 4  # the batch and three pieces, each its own message


async def test_a_barrier_goes_before_the_events_kept_for_its_user(rig: SenderRig) -> None:
    rig.tokens.tokens["alice"] = "alice:1"
    rig.tokens.inactive.add("alice")  # a dead grant: events are kept
    await rig.queue("alice", press("bell"), change("lamp", "On"), press("bell"))
    welcome = discovery_events("Service", [endpoint("bell"), endpoint("lamp")], barrier=True)
    assert welcome[0].lanes[0] == BARRIER_LANE
    await rig.queue("alice", *welcome)
    await eventually(lambda: rig.sender.depth() == 4, "four rows indexed")
    assert rig.api.posted == []
    rig.tokens.inactive.discard("alice")
    rig.refreshed("alice", "alice:2")  # the new grant
    await eventually(lambda: len(rig.api.accepted) == 4, "all four")
    assert [p.name for p in rig.api.accepted] == ["AddOrUpdateReport", "DoorbellPress", "ChangeReport",
                                                  "DoorbellPress"]


async def test_one_users_backlog_on_a_slow_platform_does_not_delay_another(rig: SenderRig) -> None:
    gate = asyncio.Event()
    rig.api.behaviour["alice"] = held(gate)
    rig.tokens.tokens.update({"alice": "alice:1", "bob": "bob:1"})
    await rig.queue("alice", *[press(f"bell{i % 100}") for i in range(3000)])
    await eventually(lambda: len(rig.api.posted) >= outbox.MAX_IN_FLIGHT_PER_USER, "alice's sends hanging")
    await rig.queue("bob", press("bell0"))
    await eventually(lambda: len(rig.api.of("bob")) == 1, "bob's press while alice's hang")
    assert len(rig.api.of("alice")) == 0
    gate.set()
    await eventually(lambda: len(rig.api.of("alice")) == 3000, "alice's backlog", timeout_s=60)


async def test_many_busy_users_still_leave_a_send_for_a_newcomer(rig: SenderRig) -> None:
    gate = asyncio.Event()
    users = [f"u{i}" for i in range(3)]  # 3 x 32 > MAX_IN_FLIGHT
    for user in users:
        rig.api.behaviour[user] = held(gate)
        rig.tokens.tokens[user] = f"{user}:1"
        await rig.queue(user, *[press(f"bell{i}") for i in range(40)])
    await eventually(lambda: len(rig.api.posted) >= outbox.MAX_IN_FLIGHT, "the sends in flight full")
    rig.tokens.tokens["bob"] = "bob:1"
    await rig.queue("bob", press("bell0"))
    await eventually(lambda: len(rig.api.of("bob")) == 1, "bob's press")
    gate.set()
    await eventually(lambda: len(rig.api.accepted) == 121, "everything")


async def test_a_user_whose_token_is_being_refreshed_holds_no_send(rig: SenderRig) -> None:
    rig.tokens.tokens.update({"alice": None, "bob": "bob:1"})  # alice's refresh hangs (token endpoint down)
    await rig.queue("alice", *[press(f"bell{i}") for i in range(100)])
    await rig.queue("bob", press("bell"))
    await eventually(lambda: len(rig.api.of("bob")) == 1, "bob's press")
    assert rig.api.of("alice") == []
    rig.refreshed("alice", "alice:2")
    await eventually(lambda: len(rig.api.of("alice")) == 100, "alice's presses once her token is there")


async def test_401_refreshes_in_the_background_and_resends_the_same_message(rig: SenderRig) -> None:
    async def expired_once(post: Posted) -> None:
        if post.token == "alice:1":
            raise CloudAuthError("401", fatal=False)

    rig.api.behaviour["alice"] = expired_once
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", press("bell"), press("bell"))
    await eventually(lambda: ("alice", "alice:1") in rig.tokens.invalidated, "the token invalidated")
    rig.refreshed("alice", "alice:2")
    await eventually(lambda: len(rig.api.accepted) == 2, "both presses")
    first = rig.api.posted[0]
    assert first.token == "alice:1"
    assert rig.api.accepted[0].message_id == first.message_id and rig.api.accepted[0].token == "alice:2"
    assert rig.tokens.revocations == []
    await eventually(lambda: rig.sender.depth() == 0, "an empty outbox")


async def test_403_after_a_refresh_ends_the_grant_once_and_keeps_the_events(rig: SenderRig) -> None:
    async def forbidden(post: Posted) -> None:
        raise CloudAuthError("403", fatal=True)

    rig.api.behaviour["alice"] = forbidden
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", press("bell"), press("bell"), press("door"))
    await eventually(lambda: ("alice", "alice:1") in rig.tokens.invalidated, "a refresh asked for")
    rig.refreshed("alice", "alice:2")
    failures = rig.metrics.counter("hubd_event_send_failures_total", "", "reason")
    # Two rows in flight (two devices): one ends the grant, the other finds it ended.
    await eventually(lambda: failures.get("revoked") + failures.get("grant_ended") == 2, "both sends back")
    assert rig.tokens.revocations == ["alice"]
    assert len(await rig.rows()) == 3 and rig.sender.depth("alice") == 3
    assert await rig.rows("dead_letters") == []


async def test_a_user_who_must_bind_again_keeps_only_the_newest_events(rig: SenderRig,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox, "KEPT_WHILE_UNBOUND", 10)
    monkeypatch.setattr(outbox, "PRUNE_SLACK", 5)
    rig.tokens.tokens["alice"] = "alice:1"
    rig.tokens.inactive.add("alice")
    await rig.queue("alice", *[change("lamp", str(i)) for i in range(12)])
    await eventually(lambda: rig.sender.depth("alice") == 12, "12 kept (within the slack)")
    await rig.queue("alice", *[change("lamp", str(i)) for i in range(12, 20)])
    await eventually(lambda: rig.sender.depth("alice") == 10, "pruned to 10")
    values = [json.loads(r["body"])["payload"]["change"]["states"][0]["value"] for r in await rig.rows()]
    assert values == [str(i) for i in range(10, 20)]
    assert rig.metrics.counter("hubd_events_dropped_total", "").get() == 10
    rig.tokens.inactive.discard("alice")  # an active user's backlog is never pruned
    await rig.queue("alice", *[change("fan", str(i)) for i in range(20)])
    await eventually(lambda: len(rig.api.accepted) == 30, "all 30 delivered")


async def test_a_new_grants_report_goes_first_even_if_a_dispatch_was_already_due(rig: SenderRig) -> None:
    """The sender must not dispatch for a user whose activation it has not seen after a load of new rows."""
    gate = asyncio.Event()
    rig.api.behaviour["bob"] = held(gate)
    rig.tokens.tokens.update({"alice": "alice:1", "bob": "bob:1"})
    rig.tokens.inactive.add("alice")  # a dead grant: events are kept
    await rig.queue("bob", press("door"))
    await eventually(lambda: len(rig.api.posted) == 1, "bob's press in flight")
    await rig.queue("alice", press("bell"), change("lamp", "On"))
    await eventually(lambda: rig.sender.depth("alice") == 2, "alice's kept events indexed")
    # OutboxWriter.commit_grant: the new grant's report is committed; the wakeup comes with the activation.
    welcome = discovery_events("Service", [endpoint("bell"), endpoint("lamp")], barrier=True)
    await rig.queue("alice", *welcome, wake=False)
    gate.set()  # bob's delivery ends: the sender has a dispatch round due (its kick) before the wakeup is seen
    while not rig.api.of("bob"):
        await asyncio.sleep(0)
    rig.tokens.activate("alice", "alice:2")
    rig.wakeup.set()
    await eventually(lambda: len(rig.api.of("alice")) == 3, "alice's three messages")
    assert [p.name for p in rig.api.of("alice")] == ["AddOrUpdateReport", "DoorbellPress", "ChangeReport"]


async def test_pruning_keeps_delete_reports_and_leaves_no_dead_rows_in_memory(
        rig: SenderRig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox, "KEPT_WHILE_UNBOUND", 100)
    monkeypatch.setattr(outbox, "PRUNE_SLACK", 50)
    rig.tokens.tokens["alice"] = "alice:1"
    rig.tokens.inactive.add("alice")
    gone = PendingEvent("DeleteReport", ("old",), messages.delete_report("Service", "", ["old"]))
    await rig.queue("alice", gone)
    expected = 1
    for batch in range(30):
        await rig.queue("alice", *[change("lamp", f"{batch}.{i}") for i in range(60)])
        expected += 60
        if expected - outbox.KEPT_WHILE_UNBOUND >= outbox.PRUNE_SLACK:
            expected = outbox.KEPT_WHILE_UNBOUND
        # The rows on disk too: right after an insert the in-memory depth is still the previous batch's.
        async def kept(want: int = expected) -> bool:
            return rig.sender.depth("alice") == want and len(await rig.rows()) == want

        await eventually(kept, f"{expected} events kept")
    names = [r["name"] for r in await rig.rows()]
    assert names[0] == "DeleteReport" and len(names) == expected
    # The index holds nothing for the dropped rows: the lane heads promoted while pruning were let go.
    queue = rig.sender._queues["alice"]
    assert len(queue.ready) + len(queue.waiting) <= len(queue.lanes) + 1
    rig.tokens.activate("alice", "alice:2")
    await rig.later(outbox.DISCOVERY_WINDOW_S)  # the DeleteReport's window closes (and the sender is woken)
    await eventually(lambda: len(rig.api.of("alice")) == len(names), "the kept events delivered")
    assert rig.api.of("alice")[0].name == "DeleteReport"


async def test_an_unexpected_error_in_one_delivery_is_logged_and_retried(
        rig: SenderRig, caplog: pytest.LogCaptureFixture) -> None:
    surprises = [UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")]

    async def surprising(post: Posted) -> None:
        if post.endpoints == ("bell",) and surprises:
            raise surprises.pop()

    rig.api.behaviour["alice"] = surprising
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", press("bell"), press("door"))
    await eventually(lambda: len(rig.api.of("alice", "door")) == 1, "the other device's press")
    failures = rig.metrics.counter("hubd_event_send_failures_total", "", "reason")
    await eventually(lambda: failures.get("error") == 1, "the error counted")
    assert any(r.exc_info and r.levelname == "ERROR" for r in caplog.records)
    await rig.later(120)  # the retry falls due
    await eventually(lambda: len(rig.api.of("alice", "bell")) == 1, "the press, retried")
    first, again = [p for p in rig.api.posted if p.endpoints == ("bell",)]
    assert first.message_id == again.message_id


async def test_the_pieces_of_a_split_report_go_before_a_later_grants_report(rig: SenderRig) -> None:
    gate = asyncio.Event()

    async def refuse_the_old_batch(post: Posted) -> None:
        if post.name == "AddOrUpdateReport" and len(post.endpoints) == 2 and post.token == "alice:1":
            await gate.wait()
            raise CloudRejected(400, '{"error": "payload.endpoints[1]: bad"}')

    rig.api.behaviour["alice"] = refuse_the_old_batch
    rig.tokens.tokens["alice"] = "alice:1"
    old = {**endpoint("lamp"), "displayName": "Old"}
    await rig.queue("alice", *discovery_events("Service", [old, endpoint("fan")], barrier=True))
    await eventually(lambda: len(rig.api.posted) == 1, "the first grant's report in flight")
    rig.tokens.activate("alice", "alice:2")  # the user binds again: a newer report of every device
    new = {**endpoint("lamp"), "displayName": "New"}
    await rig.queue("alice", *discovery_events("Service", [new, endpoint("fan")], barrier=True))
    await eventually(lambda: rig.sender.depth("alice") == 2, "the new report indexed")
    gate.set()
    await eventually(lambda: len(rig.api.accepted) == 3, "two pieces and the new report")
    sent = [(p.endpoints, p.body["payload"]["endpoints"][0]["displayName"]) for p in rig.api.accepted]
    assert sent == [(("lamp",), "Old"), (("fan",), "Lamp"), (("lamp", "fan"), "New")]


async def test_a_dispatch_round_is_capped_and_the_body_query_stays_small(
        unfed: SenderRig, monkeypatch: pytest.MonkeyPatch) -> None:
    rig = unfed  # rows read back from the outbox, bodies and all
    real = outbox_store.bodies_blocking
    rounds: list[int] = []

    def counted(conn: sqlite3.Connection, ids: list[int]) -> dict[int, outbox_store.Loaded]:
        rounds.append(len(ids))
        return real(conn, ids)

    monkeypatch.setattr(outbox_store, "bodies_blocking", counted)
    gate = asyncio.Event()
    users = [f"u{i:04}" for i in range(1100)]  # each with nothing in flight, so each is owed a send at once
    for user in users:
        rig.tokens.tokens[user] = f"{user}:1"
        rig.api.behaviour[user] = held(gate)

    def insert_all(conn: sqlite3.Connection) -> int:
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            for user in users:
                insert_events_blocking(conn, [press("bell")], [user], NOW)
        return conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)  # as SQLite before 3.32

    limit = await rig.db.call(insert_all)
    try:
        rig.wakeup.set()
        await eventually(lambda: len(rig.api.posted) == len(users), "a press of every user in flight")
        assert max(rounds) <= outbox.MAX_SENDS_PER_ROUND and len(rounds) >= 2
        assert len(await rig.db.call(real, list(range(1, 2500)))) == len(users)  # one call, several statements
        gate.set()
        await eventually(lambda: len(rig.api.accepted) == len(users), "every press delivered")
    finally:
        await rig.db.call(lambda c: c.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit))


async def test_a_refresh_that_hands_back_the_same_token_does_not_loop(rig: SenderRig) -> None:
    async def refused(post: Posted) -> None:
        raise CloudAuthError("401", fatal=False)

    rig.api.behaviour["alice"] = refused
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", press("bell"))
    await eventually(lambda: ("alice", "alice:1") in rig.tokens.invalidated, "a refresh asked for")
    rig.refreshed("alice", "alice:1")  # the token endpoint answers with the same, still valid, token

    async def retry_noted() -> bool:
        return [r["attempts"] for r in await rig.rows()] == [1]

    await eventually(retry_noted, "the second refusal backing off")
    assert len(rig.api.posted) == 2  # sent, refused, refreshed, resent once, refused: now it waits
    assert rig.tokens.invalidated == [("alice", "alice:1")] * 2  # and another refresh is asked for
    rig.api.behaviour.clear()
    rig.refreshed("alice", "alice:1")
    await rig.later(120)
    await eventually(lambda: len(rig.api.accepted) == 1, "the press once the platform takes the token")
    assert rig.tokens.revocations == []


# --- the writer's feed: rows committed are sent from memory ------------------------------------------------------

class Reads:
    """Counts the sender's reads of the outbox (new rows, bodies)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.new_rows = 0
        self.bodies: list[int] = []
        real_new, real_bodies = outbox_store.new_rows_blocking, outbox_store.bodies_blocking

        def new_rows(conn: sqlite3.Connection, after: int) -> list[outbox_store.IndexedRow]:
            self.new_rows += 1
            return real_new(conn, after)

        def bodies(conn: sqlite3.Connection, ids: list[int]) -> dict[int, outbox_store.Loaded]:
            self.bodies += ids
            return real_bodies(conn, ids)

        monkeypatch.setattr(outbox_store, "new_rows_blocking", new_rows)
        monkeypatch.setattr(outbox_store, "bodies_blocking", bodies)


async def stored_message_ids(rig: SenderRig) -> list[str]:
    return [row["message_id"] for row in await rig.rows()]


def changed_to(post: Posted) -> str:
    """The value a posted ChangeReport (as `change()` makes them) changed to."""
    return str(post.body["payload"]["change"]["states"][0]["value"])


async def test_rows_the_writer_fed_are_sent_without_reading_the_outbox_back(
        rig: SenderRig, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = Reads(monkeypatch)
    rig.tokens.tokens["alice"] = "alice:1"
    gate = asyncio.Event()
    rig.api.behaviour["alice"] = held(gate)
    await rig.queue("alice", *[change("lamp", str(i)) for i in range(5)], press("bell"))
    await eventually(lambda: len(rig.api.posted) == 2, "the lamp's first change and the press in flight")
    stored = await stored_message_ids(rig)
    gate.set()
    await eventually(lambda: len(rig.api.accepted) == 6, "all six delivered")
    assert reads.new_rows == 0 and reads.bodies == []
    # Each went with the body and messageId the outbox holds, in order per device.
    assert sorted(p.message_id for p in rig.api.accepted) == sorted(stored)
    assert [changed_to(p) for p in rig.api.of("alice", "lamp")] == [str(i) for i in range(5)]


async def test_rows_written_past_the_feed_are_read_from_the_outbox_in_order(
        rig: SenderRig, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = Reads(monkeypatch)
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.db.call(insert_rows, [change("lamp", "0"), change("lamp", "1")], "alice")  # not fed: a gap
    await rig.queue("alice", change("lamp", "2"), change("fan", "On"))
    await eventually(lambda: len(rig.api.accepted) == 4, "all four delivered")
    assert reads.new_rows == 1  # the gap made the sender read what it had not been fed
    assert [changed_to(p) for p in rig.api.of("alice", "lamp")] == ["0", "1", "2"]
    # The fed rows' bodies came from memory; only the two rows nobody fed were read.
    assert sorted(reads.bodies) == [1, 2]
    await rig.queue("alice", change("lamp", "3"))  # the index continues from the read: fed again
    await eventually(lambda: len(rig.api.accepted) == 5, "the fifth delivered")
    assert reads.new_rows == 1


async def test_bodies_beyond_what_the_sender_keeps_are_read_when_their_row_goes(
        rig: SenderRig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox, "BODIES_KEPT", 3)
    reads = Reads(monkeypatch)
    rig.tokens.tokens["alice"] = "alice:1"
    gate = asyncio.Event()
    rig.api.behaviour["alice"] = held(gate)
    await rig.queue("alice", *[change("lamp", str(i)) for i in range(10)])
    await eventually(lambda: len(rig.api.posted) == 1, "the first change in flight")
    assert len(rig.sender._bodies) <= 3  # the bound is the point
    stored = await stored_message_ids(rig)
    gate.set()
    await eventually(lambda: len(rig.api.accepted) == 10, "all ten delivered")
    assert [p.message_id for p in rig.api.accepted] == stored  # one lane: in order, each with its own messageId
    assert len(reads.bodies) == 7 and reads.new_rows == 0


async def test_written_rows_carry_the_ids_and_message_ids_the_outbox_holds(rig: SenderRig) -> None:
    await rig.db.call(insert_rows, [press("bell")], "alice")  # something before, so ids do not start at 1
    written = await rig.db.call(insert_rows, [change("lamp", "On"), press("bell")], "alice")
    written += await rig.db.call(insert_rows, [change("fan", "Off")], "bob")
    rows = await rig.rows()
    assert [(w.id, w.user_id, w.name, w.message_id, w.body) for w in written] == \
        [(r["id"], r["user_id"], r["name"], r["message_id"], r["body"]) for r in rows[1:]]


async def test_each_delivered_event_times_its_stages(rig: SenderRig) -> None:
    rig.tokens.tokens["alice"] = "alice:1"
    await rig.queue("alice", press("bell"), change("lamp", "On"))
    await eventually(lambda: len(rig.api.accepted) == 2, "both delivered")
    stages = rig.metrics.histogram("hubd_event_stage_seconds", "", "stage", (1.0,))
    await eventually(lambda: stages.count("post") == 2, "both posts timed")
    assert stages.count("commit_to_post") == 2
    text = rig.metrics.render()
    assert 'hubd_event_stage_seconds_count{stage="post"} 2' in text
    assert 'hubd_event_stage_seconds_bucket{stage="commit_to_post",le="+Inf"} 2' in text


async def test_fed_rows_taken_before_a_failed_read_are_indexed_once_the_database_is_back(
        rig: SenderRig, monkeypatch: pytest.MonkeyPatch) -> None:
    real_new = outbox_store.new_rows_blocking
    failures = [1]

    def full_once(conn: sqlite3.Connection, after: int) -> list[outbox_store.IndexedRow]:
        if failures:
            failures.pop()
            err = sqlite3.OperationalError("database or disk is full")
            err.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
            raise err
        return real_new(conn, after)

    monkeypatch.setattr(outbox_store, "new_rows_blocking", full_once)
    probe = asyncio.create_task(rig.db.run())  # the database's probe says when writes (and reads) go again
    try:
        rig.tokens.tokens["alice"] = "alice:1"
        await rig.db.call(insert_rows, [change("lamp", "0")], "alice")  # not fed: the sender must read
        await rig.queue("alice", change("lamp", "1"), change("lamp", "2"))  # fed, taken, then the read fails
        await eventually(lambda: len(rig.api.accepted) == 3, "all three delivered after the failed read",
                         timeout_s=20)
        assert not failures
        assert [changed_to(p) for p in rig.api.of("alice", "lamp")] == ["0", "1", "2"]
    finally:
        probe.cancel()
        await asyncio.gather(probe, return_exceptions=True)
