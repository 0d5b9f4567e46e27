"""The outbox sender's unit rig, shared by its tests and the journal's: a fake platform (FakeApi), fake tokens
(FakeTokens), a fake clock, and `running_sender`, an OutboxSender running on a real SQLite file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unit_helpers import NOW, FakeClock, eventually

from hubd.cloud import messages
from hubd.events import PendingEvent
from hubd.metrics import Metrics
from hubd.outbox.delivery import DeliveryObserver, PlatformApi
from hubd.outbox.feed import OutboxFeed
from hubd.outbox.sender import DISCOVERY_WINDOW_S, OutboxSender
from hubd.store.db import Database
from hubd.store.outbox import Written, insert_events_blocking


@dataclass
class Posted:
    user: str
    name: str
    message_id: str
    endpoints: tuple[str, ...]
    token: str
    body: dict[str, Any]


Behaviour = Callable[[Posted], Awaitable[None]]


@dataclass
class FakeApi:
    """Records every POST; `behaviour[user]` decides the outcome (default: accepted)."""

    posted: list[Posted] = field(default_factory=list)
    accepted: list[Posted] = field(default_factory=list)
    behaviour: dict[str, Behaviour] = field(default_factory=dict)

    async def post_event(self, body: dict[str, Any] | str) -> None:
        message = json.loads(body) if isinstance(body, str) else body
        header = message["header"]
        token = header["authorization"]["token"]
        payload = message.get("payload", {})
        if "endpoints" in payload:
            endpoints = tuple(e["endpointId"] for e in payload["endpoints"])
        elif "endpoint" in message:
            endpoints = (message["endpoint"]["endpointId"],)
        else:
            endpoints = (payload["endpointId"],)
        post = Posted(token.split(":")[0], header["name"], header["messageId"], endpoints, token, message)
        self.posted.append(post)
        handler = self.behaviour.get(post.user)
        if handler is not None:
            await handler(post)
        self.accepted.append(post)

    def of(self, user: str, endpoint: str | None = None) -> list[Posted]:
        return [p for p in self.accepted if p.user == user and (endpoint is None or endpoint in p.endpoints)]


@dataclass
class FakeTokens:
    """Tokens look like "<user>:<n>"; a user is active once given a token."""

    tokens: dict[str, str | None] = field(default_factory=dict)
    inactive: set[str] = field(default_factory=set)
    invalidated: list[tuple[str, str]] = field(default_factory=list)
    revocations: list[str] = field(default_factory=list)
    activation_count: int = 0
    activated_at: dict[str, int] = field(default_factory=dict)
    current: dict[str, str] = field(default_factory=dict)  # the grant's token, also while "refreshing"

    def is_active(self, user_id: str) -> bool:
        return user_id in self.tokens and user_id not in self.inactive

    def token_now(self, user_id: str) -> str | None:
        return self.tokens.get(user_id)

    def invalidate(self, user_id: str, token: str) -> None:
        self.invalidated.append((user_id, token))
        if self.tokens.get(user_id) == token:
            self.current[user_id] = token
            self.tokens[user_id] = None  # "refreshing": the test hands out the next token

    async def revoked(self, user_id: str, token: str, reason: str) -> bool:
        if not self.is_active(user_id):
            return True
        if (self.tokens.get(user_id) or self.current.get(user_id)) != token:
            return False
        self.revocations.append(user_id)
        self.inactive.add(user_id)
        return True

    def activations(self) -> int:
        return self.activation_count

    def activated(self, user_id: str) -> int:
        return self.activated_at.get(user_id, 0)

    def activate(self, user_id: str, token: str) -> None:
        """What the token manager does once a new grant is committed (its wakeup is the caller's)."""
        self.tokens[user_id] = token
        self.inactive.discard(user_id)
        self.activation_count += 1
        self.activated_at[user_id] = self.activation_count


@dataclass
class SenderRig:
    """An OutboxSender running on a real SQLite file, with a fake platform, fake tokens and a fake clock."""

    db: Database
    sender: OutboxSender
    api: FakeApi
    tokens: FakeTokens
    clock: FakeClock
    wakeup: asyncio.Event
    metrics: Metrics
    task: asyncio.Task[None]  # the sender's run()
    feed: OutboxFeed | None  # as in hubd: the writer's rows in memory (None: the sender reads them back)

    async def queue(self, user: str, *events: PendingEvent, wake: bool = True) -> None:
        """Commit events for `user` as the writer does: insert, feed, wake (`wake=False`: as `commit_grant`, whose
        wakeup comes with the grant's activation)."""
        written = await self.db.call(insert_rows, list(events), user)
        if self.feed is not None:
            self.feed.written(written, time.monotonic())
        if wake:
            self.wakeup.set()

    def refreshed(self, user: str, token: str) -> None:
        self.tokens.tokens[user] = token
        self.wakeup.set()  # what the token manager does after a refresh

    async def later(self, seconds: float) -> None:
        """Move the clock on (retries fall due) and wake the sender."""
        self.clock.now += seconds
        self.wakeup.set()
        await asyncio.sleep(0)

    async def close_windows(self, waiting: int) -> None:
        """Once `waiting` rows wait in the sender's index, move the clock past the discovery window of those that
        wait for theirs (AddOrUpdateReports and DeleteReports)."""
        await eventually(lambda: self.sender.depth() >= waiting, f"{waiting} rows waiting")
        await self.later(DISCOVERY_WINDOW_S)

    async def rows(self, table: str = "outbox") -> list[sqlite3.Row]:
        return await self.db.call(lambda c: c.execute(f"SELECT * FROM {table} ORDER BY id").fetchall())  # noqa: S608


def insert_rows(conn: sqlite3.Connection, events: list[PendingEvent], user: str) -> list[Written]:
    """Queue `events` for `user` as the writer does (created at NOW), not fed: `SenderRig.queue` feeds."""
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        return insert_events_blocking(conn, events, [user], NOW)


def change(endpoint: str, value: str) -> PendingEvent:
    state = {"interface": "Switch", "value": value, "timeOfSample": "2024-01-01T00:00:00.000Z"}
    return PendingEvent("ChangeReport", (endpoint,), messages.change_report(
        "Service", "", endpoint, {}, [state], [state], "PHYSICAL_INTERACTION"))


def press(endpoint: str) -> PendingEvent:
    return PendingEvent("DoorbellPress", (endpoint,),
                        messages.doorbell_press("Service", "", endpoint, "2024-01-01T00:00:00.000Z"))


def endpoint(endpoint_id: str) -> dict[str, Any]:
    return {"endpointId": endpoint_id, "displayName": "Lamp", "displayType": "light", "additionalInfo": {},
            "capabilities": [], "states": []}


def held(gate: asyncio.Event, endpoint: str | None = None) -> Behaviour:
    """A behaviour that holds each post (of `endpoint`, or every one) until `gate` is set."""
    async def hold(post: Posted) -> None:
        if endpoint is None or endpoint in post.endpoints:
            await gate.wait()
    return hold


@contextlib.asynccontextmanager
async def running_sender(tmp_path: Path, *, api: PlatformApi | None = None, tokens: FakeTokens | None = None,
                         observer: DeliveryObserver | None = None, log_events: bool = True, fed: bool = True,
                         ) -> AsyncIterator[SenderRig]:
    """An OutboxSender on `tmp_path/hubd.db`, running until the block ends. `api` replaces the FakeApi (a real
    PlatformClient, say); `rig.api` is then a FakeApi nobody posts to. `fed=False`: no feed, every new row is
    read back from the outbox."""
    db = Database(tmp_path / "hubd.db", synchronous="normal")
    await db.start()
    fake, clock, wakeup, metrics = FakeApi(), FakeClock(), asyncio.Event(), Metrics()
    tokens = tokens or FakeTokens()
    feed = OutboxFeed() if fed else None
    sender = OutboxSender(db, api or fake, tokens, clock=clock, metrics=metrics, wakeup=wakeup, observer=observer,
                          log_events=log_events, feed=feed)
    await sender.start()
    task = asyncio.create_task(sender.run())
    try:
        yield SenderRig(db, sender, fake, tokens, clock, wakeup, metrics, task, feed)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await sender.stop()
        await db.stop()
