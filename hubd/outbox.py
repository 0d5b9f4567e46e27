"""OutboxSender: delivers the durable outbox to the platform, at least once, in order per (user, device).

Rows are written by the reporter before anything is sent. The sender keeps a small in-memory index of
pending rows (ids, lanes, retry times; bodies stay on disk): per user, one queue per lane (endpointId),
and a row may go once it heads every one of its lanes, so one device's backlog or retries never hide or
block another device. A barrier row (lanes starting with BARRIER_LANE: a new grant's AddOrUpdateReport)
goes before every other row of its user; barriers go in the order of their place (`hubd.events`), so the
pieces of a split batch go where the batch was, before a later grant's report. A user whose grant became
active since the last load of new rows waits for one: that grant's report is loaded before anything goes.
Users share the send slots fairly: each round starts with the next user, a user holds at most
MAX_IN_FLIGHT_PER_USER sends, one with nothing in flight always gets one, and a user whose token is
being refreshed is skipped (nobody waits for a token in a slot). So one user's outage, backlog or dead
grant never delays another user.
Outcomes (the event gateway's answers): 2xx delete; a row's first 401/403 in a row refreshes in the background and
resends with the same messageId, then a 403 ends the grant (if the refused token is still the grant's) and a
401 backs off; 400/422 dead-letter (a batched AddOrUpdateReport or DeleteReport refused with 400 is first
split into one message per endpoint, so one bad endpoint dead-letters only itself); anything else (5xx,
429, other 4xx, timeouts, and any unexpected error, logged with its traceback) backs off (cap 60 s) and
retries. A user who must bind again keeps at most KEPT_WHILE_UNBOUND events (DeleteReports are always kept).
A write the disk refuses (`StorageUnavailable`) never stops the sender: delivered rows stay in memory and are
deleted once the database takes writes (a restart before that resends them, with their messageId); a dead
letter or a split that cannot be written is retried with the row's backoff; a failed read waits for the
database. Sending goes on meanwhile: it only reads.
What becomes of each row is told to a `DeliveryObserver` (the event journal of the status page: waiting,
sending, delivered, retrying and why, given up on, held back), and each event delivered or given up on is one
line on the `hubd.events` logger (`delivered ChangeReport <messageId> for user u1: lamp (Switch=On) in 3 ms`, info,
off with `log.events: false`; `gave up on ...` is an error and always logged); never a token (stored bodies hold
none).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import sqlite3
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from hubd.cloud.messages import new_message_id, with_token_json
from hubd.errors import CloudAuthError, CloudRejected, CloudUnavailable, StorageUnavailable
from hubd.events import BARRIER_LANE
from hubd.journal import EventRef, describe
from hubd.lifecycle import Backoff, Clock
from hubd.metrics import Metrics
from hubd.store.db import Database

log = logging.getLogger(__name__)
# One line per platform event delivered (info; `log.events: false` quiets them) or given up on (error).
events_log = logging.getLogger("hubd.events")

MAX_IN_FLIGHT = 64  # sends at once, all users (beyond it, only a user with nothing in flight gets one)
MAX_IN_FLIGHT_PER_USER = 32
# Sends started by one dispatch round, all users: with thousands of users each owed one send, the rest go in
# the next rounds, right after (the round starts with the first user left out).
MAX_SENDS_PER_ROUND = 256
# Row ids per `IN (?, ...)` query: well below SQLite's variable limit (999 before 3.32).
QUERY_CHUNK = 500
RETRY_CAP_S = 60.0
# A user who must bind again keeps this many undelivered events (their new grant's AddOrUpdateReport brings
# the devices up to date anyway); the oldest beyond it are dropped, PRUNE_SLACK at a time.
KEPT_WHILE_UNBOUND = 10_000
PRUNE_SLACK = 500
# Delivered rows are deleted in one transaction per this interval (or DELETE_BATCH rows, whichever comes
# first), not one per delivery: the deletes share the database thread with the reporter's commits, which
# are on every event's path. A crash within the interval resends a few delivered events with their
# original messageId (at least once, as always).
DELETE_EVERY_S = 0.05
DELETE_BATCH = 500
# Names whose batched form is split, one endpoint per message, when the platform refuses the batch (400).
SPLITTABLE = frozenset({"AddOrUpdateReport", "DeleteReport"})

Outcome = Literal["done", "dead", "split", "retry", "again", "paused"]
Loaded = tuple[str, str, str, float]  # a row's name, body (JSON text), messageId and time written


class DeliveryObserver(Protocol):
    """What becomes of each event (the event journal, `hubd.journal`): called on the loop, each call O(1)."""

    def queued(self, event: EventRef, at: float) -> None:
        """The sender indexed a row of the outbox: it waits for its turn."""

    def sending(self, event: EventRef, body: str, at: float) -> None:
        """It is on its way (`body`: its stored JSON text, which holds no token)."""

    def delivered(self, event: EventRef, attempts: int, at: float) -> None:
        """The platform accepted it at the `attempts`-th try."""

    def failed(self, event: EventRef, attempts: int, error: str, at: float, *, retry_at: float | None) -> None:
        """A try failed: retried at `retry_at`, or (None) given up on: moved to the dead letters."""

    def held(self, event: EventRef, reason: str, at: float) -> None:
        """Not sent for now, not a failed try: a token refresh, a grant that ended, a batch resent in pieces."""


class PlatformApi(Protocol):
    """What the sender needs of the platform client."""

    async def post_event(self, body: dict[str, Any] | str) -> None:
        """POST one message (a dict or its JSON text); raise CloudUnavailable / CloudRejected / CloudAuthError."""


class TokenSource(Protocol):
    """What the sender needs of the token manager."""

    def is_active(self, user_id: str) -> bool:
        """True when the user's grant is active."""

    def token_now(self, user_id: str) -> str | None:
        """A token to send with now, or None while it is being refreshed; never waits."""

    def invalidate(self, user_id: str, token: str) -> None:
        """The event API refused this token: refresh in the background (no-op if already replaced)."""

    async def revoked(self, user_id: str, token: str, reason: str) -> bool:
        """The event API refused `token` again after a refresh: end the grant if `token` is still its token.

        False when `token` was replaced meanwhile (a refresh, or the user bound again): the row may go again.
        """

    def activations(self) -> int:
        """How many times a grant became active (any user) since start."""

    def activated(self, user_id: str) -> int:
        """`activations()` as it was when this user's grant last became active; 0: not since start."""


