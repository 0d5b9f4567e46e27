"""The installation's identity proof (pure): how `/healthz?challenge=<nonce>` shows that *this* hubd answers.

Each database holds a random per-installation secret (migration 0009, `meta.instance_secret`); hubd answers a
challenge with an HMAC-SHA256 of it under that secret, and `hubd doctor`, which reads the same database,
checks the answer in constant time. The message is prefixed with a purpose of its own, and the secret serves
nothing else, so an answer proves only that whoever answered holds this database.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

CHALLENGE_PARAM = "challenge"
CHALLENGE_MIN_CHARS = 16
CHALLENGE_MAX_CHARS = 128
CHALLENGE_RULE = (f"{CHALLENGE_MIN_CHARS} to {CHALLENGE_MAX_CHARS} letters, digits, '-' or '_' "
                  "(a random nonce, as `hubd doctor` sends)")
SECRET_KEY = "instance_secret"  # noqa: S105 - the row of the `meta` table that holds the secret (hex)
_PURPOSE = b"hubd /healthz identity v1\n"
_CHALLENGE_RE = re.compile(rf"^[A-Za-z0-9_-]{{{CHALLENGE_MIN_CHARS},{CHALLENGE_MAX_CHARS}}}$")


def valid_challenge(challenge: str) -> bool:
    """Whether a challenge has the shape hubd answers (CHALLENGE_RULE)."""
    return _CHALLENGE_RE.match(challenge) is not None


def new_challenge() -> str:
    """A fresh random challenge (256 bits)."""
    return secrets.token_urlsafe(32)


def prove(secret: bytes, challenge: str) -> str:
    """The answer to a challenge under the installation's secret (lowercase hex)."""
    return hmac.new(secret, _PURPOSE + challenge.encode("ascii"), hashlib.sha256).hexdigest()


def proves(secret: bytes, challenge: str, answer: object) -> bool:
    """Whether `answer` is this installation's answer to `challenge`, compared in constant time."""
    if not isinstance(answer, str) or not answer.isascii():
        return False
    return hmac.compare_digest(prove(secret, challenge).encode("ascii"), answer.encode("ascii"))
