"""DriverRepo: the SQL for login grants, authorization codes and issued token pairs (0003_driver.sql).

Owns how codes and tokens are made, hashed, rotated, revoked and pruned. Only SHA-256 hex of a
code or token is stored; a secret is looked up by its hash, which leaks nothing about it. Imports
hubd.store, hubd.errors, hubd.usertoken and hubd.driver.seal only; never logs a secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hubd.driver.seal import SealBroken, seal, unseal
from hubd.errors import DriverError
from hubd.store.db import Database
from hubd.usertoken import TokenCheck, TokenStatus

CODE_TTL_S = 600
# How long a rotated-out refresh token still answers with the pair that replaced it, so a refresh
# whose response was lost can be retried; the old userToken dies at the same moment.
GRACE_S = 120
# Used codes and dead pairs are kept this long, so a replay is recognised rather than "unknown".
KEEP_DEAD_S = 86400
# A rotated-out pair is kept this long to detect refresh token reuse; the platform refreshes about
# hourly, so this bounds the table to ~170 rows per linked account.
KEEP_ROTATED_S = 7 * 86400
KEEP_REVOKED_S = 30 * 86400
INVALID = "E_INVALID_AUTHORIZATION"
_META_KEY = "driver_csrf_key"


@dataclass(frozen=True, slots=True)
class IssuedPair:
    """A userToken/refreshToken pair as handed out once (the platform's UserAuth object)."""

    user_id: str
    user_token: str
    refresh_token: str
    expires_in: int

    def user_auth(self) -> dict[str, Any]:
        """The UserAuth object; refreshToken always a string."""
        return {"userId": self.user_id, "userToken": self.user_token, "expiresIn": self.expires_in,
                "refreshToken": self.refresh_token}


@dataclass(frozen=True, slots=True)
class GrantInfo:
    """One grant as `hubd tokens list` shows it: no secret in here."""

    grant_id: int
    username: str
    created_at: float
    refreshed_at: float | None
    user_expires_at: float | None
    refresh_expires_at: float | None
    revoked_at: float | None
    revoked_why: str | None

    def state(self, now: float) -> str:
        """active, refresh-due, expired or revoked."""
        if self.revoked_at is not None:
            return "revoked"
        if self.refresh_expires_at is None or now >= self.refresh_expires_at:
            return "expired"
        if self.user_expires_at is None or now >= self.user_expires_at:
            return "refresh-due"
        return "active"


@dataclass(frozen=True, slots=True)
class _Rejected:
    message: str
    revoked_grant: int | None = None


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """How long issued tokens live."""

    user_s: int
    refresh_s: int


class DriverRepo:
    """Codes, grants and token pairs in SQLite; every method is one transaction in the DB thread."""

    def __init__(self, db: Database, lifetimes: Lifetimes, known_users: frozenset[str]) -> None:
        self._db = db
        self._lifetimes = lifetimes
        self._known = known_users

    async def server_secret(self) -> bytes:
        """The random key of this hub's CSRF tokens; created on first use."""
        return await self._db.call(_server_secret_blocking)

    async def issue_code(self, username: str, callback_url: str, now: float) -> str:
        """A new single-use code for `username`, bound to `callback_url`."""
        return await self._db.call(_issue_code_blocking, username, callback_url, now)

    async def issue_grant(self, username: str, now: float) -> IssuedPair:
        """A new grant with its first pair (OAuth v1 mode: tokens straight from the login)."""
        return await self._db.call(_issue_grant_blocking, username, now, self._lifetimes)

    async def exchange_code(self, code: str, callback_url: str | None, now: float) -> IssuedPair:
        """Trade a code for a new grant's first pair; DriverError(E_INVALID_AUTHORIZATION), or CodeReused."""
        result = await self._db.call(_exchange_blocking, code, callback_url, now, self._lifetimes, self._known)
        if isinstance(result, _Rejected) and result.revoked_grant is not None:
            raise CodeReused(result.message, result.revoked_grant)
        return _unwrap(result)

    async def refresh(self, refresh_token: str, user_id: str | None, now: float) -> IssuedPair:
        """Rotate a pair (or repeat the rotation within GRACE_S); DriverError, or RefreshReused on reuse."""
        result = await self._db.call(_refresh_blocking, refresh_token, user_id, now, self._lifetimes, self._known)
        if isinstance(result, _Rejected) and result.revoked_grant is not None:
            raise RefreshReused(result.message, result.revoked_grant)
        return _unwrap(result)

    async def check_user_token(self, token: str, now: float) -> TokenCheck:
        """VALID, EXPIRED or UNKNOWN (also for revoked tokens and removed accounts)."""
        return await self._db.call(_check_blocking, token, now, self._known)


class CodeReused(DriverError):
    """A code that was already exchanged came back: the grant it was exchanged for was revoked."""

    def __init__(self, message: str, grant_id: int) -> None:
        super().__init__(INVALID, message)
        self.grant_id = grant_id


class RefreshReused(DriverError):
    """A rotated-out refresh token came back after the grace period: its grant was revoked."""

    def __init__(self, message: str, grant_id: int) -> None:
        super().__init__(INVALID, message)
        self.grant_id = grant_id


def list_grants_blocking(conn: sqlite3.Connection) -> list[GrantInfo]:
    """Every grant with its current pair's times, oldest first."""
    rows = conn.execute(
        "SELECT g.id, g.username, g.created_at, g.revoked_at, g.revoked_why, t.created_at AS refreshed_at,"
        " t.user_expires_at, t.refresh_expires_at FROM driver_grants g"
        " LEFT JOIN driver_tokens t ON t.grant_id = g.id AND t.rotated_at IS NULL ORDER BY g.id"
    ).fetchall()
    return [GrantInfo(grant_id=r["id"], username=r["username"], created_at=r["created_at"],
                      refreshed_at=r["refreshed_at"], user_expires_at=r["user_expires_at"],
                      refresh_expires_at=r["refresh_expires_at"], revoked_at=r["revoked_at"],
                      revoked_why=r["revoked_why"]) for r in rows]


def revoke_user_blocking(conn: sqlite3.Connection, username: str, now: float, why: str) -> int:
    """Revoke every live grant of `username` and burn its unused codes; the number of grants revoked."""
    with _transaction(conn):
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM driver_grants WHERE username = ? AND revoked_at IS NULL", (username,))]
        for grant_id in ids:
            _revoke_grant(conn, grant_id, now, why)
        conn.execute("UPDATE driver_codes SET used_at = ? WHERE username = ? AND used_at IS NULL", (now, username))
    return len(ids)


def digest(secret: str) -> str:
    """The stored form of a code or token (a lone surrogate, which JSON can carry, hashes to what nothing matches)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret() -> str:
    """A fresh code or token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def _unwrap(result: IssuedPair | _Rejected) -> IssuedPair:
    if isinstance(result, _Rejected):
        raise DriverError(INVALID, result.message)
    return result


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE: `hubd tokens revoke` may write from another process while the daemon runs.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _server_secret_blocking(conn: sqlite3.Connection) -> bytes:
    fresh = base64.b64encode(secrets.token_bytes(32)).decode()
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", (_META_KEY, fresh))
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_META_KEY,)).fetchone()
    return base64.b64decode(row[0])


