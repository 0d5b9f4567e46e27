"""The webhook's SQL (0004_webhook.sql, 0005_webhook_counts.sql): tokens, call counts, commands and results.

A token is `whk_` and 43 URL-safe characters (256 random bits); only its SHA-256 hex is stored and
it is looked up by that hash, which leaks nothing about the token, then compared in constant time.
The hashes a webhook had before a rotation are kept, so an old URL is known as such.
Every function here runs in the database thread (`Database.call`) or from the CLI
(`Database.call_blocking`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hubd.untrusted.numbers import ascii_int
from hubd.webhook.trigger import Trigger

PREFIX = "whk_"
TOKEN_RE = re.compile(r"whk_[A-Za-z0-9_-]{43}")  # use fullmatch
DAY_S = 86400
KEEP_COMMANDS_S = 7 * DAY_S


def new_token() -> str:
    """A fresh webhook token."""
    return PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """What the database keeps of a token."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class WebhookInfo:
    """A webhook as `hubd webhook list` shows it: never the token."""

    id: int
    name: str
    default_action: dict[str, Any] | None
    created_at: float
    rotated_at: float | None
    revoked_at: float | None
    calls_last_day: int
    last_call_at: float | None


@dataclass(frozen=True, slots=True)
class LiveToken:
    """A token that may be used: its id, name, default action, and the hash it was found by."""

    id: int
    name: str
    token_hash: str
    default_action: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class RetiredToken:
    """A token that worked once: its webhook was revoked, or rotated to a new token."""

    id: int
    why: str  # "revoked" or "rotated"
    at: float


@dataclass(frozen=True, slots=True)
class Target:
    """One speaker a command selected."""

    endpoint_id: str
    sn: str
    status: str  # sent, offline, unsent, then done/error
    message: str | None = None


# --- the CLI side ---------------------------------------------------------------------------------

def create_blocking(conn: sqlite3.Connection, name: str, default_action: Trigger | None, now: float) -> tuple[int, str]:
    """Insert a webhook; return its id and the token (shown once, never stored)."""
    token = new_token()
    action = json.dumps(default_action.as_body()) if default_action else None
    with conn:
        cur = conn.execute("INSERT INTO webhook_tokens (name, token_hash, default_action, created_at)"
                           " VALUES (?, ?, ?, ?)", (name, digest(token), action, now))
    assert cur.lastrowid is not None  # an INSERT into a rowid table always sets it
    return cur.lastrowid, token


def list_blocking(conn: sqlite3.Connection, now: float) -> list[WebhookInfo]:
    """Every webhook, revoked ones too, with its use in the last 24 hours."""
    rows = conn.execute(
        "SELECT t.id, t.name, t.default_action, t.created_at, t.rotated_at, t.revoked_at,"
        " (SELECT coalesce(sum(calls), 0) FROM webhook_call_counts c WHERE c.token_id = t.id AND c.second + 1 > ?)"
        " AS calls,"
        " (SELECT max(second) FROM webhook_call_counts c WHERE c.token_id = t.id) AS last_call"
        " FROM webhook_tokens t ORDER BY t.id", (now - DAY_S,)).fetchall()
    return [WebhookInfo(r["id"], r["name"], json.loads(r["default_action"]) if r["default_action"] else None,
                        r["created_at"], r["rotated_at"], r["revoked_at"], r["calls"],
                        float(r["last_call"]) if r["last_call"] is not None else None)
            for r in rows]


@dataclass(frozen=True, slots=True)
class WebhookUse:
    """A live webhook's saved use, for the status page: never the token (its hash keys the in-memory counts)."""

    id: int
    name: str
    token_hash: str
    calls_last_minute: int
    calls_last_day: int
    last_call_at: float | None


