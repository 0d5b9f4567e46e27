"""Throttles for wrong credentials: growing waits per key, and the login limits of the authorize page built on them.

`FailureThrottle` lets a key fail `free` times, then makes it wait `first_delay_s`, doubling with
each further failure up to `cap_s`; a key is forgotten `forget_s` after its last failure. The
webhook uses it per client address for unknown tokens.

`LoginLimiter` counts a failed sign-in against its *source* (the account at this address, or at
this browser when it holds a device cookie of the account) and, unless the source is trusted,
against the *account* as a whole. A trusted source (a device cookie of the account, or an address
the account signed in from within TRUST_S) skips the account's throttle: someone guessing from
elsewhere slows only the guessers, never the owner's own browser or home address. An attempt is
counted *before* its password is checked and taken back when the password was right, so parallel
attempts cannot slip past a limit together. State lives in memory: a restart forgets it. Imports
nothing from hubd.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE_FREE = 5  # wrong passwords a source may give before it has to wait
ACCOUNT_FREE = 10  # wrong passwords from untrusted sources before the account makes them all wait
FIRST_DELAY_S = 1.0
CAP_S = 15 * 60.0
FORGET_S = 24 * 3600.0
TRUST_S = 30 * 86400.0  # how long an address that signed in to an account stays trusted for it
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


@dataclass(frozen=True, slots=True)
class Attempt:
    """One sign-in attempt as the limiter saw it: how long to wait (0: go ahead) and what it counted."""

    wait_s: float
    account: str
    source: str
    address: str
    counted_on_account: bool = False


class LoginLimiter:
    """Failed sign-ins per source (account at an address or a device) and per account (untrusted sources only)."""

    def __init__(self, *, source_free: int = SOURCE_FREE, account_free: int = ACCOUNT_FREE,
                 cap_s: float = CAP_S, trust_s: float = TRUST_S, max_keys: int = MAX_KEYS) -> None:
        self._sources = FailureThrottle(free=source_free, cap_s=cap_s, max_keys=max_keys)
        self._accounts = FailureThrottle(free=account_free, cap_s=cap_s, max_keys=max_keys)
        self._trust_s = trust_s
        self._max_keys = max_keys
        self._good: dict[tuple[str, str], float] = {}  # (account, address) -> last sign-in

    def begin(self, username: str, address: str, device: str | None, now: float) -> Attempt:
        """Count an attempt before its password is checked; or, when it must wait, count nothing.

        `address` is the client's throttle key, `device` the id of a device cookie that holds for this
        username (None without one). The check and the count happen without an await in between, so of
        many parallel attempts only those the limits allow get through.
        """
        account = _account_key(username)
        source = f"{account}\n{'device:' + device if device is not None else 'address:' + address}"
        trusted = device is not None or self._trusted_address(account, address, now)
        wait = self._sources.wait(source, now)
        if not trusted:
            wait = max(wait, self._accounts.wait(account, now))
        if wait > 0:
            return Attempt(wait, account, source, address)
        self._sources.fail(source, now)
        if not trusted:
            self._accounts.fail(account, now)
        return Attempt(0.0, account, source, address, counted_on_account=not trusted)

    def succeeded(self, attempt: Attempt, now: float) -> None:
        """A right password: the source starts afresh, the account takes its count back, the address is trusted."""
        self._sources.clear(attempt.source)
        if attempt.counted_on_account:
            self._accounts.take_back(attempt.account)
        self._good.pop((attempt.account, attempt.address), None)
        self._good[(attempt.account, attempt.address)] = now  # re-insert: oldest first
        while len(self._good) > self._max_keys:
            del self._good[next(iter(self._good))]

    def _trusted_address(self, account: str, address: str, now: float) -> bool:
        """Whether the account signed in from `address` within TRUST_S."""
        at = self._good.get((account, address))
        return at is not None and now - at < self._trust_s


def _account_key(username: str) -> str:
    return username.strip().casefold()