_BLOCKED, _READY, _WAITING, _FLIGHT = range(4)


@dataclass(slots=True, eq=False)  # compared by identity: rows are found in lanes by `is`
class _Row:
    id: int
    user_id: str
    lanes: tuple[str, ...]
    attempts: int
    next_attempt_at: float
    state: int = _BLOCKED
    backoff: Backoff | None = None  # made at the first failed attempt: a backlog of 50,000 rows needs none
    refusals: int = 0  # 401/403 answers in a row
    keep: bool = False  # pruning never drops it (a DeleteReport)

    @property
    def barrier(self) -> bool:
        return bool(self.lanes) and self.lanes[0].startswith(BARRIER_LANE)


@dataclass(slots=True)
class _UserQueue:
    """One user's pending rows: per-lane FIFOs, the lane heads ready to go and those waiting for a retry."""

    rows: dict[int, _Row] = field(default_factory=dict)  # in id order
    lanes: dict[str, deque[_Row]] = field(default_factory=dict)
    barriers: deque[_Row] = field(default_factory=deque)
    ready: list[tuple[int, _Row]] = field(default_factory=list)  # heap by id; stale entries skipped
    waiting: list[tuple[float, int, _Row]] = field(default_factory=list)  # heap by retry time
    in_flight: int = 0

    def add(self, row: _Row, now: float) -> None:
        self.rows[row.id] = row
        if row.barrier:
            _insert_barrier(self.barriers, row)
            return
        for lane in row.lanes:
            self.lanes.setdefault(lane, deque()).append(row)
        self._head(row, now)

    def remove(self, row: _Row, now: float) -> None:
        """Forget a row; the rows behind it in its lanes may go."""
        self.rows.pop(row.id, None)
        if row.barrier:
            _drop(self.barriers, row)
            return
        heads: list[_Row] = []
        lanes = self.lanes
        for lane in row.lanes:
            queue = lanes[lane]
            _drop(queue, row)
            if queue:
                heads.append(queue[0])
            else:
                del lanes[lane]
        for head in heads:
            self._head(head, now)

    def back(self, row: _Row, now: float) -> None:
        """A row that was in flight stays: ready again, or waiting for its retry time."""
        row.state = _BLOCKED
        if row.barrier:
            return
        self._head(row, now)

    def take(self, now: float) -> _Row | None:
        """The next row that may go now: the first barrier alone while there is one, else a ready lane head."""
        if self.barriers:
            row = self.barriers[0]
            return row if row.state != _FLIGHT and row.next_attempt_at <= now else None
        return self._pop_ready()

    def next_due(self, now: float) -> float | None:
        """Make due retries ready; return when the next one is due (None: nothing is waiting)."""
        if self.barriers:
            row = self.barriers[0]
            return row.next_attempt_at if row.state != _FLIGHT and row.next_attempt_at > now else None
        while self.waiting:
            due, _, row = self.waiting[0]
            if row.state != _WAITING or self.rows.get(row.id) is not row:
                heapq.heappop(self.waiting)
                continue
            if due > now:
                return due
            heapq.heappop(self.waiting)
            row.state = _READY
            heapq.heappush(self.ready, (row.id, row))
        return None

    def compact(self) -> None:
        """Drop the heaps' stale entries: a user who must bind again is never `take`n from, and pruning
        their rows would otherwise leave an entry per dropped row."""
        rows = self.rows
        self.ready = [(i, r) for i, r in self.ready if r.state == _READY and rows.get(i) is r]
        heapq.heapify(self.ready)
        self.waiting = [(t, i, r) for t, i, r in self.waiting if r.state == _WAITING and rows.get(i) is r]
        heapq.heapify(self.waiting)

    def _pop_ready(self) -> _Row | None:
        while self.ready:
            _, row = heapq.heappop(self.ready)
            if row.state == _READY and self.rows.get(row.id) is row:
                return row
        return None

    def _head(self, row: _Row, now: float) -> None:
        """Make a blocked row ready (or waiting) if it heads all of its lanes."""
        if row.state != _BLOCKED:
            return
        lanes = self.lanes
        for lane in row.lanes:
            if lanes[lane][0] is not row:
                return
        if row.next_attempt_at > now:
            row.state = _WAITING
            heapq.heappush(self.waiting, (row.next_attempt_at, row.id, row))
        else:
            row.state = _READY
            heapq.heappush(self.ready, (row.id, row))


