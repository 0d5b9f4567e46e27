"""The database's storage health (hubd.store.db): a write the disk refuses is `StorageUnavailable` and fails the
`storage` check with the reason; only a probe write declares the disk writable again; probes back off; the
writers that hold state in memory (registry, outbox sender, token manager) keep it and store it once the disk
takes writes, never crashing.

Real SQLite files throughout. A full disk is a real one where it matters (a small tmpfs, `disk.py`, root
only); a database that refuses writes without a full disk is made with SQLite's own limits
(`PRAGMA max_page_count` gives SQLITE_FULL, `PRAGMA query_only` SQLITE_READONLY).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from disk import SmallDisk
from unit_helpers import FakeClock, device_message, eventually

from hubd.cloud.client import TokenSet
from hubd.cloud.tokens import TokenManager
from hubd.dialects.base import Decoded
from hubd.directives.message import BUSY, Directive
from hubd.directives.replay import Attempt, Replay
from hubd.errors import DirectiveError, StorageUnavailable, StoreError
from hubd.events import PendingEvent
from hubd.lifecycle import Backoff, Health
from hubd.metrics import Metrics
from hubd.outbox.sender import OutboxSender
from hubd.outbox.writer import OutboxWriter
from hubd.registry import DeviceRegistry
from hubd.store import db as store_db
from hubd.store.db import Database
from hubd.store.grants import Grant, GrantRepo, replace_grant_blocking
from hubd.store.outbox import insert_events_blocking
from hubd.store.replies import DirectiveReplyRepo

LAMP = {"displayName": "Desk Lamp", "displayType": "light", "capabilities": [
    {"interface": "Switch", "supportedOperations": ["On", "Off"], "proactivelyReported": True, "retrievable": True}]}


class RecordingBackoff(Backoff):
    """A real Backoff whose delays are recorded and slept as a yield: the probe loop runs at test speed."""

    def __init__(self) -> None:
        super().__init__(initial_s=0.5, cap_s=30.0)
        self.delays: list[float] = []
        self.resets = 0

    def next_delay(self) -> float:
        delay = super().next_delay()
        self.delays.append(delay)
        return delay

    def reset(self) -> None:
        self.resets += 1
        super().reset()

    async def sleep(self) -> None:
        self.next_delay()
        await asyncio.sleep(0.001)


@dataclass
class Store:
    """A started Database with its probe loop running, and what it reports."""

    db: Database
    health: Health
    metrics: Metrics
    backoff: RecordingBackoff
    clock: FakeClock
    task: asyncio.Task[None]

    def check(self) -> dict[str, object]:
        return self.health.snapshot()["storage"]

    @property
    def writable(self) -> bool:
        """What the metric says: hubd_storage_writable 1 from a passing probe until a write is refused."""
        return "hubd_storage_writable 1" in self.metrics.render().splitlines()

    async def pragma(self, sql: str) -> None:
        await self.db.call(lambda c: c.execute(sql).fetchall())


@pytest.fixture
async def open_store(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[Store] = []

    async def open_at(path: Path) -> Store:
        health, metrics, backoff, clock = Health(), Metrics(), RecordingBackoff(), FakeClock()
        db = Database(path, synchronous="normal", health=health, metrics=metrics, backoff=backoff, clock=clock)
        await db.start()
        store = Store(db, health, metrics, backoff, clock, asyncio.create_task(db.run()))
        started.append(store)
        return store

    yield open_at
    for store in started:
        store.task.cancel()
        await asyncio.gather(store.task, return_exceptions=True)
        await store.db.stop()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    SmallDisk.skip_unless_root()
    with SmallDisk(tmp_path / "disk", 4 << 20) as disk:
        yield disk


def _blob_table(c: sqlite3.Connection) -> None:
    c.execute("CREATE TABLE IF NOT EXISTS blobs (b BLOB)")


def _add_blob(c: sqlite3.Connection, size: int) -> None:
    with c:
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO blobs VALUES (randomblob(?))", (size,))


async def _page_limit_at_current(store: Store) -> None:
    """From now on, a write that needs one more database page is refused with SQLITE_FULL."""
    count = await store.db.call(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    await store.pragma(f"PRAGMA max_page_count = {count}")


async def test_a_full_database_is_storage_unavailable_with_the_reason_in_the_storage_check(
        open_store: Callable[..., Any], tmp_path: Path) -> None:
    store: Store = await open_store(tmp_path / "hubd.db")
    assert store.check() == {"ok": True, "detail": "writable"}
    await store.db.call(_blob_table)
    await _page_limit_at_current(store)
    with pytest.raises(StorageUnavailable, match="the disk is full"):
        await store.db.call(_add_blob, 100_000)
    check = store.check()
    assert check["ok"] is False and "the disk is full" in str(check["detail"]) and "hubd.db" in str(check["detail"])
    assert not store.health.ready and not store.writable
    assert "hubd_storage_writable 0" in store.metrics.render()
    assert "hubd_storage_failures_total 1" in store.metrics.render()
    assert await store.db.call(lambda c: c.execute("SELECT COUNT(*) FROM blobs").fetchone()[0]) == 0


async def test_other_database_errors_stay_store_errors_and_leave_the_storage_check_alone(
        open_store: Callable[..., Any], tmp_path: Path) -> None:
    store: Store = await open_store(tmp_path / "hubd.db")
    with pytest.raises(StoreError) as raised:
        await store.db.call(lambda c: c.execute("SELECT * FROM no_such_table"))
    assert not isinstance(raised.value, StorageUnavailable)
    assert store.check()["ok"] is True and store.writable


async def test_a_read_only_database_is_unavailable_until_a_probe_write_goes_through(
        open_store: Callable[..., Any], tmp_path: Path) -> None:
    store: Store = await open_store(tmp_path / "hubd.db")
    await store.pragma("PRAGMA query_only = ON")
    with pytest.raises(StorageUnavailable, match="read-only"):
        await store.db.call(_blob_table)
    # Probes keep failing (their commit is refused too), backing off, until writes are allowed again.
    await eventually(lambda: len(store.backoff.delays) >= 5, "five probes")
    assert not store.writable and "read-only" in str(store.check()["detail"])
    await store.pragma("PRAGMA query_only = OFF")
    async with asyncio.timeout(10):
        await store.db.writable()
    assert store.check() == {"ok": True, "detail": "writable"} and store.health.ready
    await store.db.call(_blob_table)


async def test_probe_delays_grow_during_an_outage_and_start_again_only_after_a_stable_spell(
        open_store: Callable[..., Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="hubd.store.db")
    store: Store = await open_store(tmp_path / "hubd.db")
    await store.pragma("PRAGMA query_only = ON")
    with pytest.raises(StorageUnavailable):
        await store.db.call(_blob_table)
    await eventually(lambda: len(store.backoff.delays) >= 6, "six probes")
    delays = store.backoff.delays[:6]  # below the cap: each ceiling doubles, and the jitter keeps half of it
    assert delays == sorted(delays) and delays[-1] >= delays[0] * 8
    resets = store.backoff.resets
    await store.pragma("PRAGMA query_only = OFF")
    async with asyncio.timeout(10):
        await store.db.writable()

    # Refused again right after the recovery: the same outage (a flap), logged at DEBUG, backoff not reset.
    await store.pragma("PRAGMA query_only = ON")
    with pytest.raises(StorageUnavailable):
        await store.db.call(_blob_table)
    assert store.backoff.resets == resets
    await store.pragma("PRAGMA query_only = OFF")
    async with asyncio.timeout(10):
        await store.db.writable()

    # Refused after a stable spell: a new outage, warned about, probes from the first delay again.
    store.clock.now += store_db.STABLE_AFTER_S
    await store.pragma("PRAGMA query_only = ON")
    with pytest.raises(StorageUnavailable):
        await store.db.call(_blob_table)
    assert store.backoff.resets == resets + 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("read-only" in r.getMessage() for r in warnings)
    await store.pragma("PRAGMA query_only = OFF")


async def test_on_a_full_disk_only_a_probe_write_says_the_space_is_back(
        open_store: Callable[..., Any], small_disk: SmallDisk) -> None:
    store: Store = await open_store(small_disk.path / "hubd.db")
    await store.db.call(_blob_table)
    small_disk.fill()
    with pytest.raises(StorageUnavailable, match="the disk is full"):
        await store.db.call(_add_blob, 200_000)
    # The failed commit left room at the end of the WAL file: a one-page write would fit, the probe does not.
    await eventually(lambda: len(store.backoff.delays) >= 5, "five probes")
    assert not store.writable
    small_disk.free()
    async with asyncio.timeout(10):
        await store.db.writable()
    await store.db.call(_add_blob, 200_000)
    assert store.health.ready
    assert not list(small_disk.path.glob("*-probe"))  # each probe removes its file


# --- the writers -----------------------------------------------------------------------------------------


def _message(device: str, kind: str, payload: object) -> Decoded:
    return device_message(kind, device, json.dumps(payload).encode(), 1_700_000_000.0)


def _grant(user_id: str) -> Grant:
    return Grant(user_id, "anna", "at-0", "rt-0", 1_700_003_600.0, 1_700_000_000.0, "active", False, None)


def _outbox(c: sqlite3.Connection) -> list[tuple[str, dict[str, Any]]]:
    return [(r[0], json.loads(r[1])) for r in c.execute("SELECT name, body FROM outbox ORDER BY id")]


async def test_a_refused_commit_is_repeated_with_the_batch_s_changes_so_no_report_is_lost(
        open_store: Callable[..., Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store: Store = await open_store(tmp_path / "hubd.db")
    await store.db.call(replace_grant_blocking, _grant("alice"))
    metrics = Metrics()
    registry = DeviceRegistry(store.db, OutboxWriter(store.db, namespace="Service", metrics=metrics), metrics)
    await registry.start()
    await registry.handle([_message("lamp-1", "config", LAMP)])
    # A batch whose commit needs new pages: the lamp switched on, and 60 new devices (one big AddOrUpdateReport).
    batch = [_message("lamp-1", "state", {"Switch": "On"})] + [
        _message(f"lamp-{n + 2}", "config", {**LAMP, "displayName": "Hall Lamp"}) for n in range(60)]
    await _page_limit_at_current(store)
    handling = asyncio.create_task(registry.handle(batch))
    await eventually(lambda: not store.writable, "the commit refused")
    await eventually(lambda: len(store.backoff.delays) >= 3, "the commit retried after probes")
    assert not handling.done()  # held: the bridge acks nothing meanwhile
    await store.pragma("PRAGMA max_page_count = 1000000")
    async with asyncio.timeout(10):
        await handling
    names = [name for name, _ in await store.db.call(_outbox)]
    assert names == ["AddOrUpdateReport", "ChangeReport", "AddOrUpdateReport"]
    change = (await store.db.call(_outbox))[1][1]
    assert change["payload"]["change"]["states"][0]["value"] == "On"
    assert sum("holding 61 device changes" in r.getMessage() for r in caplog.records) == 1
    # The broker redelivers what was never acked after a restart; in this process the commit went through, so
    # the same batch again changes nothing.
    await registry.handle(batch)
    assert len(await store.db.call(_outbox)) == 3


async def test_delivered_rows_are_deleted_once_the_full_disk_has_room_again(
        open_store: Callable[..., Any], small_disk: SmallDisk) -> None:
    store: Store = await open_store(small_disk.path / "hubd.db")
    await store.db.call(replace_grant_blocking, _grant("alice"))
    posted: list[str] = []
    all_posted = asyncio.Event()

    class Api:
        async def post_event(self, body: dict[str, Any] | str) -> None:
            posted.append(json.loads(body)["header"]["messageId"] if isinstance(body, str) else "")
            if len(posted) == 20:
                all_posted.set()

    class Tokens:
        def is_active(self, user_id: str) -> bool:
            return True

        def token_now(self, user_id: str) -> str | None:
            return "at-0"

        def invalidate(self, user_id: str, token: str) -> None:
            pass

        async def revoked(self, user_id: str, token: str, reason: str) -> bool:
            return False

        def activations(self) -> int:
            return 0

        def activated(self, user_id: str) -> int:
            return 0

    events = [PendingEvent("DoorbellPress", (f"bell-{n % 3}",), {"header": {"messageId": ""}}) for n in range(20)]
    await store.db.call(lambda c: insert_events_blocking(c, events, None, 0.0))
    small_disk.fill()
    wakeup = asyncio.Event()
    sender = OutboxSender(store.db, Api(), Tokens(), clock=FakeClock(), metrics=Metrics(), wakeup=wakeup)
    await sender.start()
    running = asyncio.create_task(sender.run())
    try:
        async with asyncio.timeout(10):
            await all_posted.wait()  # sending only reads: it goes on with the disk full
        await eventually(lambda: not store.writable, "the deletes refused")
        assert not running.done() and sender.depth() == 0
        assert len(set(posted)) == 20
        assert await store.db.call(lambda c: c.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]) == 20
        small_disk.free()
        await eventually(lambda: store.db.call(lambda c: c.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 0),
                         "the delivered rows deleted")
        assert len(posted) == 20  # nothing sent twice
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


@dataclass
class Endpoint:
    """Hands out tokens at-N/rt-N."""

    issued: int = 0
    refreshed_with: list[str] = field(default_factory=list)

    async def exchange_code(self, code: str, *, timeout_s: float | None = None) -> TokenSet:
        self.issued += 1
        return TokenSet(f"at-{self.issued}", f"rt-{self.issued}", 3600.0)

    async def refresh(self, refresh_token: str) -> TokenSet:
        self.refreshed_with.append(refresh_token)
        self.issued += 1
        return TokenSet(f"at-{self.issued}", f"rt-{self.issued}", 3600.0)

    async def report_failure(self, user_id: str) -> None:
        pass


async def test_refreshed_tokens_the_disk_refuses_are_used_and_stored_once_it_takes_writes(
        open_store: Callable[..., Any], tmp_path: Path) -> None:
    store: Store = await open_store(tmp_path / "hubd.db")
    endpoint = Endpoint()
    repo = GrantRepo(store.db)
    manager = TokenManager(repo, endpoint, clock=FakeClock(), failure_report=False, metrics=Metrics(),
                           outbox_wakeup=asyncio.Event())
    await manager.start()
    running = asyncio.create_task(manager.run())
    try:
        await manager.accept_grant("alice", "code", driver_user="anna", timeout_s=1.0)
        await store.pragma("PRAGMA query_only = ON")
        await manager.refresh("alice")  # the platform spent rt-1: losing rt-2 would end the grant
        assert manager.token_now("alice") == "at-2"
        assert (await repo.get("alice")).refresh_token == "rt-1"  # type: ignore[union-attr]
        await store.pragma("PRAGMA query_only = OFF")

        async def stored() -> bool:
            grant = await repo.get("alice")
            return grant is not None and grant.refresh_token == "rt-2" and grant.access_token == "at-2"

        await eventually(stored, "the refreshed tokens stored")
        assert not running.done()
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_a_new_grant_the_disk_refuses_is_committed_once_it_takes_writes(
        open_store: Callable[..., Any], tmp_path: Path) -> None:
    store: Store = await open_store(tmp_path / "hubd.db")
    repo = GrantRepo(store.db)
    manager = TokenManager(repo, Endpoint(), clock=FakeClock(), failure_report=False, metrics=Metrics(),
                           outbox_wakeup=asyncio.Event())
    await manager.start()
    running = asyncio.create_task(manager.run())
    try:
        await store.pragma("PRAGMA query_only = ON")
        accepting = asyncio.create_task(manager.accept_grant("alice", "code", driver_user="anna", timeout_s=1.0))
        await eventually(lambda: len(store.backoff.delays) >= 3, "the commit retried after probes")
        assert not accepting.done() and not manager.is_active("alice")
        await store.pragma("PRAGMA query_only = OFF")
        async with asyncio.timeout(10):
            await accepting
        assert manager.is_active("alice") and (await repo.get("alice")) is not None
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_a_control_is_refused_busy_unsent_and_a_queued_reply_waits_its_turn_while_the_disk_refuses(
        open_store: Callable[..., Any], tmp_path: Path) -> None:
    store: Store = await open_store(tmp_path / "hubd.db")
    resends = Replay(DirectiveReplyRepo(store.db), Metrics())
    writer = asyncio.create_task(resends.run())
    sent: list[str] = []

    async def control(directive: Directive, attempt: Attempt) -> dict[str, Any]:
        if await resends.claim(attempt, {"done": False}, directive.deadline) is None:
            sent.append(directive.message_id)  # the `set` goes out here
            resends.finish(attempt, {"done": True})
        return {"done": True}

    def directive(message_id: str) -> Directive:
        return Directive(message_id, "Service.Control", "Switch.On", "token", "alice", None, {"endpointId": "lamp-1"},
                         {}, {}, asyncio.get_running_loop().time() + 5.0)

    async def rows() -> list[tuple[str, int]]:
        return await store.db.call(lambda c: [(r[0], r[1]) for r in c.execute(
            "SELECT message_id, done FROM directive_replies ORDER BY message_id")])

    try:
        await store.pragma("PRAGMA query_only = ON")
        with pytest.raises(DirectiveError) as refused:
            await resends.once(directive("m-1"), control)
        assert refused.value.name == BUSY and sent == []
        await store.pragma("PRAGMA query_only = OFF")
        await store.db.writable()
        await resends.once(directive("m-2"), control)  # claimed and sent; its finish is queued
        await store.pragma("PRAGMA query_only = ON")
        await eventually(lambda: not store.writable, "the finish refused")
        assert not writer.done()
        await store.pragma("PRAGMA query_only = OFF")

        async def finished() -> bool:
            return await rows() == [("m-2", 1)]

        await eventually(finished, "the finish written once the disk takes writes")
        assert sent == ["m-2"]
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
