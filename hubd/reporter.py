"""The reporter: decides which platform events device changes cause and writes them to the outbox.

`decide()` is pure (the rules README "MQTT" states). `Reporter.commit()` writes the registry's device
rows and one outbox row per (event, bound user) in ONE transaction, then wakes the outbox sender.
`Reporter.commit_grant()` stores a new grant and the new user's AddOrUpdateReport of every device in ONE
transaction, as a barrier row that goes before the events kept for that user.
It never sends anything itself and never drops anything: the outbox is on disk. A commit the disk refuses
raises `StorageUnavailable` (rolled back: none of its rows or messageIds exist) for the caller to retry;
`enqueue()`, whose callers have nothing to retry with, retries itself once the database takes writes.
Speakers' command results are written in the same transaction by the `ResultWriter` handed in (the webhook's
store, wired in app.py).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hubd.cloud import messages
from hubd.errors import StorageUnavailable
from hubd.events import BARRIER_LANE
from hubd.metrics import Metrics
from hubd.registry import (
    Change,
    CommandResultReceived,
    DeviceAnnounced,
    DeviceRemoved,
    DeviceRows,
    DoorbellPressed,
    StatesChanged,
    load_devices_blocking,
    write_rows_blocking,
)
from hubd.store.db import Database
from hubd.store.grants import Grant, replace_grant_blocking

Result = tuple[str, str, str, str | None, float]  # endpoint, command id, status, message, time


class ResultWriter(Protocol):
    """Stores speakers' command results inside the reporter's transaction (hubd.webhook.store)."""

    def __call__(self, conn: sqlite3.Connection, results: Sequence[Result], /) -> object:
        """Store the results; runs inside the caller's transaction."""


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """A platform message to queue: its name, the endpoints whose order it joins, its body builder input."""

    name: str
    lanes: tuple[str, ...]
    body: dict[str, Any]  # built with a placeholder messageId; each user's row gets its own


DISCOVERY_BATCH = 100  # endpoints per AddOrUpdateReport / DeleteReport


def discovery_events(brand: str, endpoints: Sequence[dict[str, Any]], *, barrier: bool = False) -> list[PendingEvent]:
    """AddOrUpdateReports for these endpoints, DISCOVERY_BATCH at a time; `barrier`: ahead of the user's rows."""
    out = []
    first = (BARRIER_LANE,) if barrier else ()
    for start in range(0, len(endpoints), DISCOVERY_BATCH):
        chunk = list(endpoints[start:start + DISCOVERY_BATCH])
        out.append(PendingEvent("AddOrUpdateReport", (*first, *(e["endpointId"] for e in chunk)),
                                messages.add_or_update_report(brand, "", chunk)))
    return out


def decide(changes: Sequence[Change], brand: str) -> list[PendingEvent]:
    """Platform events for a batch of changes, in order; consecutive announcements/deletions are batched."""
    out: list[PendingEvent] = []
    announced: list[dict[str, Any]] = []
    removed: list[str] = []

    def flush() -> None:
        if announced:
            out.extend(discovery_events(brand, announced))
            announced.clear()
        for start in range(0, len(removed), DISCOVERY_BATCH):
            chunk = removed[start:start + DISCOVERY_BATCH]
            out.append(PendingEvent("DeleteReport", tuple(chunk), messages.delete_report(brand, "", chunk)))
        removed.clear()

    for change in changes:
        if isinstance(change, DeviceAnnounced):
            if removed:
                flush()
            announced[:] = [e for e in announced if e["endpointId"] != change.endpoint["endpointId"]]
            announced.append(change.endpoint)
            continue
        if isinstance(change, DeviceRemoved):
            if announced:
                flush()
            if change.device_id not in removed:
                removed.append(change.device_id)
            continue
        flush()
        if isinstance(change, StatesChanged):
            reported = [s for s in change.changed if s.interface in change.proactive]
            if not reported:
                continue
            changed = [{"interface": s.interface, "value": s.value, "timeOfSample": s.time_of_sample}
                       for s in reported]
            out.append(PendingEvent("ChangeReport", (change.device_id,), messages.change_report(
                brand, "", change.device_id, change.additional_info, change.snapshot, changed, change.cause)))
        elif isinstance(change, DoorbellPressed):
            out.append(PendingEvent("DoorbellPress", (change.device_id,),
                                    messages.doorbell_press(brand, "", change.device_id, change.timestamp)))
    flush()
    return out


