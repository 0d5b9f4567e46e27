"""TokenManager in-process: real SQLite grants, a fake token endpoint, a clock the test moves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from unit_helpers import NOW as T0
from unit_helpers import FakeClock, eventually

from hubd.cloud import messages
from hubd.cloud.client import TokenSet
from hubd.cloud.grantstate import refresh_at
from hubd.cloud.tokens import TokenManager
from hubd.errors import CloudAuthError, CloudRejected, CloudUnavailable
from hubd.events import PendingEvent
from hubd.metrics import Metrics
from hubd.outbox.sender import OutboxSender
from hubd.store.db import Database
from hubd.store.grants import Grant, GrantRepo, remove_grant_blocking
from hubd.store.outbox import insert_events_blocking


@dataclass
class FakeEndpoint:
    """Hands out tokens "at-N"/"rt-N" of `lifetime_s`; records when (on the fake clock) each refresh ran."""

    clock: FakeClock
    lifetime_s: float = 3600.0
    issued: int = 0
    refreshed_at: list[float] = field(default_factory=list)
    running: int = 0
    most_at_once: int = 0
    gate: asyncio.Event | None = None
    refuse: Exception | None = None
    reports: list[str] = field(default_factory=list)
    report_gate: asyncio.Event | None = None
    report_errors: list[Exception] = field(default_factory=list)
    same_token: bool = False  # a refresh hands back the access token it was given (some servers do)

    def _tokens(self) -> TokenSet:
        if not self.same_token or not self.issued:
            self.issued += 1
        return TokenSet(f"at-{self.issued}", f"rt-{self.issued}", self.lifetime_s)

    async def exchange_code(self, code: str, *, timeout_s: float | None = None) -> TokenSet:
        return self._tokens()

    async def refresh(self, refresh_token: str) -> TokenSet:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            self.refreshed_at.append(self.clock.now)
            if self.gate is not None:
                await self.gate.wait()
            if self.refuse is not None:
                raise self.refuse
            return self._tokens()
        finally:
            self.running -= 1

    async def report_failure(self, user_id: str) -> None:
        if self.report_gate is not None:
            await self.report_gate.wait()
        if self.report_errors:
            raise self.report_errors.pop(0)
        self.reports.append(user_id)


@dataclass
class Rig:
    manager: TokenManager
    endpoint: FakeEndpoint
    clock: FakeClock
    wakeup: asyncio.Event
    db: Database
    task: asyncio.Task[None]
    others: list[asyncio.Task[None]]  # more tasks on this rig (an outbox sender), cancelled first

    async def at(self, offset_s: float) -> None:
        """Move the fake clock to T0 + offset and let the scheduler look (as its periodic re-check would); return
        once it has looked and every refresh it started has ended, so what did not happen will not."""
        self.clock.now = T0 + offset_s
        self.manager._changed.set()  # the scheduler's own wake-up; a real clock gets there by itself

        def idle() -> bool:
            # The scheduler clears the wake-up after its pass has started the refreshes due (tasks named
            # tokens.refresh.<user>); each sets it again when it ends, for another pass.
            return not self.manager._changed.is_set() and not any(
                t.get_name().startswith("tokens.refresh.") and not t.done() for t in asyncio.all_tasks())
        await eventually(idle, "the refresh scheduler idle again")


@pytest.fixture
async def make_rig(tmp_path: Path) -> AsyncIterator[Callable[..., object]]:
    started: list[Rig] = []

    async def make(lifetime_s: float = 3600.0) -> Rig:
        db = Database(tmp_path / f"hubd{len(started)}.db", synchronous="normal")
        await db.start()
        clock = FakeClock()
        endpoint = FakeEndpoint(clock, lifetime_s)
        wakeup = asyncio.Event()
        manager = TokenManager(GrantRepo(db), endpoint, clock=clock, failure_report=True, metrics=Metrics(),
                               outbox_wakeup=wakeup)
        await manager.start()
        task = asyncio.create_task(manager.run())
        rig = Rig(manager, endpoint, clock, wakeup, db, task, [])
        started.append(rig)
        await manager.accept_grant("alice", "code", driver_user="anna", timeout_s=1.0)
        return rig

    yield make
    for rig in started:
        for task in [*rig.others, rig.task]:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await rig.db.stop()


@pytest.mark.parametrize(("lifetime", "due"), [
    (3600, 2880),             # 80 % of an hour (earlier than 5 minutes before expiry)
    (1000, 700),              # 5 minutes before expiry comes first
    (3, 2.4),                 # very short: 80 %, never a tight loop
    (30 * 86400, 12 * 3600),  # long-lived: at least every 12 hours
    (1, 1.0),                 # never sooner than 1 s after it was obtained
])
async def test_background_refresh_is_due_when_the_schedule_says(make_rig: Callable[..., object], lifetime: float,
                                                                due: float) -> None:
    rig: Rig = await make_rig(lifetime)  # type: ignore[misc]
    await rig.at(due - 0.01)
    assert rig.endpoint.refreshed_at == []
    await rig.at(due)
    await eventually(lambda: rig.manager.token_now("alice") == "at-2", "the refreshed token")
    assert rig.endpoint.refreshed_at == [T0 + due]
    assert rig.wakeup.is_set()  # the outbox is told


async def test_one_refresh_at_a_time_per_user(make_rig: Callable[..., object]) -> None:
    rig: Rig = await make_rig()
    rig.endpoint.gate = asyncio.Event()
    first = asyncio.create_task(rig.manager.refresh("alice"))
    second = asyncio.create_task(rig.manager.refresh("alice"))
    late_401 = asyncio.create_task(rig.manager.refresh("alice", stale_token="at-1"))
    await eventually(lambda: len(rig.endpoint.refreshed_at) == 1, "the first refresh under way")
    rig.endpoint.gate.set()
    await asyncio.gather(first, second, late_401)
    assert rig.endpoint.most_at_once == 1
    # Two refreshes asked for outright; the one for the already replaced at-1 did nothing.
    assert len(rig.endpoint.refreshed_at) == 2
    assert rig.manager.token_now("alice") == "at-3"


async def test_a_refused_token_is_refreshed_once_and_a_late_refusal_refreshes_nothing(
        make_rig: Callable[..., object]) -> None:
    rig: Rig = await make_rig()
    rig.wakeup.clear()
    rig.manager.invalidate("alice", "at-1")  # a 401 for at-1
    assert rig.manager.token_now("alice") is None  # the sender waits, holding nothing
    await eventually(lambda: rig.manager.token_now("alice") == "at-2", "the refreshed token")
    assert rig.wakeup.is_set()
    # Another send with at-1 was in flight and comes back 401 too: at-1 is already replaced.
    rig.manager.invalidate("alice", "at-1")
    assert rig.manager.token_now("alice") == "at-2"
    await rig.at(1)
    assert len(rig.endpoint.refreshed_at) == 1


async def test_a_token_near_expiry_is_not_handed_out(make_rig: Callable[..., object]) -> None:
    rig: Rig = await make_rig()
    rig.endpoint.refuse = CloudUnavailable("token endpoint down")
    rig.clock.now = T0 + 3600 - 30  # the background refreshes failed; 30 s left
    assert rig.manager.token_now("alice") is None
    rig.endpoint.refuse = None
    await eventually(lambda: rig.manager.token_now("alice") == "at-2", "a fresh token")


async def test_a_dead_refresh_ends_the_grant_with_one_failure_report(make_rig: Callable[..., object]) -> None:
    rig: Rig = await make_rig()
    rig.endpoint.refuse = CloudAuthError("invalid_grant", fatal=True, error="invalid_grant")
    rig.manager.invalidate("alice", "at-1")
    await eventually(lambda: rig.endpoint.reports == ["alice"], "the failure report")
    assert not rig.manager.is_active("alice") and rig.manager.token_now("alice") is None
    assert await rig.manager.revoked("alice", "at-1", "403 again")  # later news of the same dead grant
    await rig.at(7200)
    assert rig.endpoint.reports == ["alice"]
    assert [g.status for g in await GrantRepo(rig.db).all()] == ["needs_rebind"]


async def test_a_rejected_failure_report_is_not_sent_again(make_rig: Callable[..., object]) -> None:
    rig: Rig = await make_rig()
    rig.endpoint.report_errors.append(CloudRejected(400, "bad sign"))  # the platform's verdict: final
    rig.endpoint.refuse = CloudAuthError("invalid_grant", fatal=True, error="invalid_grant")
    rig.manager.invalidate("alice", "at-1")
    await eventually(lambda: [g.failure_reported for g in rig.manager.grants()] == [True], "the report done")
    assert rig.endpoint.reports == [] and not rig.endpoint.report_errors  # tried once, not retried


async def test_a_removed_grant_is_forgotten_at_its_next_refresh(make_rig: Callable[..., object]) -> None:
    rig: Rig = await make_rig()
    assert await rig.db.call(remove_grant_blocking, "alice") == (True, 0)
    await rig.at(2880)
    await eventually(lambda: not rig.manager.grants(), "the grant forgotten")
    assert rig.manager.token_now("alice") is None


@dataclass
class EventApi:
    """The event API in front of a real OutboxSender: `answer(token)` raises for a refused token."""

    answer: Callable[[str], Awaitable[None]]
    tokens: list[str] = field(default_factory=list)

    async def post_event(self, body: dict[str, Any] | str) -> None:
        message = json.loads(body) if isinstance(body, str) else body
        token = message["header"]["authorization"]["token"]
        self.tokens.append(token)
        await self.answer(token)


async def run_sender(rig: Rig, api: EventApi) -> OutboxSender:
    """A real OutboxSender on the rig's database and token manager, with one press queued for alice."""
    sender = OutboxSender(rig.db, api, rig.manager, clock=rig.clock, metrics=Metrics(), wakeup=rig.wakeup)
    await sender.start()
    await rig.db.call(lambda c: insert_events_blocking(c, [press()], ["alice"], T0))
    rig.others.append(asyncio.create_task(sender.run()))
    rig.wakeup.set()
    return sender


