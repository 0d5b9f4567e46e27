"""The webhook's SQL on a real SQLite file: call counts, rotated-out tokens, finding a webhook."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from hubd.store.db import Database, _split_sql, migrations
from hubd.webhook import store
from hubd.webhook.limits import CallLimiter
from hubd.webhook.service import prune, save_counts
from hubd.webhook.trigger import parse

NOW = 1_700_000_000.0


def open_db(tmp_path: Path) -> sqlite3.Connection:
    """A migrated database, as hubd opens it."""
    db = Database(tmp_path / "hubd.db")
    db.call_blocking(lambda conn: None)
    conn = sqlite3.connect(tmp_path / "hubd.db", isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def test_migration_0005_turns_the_calls_of_0004_into_per_second_counts(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for version, _, sql in migrations()[:4]:
        for statement in _split_sql(sql):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={version}")
    conn.execute("INSERT INTO webhook_tokens (id, name, token_hash, created_at) VALUES (1, 'a', 'h1', 0)")
    conn.executemany("INSERT INTO webhook_calls (token_id, at) VALUES (1, ?)", [(NOW,), (NOW + 0.5,), (NOW + 3.2,)])
    conn.close()

    Database(path).call_blocking(lambda conn: None)  # applies 0005 (and whatever comes after it)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT token_id, second, calls FROM webhook_call_counts ORDER BY second").fetchall() == [
        (1, int(NOW), 2), (1, int(NOW) + 3, 1)]
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'webhook_calls'").fetchone() == (0,)


def test_counts_add_up_and_a_rotated_token_starts_afresh(tmp_path: Path) -> None:
    conn = open_db(tmp_path)
    webhook_id, token = store.create_blocking(conn, "kitchen", None, NOW)
    old_hash = store.digest(token)
    store.save_counts_blocking(conn, [(webhook_id, old_hash, int(NOW), 3), (webhook_id, old_hash, int(NOW) + 1, 1)])
    store.save_counts_blocking(conn, [(webhook_id, old_hash, int(NOW), 2)])
    assert store.recent_counts_blocking(conn, webhook_id, NOW + 2) == [(int(NOW), 5), (int(NOW) + 1, 1)]
    assert store.list_blocking(conn, NOW + 2)[0].calls_last_day == 6
    assert store.list_blocking(conn, NOW + 2)[0].last_call_at == int(NOW) + 1

    new_token = store.rotate_blocking(conn, webhook_id, NOW + 10)
    assert new_token is not None
    assert store.recent_counts_blocking(conn, webhook_id, NOW + 10) == []
    # Counts of the old token that were not saved before the rotation do not land on the new one.
    store.save_counts_blocking(conn, [(webhook_id, old_hash, int(NOW) + 9, 4)])
    assert store.recent_counts_blocking(conn, webhook_id, NOW + 10) == []
    store.save_counts_blocking(conn, [(webhook_id, store.digest(new_token), int(NOW) + 11, 1)])
    assert store.recent_counts_blocking(conn, webhook_id, NOW + 12) == [(int(NOW) + 11, 1)]
    # A day later they are gone.
    assert store.recent_counts_blocking(conn, webhook_id, NOW + 11 + 86400) == [(int(NOW) + 11, 1)]
    assert store.recent_counts_blocking(conn, webhook_id, NOW + 12 + 86400) == []
    store.prune_blocking(conn, NOW + 12 + 86400)
    assert conn.execute("SELECT count(*) FROM webhook_call_counts").fetchone()[0] == 0


def test_old_tokens_are_known_as_rotated_or_revoked(tmp_path: Path) -> None:
    conn = open_db(tmp_path)
    action = parse({"type": "tts", "devices": {"isAll": True}, "data": {"text": "hi"}})
    webhook_id, first = store.create_blocking(conn, "door", action, NOW)
    live = store.lookup_blocking(conn, first)
    assert isinstance(live, store.LiveToken)
    assert (live.id, live.name, live.default_action) == (webhook_id, "door", action.as_body())

    second = store.rotate_blocking(conn, webhook_id, NOW + 5)
    assert second is not None
    assert store.lookup_blocking(conn, first) == store.RetiredToken(webhook_id, "rotated", NOW + 5)
    assert isinstance(store.lookup_blocking(conn, second), store.LiveToken)
    assert store.lookup_blocking(conn, "whk_" + "x" * 43) is None

    assert store.revoke_blocking(conn, webhook_id, NOW + 9)
    assert store.lookup_blocking(conn, second) == store.RetiredToken(webhook_id, "revoked", NOW + 9)
    assert store.lookup_blocking(conn, first) == store.RetiredToken(webhook_id, "revoked", NOW + 9)
    # The database holds hashes only.
    raw = (tmp_path / "hubd.db").read_bytes() + (tmp_path / "hubd.db-wal").read_bytes()
    assert first.encode() not in raw
    assert second.encode() not in raw


def test_find_by_id_or_by_name(tmp_path: Path) -> None:
    conn = open_db(tmp_path)
    first, _ = store.create_blocking(conn, "webhook", None, NOW)
    second, _ = store.create_blocking(conn, "webhook", None, NOW)
    legacy, _ = store.create_blocking(conn, "123", None, NOW)  # made before all-digit names were refused
    assert [h.id for h in store.find_blocking(conn, "webhook")] == [first, second]
    assert [h.id for h in store.find_blocking(conn, str(second))] == [second]
    assert [h.id for h in store.find_blocking(conn, "123")] == [legacy]  # no webhook 123: the name
    store.revoke_blocking(conn, first, NOW)
    assert [h.id for h in store.find_blocking(conn, "webhook")] == [second]
    assert [h.revoked_at for h in store.find_blocking(conn, str(first))] == [NOW]
    assert store.find_blocking(conn, "nope") == []


async def test_a_failing_prune_or_save_is_logged_and_tried_again(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    db = Database(tmp_path / "hubd.db")
    await db.start()
    try:
        webhook_id, token = await db.call(store.create_blocking, "w", None, NOW)
        limits = CallLimiter(per_minute=5, per_day=5)
        key = (webhook_id, store.digest(token))
        limits.load(key, [], NOW)
        limits.admit(key, NOW)
        # Another process holds the write lock for longer than hubd waits (busy_timeout).
        lock = sqlite3.connect(tmp_path / "hubd.db", isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            with caplog.at_level(logging.WARNING, logger="hubd.webhook"):
                await prune(db, limits, NOW + 86400 * 2)  # no exception: the run() loop goes on
                assert not await save_counts(db, limits)
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        assert "could not prune old calls and commands (trying again in an hour)" in caplog.text
        assert "could not save the call counts (kept in memory" in caplog.text
        assert await save_counts(db, limits)  # the kept counts go in now
        assert await db.call(store.recent_counts_blocking, webhook_id, NOW) == [(int(NOW), 1)]
    finally:
        await db.stop()