class Reporter:
    """The registry's sink: persists device rows and queues platform events for every bound user."""

    def __init__(self, db: Database, *, namespace: str, metrics: Metrics,
                 outbox_wakeup: asyncio.Event | None = None, results: ResultWriter | None = None) -> None:
        self._db = db
        self._results = results  # None: speakers' command results are not kept
        self._brand = namespace
        self._wakeup = outbox_wakeup
        self._queued = metrics.counter("hubd_events_queued_total", "platform events written to the outbox, by name",
                                       "name")

    async def commit(self, changes: Sequence[Change], rows: DeviceRows) -> None:
        """Write rows, events and speakers' command results in one transaction; wake the sender."""
        events = decide(changes, self._brand)
        counts = await self._db.call(_commit_blocking, rows, events, changes, self._results, time.time())
        for name, count in counts.items():
            self._queued.inc(count, label=name)
        if counts and self._wakeup is not None:
            self._wakeup.set()

    async def commit_grant(self, grant: Grant) -> None:
        """Store a new grant and queue its user's AddOrUpdateReport of every device, in ONE transaction.

        The devices are read in that transaction, so every device change is either in this report or
        queued for the user after it. The rows are barriers: they go before the events kept for the user
        (a dead grant's), so the platform knows the endpoints first. The token manager wakes the sender
        once the grant is active.
        """
        counts = await self._db.call(_commit_grant_blocking, grant, self._brand, time.time())
        for name, count in counts.items():
            self._queued.inc(count, label=name)

    async def enqueue(self, events: Sequence[PendingEvent], user_ids: Sequence[str] | None = None) -> int:
        """Queue events outside the device path (e.g. the async Response of a slow control); returns once they
        are stored, waiting out a disk that refuses writes."""
        while True:
            try:
                counts = await self._db.call(_enqueue_blocking, events, user_ids, time.time())
                break
            except StorageUnavailable:
                await self._db.writable()
        for name, count in counts.items():
            self._queued.inc(count, label=name)
        if counts and self._wakeup is not None:
            self._wakeup.set()
        return sum(counts.values())


def _commit_blocking(conn: sqlite3.Connection, rows: DeviceRows, events: Sequence[PendingEvent],
                     changes: Sequence[Change], record_results: ResultWriter | None, now: float) -> dict[str, int]:
    with conn:  # one transaction: device rows and the events they caused are durable together
        conn.execute("BEGIN IMMEDIATE")
        write_rows_blocking(conn, rows)
        results = [(c.device_id, c.result.command_id, c.result.status, c.result.message, c.received_at)
                   for c in changes if isinstance(c, CommandResultReceived)]
        if results and record_results is not None:
            record_results(conn, results)
        return insert_events_blocking(conn, events, None, now)


def _commit_grant_blocking(conn: sqlite3.Connection, grant: Grant, brand: str, now: float) -> dict[str, int]:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        replace_grant_blocking(conn, grant)
        endpoints = [device.endpoint() for device in load_devices_blocking(conn)]
        return insert_events_blocking(conn, discovery_events(brand, endpoints, barrier=True), [grant.user_id], now)


def _enqueue_blocking(conn: sqlite3.Connection, events: Sequence[PendingEvent], user_ids: Sequence[str] | None,
                      now: float) -> dict[str, int]:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        return insert_events_blocking(conn, events, user_ids, now)


def insert_events_blocking(conn: sqlite3.Connection, events: Sequence[PendingEvent],
                           user_ids: Sequence[str] | None, now: float) -> dict[str, int]:
    """Insert one outbox row per (event, user); users default to everyone with a grant."""
    if not events:
        return {}
    users = list(user_ids) if user_ids is not None else [
        r[0] for r in conn.execute("SELECT user_id FROM grants ORDER BY user_id")]
    counts: dict[str, int] = {}
    rows = []
    for event in events:
        lanes = json.dumps(list(event.lanes))
        for user in users:
            message_id = messages.new_message_id()
            body = {**event.body, "header": {**event.body["header"], "messageId": message_id}}
            rows.append((user, message_id, event.name, lanes, json.dumps(body, separators=(",", ":")), now))
            counts[event.name] = counts.get(event.name, 0) + 1
    conn.executemany(
        "INSERT INTO outbox (user_id, message_id, name, lanes, body, created_at) VALUES (?, ?, ?, ?, ?, ?)", rows)
    return counts