def _issue_code_blocking(conn: sqlite3.Connection, username: str, callback_url: str, now: float) -> str:
    code = new_secret()
    with _transaction(conn):
        _prune(conn, now)
        conn.execute(
            "INSERT INTO driver_codes (code_hash, username, callback_url, created_at, expires_at)"
            " VALUES (?, ?, ?, ?, ?)", (digest(code), username, callback_url, now, now + CODE_TTL_S))
    return code


def _issue_grant_blocking(conn: sqlite3.Connection, username: str, now: float, life: Lifetimes) -> IssuedPair:
    with _transaction(conn):
        _prune(conn, now)
        grant_id = _new_grant(conn, username, now)
        return _new_pair(conn, grant_id, username, now, life)[1]


def _exchange_blocking(
    conn: sqlite3.Connection, code: str, callback_url: str | None, now: float, life: Lifetimes,
    known: frozenset[str],
) -> IssuedPair | _Rejected:
    with _transaction(conn):
        row = conn.execute(
            "SELECT code_hash, username, callback_url, expires_at, used_at, grant_id FROM driver_codes"
            " WHERE code_hash = ?", (digest(code),)).fetchone()
        if row is None:
            return _Rejected("unknown code: this hub never issued it (or it is more than a day old); "
                             "start the login again with OAuth")
        if row["used_at"] is not None:
            # RFC 6749 4.1.2: a code used twice revokes what it was exchanged for.
            if row["grant_id"] is not None:
                _revoke_grant(conn, row["grant_id"], now, "authorization code used twice")
            return _Rejected("this code was already used; codes are single use (the tokens issued for it are "
                             "now revoked); start the login again with OAuth", revoked_grant=row["grant_id"])
        conn.execute("UPDATE driver_codes SET used_at = ? WHERE code_hash = ?", (now, row["code_hash"]))
        if now >= row["expires_at"]:
            return _Rejected(f"this code expired (codes live {CODE_TTL_S // 60} minutes); "
                             "start the login again with OAuth")
        if callback_url is not None and callback_url != row["callback_url"]:
            return _Rejected("this code was issued for another callbackURL; it is now void; "
                             "start the login again with OAuth")
        if row["username"] not in known:
            return _Rejected(f"the account {row['username']!r} is no longer in driver.accounts")
        grant_id = _new_grant(conn, row["username"], now)
        conn.execute("UPDATE driver_codes SET grant_id = ? WHERE code_hash = ?", (grant_id, row["code_hash"]))
        return _new_pair(conn, grant_id, row["username"], now, life)[1]


