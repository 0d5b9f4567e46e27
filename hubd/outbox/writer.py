"""OutboxWriter: the registry's sink, and the only writer of outbox rows (the platform events to deliver).

`commit()` writes the registry's device rows and one outbox row per (event, bound user) in ONE transaction
(deleting, in passing, the rows the sender delivered since the last commit),
then hands the rows it wrote to the sender (`hubd.outbox.feed`, in memory: the sender need not read them back)
and wakes it; which events is `decide()`'s business (pure, `hubd.outbox.decide`).
`commit_grant()` stores a new grant and the new user's AddOrUpdateReport of every device in ONE transaction,
as a barrier row that goes before the events kept for that user.
It never sends anything itself and never drops anything: the outbox is on disk. A commit the disk refuses
raises `StorageUnavailable` (rolled back: none of its rows or messageIds exist) for the caller to retry;
`enqueue()`, whose callers have nothing to retry with, retries itself once the database takes writes.
Speakers' command results are written in the same transaction by the `ResultWriter` handed in (the webhook's
store, wired in app.py). The tables' SQL is `hubd.store`'s (outbox, devices, grants).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Sequence
from typing import Protocol

from hubd.devices.changes import Change, CommandResultReceived
from hubd.errors import StorageUnavailable
from hubd.events import PendingEvent
from hubd.metrics import Metrics
from hubd.outbox.decide import decide, discovery_events
from hubd.outbox.feed import OutboxFeed
from hubd.store.db import Database
from hubd.store.devices import DeviceRows, platform_endpoints_blocking, write_rows_blocking
from hubd.store.grants import Grant, replace_grant_blocking
from hubd.store.outbox import Written, count_by_name, delete_rows_blocking, insert_events_blocking
from hubd.store.receipts import Receipt, record_receipts_blocking

Result = tuple[str, str, str, str | None, float]  # endpoint, command id, status, message, time


class ResultWriter(Protocol):
    """Stores speakers' command results inside the writer's transaction (hubd.webhook.store)."""

    def __call__(self, conn: sqlite3.Connection, results: Sequence[Result], /) -> object:
        """Store the results; runs inside the caller's transaction."""


class OutboxWriter:
    """The registry's sink: persists device rows and queues platform events for every bound user."""

    def __init__(self, db: Database, *, namespace: str, metrics: Metrics,
                 outbox_wakeup: asyncio.Event | None = None, results: ResultWriter | None = None,
                 feed: OutboxFeed | None = None) -> None:
        self._db = db
        self._feed = feed  # None: the sender reads new rows back from the outbox
        self._results = results  # None: speakers' command results are not kept
        self._namespace = namespace
        self._wakeup = outbox_wakeup
        self._queued = metrics.counter("hubd_events_queued_total", "platform events written to the outbox, by name",
                                       "name")

    async def commit(self, changes: Sequence[Change], rows: DeviceRows, receipts: Sequence[Receipt] = ()) -> None:
        """Write rows, events, speakers' command results and the MQTT receipts in one transaction; wake the
        sender."""
        events = decide(changes, self._namespace)
        gone = self._feed.take_delivered() if self._feed is not None else []  # delivered rows, deleted in passing
        try:
            written = await self._db.call(_commit_blocking, rows, events, changes, self._results, receipts, gone,
                                          time.time())
        except BaseException:
            if gone and self._feed is not None:
                self._feed.delivered_again(gone)  # deleted by the next commit, or by the sender
            raise
        self._written(written)

    async def commit_grant(self, grant: Grant) -> None:
        """Store a new grant and queue its user's AddOrUpdateReport of every device, in ONE transaction.

        The devices are read in that transaction, so every device change is either in this report or
        queued for the user after it; the devices the owner hid are left out, the others carry the owner's
        names. The rows are barriers: they go before the events kept for the user (a dead grant's), so the
        platform knows the endpoints first. The token manager wakes the sender once the grant is active.
        """
        written = await self._db.call(_commit_grant_blocking, grant, self._namespace, time.time())
        self._written(written, wake=False)

    async def enqueue(self, events: Sequence[PendingEvent], user_ids: Sequence[str] | None = None) -> int:
        """Queue events outside the device path (e.g. the async Response of a slow control); returns once they
        are stored, waiting out a disk that refuses writes."""
        while True:
            try:
                written = await self._db.call(_enqueue_blocking, events, user_ids, time.time())
                break
            except StorageUnavailable:
                await self._db.writable()
        self._written(written)
        return len(written)

    def _written(self, written: list[Written], *, wake: bool = True) -> None:
        """Count a commit's rows, feed them to the sender and wake it (unless the caller wakes it later)."""
        if not written:
            return
        for name, count in count_by_name(written).items():
            self._queued.inc(count, label=name)
        if self._feed is not None:
            self._feed.written(written, time.monotonic())
        if wake and self._wakeup is not None:
            self._wakeup.set()


def _commit_blocking(conn: sqlite3.Connection, rows: DeviceRows, events: Sequence[PendingEvent],
                     changes: Sequence[Change], record_results: ResultWriter | None, receipts: Sequence[Receipt],
                     delivered: Sequence[int], now: float) -> list[Written]:
    with conn:  # one transaction: device rows, the events they caused and the messages they came from
        conn.execute("BEGIN IMMEDIATE")
        write_rows_blocking(conn, rows)
        delete_rows_blocking(conn, delivered)
        record_receipts_blocking(conn, receipts)
        results = [(c.device_id, c.result.command_id, c.result.status, c.result.message, c.received_at)
                   for c in changes if isinstance(c, CommandResultReceived)]
        if results and record_results is not None:
            record_results(conn, results)
        return insert_events_blocking(conn, events, None, now)


def _commit_grant_blocking(conn: sqlite3.Connection, grant: Grant, namespace: str, now: float) -> list[Written]:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        replace_grant_blocking(conn, grant)
        endpoints = platform_endpoints_blocking(conn)  # with the owner's names and rooms, none the owner hid
        return insert_events_blocking(conn, discovery_events(namespace, endpoints, barrier=True), [grant.user_id], now)


def _enqueue_blocking(conn: sqlite3.Connection, events: Sequence[PendingEvent], user_ids: Sequence[str] | None,
                      now: float) -> list[Written]:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        return insert_events_blocking(conn, events, user_ids, now)
