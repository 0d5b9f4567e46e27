"""DirectiveReplyRepo: the first reply to each control directive that reached a device (table
`directive_replies`), so a resend after a restart gets it again instead of running twice (PROTOCOL.md 5.4).

A row is claimed before the `set` is published; a try that never published is released by its attempt id,
so a late release cannot remove the row of a later try.
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
    """A remembered reply; `done` is False while it holds the target states written before the publish."""

    reply: dict[str, Any]
    done: bool


class DirectiveReplyRepo:
    """Reads and writes remembered directive replies."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def claim(self, key: ReplyKey, attempt: str, reply: dict[str, Any], now: float, *,
                    replace: bool = False) -> StoredReply | None:
        """Write `reply` (unfinished) for `key` and return None; or return the row already there.

        With `replace`, an existing row is overwritten: its try is known never to have published.
        """
        return await self._db.call(_claim_blocking, key, attempt, json.dumps(reply, separators=(",", ":")), now,
                                    replace)

    async def find(self, key: ReplyKey) -> StoredReply | None:
        """The remembered reply, if any."""
        def q(c: sqlite3.Connection) -> StoredReply | None:
            row = c.execute("SELECT reply, done FROM directive_replies WHERE user_id = ? AND message_id = ? AND "
                            "fingerprint = ?", (key.user_id, key.message_id, key.fingerprint)).fetchone()
            return None if row is None else StoredReply(json.loads(row[0]), bool(row[1]))
        return await self._db.call(q)

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


def _claim_blocking(conn: sqlite3.Connection, key: ReplyKey, attempt: str, reply: str, now: float,
                    replace: bool) -> StoredReply | None:
    args = (key.user_id, key.message_id, key.fingerprint, attempt, reply, now)
    if not replace:
        # One statement, so it is atomic without a transaction: either this try wrote the row or one had.
        inserted = conn.execute(
            "INSERT INTO directive_replies (user_id, message_id, fingerprint, attempt, reply, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING attempt", args).fetchall()
        if inserted:
            return None
        found = conn.execute("SELECT reply, done FROM directive_replies WHERE user_id = ? AND message_id = ? AND "
                             "fingerprint = ?", (key.user_id, key.message_id, key.fingerprint)).fetchone()
        if found is not None:
            return StoredReply(json.loads(found[0]), bool(found[1]))
    conn.execute("INSERT OR REPLACE INTO directive_replies (user_id, message_id, fingerprint, attempt, reply, "
                 "created_at) VALUES (?, ?, ?, ?, ?, ?)", args)
    return None