def press() -> PendingEvent:
    return PendingEvent("DoorbellPress", ("bell",),
                        messages.doorbell_press("Service", "", "bell", "2024-01-01T00:00:00.000Z"))


async def test_a_late_403_for_a_replaced_token_leaves_the_new_grant_alone(make_rig: Callable[..., object]) -> None:
    rig: Rig = await make_rig()  # alice's grant: at-1

    async def answer(token: str) -> None:
        if token == "at-1":
            raise CloudAuthError("403", fatal=True)  # refused: refreshed to at-2, resent
        if token == "at-2":
            # While this send is in flight the user binds again (at-3); then the answer for at-2 comes: 403.
            await rig.manager.accept_grant("alice", "code-2", driver_user="anna", timeout_s=1.0)
            raise CloudAuthError("403", fatal=True)

    api = EventApi(answer)
    await run_sender(rig, api)
    await eventually(lambda: api.tokens[-1:] == ["at-3"], "the press resent with the new grant's token")
    assert api.tokens == ["at-1", "at-2", "at-3"]
    assert rig.manager.is_active("alice") and rig.manager.token_now("alice") == "at-3"
    assert [g.status for g in await GrantRepo(rig.db).all()] == ["active"] and rig.endpoint.reports == []


async def test_a_refresh_that_hands_back_the_same_token_ends_the_grant_after_one_retry(
        make_rig: Callable[..., object]) -> None:
    rig: Rig = await make_rig()
    rig.endpoint.same_token = True

    async def forbidden(token: str) -> None:
        raise CloudAuthError("403", fatal=True)

    api = EventApi(forbidden)
    sender = await run_sender(rig, api)
    await eventually(lambda: rig.endpoint.reports == ["alice"], "the grant ended and reported")
    assert api.tokens == ["at-1", "at-1"] and len(rig.endpoint.refreshed_at) == 1
    assert not rig.manager.is_active("alice") and sender.depth("alice") == 1  # the press is kept


