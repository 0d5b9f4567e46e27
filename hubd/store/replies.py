"""DirectiveReplyRepo: the first reply to each control directive that reached a device (table
`directive_replies`), so a resend after a restart gets it again instead of running twice.

A row is claimed before the `set` is published; a try that never published is released by its attempt id,
so a late release cannot remove the row of a later try. A claim overwrites a row only when the caller names
its attempt as one of its own that never published; any other row (say, from before a restart) is the answer.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from hubd.store.db import Database


@dataclass(frozen=True, slots=True)
class ReplyKey:
    """What makes a directive a resend: the same account, messageId and content."""

    user_id: str
    message_id: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class StoredReply:
    """A remembered reply; `done` is False while it holds the target states written before the publish;
    `attempt` is the try that wrote it."""

    reply: dict[str, Any]
    done: bool
    attempt: str


class DirectiveReplyRepo:
    """Reads and writes remembered directive replies."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def writable(self) -> None:
        """Return once the database takes writes again (at once if it does)."""
        await self._db.writable()

    async def claim(self, key: ReplyKey, attempt: str, reply: dict[str, Any], now: float, *,
                    replaceable: frozenset[str]) -> StoredReply | None:
        """Write `reply` (unfinished) for `key` and return None; or return the row already there.

        A row written by one of the `replaceable` attempts (tries of this process that never published) is
        overwritten instead; a row of any other attempt is returned, never touched.
        """
        return await self._db.call(_claim_blocking, key, attempt, json.dumps(reply, separators=(",", ":")), now,
                                    replaceable)

    async def find(self, key: ReplyKey) -> StoredReply | None:
        """The remembered reply, if any."""
        return await self._db.call(_find_blocking, key)

    async def finish(self, key: ReplyKey, attempt: str, reply: dict[str, Any]) -> None:
        """Replace the claimed row's reply with the one that went out."""
        await self._db.call(lambda c: c.execute(
            "UPDATE directive_replies SET reply = ?, done = 1 WHERE user_id = ? AND message_id = ? AND "
            "fingerprint = ? AND attempt = ?",
            (json.dumps(reply, separators=(",", ":")), key.user_id, key.message_id, key.fingerprint, attempt)))

    async def release(self, key: ReplyKey, attempt: str) -> None:
        """Remove the row of a try that never published (not one a later try wrote)."""
        await self._db.call(lambda c: c.execute(
            "DELETE FROM directive_replies WHERE user_id = ? AND message_id = ? AND fingerprint = ? AND attempt = ?",
            (key.user_id, key.message_id, key.fingerprint, attempt)))

    async def prune(self, before: float) -> int:
        """Remove rows created before `before` (epoch seconds); how many."""
        return await self._db.call(lambda c: c.execute(
            "DELETE FROM directive_replies WHERE created_at < ?", (before,)).rowcount)


def _find_blocking(conn: sqlite3.Connection, key: ReplyKey) -> StoredReply | None:
    row = conn.execute("SELECT reply, done, attempt FROM directive_replies WHERE user_id = ? AND message_id = ? AND "
                       "fingerprint = ?", (key.user_id, key.message_id, key.fingerprint)).fetchone()
    return None if row is None else StoredReply(json.loads(row[0]), bool(row[1]), str(row[2]))


def _claim_blocking(conn: sqlite3.Connection, key: ReplyKey, attempt: str, reply: str, now: float,
                    replaceable: frozenset[str]) -> StoredReply | None:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        inserted = conn.execute(
            "INSERT INTO directive_replies (user_id, message_id, fingerprint, attempt, reply, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING attempt",
            (key.user_id, key.message_id, key.fingerprint, attempt, reply, now)).fetchall()
        if inserted:
            return None
        found = _find_blocking(conn, key)
        assert found is not None  # the INSERT just met it, in this transaction
        if found.attempt not in replaceable:
            return found
        conn.execute("UPDATE directive_replies SET attempt = ?, reply = ?, done = 0, created_at = ? WHERE "
                     "user_id = ? AND message_id = ? AND fingerprint = ? AND attempt = ?",
                     (attempt, reply, now, key.user_id, key.message_id, key.fingerprint, found.attempt))
        return None