def usage_blocking(conn: sqlite3.Connection, now: float) -> list[WebhookUse]:
    """Every live webhook with its saved calls in the last minute and the last 24 hours, by id."""
    rows = conn.execute(
        "SELECT t.id, t.name, t.token_hash,"
        " coalesce(sum(CASE WHEN c.second + 1 > ? THEN c.calls END), 0) AS minute,"
        " coalesce(sum(c.calls), 0) AS day, max(c.second) AS last_call"
        " FROM webhook_tokens t LEFT JOIN webhook_call_counts c ON c.token_id = t.id AND c.second + 1 > ?"
        " WHERE t.revoked_at IS NULL GROUP BY t.id ORDER BY t.id", (now - 60, now - DAY_S)).fetchall()
    return [WebhookUse(r["id"], r["name"], r["token_hash"], r["minute"], r["day"],
                       float(r["last_call"]) if r["last_call"] is not None else None) for r in rows]


def find_blocking(conn: sqlite3.Connection, ref: str) -> list[WebhookInfo]:
    """The webhook with this id; else the live webhooks with this name (none, one, or several)."""
    hooks = list_blocking(conn, 0.0)
    number = ascii_int(ref)
    if number is not None:
        by_id = [h for h in hooks if h.id == number]
        if by_id:
            return by_id
    return [h for h in hooks if h.name == ref and h.revoked_at is None]


def revoke_blocking(conn: sqlite3.Connection, webhook_id: int, now: float) -> bool:
    """Revoke; False if it was unknown or already revoked."""
    with conn:
        cur = conn.execute("UPDATE webhook_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                           (now, webhook_id))
    return cur.rowcount == 1


def rotate_blocking(conn: sqlite3.Connection, webhook_id: int, now: float) -> str | None:
    """A new token for a live webhook (the old one stops working at once); None if unknown or revoked.

    The old hash is kept, so the old URL is known as replaced. The counters start again: the calls
    that made someone rotate were most likely not theirs.
    """
    token = new_token()
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT token_hash FROM webhook_tokens WHERE id = ? AND revoked_at IS NULL",
                           (webhook_id,)).fetchone()
        if row is None:
            return None
        conn.execute("INSERT OR REPLACE INTO webhook_retired_hashes (token_hash, token_id, retired_at)"
                     " VALUES (?, ?, ?)", (row["token_hash"], webhook_id, now))
        conn.execute("UPDATE webhook_tokens SET token_hash = ?, rotated_at = ? WHERE id = ?",
                     (digest(token), now, webhook_id))
        conn.execute("DELETE FROM webhook_call_counts WHERE token_id = ?", (webhook_id,))
    return token


# --- the daemon side ------------------------------------------------------------------------------

def lookup_blocking(conn: sqlite3.Connection, token: str) -> LiveToken | RetiredToken | None:
    """The live webhook this token belongs to; or what became of the webhook it used to open; or None."""
    wanted = digest(token)
    row = conn.execute("SELECT id, name, token_hash, default_action, revoked_at FROM webhook_tokens"
                       " WHERE token_hash = ?", (wanted,)).fetchone()
    if row is not None and hmac.compare_digest(row["token_hash"], wanted):
        if row["revoked_at"] is not None:
            return RetiredToken(row["id"], "revoked", row["revoked_at"])
        return LiveToken(row["id"], row["name"], row["token_hash"],
                         json.loads(row["default_action"]) if row["default_action"] else None)
    old = conn.execute("SELECT r.token_hash, r.token_id, r.retired_at, t.revoked_at FROM webhook_retired_hashes r"
                       " JOIN webhook_tokens t ON t.id = r.token_id WHERE r.token_hash = ?", (wanted,)).fetchone()
    if old is None or not hmac.compare_digest(old["token_hash"], wanted):
        return None
    if old["revoked_at"] is not None:
        return RetiredToken(old["token_id"], "revoked", old["revoked_at"])
    return RetiredToken(old["token_id"], "rotated", old["retired_at"])


def hashes_blocking(conn: sqlite3.Connection) -> frozenset[str]:
    """Every token hash a lookup can find: live, revoked and rotated-out tokens."""
    rows = conn.execute("SELECT token_hash FROM webhook_tokens UNION ALL SELECT token_hash FROM webhook_retired_hashes")
    return frozenset(row[0] for row in rows)