async def test_an_unexpected_error_in_a_refresh_is_retried_and_stops_nothing(
        make_rig: Callable[..., object], caplog: pytest.LogCaptureFixture) -> None:
    rig: Rig = await make_rig()
    rig.endpoint.refuse = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    rig.manager.invalidate("alice", "at-1")
    await eventually(lambda: len(rig.endpoint.refreshed_at) == 1, "the refresh tried")
    await rig.at(0)
    assert not rig.task.done()
    assert any(r.levelname == "ERROR" and r.exc_info for r in caplog.records)
    rig.endpoint.refuse = None
    await rig.at(120)  # the backoff is over
    await eventually(lambda: rig.manager.token_now("alice") == "at-2", "the refreshed token")
    assert not rig.task.done()


async def test_the_failure_report_of_an_old_grant_never_marks_a_new_one(make_rig: Callable[..., object]) -> None:
    rig: Rig = await make_rig()
    rig.endpoint.report_gate = asyncio.Event()
    rig.endpoint.report_errors.append(RuntimeError("a surprise"))  # the first try fails unexpectedly
    rig.endpoint.refuse = CloudAuthError("invalid_grant", fatal=True, error="invalid_grant")
    rig.manager.invalidate("alice", "at-1")
    await eventually(lambda: not rig.manager.is_active("alice"), "the grant ended")
    rig.endpoint.refuse = None
    await rig.manager.accept_grant("alice", "code-2", driver_user="anna", timeout_s=1.0)  # bound again meanwhile
    rig.endpoint.report_gate.set()
    await eventually(lambda: rig.endpoint.reports == ["alice"], "the old grant's report, on its second try")
    await eventually(lambda: not rig.endpoint.report_errors and rig.manager._reports.empty(), "the report done")
    await rig.at(1)
    assert not rig.task.done()
    [grant] = await GrantRepo(rig.db).all()
    assert grant.active and not grant.failure_reported
    assert [g.failure_reported for g in rig.manager.grants()] == [False]


def grant(lifetime_s: float) -> Grant:
    return Grant("u", None, "a", "r", 1000.0 + lifetime_s, 1000.0, "active", False, None)


@pytest.mark.parametrize(("lifetime", "after"), [
    (3600, 2880),          # 80 % of an hour
    (1000, 700),           # 5 minutes before expiry comes first
    (3, 2.4),              # very short: still 80 %, never a tight loop
    (30 * 86400, 12 * 3600),  # long-lived: at least every 12 hours
    (1, 1.0),              # never sooner than 1 s
])
def test_a_token_is_due_for_refresh_at_80_percent_of_its_life_within_bounds(lifetime: float, after: float) -> None:
    assert refresh_at(grant(lifetime)) - 1000.0 == pytest.approx(after)
