"""The outbox sender's index of pending rows (pure: no I/O, no asyncio): which rows may go now, in what order.

Only ids, lanes and retry times are held (bodies stay on disk). Per user, one FIFO per lane (endpointId), in
id order: a row may go once it heads every one of its lanes, so one device's backlog or retries never hide or
block another device, and a device's rows go in the order they were written. A barrier row (first lane
starting with `hubd.events.BARRIER_LANE`: a new grant's AddOrUpdateReport, or a piece of a split batch) goes
before every other row of its user, alone; barriers go in the order of their place ("#": their own id, "#<id>":
that row's), never ahead of one in flight. A row is in exactly one state: blocked (behind another row in a
lane), ready, waiting for its retry time, or in flight; the sender moves it to and from in flight.

Discovery reports in a window (`PendingRow.merge`: fresh AddOrUpdateReports and DeleteReports, never sent) are
ready apart from the others: `take_window` hands them out once their window has closed, those of one name
together (up to a number of endpoints), for the sender to send as one message; `absorb` makes the group one row
that heads each of its members' lanes. Windows are on the monotonic clock, retries on the wall clock.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hubd.events import BARRIER_LANE

if TYPE_CHECKING:
    from hubd.lifecycle import Backoff

BLOCKED, READY, WAITING, IN_FLIGHT = range(4)  # a row's state


@dataclass(slots=True, eq=False)  # compared by identity: rows are found in lanes by `is`
class PendingRow:
    """One undelivered outbox row: what the index and the sender know of it."""

    id: int
    user_id: str
    lanes: tuple[str, ...]
    attempts: int
    next_attempt_at: float
    state: int = BLOCKED
    backoff: Backoff | None = None  # made at the first failed attempt: a backlog of 50,000 rows needs none
    refusals: int = 0  # 401/403 answers in a row
    keep: bool = False  # pruning never drops it (a DeleteReport)
    committed_at: float = 0.0  # monotonic time its commit returned, while its first try has not begun (0: unknown)
    merge: str = ""  # a discovery report's name while it may still go in one message with others of its window
    window_end: float = 0.0  # monotonic time its window closes (with `merge`)

    @property
    def barrier(self) -> bool:
        """It goes before every other row of its user."""
        return bool(self.lanes) and self.lanes[0].startswith(BARRIER_LANE)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Its lanes without the barrier mark: the endpoints it is about."""
        return self.lanes[1:] if self.barrier else self.lanes