def _barrier_place(row: _Row) -> tuple[int, int]:
    """Where a barrier goes among its user's barriers: "#" is its own id's place, "#<id>" that row's."""
    mark = row.lanes[0][len(BARRIER_LANE):]
    try:
        return (int(mark) if mark else row.id, row.id)
    except ValueError:
        return (row.id, row.id)


def _insert_barrier(barriers: deque[_Row], row: _Row) -> None:
    place = _barrier_place(row)
    if not barriers or _barrier_place(barriers[-1]) <= place:
        barriers.append(row)  # the usual case: a new grant's report goes last
        return
    for index, other in enumerate(barriers):
        # Never ahead of a barrier in flight: it is on its way.
        if other.state != _FLIGHT and _barrier_place(other) > place:
            barriers.insert(index, row)
            return
    barriers.append(row)


def _drop(queue: deque[_Row], row: _Row) -> None:
    if queue and queue[0] is row:
        queue.popleft()
    elif row in queue:
        queue.remove(row)


class OutboxSender:
    """The only caller of `PlatformApi.post_event`."""

    name = "outbox"

    def __init__(self, db: Database, api: PlatformApi, tokens: TokenSource, *, clock: Clock, metrics: Metrics,
                 wakeup: asyncio.Event, observer: DeliveryObserver | None = None, log_events: bool = True) -> None:
        self._db = db
        self._observer = observer
        self._log_events = log_events  # `log.events`: the info line per delivered event
        self._api = api
        self._tokens = tokens
        self._clock = clock
        self._wakeup = wakeup  # set by others: new rows (the reporter), a new grant or token (the token manager)
        self._kick = asyncio.Event()  # "dispatch again": a delivery finished, or `wakeup` was set
        self._new_rows = False
        self._queues: dict[str, _UserQueue] = {}
        self._last_id = 0
        self._loaded_activations = 0  # TokenSource.activations() when the last load of new rows began
        self._load_lock = asyncio.Lock()
        self._in_flight = 0
        self._rotation = 0
        self._done: list[int] = []
        self._done_ready = asyncio.Event()
        self._done_full = asyncio.Event()
        self._sent = metrics.counter("hubd_events_sent_total", "events the platform accepted, by name", "name")
        self._failed = metrics.counter("hubd_event_send_failures_total", "failed sends, by reason", "reason")
        self._dead = metrics.counter("hubd_events_dead_lettered_total", "events the platform refused for good")
        self._dropped = metrics.counter("hubd_events_dropped_total",
                                        "undelivered events dropped for a user who must bind again")
        metrics.gauge("hubd_outbox_depth", "events waiting to be delivered", lambda: float(self.depth()))

    async def start(self) -> None:
        """Index what is already in the outbox (for example after a crash)."""
        await self._load_new()
        depth = self.depth()
        if depth:
            log.info("outbox holds %d undelivered events", depth)

    async def run(self) -> None:
        """Send whatever is due; sleep until woken or the next retry is due."""
        await self._prune()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._flush_done(), name="outbox.ack")
            group.create_task(self._relay_wakeup(), name="outbox.wakeup")
            while True:
                self._kick.clear()
                if self._new_rows:
                    # Only when someone wrote rows: a finished delivery needs a dispatch, not a query.
                    self._new_rows = False
                    try:
                        await self._load_new()
                    except StorageUnavailable:
                        self._new_rows = True
                        await self._db.writable()
                        continue
                    await self._prune()
                next_due, due = self._dispatch()
                if due:
                    # One query for the bodies of every row sent in this round, not one per row.
                    try:
                        bodies = await self._db.call(_bodies_blocking, [row.id for row, _ in due])
                    except StorageUnavailable:
                        self._put_back(due)
                        await self._db.writable()
                        continue
                    for row, token in due:
                        group.create_task(self._deliver(row, token, bodies.get(row.id)), name=f"outbox.send.{row.id}")
                # Capped: retry times are wall-clock times, and the wall clock may jump.
                delay = RETRY_CAP_S if next_due is None else min(RETRY_CAP_S, max(0.0, next_due - self._clock.time()))
                try:
                    async with asyncio.timeout(delay):
                        await self._kick.wait()
                except TimeoutError:
                    pass

    async def stop(self) -> None:
        """Deliveries in flight are cancelled with the task group; their rows stay and are resent later."""
        ids, self._done = self._done, []
        if ids:
            try:
                await self._db.call(_delete_blocking, ids)
            except StorageUnavailable as err:
                log.warning("%d delivered events stay in the outbox (%s); they are sent again, with their messageId, "
                            "after the restart", len(ids), err)

    def depth(self, user_id: str | None = None) -> int:
        """Undelivered events (of one user, or all)."""
        if user_id is not None:
            queue = self._queues.get(user_id)
            return 0 if queue is None else len(queue.rows)
        return sum(len(queue.rows) for queue in self._queues.values())

    async def _relay_wakeup(self) -> None:
        """Turn the shared wakeup into "load new rows, then dispatch"."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            self._new_rows = True
            self._kick.set()

    def _dispatch(self) -> tuple[float | None, list[tuple[_Row, str]]]:
        """Mark every row that may be sent now as in flight; return them (with their token) and the next retry."""
        now = self._clock.time()
        next_due: float | None = None
        due: list[tuple[_Row, str]] = []
        users = [user for user, queue in self._queues.items() if queue.rows]
        if not users:
            return None, due
        start = self._rotation % len(users)
        self._rotation = start + 1
        tokens = self._tokens
        for offset, user in enumerate(users[start:] + users[:start]):
            if len(due) >= MAX_SENDS_PER_ROUND:
                self._rotation = start + offset  # the next round, at once, starts with this user
                self._kick.set()
                break
            queue = self._queues[user]
            when = queue.next_due(now)
            if when is not None:
                next_due = when if next_due is None else min(next_due, when)
            if not tokens.is_active(user):
                continue
            if tokens.activated(user) > self._loaded_activations:
                # The grant became active after the last load began: its AddOrUpdateReport (barrier rows,
                # committed before the activation) may not be indexed yet, and must go first. Load, then look.
                self._new_rows = True
                self._kick.set()
                continue
            token = tokens.token_now(user)  # None: being refreshed; the token manager wakes us after
            if token is None:
                continue
            room = min(MAX_IN_FLIGHT_PER_USER - queue.in_flight, MAX_IN_FLIGHT - self._in_flight)
            if queue.in_flight == 0:
                room = max(room, 1)  # a user with nothing in flight never waits for the others' sends
            room = min(room, MAX_SENDS_PER_ROUND - len(due))
            while room > 0 and (row := queue.take(now)) is not None:
                row.state = _FLIGHT
                queue.in_flight += 1
                self._in_flight += 1
                room -= 1
                due.append((row, token))
        return next_due, due

    async def _deliver(self, row: _Row, token: str, loaded: Loaded | None) -> None:
        queue = self._queues[row.user_id]
        event = None if loaded is None else EventRef(row.id, row.user_id, loaded[0], loaded[2], _endpoint_lanes(row),
                                                     loaded[3])
        try:
            outcome = await self._send(row, token, loaded, event)
        except Exception:  # per message (STYLE 2.6): one delivery's surprise never stops the sender
            outcome = self._unexpected(row, event)
        finally:
            queue.in_flight -= 1
            self._in_flight -= 1
        now = self._clock.time()
        if outcome in ("done", "dead"):
            queue.remove(row, now)
            if outcome == "done":
                self._done.append(row.id)
                self._done_ready.set()
                if len(self._done) >= DELETE_BATCH:
                    self._done_full.set()
        elif outcome == "split":
            queue.remove(row, now)  # its pieces were loaded as barriers: they go first
        else:
            queue.back(row, now)
        self._kick.set()

    async def _send(self, row: _Row, token: str, loaded: Loaded | None, event: EventRef | None) -> Outcome:
        if loaded is None or event is None:
            return "done"  # no longer in the outbox (dropped or removed meanwhile)
        name, body, _, _ = loaded
        if self._observer is not None:
            self._observer.sending(event, body, self._clock.time())
        try:
            # The stored JSON text goes out as is, with the token spliced in: no parse, no re-encode.
            await self._api.post_event(with_token_json(body, token))
        except CloudAuthError as err:
            return await self._refused(row, event, token, err)
        except CloudUnavailable as err:
            row.refusals = 0  # the next 401/403 is a first one again: it gets its refresh
            return await self._retry(row, event, str(err), "unavailable")
        except CloudRejected as err:
            if err.status == 400 and name in SPLITTABLE and len(_endpoint_lanes(row)) > 1:
                return await self._split(row, event, err)
            now = self._clock.time()
            try:
                await self._db.call(_dead_letter_blocking, row.id, err.status, err.body[:4000], now)
            except StorageUnavailable as store_err:
                return await self._retry(row, event, f"refused (HTTP {err.status}), and the move to dead letters "
                                                     f"failed: {store_err}", "storage")
            self._dead.inc()
            answer = f"HTTP {err.status}: {err.body[:300]}"
            if self._observer is not None:
                self._observer.failed(event, row.attempts + 1, answer, now, retry_at=None)
            events_log.error("gave up on %s %s for user %s: %s (%s), moved to dead letters", name, event.message_id,
                             row.user_id, _Description(event, body), answer)
            return "dead"
        self._sent.inc(label=name)
        now = self._clock.time()
        if self._observer is not None:
            self._observer.delivered(event, row.attempts + 1, now)
        if self._log_events and events_log.isEnabledFor(logging.INFO):
            events_log.info("delivered %s %s for user %s: %s in %s%s", name, event.message_id, row.user_id,
                            _Description(event, body), _took(now - event.created_at),
                            f" (try {row.attempts + 1})" if row.attempts else "")
        return "done"

    async def _refused(self, row: _Row, event: EventRef, token: str, err: CloudAuthError) -> Outcome:
        """401/403. The row's first in a row: refresh (in the background) and resend at once. After that a
        403 ends the grant, unless `token` was replaced meanwhile (then resend); a 401 backs off.

        Counted per row, not by comparing tokens: a refresh may hand back the same access token.
        """
        user = row.user_id
        if not self._tokens.is_active(user):
            self._failed.inc(label="grant_ended")  # the grant ended meanwhile: keep the row until a new one
            self._held(event, "kept until the user links again (their grant ended)")
            return "paused"
        row.refusals += 1
        if row.refusals == 1:
            self._failed.inc(label="403" if err.fatal else "401")
            self._tokens.invalidate(user, token)  # a no-op if `token` was already replaced
            self._held(event, f"the platform refused the token ({err}); resent once it is refreshed")
            return "again"  # same row, same messageId, once the token is refreshed
        if err.fatal:
            if await self._tokens.revoked(user, token, f"event API refused the token after a refresh: {err}"):
                self._failed.inc(label="revoked")
                self._held(event, "kept until the user links again (the platform refused their token after a "
                                  "refresh)")
                return "paused"
            row.refusals = 0  # a late 403 for a replaced token says nothing about the current one
            self._failed.inc(label="403")
            self._held(event, f"the platform refused a replaced token ({err}); resent with the current one")
            return "again"
        self._tokens.invalidate(user, token)
        return await self._retry(row, event, f"token refused after a refresh: {err}", "auth")

    def _unexpected(self, row: _Row, event: EventRef | None) -> Outcome:
        """Called in an `except`: log the error with its traceback, count it, retry the row with backoff."""
        delay = self._back_off(row)
        self._failed.inc(label="error")
        log.error("delivery of outbox row %d for user %s failed unexpectedly (attempt %d), retrying in %.1f s",
                  row.id, row.user_id, row.attempts, delay, exc_info=True)
        if self._observer is not None and event is not None:
            err = sys.exception()
            self._observer.failed(event, row.attempts, f"hubd failed unexpectedly ({type(err).__name__}: {err})",
                                  self._clock.time(), retry_at=row.next_attempt_at)
        return "retry"

    def _held(self, event: EventRef, reason: str) -> None:
        if self._observer is not None:
            self._observer.held(event, reason, self._clock.time())

    def _back_off(self, row: _Row) -> float:
        """Count a failed attempt and set the row's next attempt time; return the delay."""
        row.attempts += 1
        if row.backoff is None:
            row.backoff = Backoff(initial_s=1.0, cap_s=RETRY_CAP_S)
        delay = row.backoff.next_delay()
        row.next_attempt_at = self._clock.time() + delay
        return delay

    async def _retry(self, row: _Row, event: EventRef, error: str, reason: str) -> Outcome:
        delay = self._back_off(row)
        self._failed.inc(label=reason)
        log.warning("delivery of outbox row %d for user %s failed (attempt %d), retrying in %.1f s: %s",
                    row.id, row.user_id, row.attempts, delay, error[:200])
        if self._observer is not None:
            self._observer.failed(event, row.attempts, error, self._clock.time(), retry_at=row.next_attempt_at)
        # The row's attempts and retry time are in memory too: a refused write only makes a restart forget them.
        with contextlib.suppress(StorageUnavailable):
            await self._db.call(_note_retry_blocking, row.id, row.attempts, row.next_attempt_at, error[:500])
        return "retry"

    async def _split(self, row: _Row, event: EventRef, err: CloudRejected) -> Outcome:
        """A batch refused as a whole: resend it one endpoint per message, in its place (barriers go first)."""
        try:
            count = await self._db.call(_split_blocking, row.id)
        except StorageUnavailable as store_err:
            return await self._retry(row, event, f"refused as a batch (HTTP {err.status}), and splitting it failed: "
                                                 f"{store_err}", "storage")
        log.warning("platform rejected a %s of %d endpoints for user %s (HTTP %d: %s); resending them one by one",
                    event.name, count, row.user_id, err.status, err.body[:300])
        self._held(event, f"refused as a batch (HTTP {err.status}); resent as {count} messages, one per endpoint")
        await self._load_new()  # the pieces, before the row behind it in any lane may go
        return "split"

    async def _prune(self) -> None:
        """Drop the oldest undelivered events of users who must bind again, beyond KEPT_WHILE_UNBOUND.

        DeleteReports stay: a new grant's AddOrUpdateReport brings every device that exists up to date, but
        nothing else would tell the platform that a device is gone.
        """
        for user, queue in list(self._queues.items()):
            excess = len(queue.rows) - KEPT_WHILE_UNBOUND
            if excess < PRUNE_SLACK or self._tokens.is_active(user):
                continue
            victims = [row for row in queue.rows.values() if row.state != _FLIGHT and not row.keep][:excess]
            if not victims:
                continue
            try:
                await self._db.call(_delete_blocking, [row.id for row in victims])
            except StorageUnavailable:
                return  # the next load of new rows prunes again
            now = self._clock.time()
            for row in victims:
                queue.remove(row, now)
            queue.compact()
            self._dropped.inc(len(victims))
            log.warning("user %s must bind again and has %d undelivered events; dropped the %d oldest "
                        "(hubd keeps at most %d for a user until they bind again)",
                        user, len(queue.rows) + len(victims), len(victims), KEPT_WHILE_UNBOUND)

    async def _flush_done(self) -> None:
        while True:
            await self._done_ready.wait()
            if len(self._done) < DELETE_BATCH:
                try:
                    async with asyncio.timeout(DELETE_EVERY_S):
                        await self._done_full.wait()
                except TimeoutError:
                    pass
            self._done_ready.clear()
            self._done_full.clear()
            ids, self._done = self._done, []
            if not ids:
                continue
            try:
                await self._db.call(_delete_blocking, ids)
            except StorageUnavailable:
                # Kept, delivered, out of the index: deleted once the database takes writes (a restart first
                # sends them again, with their messageId).
                self._done[:0] = ids
                self._done_ready.set()
                await self._db.writable()

    def _put_back(self, due: list[tuple[_Row, str]]) -> None:
        """Rows marked in flight whose bodies could not be read: they go in a later round."""
        now = self._clock.time()
        for row, _ in due:
            queue = self._queues[row.user_id]
            queue.in_flight -= 1
            self._in_flight -= 1
            queue.back(row, now)

    async def _load_new(self) -> None:
        async with self._load_lock:  # the main loop and a split may both load; each row once
            # Read before the query: a grant activated by now committed its rows before it was activated.
            activations = self._tokens.activations()
            rows = await self._db.call(_new_rows_blocking, self._last_id)
            now = self._clock.time()
            observer = self._observer
            for row_id, user_id, lanes, attempts, next_at, name, message_id, created_at in rows:
                queue = self._queues.get(user_id)
                if queue is None:
                    queue = self._queues[user_id] = _UserQueue()
                row = _Row(row_id, user_id, tuple(json.loads(lanes)), attempts, next_at, keep=name == "DeleteReport")
                queue.add(row, now)
                self._last_id = max(self._last_id, row_id)
                if observer is not None:
                    observer.queued(EventRef(row_id, user_id, name, message_id, _endpoint_lanes(row), created_at), now)
            self._loaded_activations = max(self._loaded_activations, activations)


