"""The webhook's call limits (SPEC.md 8): per token, `per_minute` in any 60 s and `per_day` in any 24 h.

The admitted calls of the last day are kept per token in memory, loaded from SQLite the first time
a token is seen (so a restart forgets nothing) and appended as calls are admitted; the caller
persists each admitted call. A call refused with 429 is not counted, so `Retry-After` is exact:
calling again after that many seconds succeeds. Imports nothing from hubd.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

MINUTE_S = 60.0
DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a call is refused and when the next one is allowed."""

    retry_after_s: int
    limit_key: str  # webhook.per_minute or webhook.per_day
    limit: int
    window: str  # "minute" or "24 hours"


class CallLimiter:
    """Rolling minute and day windows per key (a token's id and hash: a rotated token starts afresh)."""

    def __init__(self, *, per_minute: int, per_day: int) -> None:
        self._per_minute = per_minute
        self._per_day = per_day
        self._calls: dict[tuple[int, str], deque[float]] = {}

    def known(self, key: tuple[int, str]) -> bool:
        """True once the key's history is loaded."""
        return key in self._calls

    def load(self, key: tuple[int, str], times: Iterable[float]) -> None:
        """Seed a key with the persisted calls (any order)."""
        if key not in self._calls:
            self._calls[key] = deque(sorted(times))

    def admit(self, key: tuple[int, str], now: float) -> Refusal | None:
        """Count a call and return None, or return why it is refused (not counted)."""
        calls = self._calls.setdefault(key, deque())
        while calls and calls[0] <= now - DAY_S:
            calls.popleft()
        refusal = self._check(calls, now)
        if refusal is None:
            calls.append(now)
        return refusal

    def forget_idle(self, now: float) -> None:
        """Drop keys without a call in the last day (revoked or rotated tokens)."""
        for key in [k for k, v in self._calls.items() if not v or v[-1] <= now - DAY_S]:
            del self._calls[key]

    def _check(self, calls: deque[float], now: float) -> Refusal | None:
        waits: list[Refusal] = []
        if len(calls) >= self._per_day:
            waits.append(Refusal(_seconds(calls[-self._per_day] + DAY_S - now), "webhook.per_day", self._per_day,
                                 "24 hours"))
        in_minute = 0
        for at in reversed(calls):
            if at <= now - MINUTE_S or in_minute >= self._per_minute:
                break
            in_minute += 1
        if in_minute >= self._per_minute:
            waits.append(Refusal(_seconds(calls[-self._per_minute] + MINUTE_S - now), "webhook.per_minute",
                                 self._per_minute, "minute"))
        return max(waits, key=lambda r: r.retry_after_s) if waits else None


def _seconds(wait: float) -> int:
    """Whole seconds, rounded up, at least 1: after that long the oldest counted call has left the window."""
    return max(1, math.ceil(wait))
