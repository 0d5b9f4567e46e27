"""hubd.directives.replay with the real DirectiveReplyRepo on a real SQLite file: a control never runs twice, also
when a claim stalls behind another process's write lock and lands after hubd gave up on it, and across a restart
(a second Replay over the same database)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hubd.directives import replay as replay_module
from hubd.directives.message import Directive
from hubd.directives.replay import Attempt, Replay
from hubd.errors import DirectiveError
from hubd.metrics import Metrics
from hubd.store.db import Database
from hubd.store.replies import DirectiveReplyRepo

BUDGET_S = 5.0
STALLED_BUDGET_S = 0.2  # the reply budget of a try whose claim waits behind the lock: it gives up


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(tmp_path / "hubd.db")
    await database.start()
    try:
        yield database
    finally:
        await database.stop()


class Device:
    """Counts the `set`s that went out; each handler claims, then "publishes", then finishes, as control does."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.offline = False

    def handler(self, resends: Replay) -> Callable[[Directive, Attempt], Awaitable[dict[str, Any]]]:
        async def control(directive: Directive, attempt: Attempt) -> dict[str, Any]:
            if self.offline:  # what control does when the device cannot be told: an earlier run's answer, if any
                stored = await resends.stored(attempt.key, directive.deadline)
                if stored is not None:
                    return stored
                raise DirectiveError("E_ENDPOINT_UNREACHABLE", "offline")
            run = len(self.sent) + 1
            stored = await resends.claim(attempt, {"run": run, "done": False}, directive.deadline)
            if stored is not None:
                return stored
            self.sent.append(directive.message_id)  # the `set` goes out here
            resends.finish(attempt, {"run": run, "done": True})
            return {"run": run, "done": True}
        return control


def directive(message_id: str, budget_s: float = BUDGET_S) -> Directive:
    return Directive(message_id, "Service.Control", "Brightness.Adjust", "token", "alice", None,
                     {"endpointId": "lamp-1"}, {"delta": 10}, {}, asyncio.get_running_loop().time() + budget_s)


@contextmanager
def write_lock(db: Database) -> Iterator[None]:
    """Another process holds the database's write lock: hubd's claims wait behind it (busy_timeout)."""
    holder = sqlite3.connect(db.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


async def landed(db: Database) -> None:
    """Every database call submitted before this one is done (one database thread, in order)."""
    await db.call(lambda c: None)


async def rows(db: Database) -> list[tuple[str, int]]:
    return await db.call(lambda c: [(r[0], r[1]) for r in c.execute(
        "SELECT message_id, done FROM directive_replies ORDER BY message_id")])


async def test_a_resend_after_a_restart_whose_claim_stalled_does_not_run_again(
        db: Database, caplog: pytest.LogCaptureFixture) -> None:
    device = Device()
    before = Replay(DirectiveReplyRepo(db), Metrics())
    first = await before.once(directive("m-1"), device.handler(before))
    await before.flush(5.0)

    restarted = Replay(DirectiveReplyRepo(db), Metrics())
    caplog.set_level(logging.WARNING, logger="hubd.directives.replay")
    with write_lock(db):
        with pytest.raises(DirectiveError) as busy:
            await restarted.once(directive("m-1", STALLED_BUDGET_S), device.handler(restarted))
        assert busy.value.name == "E_ENDPOINT_BUSY"
    await landed(db)  # the stalled claim ran: it met the row from before the restart and left it alone

    again = await restarted.once(directive("m-1"), device.handler(restarted))
    assert device.sent == ["m-1"]
    assert again == first == {"run": 1, "done": True}
    await restarted.flush(5.0)
    assert await rows(db) == [("m-1", 1)]
    assert any("did not record it in time (timed out)" in r.getMessage() for r in caplog.records)


async def test_a_resend_after_a_restart_whose_claim_stalled_gets_the_earlier_answer_when_it_cannot_run(
        db: Database) -> None:
    device = Device()
    before = Replay(DirectiveReplyRepo(db), Metrics())
    first = await before.once(directive("m-1"), device.handler(before))
    await before.flush(5.0)

    restarted = Replay(DirectiveReplyRepo(db), Metrics())
    with write_lock(db), pytest.raises(DirectiveError):
        await restarted.once(directive("m-1", STALLED_BUDGET_S), device.handler(restarted))
    await landed(db)
    device.offline = True
    assert await restarted.once(directive("m-1"), device.handler(restarted)) == first
    assert device.sent == ["m-1"]


async def test_a_claim_of_ours_that_lands_late_is_overwritten_by_the_next_try(db: Database) -> None:
    device = Device()
    resends = Replay(DirectiveReplyRepo(db), Metrics())  # its writer is not running: the release waits
    with write_lock(db), pytest.raises(DirectiveError):
        await resends.once(directive("m-1", STALLED_BUDGET_S), device.handler(resends))
    await landed(db)
    assert await rows(db) == [("m-1", 0)]  # the try gave up, but its claim is in the database now
    assert device.sent == []

    device.offline = True  # a row of ours that never published is no earlier run's answer
    with pytest.raises(DirectiveError) as unreachable:
        await resends.once(directive("m-1"), device.handler(resends))
    assert unreachable.value.name == "E_ENDPOINT_UNREACHABLE"
    device.offline = False
    second = await resends.once(directive("m-1"), device.handler(resends))  # runs: nothing was sent before
    assert second == {"run": 1, "done": True} and device.sent == ["m-1"]

    await resends.flush(5.0)  # the late release must not remove the row the second try wrote
    assert await rows(db) == [("m-1", 1)]
    restarted = Replay(DirectiveReplyRepo(db), Metrics())
    assert await restarted.once(directive("m-1"), device.handler(restarted)) == second
    assert device.sent == ["m-1"]


async def test_the_removal_of_a_row_that_never_published_is_never_dropped(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "WRITES_MAX", 2)
    device = Device()
    resends = Replay(DirectiveReplyRepo(db), Metrics())  # its writer is stuck: nothing queued gets written
    await resends.once(directive("a"), device.handler(resends))
    await resends.once(directive("b"), device.handler(resends))
    with write_lock(db), pytest.raises(DirectiveError) as busy:
        await resends.once(directive("c", STALLED_BUDGET_S), device.handler(resends))
    assert busy.value.name == "E_ENDPOINT_BUSY"
    await landed(db)
    assert device.sent == ["a", "b"]

    # hubd dies with its writes undone; after the restart "c" never ran, so it runs now.
    restarted = Replay(DirectiveReplyRepo(db), Metrics())
    assert await restarted.once(directive("c"), device.handler(restarted)) == {"run": 3, "done": True}
    assert device.sent == ["a", "b", "c"]


async def test_writes_waiting_for_the_database_refuse_new_controls_until_written(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "WRITES_MAX", 2)
    device = Device()
    resends = Replay(DirectiveReplyRepo(db), Metrics())
    await resends.once(directive("a"), device.handler(resends))
    await resends.once(directive("b"), device.handler(resends))
    with pytest.raises(DirectiveError) as busy:
        await resends.once(directive("c"), device.handler(resends))
    assert busy.value.name == "E_ENDPOINT_BUSY" and "nothing was sent" in busy.value.message
    assert await rows(db) == [("a", 0), ("b", 0)]  # "c" wrote nothing and sent nothing

    await resends.flush(5.0)
    assert await resends.once(directive("c"), device.handler(resends)) == {"run": 3, "done": True}
    assert device.sent == ["a", "b", "c"]
