"""Discovery windows: which fed outbox rows wait for the others of their window, and making a window one row.

Retained configs arrive in bursts (at every broker reconnect), and the platform takes one discovery message
better than several. A fed AddOrUpdateReport or DeleteReport, never sent, waits until DISCOVERY_WINDOW_S after
the first report of its window arrived (`open_window`); then the sender takes the window's reports of a user
together (`hubd.outbox.lanes.UserQueue.take_window`, at most DISCOVERY_BATCH endpoints) and, before the first
try, `WindowMerger.merge` makes them one row in one transaction: the oldest keeps its id and its messageId
(never sent) and takes the others' endpoints and lanes, so retries and restarts send that one message. A row
read back from the outbox may have been sent before a restart and is never merged. Nothing else waits for a
window. Imports the lanes, the store's outbox and the delivery observer; never the sender.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from hubd.errors import StorageUnavailable
from hubd.journal import EventRef
from hubd.lifecycle import Clock
from hubd.metrics import Metrics
from hubd.outbox.decide import DISCOVERY_BATCH
from hubd.outbox.delivery import DeliveryObserver
from hubd.outbox.feed import OutboxFeed
from hubd.outbox.lanes import PendingRow, UserQueue
from hubd.store.outbox import Loaded, OutboxRepo

log = logging.getLogger("hubd.outbox")  # the sender's logger: its lines keep one name

DISCOVERY_WINDOW_S = 0.1
DISCOVERY_REPORTS = frozenset({"AddOrUpdateReport", "DeleteReport"})


def open_window(queue: UserQueue, row: PendingRow, name: str, arrived: float) -> None:
    """Let a fed row that arrived at monotonic time `arrived` wait for its window, if it is a discovery report
    with room for others."""
    if name in DISCOVERY_REPORTS and not row.barrier and len(row.lanes) < DISCOVERY_BATCH:
        row.merge = name
        row.window_end = queue.window(arrived, DISCOVERY_WINDOW_S)


class WindowMerger:
    """Makes the other rows of a window part of the row that goes first: one row, one message."""

    def __init__(self, store: OutboxRepo, delivered: OutboxFeed, *, clock: Clock, metrics: Metrics,
                 observer: DeliveryObserver | None) -> None:
        self._store = store
        self._delivered = delivered  # rows delivered, not yet deleted: deleted with the merge
        self._clock = clock
        self._observer = observer
        self._merged = metrics.counter("hubd_events_merged_total",
                                       "discovery reports sent in one message with an older one of their window")

    async def merge(self, queue: UserQueue, row: PendingRow, parts: Sequence[PendingRow],
                    loaded: Loaded | None) -> tuple[Loaded | None, list[PendingRow]]:
        """Before `row`'s first try, make `parts` (in flight with it) part of it; its body as it now goes (None:
        no longer stored) and the parts it took. The others go back to the index; if the disk refuses the
        write, `row` goes alone with `loaded`."""
        taken: list[int] = []
        try:
            gone = self._delivered.take_delivered()
            try:
                merged = await self._store.merge(row.id, [part.id for part in parts], gone)
            except BaseException:
                self._delivered.delivered_again(gone)  # deleted later, by the writer or the sender
                raise
            if merged is None:
                return None, []
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
                self._merged.inc(len(absorbed))
                if self._observer is not None and loaded is not None:
                    self._observer.merged(EventRef(row.id, row.user_id, loaded[0], loaded[2], row.endpoints,
                                                   loaded[3]), [part.id for part in absorbed], now)
        return loaded, absorbed