def _endpoint_lanes(row: _Row) -> tuple[str, ...]:
    return row.lanes[1:] if row.barrier else row.lanes


class _Description:
    """An event's description for a log line, made only if the line is written (it may parse the body)."""

    __slots__ = ("body", "event")

    def __init__(self, event: EventRef, body: str) -> None:
        self.event = event
        self.body = body

    def __str__(self) -> str:
        return describe(self.event.name, self.event.endpoints, self.body)


def _took(seconds: float) -> str:
    """A latency for a log line: "3 ms", "1.2 s", "4 min"."""
    seconds = max(0.0, seconds)
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120.0:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.0f} min"


def _new_rows_blocking(conn: sqlite3.Connection,
                       after: int) -> list[tuple[int, str, str, int, float, str, str, float]]:
    """Rows after `after`, in id order: id, user, lanes, attempts, next attempt, name, messageId, time written."""
    return [tuple(r) for r in conn.execute(
        "SELECT id, user_id, lanes, attempts, next_attempt_at, name, message_id, created_at FROM outbox WHERE id > ? "
        "ORDER BY id", (after,))]


def _bodies_blocking(conn: sqlite3.Connection, ids: list[int]) -> dict[int, Loaded]:
    """Name, body (JSON text), messageId and time written of each row still in the outbox."""
    out: dict[int, Loaded] = {}
    for start in range(0, len(ids), QUERY_CHUNK):
        chunk = ids[start:start + QUERY_CHUNK]
        marks = ",".join("?" * len(chunk))
        query = f"SELECT id, name, body, message_id, created_at FROM outbox WHERE id IN ({marks})"  # noqa: S608 - ?s
        rows = conn.execute(query, chunk)
        out.update((row[0], (row[1], row[2], row[3], row[4])) for row in rows)
    return out


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


