"""The webhook's call limits: per token, `per_minute` in any 60 s and `per_day` in any 24 h.

Every call with a valid token counts, refused ones too (as the platform counts them), so a client that keeps
calling past a limit stays refused. `Retry-After` is the wait until a call is allowed if the
client stops calling now.

Calls are counted in one-second buckets per token: a flood adds to one bucket a second, and the
service saves the buckets not yet saved (`take_unsaved`) to SQLite at most once a second instead of
writing a row per call. A bucket stands for its second's end (`second + 1`), so a window never
holds more calls than allowed, at the cost of a window up to one second longer. A token's buckets
are loaded from SQLite the first time it is seen after a start.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

MINUTE_S = 60
DAY_S = 86400

Key = tuple[int, str]  # a token's id and hash: a rotated token starts afresh


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a call is refused and when the next one is allowed."""

    retry_after_s: int
    limit_key: str  # webhook.per_minute or webhook.per_day
    limit: int
    window: str  # "minute" or "24 hours"


class _Buckets:
    """One token's calls: [second, count] pairs, oldest first, and their total."""

    __slots__ = ("items", "total")

    def __init__(self) -> None:
        self.items: deque[list[int]] = deque()
        self.total = 0


class CallLimiter:
    """Rolling minute and day windows per key, counting every call."""

    def __init__(self, *, per_minute: int, per_day: int) -> None:
        self._per_minute = per_minute
        self._per_day = per_day
        self._keys: dict[Key, _Buckets] = {}
        self._unsaved: dict[Key, dict[int, int]] = {}

    def known(self, key: Key) -> bool:
        """True once the key's history is loaded (or it was counted since the start)."""
        return key in self._keys

    def load(self, key: Key, counts: Iterable[tuple[int, int]], now: float) -> None:
        """Seed a key with its saved (second, count) buckets.

        A second later than now (the clock stepped back since it was saved) counts as now: the
        Retry-After it would give could otherwise be far too long.
        """
        if key in self._keys:
            return
        latest = math.floor(now)
        merged: dict[int, int] = {}
        for second, count in counts:
            if count > 0:
                second = min(second, latest)
                merged[second] = merged.get(second, 0) + count
        buckets = _Buckets()
        for second in sorted(merged):
            buckets.items.append([second, merged[second]])
            buckets.total += merged[second]
        self._keys[key] = buckets
        self._trim(buckets, now)

    def admit(self, key: Key, now: float) -> Refusal | None:
        """Count a call; None if it is allowed, else why not and when to come back."""
        buckets = self._keys.get(key)
        if buckets is None:
            buckets = self._keys[key] = _Buckets()
        self._trim(buckets, now)
        refused = self._check(buckets, now) is not None
        second = self._add(buckets, now)
        self._trim(buckets, now)
        unsaved = self._unsaved.setdefault(key, {})
        unsaved[second] = unsaved.get(second, 0) + 1
        # The wait is computed with this call counted: it is the wait if the client stops now.
        return self._check(buckets, now) if refused else None

    def usage(self, key: Key, now: float) -> tuple[int, int, int | None] | None:
        """Calls in the last minute and in the last 24 hours, and the second of the last one; None: not loaded.

        Changes nothing. The day holds at most about `per_day` calls: older ones can decide nothing and are
        forgotten (`_trim`), so a token past its day's limit shows the limit.
        """
        buckets = self._keys.get(key)
        if buckets is None:
            return None
        items = buckets.items
        day = buckets.total
        for second, count in items:  # the head, out of the day since the last trim (usually none)
            if second + 1 > now - DAY_S:
                break
            day -= count
        minute = 0
        for second, count in reversed(items):  # at most a minute of buckets
            if second + 1 <= now - MINUTE_S:
                break
            minute += count
        return minute, day, items[-1][0] if items else None

    def take_unsaved(self) -> dict[Key, dict[int, int]]:
        """The counts added since the last take ({key: {second: count}}); the caller saves them."""
        taken, self._unsaved = self._unsaved, {}
        return taken

    def restore_unsaved(self, counts: dict[Key, dict[int, int]]) -> None:
        """Counts whose save failed: keep them for the next save."""
        for key, seconds in counts.items():
            unsaved = self._unsaved.setdefault(key, {})
            for second, count in seconds.items():
                unsaved[second] = unsaved.get(second, 0) + count

    def forget_idle(self, now: float) -> None:
        """Drop keys without a call in the last day (revoked or rotated tokens); reloaded if seen again."""
        for key in [k for k, b in self._keys.items()
                    if k not in self._unsaved and (not b.items or b.items[-1][0] + 1 <= now - DAY_S)]:
            del self._keys[key]

    def _add(self, buckets: _Buckets, now: float) -> int:
        second = math.floor(now)
        items = buckets.items
        if items and items[-1][0] >= second:
            if items[-1][0] > second:
                # The clock stepped back: merge the buckets "from the future" into now, so that
                # they leave the windows as if made now rather than hours late.
                moved = 0
                while items and items[-1][0] > second:
                    moved += items.pop()[1]
                items.append([second, moved])
            items[-1][1] += 1
        else:
            items.append([second, 1])
        buckets.total += 1
        return second

    def _trim(self, buckets: _Buckets, now: float) -> None:
        """Drop buckets out of the day, and the ones older than the per_day newest calls.

        Those can never decide anything: the newer calls alone fill the day window until later. So
        memory stays bounded under a flood, and the oldest bucket left holds the per_day-th newest
        call whenever the day is full. (A per_minute above per_day only matters when the day is
        full too, and then the day's wait is the longer one.)
        """
        items = buckets.items
        while items and (items[0][0] + 1 <= now - DAY_S or buckets.total - items[0][1] >= self._per_day):
            buckets.total -= items.popleft()[1]

    def _check(self, buckets: _Buckets, now: float) -> Refusal | None:
        """Refused if a window already holds its limit; the wait until it holds one call less."""
        waits: list[Refusal] = []
        if buckets.total >= self._per_day:
            day_end = buckets.items[0][0] + 1
            waits.append(Refusal(_seconds(day_end + DAY_S - now), "webhook.per_day", self._per_day, "24 hours"))
        minute_end = _window_end(buckets.items, self._per_minute, now - MINUTE_S)
        if minute_end is not None:
            waits.append(Refusal(_seconds(minute_end + MINUTE_S - now), "webhook.per_minute", self._per_minute,
                                 "minute"))
        return max(waits, key=lambda r: r.retry_after_s) if waits else None


def _window_end(items: deque[list[int]], limit: int, since: float) -> int | None:
    """The end of the bucket holding the limit-th newest call after `since`, or None if fewer.

    Once that bucket leaves the window (at its end plus the window), the window holds fewer than
    `limit` calls again. Looks at no more than a minute of buckets: it is only used for the minute.
    """
    seen = 0
    for second, count in reversed(items):
        if second + 1 <= since:
            return None
        seen += count
        if seen >= limit:
            return second + 1
    return None


def _seconds(wait: float) -> int:
    """Whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait))
