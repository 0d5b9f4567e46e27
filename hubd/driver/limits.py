"""The login limits of the authorize page, built on `hubd.ratelimit.FailureThrottle` (growing waits per key).

`LoginLimiter` counts a failed sign-in against its *source* (the account at this address, or at
this browser when it holds a device cookie of the account) and, unless the source is trusted,
against the *account* as a whole. A trusted source (a device cookie of the account, or an address
the account signed in from within TRUST_S) skips the account's throttle: someone guessing from
elsewhere slows only the guessers, never the owner's own browser or home address. An attempt is
counted *before* its password is checked and taken back when the password was right, so parallel
attempts cannot slip past a limit together. State lives in memory: a restart forgets it. Imports
only hubd.ratelimit.
"""

from __future__ import annotations

from dataclasses import dataclass

from hubd.ratelimit import CAP_S, MAX_KEYS, FailureThrottle

SOURCE_FREE = 5  # wrong passwords a source may give before it has to wait
ACCOUNT_FREE = 10  # wrong passwords from untrusted sources before the account makes them all wait
TRUST_S = 30 * 86400.0  # how long an address that signed in to an account stays trusted for it


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
