"""CodeOutcomes: the outcome of each AcceptGrant code's exchange, remembered for a resent AcceptGrant.

Owns that memory: keyed by a hash of the user and the code (never the code itself), an outcome is kept
CODE_MEMORY_S after its exchange began, and at most CODE_MEMORY_MAX of them (the oldest finished ones go
first; one under way is never forgotten). An outcome that may be retried (cancelled: hubd is stopping;
CloudUnavailable: the code may be unspent) is forgotten once known, so the next AcceptGrant tries again.
Runs no exchange, logs nothing and reads no clock: hubd.cloud.tokens does, and passes the times in.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections import OrderedDict

from hubd.errors import CloudUnavailable

# A resent AcceptGrant (the same userId and code) within this time gets the first one's outcome.
CODE_MEMORY_S = 600.0
CODE_MEMORY_MAX = 1_000


def _code_key(user_id: str, code: str) -> bytes:
    """What the outcome of a code's exchange is remembered by (not the code itself)."""
    # surrogatepass: a code or userId with a lone surrogate (JSON allows "\ud800") is still only a key here.
    return hashlib.sha256(f"{user_id}\0{code}".encode("utf-8", "surrogatepass")).digest()


class CodeOutcomes:
    """The exchanges of AcceptGrant codes, by (user, code), oldest first."""

    def __init__(self) -> None:
        # _code_key -> (the exchange's outcome, monotonic time it began), oldest first
        self._codes: OrderedDict[bytes, tuple[asyncio.Future[None], float]] = OrderedDict()

    def known(self, user_id: str, code: str, now: float) -> bool:
        """True when an exchange of this code began within CODE_MEMORY_S of `now` (monotonic) and is kept."""
        self._forget(now)
        return _code_key(user_id, code) in self._codes

    def outcome(self, user_id: str, code: str, now: float) -> tuple[asyncio.Future[None], bool]:
        """The outcome of this code's exchange, and True when it is new: the caller runs the exchange and
        resolves the future (whoever sends the code again meanwhile gets the same one)."""
        self._forget(now)
        key = _code_key(user_id, code)
        known = self._codes.get(key)
        if known is not None:
            return known[0], False
        outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        outcome.add_done_callback(functools.partial(self._ended, key))
        self._codes[key] = (outcome, now)
        return outcome, True

    def _ended(self, key: bytes, outcome: asyncio.Future[None]) -> None:
        """An exchange ended: forget its outcome if the code may be tried again."""
        error = None if outcome.cancelled() else outcome.exception()
        current = self._codes.get(key)
        if (outcome.cancelled() or isinstance(error, CloudUnavailable)) and current is not None \
                and current[0] is outcome:
            del self._codes[key]

    def _forget(self, now: float) -> None:
        cutoff = now - CODE_MEMORY_S
        while self._codes:
            key, (outcome, began) = next(iter(self._codes.items()))
            if not outcome.done() or (began > cutoff and len(self._codes) <= CODE_MEMORY_MAX):
                return
            del self._codes[key]