def recent_counts_blocking(conn: sqlite3.Connection, token_id: int, now: float) -> list[tuple[int, int]]:
    """This token's calls of the last 24 hours as (second, count), oldest first."""
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT second, calls FROM webhook_call_counts WHERE token_id = ? AND second + 1 > ? ORDER BY second",
        (token_id, now - DAY_S))]


def save_counts_blocking(conn: sqlite3.Connection, counts: Sequence[tuple[int, str, int, int]]) -> None:
    """Add (token id, token hash, second, calls) to the saved counts: one transaction.

    Counts of a token that was rotated meanwhile are dropped: the new token starts afresh.
    """
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO webhook_call_counts (token_id, second, calls)"
            " SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM webhook_tokens WHERE id = ? AND token_hash = ?)"
            " ON CONFLICT (token_id, second) DO UPDATE SET calls = calls + excluded.calls",
            [(token_id, second, calls, token_id, token_hash) for token_id, token_hash, second, calls in counts])


def record_command_blocking(conn: sqlite3.Connection, token_id: int, now: float, command_id: str, trigger: Trigger,
                            targets: Sequence[Target]) -> None:
    """A command and its targets: one transaction."""
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO webhook_commands (id, token_id, type, body, created_at) VALUES (?, ?, ?, ?, ?)",
                     (command_id, token_id, trigger.type, json.dumps(trigger.as_body()), now))
        conn.executemany(
            "INSERT INTO webhook_command_targets (command_id, endpoint_id, sn, status, message, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [(command_id, t.endpoint_id, t.sn, t.status, t.message, now) for t in targets])


def mark_unsent_blocking(conn: sqlite3.Connection, command_id: str, endpoint_ids: Sequence[str], why: str,
                         now: float) -> None:
    """Speakers the command could not be published to."""
    with conn:
        conn.executemany("UPDATE webhook_command_targets SET status = 'unsent', message = ?, updated_at = ?"
                         " WHERE command_id = ? AND endpoint_id = ?",
                         [(why, now, command_id, e) for e in endpoint_ids])


Result = tuple[str, str, str, str | None, float]  # endpoint, command id, status, message, time


def record_results_blocking(conn: sqlite3.Connection, results: Sequence[Result]) -> int:
    """Store speakers' answers (endpoint, command id, status, message, time); runs inside the caller's transaction.

    Only a command sent to that very speaker is updated; anything else is ignored. Returns how many matched.
    """
    matched = 0
    for endpoint_id, command_id, status, message, at in results:
        cur = conn.execute("UPDATE webhook_command_targets SET status = ?, message = ?, updated_at = ?"
                           " WHERE command_id = ? AND endpoint_id = ? AND status != 'offline'",
                           (status, message, at, command_id, endpoint_id))
        matched += cur.rowcount
    return matched


def command_blocking(conn: sqlite3.Connection, command_id: str) -> dict[str, Any] | None:
    """A command and what became of it, for `GET /api/commands/<id>`."""
    row = conn.execute("SELECT c.id, c.type, c.body, c.created_at, t.name FROM webhook_commands c"
                       " LEFT JOIN webhook_tokens t ON t.id = c.token_id WHERE c.id = ?", (command_id,)).fetchone()
    if row is None:
        return None
    targets = conn.execute("SELECT endpoint_id, sn, status, message, updated_at FROM webhook_command_targets"
                           " WHERE command_id = ? ORDER BY endpoint_id", (command_id,)).fetchall()
    body = json.loads(row["body"])
    return {
        "id": row["id"], "type": row["type"], "webhook": row["name"], "createdAt": row["created_at"],
        "devices": body["devices"], "data": body["data"],
        "targets": [{"endpointId": t["endpoint_id"], "sn": t["sn"], "status": t["status"], "message": t["message"],
                     "updatedAt": t["updated_at"]} for t in targets],
    }


def prune_blocking(conn: sqlite3.Connection, now: float) -> None:
    """Forget call counts older than a day and commands older than a week."""
    with conn:
        conn.execute("DELETE FROM webhook_call_counts WHERE second + 1 <= ?", (now - DAY_S,))
        conn.execute("DELETE FROM webhook_commands WHERE created_at <= ?", (now - KEEP_COMMANDS_S,))
