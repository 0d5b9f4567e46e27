"""The `admin_tokens` table (0011_owner.sql): the owner's tokens for the devices API (`Authorization: Bearer`).

A token is `hadm_` and 43 URL-safe characters (256 random bits), shown once by `hubd admin-token create`; only its
SHA-256 hex is stored, a token is looked up by that hash (which tells nothing of the token) and then compared in
constant time. Revoked tokens stay listed. Every function runs in the database thread (`Database.call`) or from
the CLI (`Database.call_blocking`); `AdminTokens` is the daemon's lookup.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
from dataclasses import dataclass

from hubd.store.db import Database

PREFIX = "hadm_"
MAX_TOKEN_CHARS = 128  # a longer Authorization value is no token of ours: refused before it is hashed


@dataclass(frozen=True, slots=True)
class AdminToken:
    """A token as `hubd admin-token list` shows it: never the token itself."""

    id: int
    name: str
    created_at: float
    revoked_at: float | None


def new_token() -> str:
    """A fresh admin token."""
    return PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """What the database keeps of a token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def create_blocking(conn: sqlite3.Connection, name: str, now: float) -> tuple[int, str]:
    """Insert a token; its id and the token (shown once, never stored)."""
    token = new_token()
    with conn:
        cur = conn.execute("INSERT INTO admin_tokens (name, token_hash, created_at) VALUES (?, ?, ?)",
                           (name, digest(token), now))
    assert cur.lastrowid is not None  # an INSERT into a rowid table always sets it
    return cur.lastrowid, token


def list_blocking(conn: sqlite3.Connection) -> list[AdminToken]:
    """Every token, revoked ones too, by id."""
    return [AdminToken(int(r[0]), str(r[1]), float(r[2]), None if r[3] is None else float(r[3])) for r in
            conn.execute("SELECT id, name, created_at, revoked_at FROM admin_tokens ORDER BY id")]


def revoke_blocking(conn: sqlite3.Connection, token_id: int, now: float) -> bool:
    """Revoke a live token; False when it is unknown or revoked already."""
    with conn:
        cur = conn.execute("UPDATE admin_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                           (now, token_id))
    return cur.rowcount == 1


def lookup_blocking(conn: sqlite3.Connection, token: str) -> AdminToken | None:
    """The live token this is, or None (unknown, or revoked)."""
    if not token.startswith(PREFIX) or len(token) > MAX_TOKEN_CHARS:
        return None
    wanted = digest(token)
    row = conn.execute("SELECT id, name, created_at, revoked_at, token_hash FROM admin_tokens WHERE token_hash = ?",
                       (wanted,)).fetchone()
    if row is None or not hmac.compare_digest(str(row[4]), wanted) or row[3] is not None:
        return None
    return AdminToken(int(row[0]), str(row[1]), float(row[2]), None)


class AdminTokens:
    """The daemon's side: which live token a request's Bearer is."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def name_of(self, token: str) -> str | None:
        """The live token's name, or None (unknown or revoked)."""
        found = await self._db.call(lookup_blocking, token)
        return None if found is None else found.name
