"""OutboxSender: delivers the durable outbox to the platform, at least once, in order per (user, device).

Rows are written by the reporter before anything is sent. The sender keeps a small in-memory
index of pending rows (ids, lanes, retry times; bodies stay on disk) and sends every row whose
lanes (endpointIds) have no earlier pending row of the same user, so one device's retries never
block another device, and one user's outage or dead grant never blocks another user.
Outcomes (PROTOCOL.md 4.1): 2xx delete; 401 refresh + resend with the same messageId; 403 one
refresh, then end the grant; 400/422 dead-letter; 5xx/429/timeouts back off (cap 60 s) and retry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from hubd.cloud.messages import with_token_json
from hubd.errors import CloudAuthError, CloudRejected, CloudUnavailable
from hubd.lifecycle import Backoff, Clock
from hubd.metrics import Metrics
from hubd.store.db import Database

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 32
SCAN_PER_USER = 2000
RETRY_CAP_S = 60.0
# Delivered rows are deleted in one transaction per this interval, not one per delivery: the deletes share
# the database thread with the reporter's commits, which are on every event's path. A crash within the
# interval resends a few delivered events with their original messageId (at least once, as always).
DELETE_EVERY_S = 0.05


class PlatformApi(Protocol):
    """What the sender needs of the platform client."""

    async def post_event(self, body: dict[str, Any] | str) -> None:
        """POST one message (a dict or its JSON text); raise CloudUnavailable / CloudRejected / CloudAuthError."""


class TokenSource(Protocol):
    """What the sender needs of the token manager."""

    def is_active(self, user_id: str) -> bool:
        """True when the user's events may be sent."""

    async def token_for(self, user_id: str) -> str:
        """A valid access token."""

    async def refresh(self, user_id: str, *, stale_token: str | None = None) -> None:
        """Refresh the user's token."""

    async def revoked(self, user_id: str, reason: str) -> None:
        """End the user's grant."""


@dataclass(slots=True)
class _Row:
    id: int
    user_id: str
    lanes: tuple[str, ...]
    attempts: int
    next_attempt_at: float
    in_flight: bool = False
    backoff: Backoff | None = None  # made at the first failed attempt: a backlog of 50,000 rows needs none


