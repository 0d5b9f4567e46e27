"""VerdictCache: the driver's recent VALID verdicts on user tokens, for while the database stalls.

The directive endpoint checks every directive's token in the database; when that does not answer in time it
asks here. A verdict answers for at most VERDICT_TTL_S after its check, and never past the token's expiry
(then it answers EXPIRED: an expiry only ever moves earlier). `invalidate()` (the driver revoked or rotated
tokens) forgets every verdict, and a check that began before cannot put one back. `hubd tokens revoke`
runs in another process: its revocation is seen by the next database check, so a stalled database lets a
revoked token through for at most VERDICT_TTL_S. Keyed by SHA-256 of the token, never the token. Imports
hubd.lifecycle (the Clock) and hubd.usertoken only.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from hubd.lifecycle import Clock
from hubd.usertoken import TokenCheck, TokenStatus

VERDICT_TTL_S = 15.0
VERDICT_MAX = 1_000


@dataclass(frozen=True, slots=True)
class _Verdict:
    user: str | None
    checked_at: float  # the clock's monotonic time of the database check
    expires_at: float  # the token's expiry, epoch seconds


class VerdictCache:
    """SHA-256 of a token -> its last VALID verdict, in check order (the oldest is dropped first)."""

    def __init__(self, clock: Clock, *, ttl_s: float = VERDICT_TTL_S, max_entries: int = VERDICT_MAX) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._max = max_entries
        self._verdicts: OrderedDict[bytes, _Verdict] = OrderedDict()
        self._generation = 0

    @property
    def generation(self) -> int:
        """Changes with every invalidate(); read it before a check and hand it to record()."""
        return self._generation

    def record(self, token: str, check: TokenCheck, generation: int) -> None:
        """Remember a VALID verdict (forget the token otherwise), unless tokens were revoked since `generation`."""
        digest = _digest(token)
        if check.status is not TokenStatus.VALID or check.expires_at is None:
            self._verdicts.pop(digest, None)
            return
        if generation != self._generation:
            return
        self._verdicts[digest] = _Verdict(check.user, self._clock.monotonic(), check.expires_at)
        self._verdicts.move_to_end(digest)
        while len(self._verdicts) > self._max:
            self._verdicts.popitem(last=False)

    def recent(self, token: str) -> TokenCheck | None:
        """VALID, or EXPIRED once the token's expiry passed, from a check within the TTL; None if there is none."""
        digest = _digest(token)
        verdict = self._verdicts.get(digest)
        if verdict is None:
            return None
        if self._clock.monotonic() - verdict.checked_at >= self._ttl_s:
            del self._verdicts[digest]
            return None
        status = TokenStatus.EXPIRED if self._clock.time() >= verdict.expires_at else TokenStatus.VALID
        return TokenCheck(status, verdict.user, verdict.expires_at)

    def invalidate(self) -> None:
        """Tokens were revoked or rotated: forget every verdict, and any check still under way."""
        self._generation += 1
        self._verdicts.clear()


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
