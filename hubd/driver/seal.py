"""Sealing a small secret under a key that only the holder of another secret can derive.

Used for the refresh grace period: the pair that replaced a refresh token is stored sealed under
that old token, so the database alone never yields a usable token. Stdlib only: HMAC-SHA256 as
the PRF of a counter-mode keystream, then encrypt-then-MAC.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from hubd.errors import HubdError

NONCE_BYTES = 16
TAG_BYTES = 32
_BLOCK = hashlib.sha256().digest_size


class SealBroken(HubdError):
    """A sealed blob was altered, truncated, or sealed under another secret."""


def seal(secret: str, plaintext: bytes) -> bytes:
    """`nonce || ciphertext || tag`, readable only with `secret`."""
    enc_key, mac_key = _keys(secret)
    nonce = secrets.token_bytes(NONCE_BYTES)
    body = _xor(plaintext, _keystream(enc_key, nonce, len(plaintext)))
    return nonce + body + hmac.new(mac_key, nonce + body, hashlib.sha256).digest()


def unseal(secret: str, blob: bytes) -> bytes:
    """The plaintext of a `seal(secret, ...)` blob; raise SealBroken on any mismatch."""
    if len(blob) < NONCE_BYTES + TAG_BYTES:
        raise SealBroken("the sealed value is too short")
    enc_key, mac_key = _keys(secret)
    nonce, body, tag = blob[:NONCE_BYTES], blob[NONCE_BYTES:-TAG_BYTES], blob[-TAG_BYTES:]
    if not hmac.compare_digest(hmac.new(mac_key, nonce + body, hashlib.sha256).digest(), tag):
        raise SealBroken("the sealed value does not verify under this secret")
    return _xor(body, _keystream(enc_key, nonce, len(body)))


def _keys(secret: str) -> tuple[bytes, bytes]:
    # Two independent keys from one secret: never reuse the encryption key for the MAC.
    raw = secret.encode()
    return (hmac.new(raw, b"hubd seal v1 enc", hashlib.sha256).digest(),
            hmac.new(raw, b"hubd seal v1 mac", hashlib.sha256).digest())


def _keystream(key: bytes, nonce: bytes, length: int) -> bytes:
    blocks = (length + _BLOCK - 1) // _BLOCK
    return b"".join(
        hmac.new(key, nonce + i.to_bytes(8, "big"), hashlib.sha256).digest() for i in range(blocks)
    )[:length]


def _xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))
