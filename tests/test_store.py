"""The SQLite store (hubd/store/db.py): WAL, migrations by user_version, a newer schema refused, mode 0600."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from hubd.errors import StoreError
from hubd.store.db import Database, migrations


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which a plain open() would make the files world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


async def test_started_database_is_wal_migrated_and_private(tmp_path: Path, umask_022: None) -> None:
    path = tmp_path / "state" / "hubd.db"  # the directory does not exist yet
    db = Database(path)
    await db.start()
    try:
        assert await db.call(lambda conn: conn.execute("PRAGMA journal_mode").fetchone()[0]) == "wal"
        version = await db.call(lambda conn: conn.execute("PRAGMA user_version").fetchone()[0])
        assert version == len(migrations()) >= 1
        await db.call(lambda conn: conn.execute("CREATE TABLE probe (x)"))  # makes sqlite write the -wal file
        files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.iterdir()}
        assert files == {"hubd.db": 0o600, "hubd.db-wal": 0o600, "hubd.db-shm": 0o600}
        # Opening the database left the process's umask alone (it is shared by every thread).
        assert os.umask(0o022) == 0o022
    finally:
        await db.stop()


async def test_reopening_applies_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db"
    for _ in range(2):
        db = Database(path)
        await db.start()
        await db.stop()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(migrations())


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version={len(migrations()) + 1}")
    db = Database(path)
    with pytest.raises(StoreError, match=r"newer than this hubd knows.*upgrade hubd"):
        await db.start()
    await db.stop()
    with sqlite3.connect(path) as conn:  # and left as it was
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(migrations()) + 1


async def test_a_world_readable_database_is_made_private(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "hubd.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    db = Database(path)
    await db.start()
    await db.stop()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "readable by others" in caplog.text


def test_migrations_are_numbered_in_sequence() -> None:
    assert [version for version, _, _ in migrations()] == list(range(1, len(migrations()) + 1))


def test_a_file_is_replaced_whole_or_not_at_all(tmp_path: Path, umask_022: None) -> None:
    """hubd.store.snapshot's file chore (the backup file, a restored config or secret, the copy before a
    migration): the new file takes the old one's place only once written and synced; a write that fails leaves
    the old file as it was and nothing beside it."""
    from hubd.store.snapshot import replace_file_blocking, write_synced_blocking

    target, partial = tmp_path / "secret", tmp_path / ".secret.partial"
    target.write_bytes(b"old")
    replace_file_blocking(target, partial, lambda p: write_synced_blocking(p, 0o600, lambda f: f.write(b"new"),
                                                                           exclusive=True))
    assert target.read_bytes() == b"new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"]

    def fails(path: Path) -> None:
        write_synced_blocking(path, 0o600, lambda f: f.write(b"half"), exclusive=True)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_file_blocking(target, partial, fails)
    assert target.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["secret"]
    with pytest.raises(FileExistsError):  # exclusive: never over a file already there
        write_synced_blocking(target, 0o600, lambda f: f.write(b"x"), exclusive=True)
    assert target.read_bytes() == b"new"
