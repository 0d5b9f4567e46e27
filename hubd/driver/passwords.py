"""Password hashes for driver.accounts: stdlib scrypt, `scrypt$n$r$p$salt$hash`, constant-time checks.

Owns the hash format, the check of a sign-in against an account (`password_ok_blocking`: the authorize
page's and the devices page's), and the interactive prompt of `hubd hash-password`.
"""

from __future__ import annotations

import base64
import binascii
import getpass
import hashlib
import hmac
import secrets
import sys
import unicodedata
from functools import cache

from hubd.errors import HubdError

# 8 MiB and ~20 ms on an x86 server core; a Raspberry Pi 4 is about 3-5x slower, so ~60-100 ms:
# slow enough to make guessing a leaked hash expensive, fast enough for a login page on a Pi.
# 2**14 measured 42 ms on the same core, i.e. ~125-210 ms on a Pi 4: over the ~100 ms budget.
# Hashes carry their parameters, so changing this never invalidates a configured hash.
SCRYPT_N = 2**13
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
PREFIX = "scrypt$"
# A hash in the config is trusted, but a typo must not make hubd allocate gigabytes.
_MAX_N = 2**20
_MAX_R = 32
_MAX_P = 16


class PasswordHashInvalid(HubdError):
    """A `scrypt$...` string that is not a hash hubd can check."""


def hash_password(password: str) -> str:
    """A new salted scrypt hash of `password` in hubd's format."""
    if not password:
        raise HubdError("the password is empty")
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P, HASH_BYTES)
    return f"{PREFIX}{SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def is_hash(stored: str) -> bool:
    """True when a configured password is a hash (not plain text)."""
    return stored.startswith(PREFIX)


def check_hash(stored: str) -> None:
    """Raise PasswordHashInvalid when `stored` looks like a hash but cannot be verified."""
    _parse(stored)


def verify_password(stored: str, candidate: str) -> bool:
    """Whether `candidate` matches `stored` (a hash, or plain text); runs scrypt for hashes only."""
    if not is_hash(stored):
        return hmac.compare_digest(_normal(stored).encode(), _normal(candidate).encode())
    n, r, p, salt, digest = _parse(stored)
    return hmac.compare_digest(_scrypt(candidate, salt, n, r, p, len(digest)), digest)


def password_ok_blocking(stored: str | None, candidate: str) -> bool:
    """Whether `candidate` is an account's password (`stored`: its configured hash or plain text; None: no such
    account), in one scrypt run whatever `stored` is: a plain-text or unknown account is checked against a dummy
    hash as well, so timing tells neither which usernames exist nor how their passwords are kept. Blocking."""
    if stored is not None and is_hash(stored):
        return verify_password(stored, candidate)
    verify_password(dummy_hash(), candidate)
    return stored is not None and verify_password(stored, candidate)


@cache
def dummy_hash() -> str:
    """The hash of a random password nobody knows, made once (blocking, one scrypt run: make it before the first
    sign-in, so that one takes no longer than the others)."""
    return hash_password(secrets.token_urlsafe(16))


def read_password() -> str:
    """Ask for a password twice without echo, or read one line from stdin when it is not a terminal."""
    if not sys.stdin.isatty():
        line = sys.stdin.readline().rstrip("\r\n")
        if not line:
            raise HubdError("no password on standard input")
        return line
    first = getpass.getpass("Password: ")
    if not first:
        raise HubdError("the password is empty")
    if getpass.getpass("Again: ") != first:
        raise HubdError("the two passwords differ")
    return first


def _parse(stored: str) -> tuple[int, int, int, bytes, bytes]:
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise PasswordHashInvalid("expected scrypt$<n>$<r>$<p>$<salt>$<hash>; make one with `hubd hash-password`")
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = _unb64(parts[4]), _unb64(parts[5])
    except (ValueError, binascii.Error) as err:
        raise PasswordHashInvalid(f"not a valid scrypt hash ({err}); make one with `hubd hash-password`") from err
    if n < 2 or n & (n - 1) or n > _MAX_N or not 1 <= r <= _MAX_R or not 1 <= p <= _MAX_P:
        raise PasswordHashInvalid(f"scrypt parameters n={n} r={r} p={p} are out of range")
    if len(salt) < 8 or len(digest) < 16:
        raise PasswordHashInvalid("the salt or the hash is too short")
    return n, r, p, salt, digest


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int, length: int) -> bytes:
    # maxmem: scrypt needs 128*r*n bytes (plus p lanes); OpenSSL's default cap is 32 MiB.
    maxmem = 128 * r * (n + p + 2) + 1024 * 1024
    return hashlib.scrypt(_normal(password).encode(), salt=salt, n=n, r=r, p=p, maxmem=maxmem, dklen=length)


def _normal(password: str) -> str:
    # A phone keyboard and a desktop may send the same accented password in different forms.
    return unicodedata.normalize("NFC", password)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
