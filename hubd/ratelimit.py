"""Growing waits after wrong guesses, per key: the throttle the driver's login limits and the webhook share.

`FailureThrottle` lets a key fail `free` times, then makes it wait `first_delay_s`, doubling with
each further failure up to `cap_s`; a key is forgotten `forget_s` after its last failure. The
driver (`hubd.driver.limits`) counts failed sign-ins with it, per source and per account; the
webhook, unknown tokens per client address. State lives in memory: a restart forgets it. Imports
nothing from hubd.
"""

from __future__ import annotations

from dataclasses import dataclass

FIRST_DELAY_S = 1.0
CAP_S = 15 * 60.0
FORGET_S = 24 * 3600.0
# Bounds memory when someone tries many made-up usernames or addresses.
MAX_KEYS = 4096


@dataclass(slots=True)
class _Record:
    failures: int
    last: float


class FailureThrottle:
    """Failures per key: `free` ones cost nothing, then each makes the key wait twice as long, up to `cap_s`."""

    def __init__(self, *, free: int, first_delay_s: float = FIRST_DELAY_S, cap_s: float = CAP_S,
                 forget_s: float = FORGET_S, max_keys: int = MAX_KEYS) -> None:
        self._free = free
        self._first = first_delay_s
        self._cap = cap_s
        self._forget = forget_s
        self._max_keys = max_keys
        self._records: dict[str, _Record] = {}

    def delay(self, failures: int) -> float:
        """The wait after `failures` failures in a row."""
        if failures < self._free:
            return 0.0
        return min(self._cap, self._first * 2.0 ** min(failures - self._free, 64))

    def wait(self, key: str, now: float) -> float:
        """Seconds until `key` may try again; 0 when it may now."""
        record = self._current(key, now)
        if record is None:
            return 0.0
        delay = self.delay(record.failures)
        return max(0.0, min(delay, record.last + delay - now))  # min: a clock set back never lengthens it

    def failures(self, key: str, now: float) -> int:
        """The failures on record for `key`."""
        record = self._current(key, now)
        return 0 if record is None else record.failures

    def fail(self, key: str, now: float) -> None:
        """Count one failure of `key`."""
        record = self._current(key, now)
        if record is None:
            record = self._records[key] = _Record(0, now)
            if len(self._records) > self._max_keys:
                self._evict(now, keep=key)
        record.failures += 1
        record.last = now

    def take_back(self, key: str) -> None:
        """Undo one failure of `key` (an attempt counted before its outcome was known, which succeeded)."""
        record = self._records.get(key)
        if record is not None:
            record.failures -= 1
            if record.failures <= 0:
                del self._records[key]

    def clear(self, key: str) -> None:
        """Forget `key`'s failures."""
        self._records.pop(key, None)

    def __len__(self) -> int:
        return len(self._records)

    def _current(self, key: str, now: float) -> _Record | None:
        record = self._records.get(key)
        if record is not None and now - record.last >= self._forget:
            del self._records[key]
            return None
        return record

    def _evict(self, now: float, keep: str) -> None:
        """Drop forgotten keys; if still too many, the ones with the fewest failures, oldest first.

        So a flood of made-up keys (one failure each) cannot push out a key that is being guessed hard.
        """
        for key in [k for k, r in self._records.items() if now - r.last >= self._forget]:
            del self._records[key]
        while len(self._records) > self._max_keys:
            victim = min((k for k in self._records if k != keep),
                         key=lambda k: (self._records[k].failures, self._records[k].last))
            del self._records[victim]
