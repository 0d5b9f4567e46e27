"""OutboxSender: delivers the durable outbox to the platform, at least once, in order per (user, device).

Rows are written by the outbox writer before anything is sent. The sender indexes the pending rows
(`hubd.outbox.lanes`: per user, one FIFO per lane; barriers first) and sends each row once the index says it
may go; one try and its outcome are `hubd.outbox.delivery`'s. A user whose grant became active since the last
load of new rows waits for one: that grant's report is loaded before anything goes.
New rows come from the writer in memory (`hubd.outbox.feed`), with their bodies (up to BODIES_KEPT held at once):
an event's path from commit to POST touches the database thread no more. Fed rows are taken only while their
ids continue the index without a gap; otherwise (a split's pieces, a start, rows fed out of order) the new rows
are read from the outbox, which has every committed row.
Discovery windows are the sender's: retained configs arrive in bursts (at every broker reconnect), and the
platform takes one discovery message better than several. A fed AddOrUpdateReport or DeleteReport, never sent,
waits until DISCOVERY_WINDOW_S after the first report of its window arrived; then the window's reports of a user
go together (`hubd.outbox.lanes.UserQueue.take_window` picks them, at most DISCOVERY_BATCH endpoints) and, before
the first try, become one row in one transaction (`_merge`): the oldest keeps its id and its messageId (never
sent) and takes the others' endpoints and lanes, so retries and restarts send that one message. A row read back
from the outbox may have been sent before a restart and is never merged: a crash inside a window sends its
reports one by one. ChangeReports, DoorbellPresses and Responses never wait for a window, and a device's own
events wait behind its report, in its lane.
Users share the send slots fairly: each round starts with the next user, a user holds at most
MAX_IN_FLIGHT_PER_USER sends, one with nothing in flight always gets one, and a user whose token is
being refreshed is skipped (nobody waits for a token in a slot). So one user's outage, backlog or dead
grant never delays another user. A user who must bind again keeps at most KEPT_WHILE_UNBOUND events
(DeleteReports are always kept).
A write the disk refuses (`StorageUnavailable`) never stops the sender: delivered rows stay in memory and are
deleted once the database takes writes (a restart before that resends them, with their messageId); a dead
letter or a split that cannot be written is retried with the row's backoff; a failed read waits for the
database. Sending goes on meanwhile: it only reads. Each row indexed is told to the `DeliveryObserver`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Sequence

from hubd.errors import StorageUnavailable
from hubd.lifecycle import Clock
from hubd.metrics import Metrics, event_stages
from hubd.outbox.decide import DISCOVERY_BATCH
from hubd.outbox.delivery import RETRY_CAP_S, Delivery, DeliveryObserver, PlatformApi, TokenSource
from hubd.outbox.feed import Fed, OutboxFeed
from hubd.outbox.journal import EventRef
from hubd.outbox.lanes import IN_FLIGHT, PendingRow, UserQueue
from hubd.store.db import Database
from hubd.store.outbox import IndexedRow, Loaded, OutboxRepo

log = logging.getLogger("hubd.outbox")  # its lines keep the name they have always had

MAX_IN_FLIGHT = 64  # sends at once, all users (beyond it, only a user with nothing in flight gets one)
MAX_IN_FLIGHT_PER_USER = 32
# Sends started by one dispatch round, all users: with thousands of users each owed one send, the rest go in
# the next rounds, right after (the round starts with the first user left out).
MAX_SENDS_PER_ROUND = 256
# A user who must bind again keeps this many undelivered events (their new grant's AddOrUpdateReport brings
# the devices up to date anyway); the oldest beyond it are dropped, PRUNE_SLACK at a time.
KEPT_WHILE_UNBOUND = 10_000
PRUNE_SLACK = 500
# Delivered rows are deleted with the writer's next commit (`hubd.outbox.feed`) or, if none comes within this
# interval (or DELETE_BATCH rows wait), in one transaction of the sender's; never one per delivery: the deletes
# share the database thread with the writer's commits, which are on every event's path. A crash within the
# interval resends a few delivered events with their original messageId (at least once, as always).
DELETE_EVERY_S = 0.05
DELETE_BATCH = 500
# Bodies of fed rows held in memory until they go (about 0.5 KB each). Beyond it, during a backlog, a row's body
# is read from the outbox when it goes, as after a restart: memory stays bounded whatever waits.
BODIES_KEPT = 1_000
# Discovery reports committed within this long of a window's first go out in one message, once it closes.
# Nothing else waits for it.
DISCOVERY_WINDOW_S = 0.1
DISCOVERY_REPORTS = frozenset({"AddOrUpdateReport", "DeleteReport"})


# One send: the row, its user's token, and the other rows of its window that go in its message.
Send = tuple[PendingRow, str, tuple[PendingRow, ...]]


class OutboxSender:
    """The only caller of `PlatformApi.post_event`."""

    name = "outbox"

    def __init__(self, db: Database, api: PlatformApi, tokens: TokenSource, *, clock: Clock, metrics: Metrics,
                 wakeup: asyncio.Event, observer: DeliveryObserver | None = None, log_events: bool = True,
                 feed: OutboxFeed | None = None, label: Callable[[str], str] | None = None) -> None:
        self._store = OutboxRepo(db)
        self._feed = feed  # None: new rows are always read from the outbox
        # Delivered rows waiting to be deleted: on the feed, where the writer's next commit takes them; without one,
        # the sender's own ledger of the same kind.
        self._delivered = feed if feed is not None else OutboxFeed()
        self._bodies: dict[int, Loaded] = {}  # fed rows' bodies, until they go
        self._must_read = False  # rows were taken from the feed but not indexed: read the outbox next time
        self._stages = event_stages(metrics)
        self._observer = observer
        self._tokens = tokens
        self._clock = clock
        self._wakeup = wakeup  # set by others: new rows (the writer), a new grant or token (the token manager)
        self._kick = asyncio.Event()  # "dispatch again": a delivery finished, or `wakeup` was set
        self._new_rows = False
        self._queues: dict[str, UserQueue] = {}
        self._last_id = 0
        self._loaded_activations = 0  # TokenSource.activations() when the last load of new rows began
        self._load_lock = asyncio.Lock()
        self._in_flight = 0
        self._rotation = 0
        self._done_ready = asyncio.Event()
        self._done_full = asyncio.Event()
        self._delivery = Delivery(self._store, api, tokens, clock=clock, metrics=metrics, observer=observer,
                                  log_events=log_events, load_new=self._load_split, label=label)
        self._merged = metrics.counter("hubd_events_merged_total",
                                       "discovery reports sent in one message with an older one of their window")
        self._dropped = metrics.counter("hubd_events_dropped_total",
                                        "undelivered events dropped for a user who must bind again")
        metrics.gauge("hubd_outbox_depth", "events waiting to be delivered", lambda: float(self.depth()))

    async def start(self) -> None:
        """Index what is already in the outbox (for example after a crash)."""
        await self._load_new(read=True)
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
                        await self._store.writable()
                        continue
                    await self._prune()
                next_in, due = self._dispatch()
                if due:
                    # Fed rows bring their body; one query for the bodies of the others, not one per row. A
                    # window's other rows are read with the merge.
                    bodies = {row.id: loaded for row, _, _ in due if (loaded := self._bodies.pop(row.id, None))}
                    missing = [row.id for row, _, _ in due if row.id not in bodies]
                    try:
                        if missing:
                            bodies.update(await self._store.bodies(missing))
                    except StorageUnavailable:
                        self._put_back(due)
                        await self._store.writable()
                        continue
                    for row, token, parts in due:
                        group.create_task(self._deliver(row, token, bodies.get(row.id), parts),
                                          name=f"outbox.send.{row.id}")
                # Capped: retry times are wall-clock times, and the wall clock may jump.
                delay = RETRY_CAP_S if next_in is None else min(RETRY_CAP_S, max(0.0, next_in))
                try:
                    async with asyncio.timeout(delay):
                        await self._kick.wait()
                except TimeoutError:
                    pass

    async def stop(self) -> None:
        """Deliveries in flight are cancelled with the task group; their rows stay and are resent later."""
        ids = self._delivered.take_delivered()
        if ids:
            try:
                await self._store.delete(ids)
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

    def _dispatch(self) -> tuple[float | None, list[Send]]:
        """Mark every row that may be sent now as in flight; return them (with their token and the rows of their
        window that go in their message) and the seconds until the next retry or window is due."""
        now = self._clock.time()
        mono = self._clock.monotonic()
        next_in: float | None = None
        due: list[Send] = []
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
                next_in = _sooner(next_in, when - now)
            if queue.reports and (closes := queue.next_window(mono)) is not None:
                next_in = _sooner(next_in, closes - mono)
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
            while room > 0:
                parts: tuple[PendingRow, ...] = ()
                if queue.reports and (window := queue.take_window(mono, DISCOVERY_BATCH)):
                    row, *rest = window  # one send for the rows of a window
                    parts = tuple(rest)
                    for part in parts:
                        part.state = IN_FLIGHT
                elif (taken := queue.take(now)) is not None:
                    row = taken
                else:
                    break
                row.state = IN_FLIGHT
                queue.in_flight += 1
                self._in_flight += 1
                room -= 1
                due.append((row, token, parts))
        return next_in, due

    async def _deliver(self, row: PendingRow, token: str, loaded: Loaded | None,
                       parts: tuple[PendingRow, ...]) -> None:
        queue = self._queues[row.user_id]
        event = None
        try:
            if parts:
                loaded = await self._merge(queue, row, parts, loaded)
            row.merge = ""  # its messageId goes on the wire: never merged from now on
            event = None if loaded is None else EventRef(row.id, row.user_id, loaded[0], loaded[2], row.endpoints,
                                                         loaded[3])
            started = time.monotonic()  # the stages' clock is the process's, as the writer stamped committed_at
            if row.committed_at:
                self._stages.observe(started - row.committed_at, "commit_to_post")
                row.committed_at = 0.0  # a retry's wait is the backoff's, not this stage's
            outcome = await self._delivery.send(row, token, loaded, event)
            if outcome == "done" and loaded is not None:
                self._stages.observe(time.monotonic() - started, "post")
        except Exception:  # per message: one delivery's surprise never stops the sender
            outcome = self._delivery.unexpected(row, event)
        finally:
            queue.in_flight -= 1
            self._in_flight -= 1
        now = self._clock.time()
        if outcome in ("done", "dead"):
            queue.remove(row, now)
            if outcome == "done":
                # Deleted with the writer's next commit, or by _flush_done once it waited DELETE_EVERY_S for one.
                self._delivered.delivered(row.id, time.monotonic())
                self._done_ready.set()
                if self._delivered.delivered_count >= DELETE_BATCH:
                    self._done_full.set()
        elif outcome == "split":
            queue.remove(row, now)  # its pieces were loaded as barriers: they go first
        else:  # backoff, resend, paused: the row stays
            queue.back(row, now)
        self._kick.set()

    async def _merge(self, queue: UserQueue, row: PendingRow, parts: tuple[PendingRow, ...],
                     loaded: Loaded | None) -> Loaded | None:
        """Before `row`'s first try, make the other rows of its window (in flight with it) part of it: one row, one
        message; its body as it now goes (None: no longer stored). The rows it did not take go back to the
        index; if the disk refuses the write, `row` goes alone with `loaded`."""
        taken: list[int] = []
        try:
            gone = self._delivered.take_delivered()  # rows delivered, not yet deleted: deleted with the merge
            try:
                merged = await self._store.merge(row.id, [part.id for part in parts], gone)
            except BaseException:
                self._delivered.delivered_again(gone)  # deleted later, by the writer or _flush_done
                raise
            if merged is None:
                return None
            loaded, taken = merged
        except StorageUnavailable as err:
            log.warning("could not merge %d discovery reports for user %s into one message (%s); they go one by "
                        "one", len(parts) + 1, row.user_id, err)
        finally:
            now = self._clock.time()
            absorbed = [part for part in parts if part.id in taken]
            for part in parts:
                if part.id not in taken:
                    queue.back(part, now)
            if absorbed:
                queue.absorb(row, absorbed)
                for part in absorbed:
                    self._bodies.pop(part.id, None)
                self._merged.inc(len(absorbed))
                if self._observer is not None and loaded is not None:
                    self._observer.merged(EventRef(row.id, row.user_id, loaded[0], loaded[2], row.endpoints,
                                                   loaded[3]), [part.id for part in absorbed], now)
        return loaded

    async def _prune(self) -> None:
        """Drop the oldest undelivered events of users who must bind again, beyond KEPT_WHILE_UNBOUND.

        DeleteReports stay: a new grant's AddOrUpdateReport brings every device that exists up to date, but
        nothing else would tell the platform that a device is gone.
        """
        for user, queue in list(self._queues.items()):
            excess = len(queue.rows) - KEPT_WHILE_UNBOUND
            if excess < PRUNE_SLACK or self._tokens.is_active(user):
                continue
            victims = [row for row in queue.rows.values() if row.state != IN_FLIGHT and not row.keep][:excess]
            if not victims:
                continue
            try:
                await self._store.delete([row.id for row in victims])
            except StorageUnavailable:
                return  # the next load of new rows prunes again
            now = self._clock.time()
            for row in victims:
                queue.remove(row, now)
                self._bodies.pop(row.id, None)
            queue.compact()
            self._dropped.inc(len(victims))
            log.warning("user %s must bind again and has %d undelivered events; dropped the %d oldest "
                        "(hubd keeps at most %d for a user until they bind again)",
                        user, len(queue.rows) + len(victims), len(victims), KEPT_WHILE_UNBOUND)

    async def _flush_done(self) -> None:
        while True:
            await self._done_ready.wait()
            if self._delivered.delivered_count < DELETE_BATCH:
                try:
                    async with asyncio.timeout(DELETE_EVERY_S):
                        await self._done_full.wait()
                except TimeoutError:
                    pass
            self._done_ready.clear()
            full = self._done_full.is_set()
            self._done_full.clear()
            # What the writer's commits have not taken: all of it when DELETE_BATCH wait, else what waited long
            # enough for a commit (the rest waits for the next round, unless a commit takes it first).
            ids = self._delivered.take_delivered(math.inf if full else time.monotonic() - DELETE_EVERY_S)
            if self._delivered.delivered_count:
                self._done_ready.set()
            if not ids:
                continue
            try:
                await self._store.delete(ids)
            except StorageUnavailable:
                # Kept, delivered, out of the index: deleted once the database takes writes (a restart first
                # sends them again, with their messageId).
                self._delivered.delivered_again(ids)
                self._done_ready.set()
                await self._store.writable()

    def _put_back(self, due: list[Send]) -> None:
        """Rows marked in flight whose bodies could not be read: they go in a later round."""
        now = self._clock.time()
        for row, _, parts in due:
            queue = self._queues[row.user_id]
            queue.in_flight -= 1
            self._in_flight -= 1
            for taken in (row, *parts):
                queue.back(taken, now)

    async def _load_new(self, *, read: bool = False) -> None:
        """Index the rows committed since the last load: those fed in memory, or (`read`, or a gap in what was
        fed) those read from the outbox."""
        async with self._load_lock:  # the main loop and a split may both load; each row once
            # Read before the rows: a grant activated by now committed its rows (and fed them) before it was.
            activations = self._tokens.activations()
            fed = [] if self._feed is None else [f for f in self._feed.take() if f.row.id > self._last_id]
            if (self._feed is None or read or self._must_read
                    or any(f.row.id != self._last_id + 1 + i for i, f in enumerate(fed))):
                self._must_read = True  # until the read went through: the rows taken from the feed are in it
                rows: list[IndexedRow] = await self._store.new_rows(self._last_id)
                self._must_read = False
                by_id = {f.row.id: f for f in fed}
                self._index(rows, [by_id.get(row[0]) for row in rows])
            else:
                self._index([(f.row.id, f.row.user_id, f.row.lanes, 0, 0.0, f.row.name, f.row.message_id,
                              f.row.created_at) for f in fed], fed)
            self._loaded_activations = max(self._loaded_activations, activations)

    async def _load_split(self) -> None:
        """A split's pieces, which the sender wrote itself: read from the outbox."""
        await self._load_new(read=True)

    def _index(self, rows: Sequence[IndexedRow], fed: Sequence[Fed | None]) -> None:
        """Add rows to their users' queues; keep the bodies fed with them while there is room."""
        now = self._clock.time()
        mono = self._clock.monotonic()
        observer = self._observer
        bodies = self._bodies
        for (row_id, user_id, lanes, attempts, next_at, name, message_id, created_at), written in zip(
                rows, fed, strict=True):
            queue = self._queues.get(user_id)
            if queue is None:
                queue = self._queues[user_id] = UserQueue()
            row = PendingRow(row_id, user_id, tuple(json.loads(lanes)), attempts, next_at,
                             keep=name == "DeleteReport")
            if written is not None:
                row.committed_at = written.committed_at
                if len(bodies) < BODIES_KEPT:
                    bodies[row_id] = (name, written.row.body, message_id, created_at)
                if name in DISCOVERY_REPORTS and not row.barrier and len(row.lanes) < DISCOVERY_BATCH:
                    # Fed, so never sent: it may go in one message with the others of its window, which opened
                    # (or opens) when it arrived.
                    row.merge = name
                    row.window_end = queue.window(mono - max(0.0, time.monotonic() - written.committed_at),
                                                  DISCOVERY_WINDOW_S)
            queue.add(row, now)
            self._last_id = max(self._last_id, row_id)
            if observer is not None:
                observer.queued(EventRef(row_id, user_id, name, message_id, row.endpoints, created_at), now)


def _sooner(current: float | None, wait: float) -> float:
    """The shorter of two waits (None: none yet)."""
    return wait if current is None else min(current, wait)
