"""Failed-login limits of the authorize page: sliding windows per account and per client address.

State lives in the LoginLimiter instance (in memory: a restart forgets it, which only helps a
guesser by one window). An attempt is counted *before* its password is checked and taken back
when the password was right, so parallel attempts cannot slip past a limit together. Imports
nothing from hubd.
"""

from __future__ import annotations

from collections import deque

ACCOUNT_FAILURES = 5
ADDRESS_FAILURES = 20
WINDOW_S = 15 * 60
# Bounds memory when someone tries many made-up usernames or addresses.
MAX_KEYS = 4096


class SlidingWindow:
    """At most `limit` events per key in any `window_s` seconds."""

    def __init__(self, limit: int, window_s: float, *, max_keys: int = MAX_KEYS) -> None:
        self._limit = limit
        self._window = window_s
        self._max_keys = max_keys
        self._events: dict[str, deque[float]] = {}

    def retry_after(self, key: str, now: float) -> float:
        """Seconds until `key` may try again; 0 when it may now."""
        events = self._trim(key, now)
        if len(events) < self._limit:
            return 0.0
        return events[-self._limit] + self._window - now

    def add(self, key: str, now: float) -> None:
        """Count one event for `key`."""
        events = self._trim(key, now)
        events.append(now)
        if len(events) > self._limit:
            events.popleft()
        self._events.pop(key, None)
        self._events[key] = events  # re-insert: dict order is then oldest-touched first
        if len(self._events) > self._max_keys:
            self._evict(now)

    def clear(self, key: str) -> None:
        """Forget `key`'s events."""
        self._events.pop(key, None)

    def discard(self, key: str, at: float) -> None:
        """Take back one event of `key` counted at `at`, if it is still there."""
        events = self._events.get(key)
        if events is not None and at in events:
            events.remove(at)

    def _trim(self, key: str, now: float) -> deque[float]:
        events = self._events.get(key) or deque()
        while events and events[0] <= now - self._window:
            events.popleft()
        return events

    def _evict(self, now: float) -> None:
        for key in [k for k, v in self._events.items() if not v or v[-1] <= now - self._window]:
            del self._events[key]
        while len(self._events) > self._max_keys:
            del self._events[next(iter(self._events))]


class LoginLimiter:
    """Failed logins: ACCOUNT_FAILURES per account and ADDRESS_FAILURES per address in WINDOW_S."""

    def __init__(
        self, *, account_failures: int = ACCOUNT_FAILURES, address_failures: int = ADDRESS_FAILURES,
        window_s: float = WINDOW_S,
    ) -> None:
        self._accounts = SlidingWindow(account_failures, window_s)
        self._addresses = SlidingWindow(address_failures, window_s)

    def retry_after(self, username: str, address: str, now: float) -> float:
        """Seconds until this account may be tried from this address; 0 when it may now."""
        return max(self._accounts.retry_after(_account_key(username), now),
                   self._addresses.retry_after(address, now))

    def begin(self, username: str, address: str, now: float) -> float:
        """Count an attempt before its password is checked; or, at a limit, count nothing and return the wait.

        0 means go ahead. The check and the count happen without an await in between, so of many
        parallel attempts at most the limit get through.
        """
        wait = self.retry_after(username, address, now)
        if wait > 0:
            return wait
        self._accounts.add(_account_key(username), now)
        self._addresses.add(address, now)
        return 0.0

    def succeeded(self, username: str, address: str, began: float) -> None:
        """A right password: clear the account's count and take back the address's count of this attempt."""
        self._accounts.clear(_account_key(username))
        self._addresses.discard(address, began)


def _account_key(username: str) -> str:
    return username.strip().casefold()