@dataclass(slots=True)
class UserQueue:
    """One user's pending rows: per-lane FIFOs, the lane heads ready to go and those waiting for a retry."""

    rows: dict[int, PendingRow] = field(default_factory=dict)  # in id order
    lanes: dict[str, deque[PendingRow]] = field(default_factory=dict)
    barriers: deque[PendingRow] = field(default_factory=deque)
    ready: list[tuple[int, PendingRow]] = field(default_factory=list)  # heap by id; stale entries skipped
    waiting: list[tuple[float, int, PendingRow]] = field(default_factory=list)  # heap by retry time
    reports: dict[int, PendingRow] = field(default_factory=dict)  # ready rows with `merge`, kept out of `ready`
    report_heap: list[tuple[int, PendingRow]] = field(default_factory=list)  # `reports` by id; stale entries skipped
    window_end: float = 0.0  # monotonic time the user's latest discovery window closes
    in_flight: int = 0

    def add(self, row: PendingRow, now: float) -> None:
        """Index a row (rows are added in id order, barriers in any)."""
        self.rows[row.id] = row
        if row.barrier:
            _insert_barrier(self.barriers, row)
            return
        for lane in row.lanes:
            self.lanes.setdefault(lane, deque()).append(row)
        self._head(row, now)

    def window(self, arrived: float, length: float) -> float:
        """When the discovery window a report that arrived at monotonic time `arrived` joins closes: the open
        one, or one it opens."""
        if arrived >= self.window_end:
            self.window_end = arrived + length
        return self.window_end

    def remove(self, row: PendingRow, now: float) -> None:
        """Forget a row; the rows behind it in its lanes may go."""
        self.rows.pop(row.id, None)
        self.reports.pop(row.id, None)
        if row.barrier:
            _drop(self.barriers, row)
            return
        heads: list[PendingRow] = []
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

    def back(self, row: PendingRow, now: float) -> None:
        """A row that was in flight stays: ready again, or waiting for its retry time."""
        row.state = BLOCKED
        if row.barrier:
            return
        self._head(row, now)

    def take(self, now: float) -> PendingRow | None:
        """The next row that may go now: the first barrier alone while there is one, else a ready lane head."""
        if self.barriers:
            row = self.barriers[0]
            return row if row.state != IN_FLIGHT and row.next_attempt_at <= now else None
        return self._pop_ready()

    def take_window(self, mono: float, max_endpoints: int) -> list[PendingRow]:
        """Ready discovery reports whose window closed by monotonic time `mono`, to go as one message: the oldest
        and, in id order, those of its name that fit in `max_endpoints` with it, and those written right behind
        them (`_followers`). Empty: none (or a barrier waits). Windows close in id order (a row's window is its
        commit's, and commits come in id order), so the reports are looked at from the oldest up to the first
        still open."""
        if self.barriers or not self.reports:
            return []
        heap = self.report_heap
        group: list[PendingRow] = []
        other: list[tuple[int, PendingRow]] = []  # of the other name: a DeleteReport never shares an
        count = 0  # AddOrUpdateReport's message
        while heap:
            row_id, row = heap[0]
            if self.reports.get(row_id) is not row:
                heapq.heappop(heap)
                continue
            if row.window_end > mono or (group and count + len(row.lanes) > max_endpoints):
                break  # still open, or for the next message, in order
            heapq.heappop(heap)
            if group and row.merge != group[0].merge:
                other.append((row_id, row))
                continue
            group.append(row)
            count += len(row.lanes)
        for item in other:
            heapq.heappush(heap, item)
        for row in group:
            del self.reports[row.id]
        return group + self._followers(group, mono) if group else []

    def _followers(self, group: list[PendingRow], mono: float) -> list[PendingRow]:
        """Reports of the same window written right behind the group's in every lane of theirs (a device described
        again while its entities arrive): they go in the same message, their endpoints' newer descriptions in
        place of the older ones, so the platform hears a device once, as it ended up. Only the front of each lane
        is looked at: the group heads its lanes, and a follower's lanes are all the group's (it carries no new
        endpoint)."""
        members = {id(row) for row in group}
        lanes = sorted({lane for row in group for lane in row.lanes})
        kind = group[0].merge
        out: list[PendingRow] = []
        grown = True
        while grown:
            grown = False
            for lane in lanes:
                row = _after_members(self.lanes.get(lane), members)
                if row is None or row.merge != kind or row.state != BLOCKED or not 0 < row.window_end <= mono:
                    continue
                if any(_after_members(self.lanes.get(own), members) is not row for own in row.lanes):
                    continue  # another row is ahead of it in one of its lanes
                members.add(id(row))
                out.append(row)
                grown = True
        return sorted(out, key=lambda r: r.id)

    def next_window(self, mono: float) -> float | None:
        """When the next ready discovery report's window closes (None: none is held): only the latest window can
        still be open (a window opens when the one before has closed)."""
        if self.barriers or not self.reports or self.window_end <= mono:
            return None
        return self.window_end

    def absorb(self, row: PendingRow, parts: Sequence[PendingRow]) -> None:
        """`parts` (in flight with `row`) went into `row`'s message: `row` takes their place at the head of their
        lanes and carries their endpoints."""
        for part in parts:
            self.rows.pop(part.id, None)
            for lane in part.lanes:
                queue = self.lanes[lane]
                if row in queue:  # a follower, right behind a row the message carries already
                    _drop(queue, part)
                else:
                    queue[queue.index(part)] = row  # its head: a part headed its lanes when taken, and still does
            row.lanes = (*row.lanes, *(lane for lane in part.lanes if lane not in row.lanes))

    def next_due(self, now: float) -> float | None:
        """Make due retries ready; return when the next one is due (None: nothing is waiting)."""
        if self.barriers:
            row = self.barriers[0]
            return row.next_attempt_at if row.state != IN_FLIGHT and row.next_attempt_at > now else None
        while self.waiting:
            due, _, row = self.waiting[0]
            if row.state != WAITING or self.rows.get(row.id) is not row:
                heapq.heappop(self.waiting)
                continue
            if due > now:
                return due
            heapq.heappop(self.waiting)
            self._ready(row)
        return None

    def compact(self) -> None:
        """Drop the heaps' stale entries: a user who must bind again is never `take`n from, and pruning
        their rows would otherwise leave an entry per dropped row."""
        rows = self.rows
        self.ready = [(i, r) for i, r in self.ready if r.state == READY and rows.get(i) is r]
        heapq.heapify(self.ready)
        self.waiting = [(t, i, r) for t, i, r in self.waiting if r.state == WAITING and rows.get(i) is r]
        heapq.heapify(self.waiting)

    def _pop_ready(self) -> PendingRow | None:
        while self.ready:
            _, row = heapq.heappop(self.ready)
            if row.state == READY and self.rows.get(row.id) is row:
                return row
        return None

    def _head(self, row: PendingRow, now: float) -> None:
        """Make a blocked row ready (or waiting) if it heads all of its lanes."""
        if row.state != BLOCKED:
            return
        lanes = self.lanes
        for lane in row.lanes:
            if lanes[lane][0] is not row:
                return
        if row.next_attempt_at > now:
            row.state = WAITING
            heapq.heappush(self.waiting, (row.next_attempt_at, row.id, row))
        else:
            self._ready(row)

    def _ready(self, row: PendingRow) -> None:
        row.state = READY
        if row.merge:
            self.reports[row.id] = row  # it goes with its window (take_window)
            heapq.heappush(self.report_heap, (row.id, row))
        else:
            heapq.heappush(self.ready, (row.id, row))


def _barrier_place(row: PendingRow) -> tuple[int, int]:
    """Where a barrier goes among its user's barriers: "#" is its own id's place, "#<id>" that row's."""
    mark = row.lanes[0][len(BARRIER_LANE):]
    try:
        return (int(mark) if mark else row.id, row.id)
    except ValueError:
        return (row.id, row.id)


def _insert_barrier(barriers: deque[PendingRow], row: PendingRow) -> None:
    place = _barrier_place(row)
    if not barriers or _barrier_place(barriers[-1]) <= place:
        barriers.append(row)  # the usual case: a new grant's report goes last
        return
    for index, other in enumerate(barriers):
        # Never ahead of a barrier in flight: it is on its way.
        if other.state != IN_FLIGHT and _barrier_place(other) > place:
            barriers.insert(index, row)
            return
    barriers.append(row)


def _drop(queue: deque[PendingRow], row: PendingRow) -> None:
    if queue and queue[0] is row:
        queue.popleft()
    elif row in queue:
        queue.remove(row)


def _after_members(queue: deque[PendingRow] | None, members: set[int]) -> PendingRow | None:
    """The first row of a lane behind its front run of `members` (None: the lane is all members, or none heads it)."""
    if not queue or id(queue[0]) not in members:
        return None
    for row in queue:
        if id(row) not in members:
            return row
    return None
