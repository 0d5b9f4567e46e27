"""OutboxFeed: the rows the outbox writer just committed, handed to the sender in memory; and back, the rows the
sender delivered, deleted in the writer's next transaction.

Without it the sender learns of new rows by reading them back (`OutboxRepo.new_rows`, then their bodies when
they go): two more trips through the one database thread, each queued behind the next batch's commit and its
fsync. That was most of an event's latency at a steady rate. With it, a row committed at time t is indexed and
posted from memory; the database still has it first (the writer feeds only after the commit returned), so
nothing changes for durability.

The feed is a hint, never the only source: the sender takes fed rows only while their ids continue its index
without a gap, and otherwise reads the outbox as before (`hubd.outbox.sender`).
Delivered rows ride along with the next device commit instead of a transaction (and an fsync) of their own,
which would hold the database thread while the next event waits to be committed. The sender deletes what the
writer has not taken within its interval itself. Either way a crash before the delete sends a few delivered
events again, with their messageId (at least once, as always). Pure: no I/O, no asyncio.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from hubd.store.outbox import Written


@dataclass(frozen=True, slots=True)
class Fed:
    """One committed row, as written."""

    row: Written
    committed_at: float  # monotonic time the commit returned


class OutboxFeed:
    """Committed rows in commit order, from the writer (`written`) to the sender (`take`)."""

    def __init__(self) -> None:
        self._rows: list[Fed] = []
        self._delivered: list[tuple[int, float]] = []  # (row id, monotonic time delivered), in delivery order

    def written(self, rows: Sequence[Written], committed_at: float) -> None:
        """Rows a commit just made durable (the caller wakes the sender)."""
        self._rows.extend(Fed(row, committed_at) for row in rows)

    def take(self) -> list[Fed]:
        """Every row fed since the last take, in the order fed."""
        rows, self._rows = self._rows, []
        return rows

    def delivered(self, row_id: int, at: float) -> None:
        """A row the platform accepted at monotonic time `at`: deleted by whoever takes it first."""
        self._delivered.append((row_id, at))

    def take_delivered(self, until: float = math.inf) -> list[int]:
        """The delivered rows not yet taken (those delivered by monotonic time `until`); the taker deletes them,
        or gives them back (`delivered_again`)."""
        delivered = self._delivered
        count = len(delivered) if until == math.inf else bisect.bisect_right(delivered, until, key=lambda d: d[1])
        taken, self._delivered = delivered[:count], delivered[count:]
        return [row_id for row_id, _ in taken]

    def delivered_again(self, ids: list[int]) -> None:
        """Rows taken for deletion whose delete did not happen (a failed commit): the next taker deletes them."""
        self._delivered[:0] = [(row_id, -math.inf) for row_id in ids]

    @property
    def delivered_count(self) -> int:
        """Delivered rows waiting to be deleted."""
        return len(self._delivered)