def _refresh_blocking(
    conn: sqlite3.Connection, token: str, user_id: str | None, now: float, life: Lifetimes,
    known: frozenset[str],
) -> IssuedPair | _Rejected:
    with _transaction(conn):
        row = conn.execute(
            "SELECT t.id, t.grant_id, t.user_expires_at, t.refresh_expires_at, t.rotated_at, t.successor_id,"
            " t.sealed_successor, g.username, g.revoked_at FROM driver_tokens t"
            " JOIN driver_grants g ON g.id = t.grant_id WHERE t.refresh_hash = ?", (digest(token),)).fetchone()
        if row is None or row["revoked_at"] is not None:
            return _Rejected("unknown refreshToken: this hub never issued it, or it was revoked or expired; "
                             "link the account again")
        username: str = row["username"]
        if user_id is not None and user_id != username:
            return _Rejected("userId does not match the account this refreshToken belongs to")
        if username not in known:
            return _Rejected(f"the account {username!r} is no longer in driver.accounts")
        if now >= row["refresh_expires_at"]:
            return _Rejected("this refreshToken expired; link the account again")
        if row["rotated_at"] is None:
            _prune(conn, now)
            successor_id, pair = _new_pair(conn, row["grant_id"], username, now, life)
            sealed = seal(token, json.dumps([pair.user_token, pair.refresh_token]).encode())
            conn.execute(
                "UPDATE driver_tokens SET rotated_at = ?, successor_id = ?, sealed_successor = ?,"
                " user_expires_at = MIN(user_expires_at, ?) WHERE id = ?",
                (now, successor_id, sealed, now + GRACE_S, row["id"]))
            return pair
        if now - row["rotated_at"] <= GRACE_S and row["sealed_successor"] is not None:
            successor = conn.execute(
                "SELECT user_expires_at, rotated_at FROM driver_tokens WHERE id = ?",
                (row["successor_id"],)).fetchone()
            if successor is not None and successor["rotated_at"] is None:
                try:
                    user_token, refresh_token = json.loads(unseal(token, row["sealed_successor"]))
                except SealBroken:
                    return _Rejected("the stored refresh state is damaged; link the account again")
                expires_in = max(0, math.ceil(successor["user_expires_at"] - now))
                return IssuedPair(username, user_token, refresh_token, expires_in)
        _revoke_grant(conn, row["grant_id"], now, "rotated-out refresh token used again")
        return _Rejected(f"this refreshToken was already exchanged for a new pair (more than {GRACE_S} s ago, or "
                         "that pair was refreshed too); as a precaution every token of this link is now revoked; "
                         "link the account again", revoked_grant=row["grant_id"])


