"""What a user token from a platform message is worth (pure): the verdict hubd's driver gives on a token it
issued, and the directive endpoint acts on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class TokenStatus(enum.Enum):
    """What a user token from a platform message is worth."""

    VALID = "valid"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class TokenCheck:
    """The result of verifying a user token; `user` is the hubd account and `expires_at` the token's expiry
    (epoch seconds) unless UNKNOWN."""

    status: TokenStatus
    user: str | None
    expires_at: float | None = None