def _split_blocking(conn: sqlite3.Connection, row_id: int) -> int:
    """Replace a batched discovery row by one barrier row per endpoint (new messageIds); how many.

    The pieces' barrier lane names the row (`#<row_id>`), so they take its place among the user's barriers,
    also after a restart: before a later grant's AddOrUpdateReport, which is newer than they are.
    """
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        found = conn.execute("SELECT user_id, name, body, created_at FROM outbox WHERE id = ?", (row_id,)).fetchone()
        if found is None:
            return 0
        user_id, name, text, created_at = tuple(found)
        body = json.loads(text)
        rows = []
        for endpoint in body["payload"]["endpoints"]:
            message_id = new_message_id()
            piece = {**body, "header": {**body["header"], "messageId": message_id},
                     "payload": {**body["payload"], "endpoints": [endpoint]}}
            rows.append((user_id, message_id, name, json.dumps([f"{BARRIER_LANE}{row_id}", endpoint["endpointId"]]),
                         json.dumps(piece, separators=(",", ":")), created_at))
        conn.execute("DELETE FROM outbox WHERE id = ?", (row_id,))
        conn.executemany(
            "INSERT INTO outbox (user_id, message_id, name, lanes, body, created_at) VALUES (?, ?, ?, ?, ?, ?)", rows)
        return len(rows)