def _check_blocking(conn: sqlite3.Connection, token: str, now: float, known: frozenset[str]) -> TokenCheck:
    row = conn.execute(
        "SELECT t.user_expires_at, g.username, g.revoked_at FROM driver_tokens t"
        " JOIN driver_grants g ON g.id = t.grant_id WHERE t.user_hash = ?", (digest(token),)).fetchone()
    if row is None or row["revoked_at"] is not None or row["username"] not in known:
        return TokenCheck(TokenStatus.UNKNOWN, None)
    expires_at = float(row["user_expires_at"])
    if now >= expires_at:
        return TokenCheck(TokenStatus.EXPIRED, row["username"], expires_at)
    return TokenCheck(TokenStatus.VALID, row["username"], expires_at)


def _new_grant(conn: sqlite3.Connection, username: str, now: float) -> int:
    cursor = conn.execute("INSERT INTO driver_grants (username, created_at) VALUES (?, ?)", (username, now))
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _new_pair(
    conn: sqlite3.Connection, grant_id: int, username: str, now: float, life: Lifetimes
) -> tuple[int, IssuedPair]:
    user_token, refresh_token = new_secret(), new_secret()
    cursor = conn.execute(
        "INSERT INTO driver_tokens (grant_id, user_hash, refresh_hash, created_at, user_expires_at,"
        " refresh_expires_at) VALUES (?, ?, ?, ?, ?, ?)",
        (grant_id, digest(user_token), digest(refresh_token), now, now + life.user_s, now + life.refresh_s))
    assert cursor.lastrowid is not None
    return cursor.lastrowid, IssuedPair(username, user_token, refresh_token, life.user_s)


def _revoke_grant(conn: sqlite3.Connection, grant_id: int, now: float, why: str) -> None:
    conn.execute("UPDATE driver_grants SET revoked_at = ?, revoked_why = ? WHERE id = ? AND revoked_at IS NULL",
                 (now, why, grant_id))
    conn.execute("DELETE FROM driver_tokens WHERE grant_id = ?", (grant_id,))


def _prune(conn: sqlite3.Connection, now: float) -> None:
    conn.execute("DELETE FROM driver_codes WHERE expires_at < ?", (now - KEEP_DEAD_S,))
    conn.execute("DELETE FROM driver_tokens WHERE refresh_expires_at < ? OR rotated_at < ?",
                 (now - KEEP_DEAD_S, now - KEEP_ROTATED_S))
    conn.execute("UPDATE driver_tokens SET sealed_successor = NULL"
                 " WHERE sealed_successor IS NOT NULL AND rotated_at < ?", (now - GRACE_S,))
    conn.execute(
        "DELETE FROM driver_grants WHERE (revoked_at IS NOT NULL AND revoked_at < ?) OR (revoked_at IS NULL"
        " AND created_at < ? AND NOT EXISTS (SELECT 1 FROM driver_tokens t WHERE t.grant_id = driver_grants.id))",
        (now - KEEP_REVOKED_S, now - KEEP_DEAD_S))
