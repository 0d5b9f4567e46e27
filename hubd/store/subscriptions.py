"""The mqtt_subscriptions table: the topic filters hubd's persistent MQTT session is subscribed to.

A broker keeps a persistent session's subscriptions across hubd's restarts, and MQTT 3.1.1 gives no way to ask it
for them. So the bridge keeps here what it subscribed to; when it reconnects to a session the broker kept, it
unsubscribes those no dialect needs any more (the topics of devices deleted while hubd was down, a dialect turned
off), so the broker stops delivering dead topics and holding their subscriptions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from hubd.store.db import Database


def _load_blocking(conn: sqlite3.Connection) -> set[str]:
    return {str(row[0]) for row in conn.execute("SELECT filter FROM mqtt_subscriptions")}


def _save_blocking(conn: sqlite3.Connection, added: list[str], removed: list[str]) -> None:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("DELETE FROM mqtt_subscriptions WHERE filter = ?", [(f,) for f in removed])
        conn.executemany("INSERT OR IGNORE INTO mqtt_subscriptions (filter) VALUES (?)", [(f,) for f in added])


class SubscriptionBook:
    """What the session is subscribed to, kept in SQLite."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def load(self) -> set[str]:
        """The filters kept from the last sessions."""
        return await self._db.call(_load_blocking)

    async def change(self, added: Iterable[str], removed: Iterable[str]) -> None:
        """Note filters subscribed to and unsubscribed from."""
        add, remove = sorted(set(added)), sorted(set(removed))
        if add or remove:
            await self._db.call(_save_blocking, add, remove)