class OutboxSender:
    """The only caller of `PlatformApi.post_event`."""

    name = "outbox"

    def __init__(self, db: Database, api: PlatformApi, tokens: TokenSource, *, clock: Clock, metrics: Metrics,
                 wakeup: asyncio.Event) -> None:
        self._db = db
        self._api = api
        self._tokens = tokens
        self._clock = clock
        self._wakeup = wakeup  # set by others: new rows (the reporter), a new grant (the token manager)
        self._kick = asyncio.Event()  # "dispatch again": a delivery finished, or `wakeup` was set
        self._new_rows = False
        self._pending: dict[str, dict[int, _Row]] = {}
        self._last_id = 0
        self._in_flight = 0
        self._done: list[int] = []
        self._done_ready = asyncio.Event()
        self._sent = metrics.counter("hubd_events_sent_total", "events the platform accepted, by name", "name")
        self._failed = metrics.counter("hubd_event_send_failures_total", "failed sends, by reason", "reason")
        self._dead = metrics.counter("hubd_events_dead_lettered_total", "events the platform refused for good")
        metrics.gauge("hubd_outbox_depth", "events waiting to be delivered",
                      lambda: float(sum(len(rows) for rows in self._pending.values())))

    async def start(self) -> None:
        """Index what is already in the outbox (for example after a crash)."""
        await self._load_new()
        depth = sum(len(r) for r in self._pending.values())
        if depth:
            log.info("outbox holds %d undelivered events", depth)

    async def run(self) -> None:
        """Send whatever is due; sleep until woken or the next retry is due."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._flush_done(), name="outbox.ack")
            group.create_task(self._relay_wakeup(), name="outbox.wakeup")
            while True:
                self._kick.clear()
                if self._new_rows:
                    # Only when someone wrote rows: a finished delivery needs a dispatch, not a query.
                    self._new_rows = False
                    await self._load_new()
                next_due, due = self._dispatch()
                if due:
                    # One query for the bodies of every row sent in this round, not one per row.
                    bodies = await self._db.call(_bodies_blocking, [row.id for row in due])
                    for row in due:
                        group.create_task(self._deliver(row, bodies.get(row.id)), name=f"outbox.send.{row.id}")
                delay = 30.0 if next_due is None else max(0.0, next_due - self._clock.time())
                try:
                    async with asyncio.timeout(delay):
                        await self._kick.wait()
                except TimeoutError:
                    pass

    async def _relay_wakeup(self) -> None:
        """Turn the shared wakeup into "load new rows, then dispatch"."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            self._new_rows = True
            self._kick.set()

    async def stop(self) -> None:
        """Deliveries in flight are cancelled with the task group; their rows stay and are resent later."""
        ids, self._done = self._done, []
        if ids:
            await self._db.call(_delete_blocking, ids)

    def depth(self, user_id: str | None = None) -> int:
        """Undelivered events (of one user, or all)."""
        if user_id is not None:
            return len(self._pending.get(user_id, {}))
        return sum(len(rows) for rows in self._pending.values())

    def _dispatch(self) -> tuple[float | None, list[_Row]]:
        """Mark every row that may be sent now as in flight; return them and when the next retry is due."""
        now = self._clock.time()
        next_due: float | None = None
        due: list[_Row] = []
        for user_id, rows in self._pending.items():
            if not rows or not self._tokens.is_active(user_id):
                continue
            blocked: set[str] = set()
            for scanned, row in enumerate(rows.values()):
                if scanned >= SCAN_PER_USER or self._in_flight >= MAX_IN_FLIGHT:
                    break
                if row.in_flight or blocked.intersection(row.lanes):
                    blocked.update(row.lanes)
                    continue
                if row.next_attempt_at > now:
                    next_due = row.next_attempt_at if next_due is None else min(next_due, row.next_attempt_at)
                    blocked.update(row.lanes)
                    continue
                blocked.update(row.lanes)
                row.in_flight = True
                self._in_flight += 1
                due.append(row)
        return next_due, due

    async def _deliver(self, row: _Row, loaded: tuple[str, str] | None) -> None:
        try:
            outcome = await self._send(row, loaded)
        finally:
            row.in_flight = False
            self._in_flight -= 1
        if outcome == "done":
            self._pending.get(row.user_id, {}).pop(row.id, None)
            self._done.append(row.id)
            self._done_ready.set()
        elif outcome == "dead":
            self._pending.get(row.user_id, {}).pop(row.id, None)
        self._kick.set()

    async def _send(self, row: _Row, loaded: tuple[str, str] | None) -> str:
        if loaded is None:
            return "done"
        name, body = loaded
        refreshed = False
        while True:
            try:
                token = await self._tokens.token_for(row.user_id)
                # The stored JSON text goes out as is, with the token spliced in: no parse, no re-encode.
                await self._api.post_event(with_token_json(body, token))
            except CloudAuthError as err:
                if not self._tokens.is_active(row.user_id):
                    # The grant ended (refresh failed for good): keep the row until a new grant.
                    self._failed.inc(label="grant_ended")
                    return "paused"
                if refreshed:
                    if err.fatal:
                        await self._tokens.revoked(row.user_id, f"event API refused the token after a refresh: {err}")
                        self._failed.inc(label="revoked")
                        return "paused"
                    return await self._retry(row, f"token refused after refresh: {err}", "auth")
                refreshed = True
                self._failed.inc(label="403" if err.fatal else "401")
                try:
                    await self._tokens.refresh(row.user_id, stale_token=token)
                except CloudAuthError:
                    return "paused" if not self._tokens.is_active(row.user_id) else await self._retry(
                        row, "refresh failed", "refresh")
                except CloudUnavailable as refresh_err:
                    return await self._retry(row, f"refresh failed: {refresh_err}", "refresh")
                continue  # resend the same body: same messageId
            except CloudUnavailable as err:
                return await self._retry(row, str(err), "unavailable")
            except CloudRejected as err:
                log.error("platform rejected %s %s for user %s (HTTP %d): %s; moved to dead letters",
                          name, json.loads(body)["header"]["messageId"], row.user_id, err.status, err.body[:300])
                await self._db.call(_dead_letter_blocking, row.id, err.status, err.body[:4000], self._clock.time())
                self._dead.inc()
                return "dead"
            self._sent.inc(label=name)
            return "done"

    async def _retry(self, row: _Row, error: str, reason: str) -> str:
        row.attempts += 1
        if row.backoff is None:
            row.backoff = Backoff(initial_s=1.0, cap_s=RETRY_CAP_S)
        row.next_attempt_at = self._clock.time() + row.backoff.next_delay()
        self._failed.inc(label=reason)
        log.warning("delivery of outbox row %d for user %s failed (attempt %d), retrying in %.1f s: %s",
                    row.id, row.user_id, row.attempts, row.next_attempt_at - self._clock.time(), error[:200])
        await self._db.call(_note_retry_blocking, row.id, row.attempts, row.next_attempt_at, error[:500])
        return "retry"

    async def _flush_done(self) -> None:
        while True:
            await self._done_ready.wait()
            await asyncio.sleep(DELETE_EVERY_S)
            self._done_ready.clear()
            ids, self._done = self._done, []
            if ids:
                await self._db.call(_delete_blocking, ids)

    async def _load_new(self) -> None:
        rows = await self._db.call(_new_rows_blocking, self._last_id)
        for row_id, user_id, lanes, attempts, next_at in rows:
            self._pending.setdefault(user_id, {})[row_id] = _Row(row_id, user_id, tuple(json.loads(lanes)),
                                                                 attempts, next_at)
            self._last_id = max(self._last_id, row_id)


def _new_rows_blocking(conn: sqlite3.Connection, after: int) -> list[tuple[int, str, str, int, float]]:
    return [tuple(r) for r in conn.execute(
        "SELECT id, user_id, lanes, attempts, next_attempt_at FROM outbox WHERE id > ? ORDER BY id", (after,))]


def _bodies_blocking(conn: sqlite3.Connection, ids: list[int]) -> dict[int, tuple[str, str]]:
    """Name and body (JSON text) of each row still in the outbox (at most MAX_IN_FLIGHT ids per call)."""
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"SELECT id, name, body FROM outbox WHERE id IN ({marks})", ids)  # noqa: S608 - only ?s
    return {row[0]: (row[1], row[2]) for row in rows}


def _delete_blocking(conn: sqlite3.Connection, ids: Iterable[int]) -> None:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])


def _note_retry_blocking(conn: sqlite3.Connection, row_id: int, attempts: int, next_at: float, error: str) -> None:
    conn.execute("UPDATE outbox SET attempts=?, next_attempt_at=?, last_error=? WHERE id=?",
                 (attempts, next_at, error, row_id))


def _dead_letter_blocking(conn: sqlite3.Connection, row_id: int, status: int, response: str, now: float) -> None:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO dead_letters (id, user_id, message_id, name, body, http_status, response, attempts, "
            "created_at, dead_at) SELECT id, user_id, message_id, name, body, ?, ?, attempts + 1, created_at, ? "
            "FROM outbox WHERE id = ?", (status, response, now, row_id))
        conn.execute("DELETE FROM outbox WHERE id = ?", (row_id,))
