"""Before hubd migrates a database to a newer schema it copies it beside itself, and `hubd restore --force` with
that copy goes back: an older schema is built by applying only the first migrations."""

from __future__ import annotations

import sqlite3
import stat
import time
from pathlib import Path

import pytest
from backup_helpers import hubd, ok, rows

from hubd.errors import StoreError
from hubd.store.db import Database, migration_backup_path, migrations

OLD = 6  # webhooks exist from 0004 on; 0007 and 0008 are what the "upgrade" applies


def old_database(path: Path, version: int = OLD) -> None:
    """A database as a hubd that knew only the first `version` migrations left it, with one webhook."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for number, _, sql in migrations()[:version]:
        conn.executescript(sql)
        conn.execute(f"PRAGMA user_version={number}")
    conn.execute("INSERT INTO webhook_tokens (name, token_hash, created_at) VALUES ('kitchen', 'h', ?)", (time.time(),))
    conn.close()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"storage:\n  path: {tmp_path / 'hubd.db'}\n")
    return path


def test_migrating_an_older_database_copies_it_beside_first(tmp_path: Path, config: Path) -> None:
    db = tmp_path / "hubd.db"
    old_database(db)
    out = ok("db-migrate", "-c", str(config))
    new = len(migrations())
    copy = migration_backup_path(db, OLD, new)
    assert copy == tmp_path / f"hubd.db.pre-{OLD}-to-{new}.bak"
    assert f"copied the database to {copy} before migrating it" in out
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert rows(copy, "PRAGMA user_version") == [(OLD,)] and rows(db, "PRAGMA user_version") == [(new,)]
    assert rows(copy, "SELECT name FROM webhook_tokens") == [("kitchen",)]
    assert rows(copy, "PRAGMA journal_mode") == [("delete",)]  # one self-contained file
    assert "dialect" not in {r[1] for r in rows(copy, "PRAGMA table_info(devices)")}  # 0007 not in the copy
    assert sorted(p.name for p in tmp_path.iterdir() if "pre-" in p.name) == [copy.name]  # no partial left

    made = copy.stat().st_mtime_ns
    out = ok("db-migrate", "-c", str(config))  # already current: no copy again
    assert "copied" not in out and copy.stat().st_mtime_ns == made and len(list(tmp_path.glob("*.bak"))) == 1


def test_a_new_database_is_not_copied(tmp_path: Path, config: Path) -> None:
    out = ok("db-migrate", "-c", str(config))
    assert "copied" not in out and not list(tmp_path.glob("*.bak"))


async def test_the_daemons_start_makes_the_copy_too(tmp_path: Path) -> None:
    db = tmp_path / "hubd.db"
    old_database(db)
    database = Database(db)
    await database.start()
    await database.stop()
    assert database.migration_backup == migration_backup_path(db, OLD, len(migrations()))
    assert rows(database.migration_backup, "SELECT name FROM webhook_tokens") == [("kitchen",)]


def test_a_migration_whose_copy_cannot_be_written_does_not_start(tmp_path: Path) -> None:
    db = tmp_path / "hubd.db"
    old_database(db)
    blocker = migration_backup_path(db, OLD, len(migrations()))
    blocker.mkdir()  # a directory where the copy goes: the rename fails as a full disk would
    (blocker / "x").write_text("x")
    new = len(migrations())
    with pytest.raises(StoreError, match=rf"not migrated from schema {OLD} to {new}: the copy to go back"):
        Database(db).call_blocking(lambda conn: None)
    assert rows(db, "PRAGMA user_version") == [(OLD,)]  # left as it was
    assert not list(tmp_path.glob("*.partial*"))


def test_going_back_restores_the_copy_with_force(tmp_path: Path, config: Path) -> None:
    db = tmp_path / "hubd.db"
    old_database(db)
    ok("db-migrate", "-c", str(config))
    ok("webhook", "create", "-c", str(config), "--name", "after-the-upgrade")
    copy = migration_backup_path(db, OLD, len(migrations()))

    refused = hubd("restore", "-c", str(config), str(copy))
    assert refused.returncode == 1 and "is newer than the backup" in refused.stderr
    out = ok("restore", "-c", str(config), "--force", str(copy))
    assert f"restored the database to {db} (schema {OLD}" in out
    assert rows(db, "PRAGMA user_version") == [(OLD,)]
    assert rows(db, "SELECT name FROM webhook_tokens") == [("kitchen",)]
    assert rows(copy, "PRAGMA user_version") == [(OLD,)]  # the copy itself is left as it was
    [kept] = tmp_path.glob("hubd.db.before-restore-*")
    assert rows(kept, "PRAGMA user_version") == [(len(migrations()),)]


def test_a_bare_database_of_a_newer_schema_is_refused(tmp_path: Path, config: Path) -> None:
    future = tmp_path / "future.db"
    conn = sqlite3.connect(future)
    conn.execute(f"PRAGMA user_version={len(migrations()) + 1}")
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    done = hubd("restore", "-c", str(config), "--force", str(future))
    assert done.returncode == 1 and f"newer than this hubd knows ({len(migrations())})" in done.stderr
    assert not (tmp_path / "hubd.db").exists() or rows(tmp_path / "hubd.db", "PRAGMA user_version") != [
        (len(migrations()) + 1,)]
    with sqlite3.connect(future) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == len(migrations()) + 1
