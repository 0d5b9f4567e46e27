"""Online copies of the database, and what a database holds: schema version, newest activity, integrity.

A copy is made with SQLite's online backup API inside one read transaction of the source connection. In WAL
mode a reader never blocks hubd's writer (its commits go on into the WAL meanwhile), the copy is one
consistent moment, and its steps never start over when another process commits (without the transaction
they would, at every commit hubd makes). Used by `Database` before a migration, and by `hubd backup` and
`hubd restore`, with the file chores around them (opening a file that must exist, a file written whole or not
at all, sync, ownership, leftovers).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Literal, TypeVar

T = TypeVar("T")
STEP_PAGES = 1024  # pages per backup step (4 MiB at SQLite's default page size)
# When hubd recorded something it would not get back by itself: an event queued or given up on, a grant
# stored or refreshed, a login or token of the driver, a webhook made, rotated or revoked or called, an
# override of the owner's set or cleared, an admin token made or revoked. Epoch
# seconds; a table or column a database lacks is skipped (older schemas). New tables' times belong here.
ACTIVITY_COLUMNS = (
    ("outbox", "created_at"), ("dead_letters", "dead_at"), ("grants", "obtained_at"),
    ("driver_grants", "created_at"), ("driver_grants", "revoked_at"), ("driver_tokens", "created_at"),
    ("driver_tokens", "rotated_at"), ("webhook_tokens", "created_at"), ("webhook_tokens", "rotated_at"),
    ("webhook_tokens", "revoked_at"), ("webhook_commands", "created_at"), ("device_overrides", "updated_at"),
    ("admin_tokens", "created_at"), ("admin_tokens", "revoked_at"),
)


def open_existing_blocking(path: Path, mode: Literal["ro", "rw"], busy_ms: int) -> sqlite3.Connection:
    """A connection (autocommit) to the database `path`, read-only (`ro`) or read-write (`rw`), never creating
    the file; it waits up to `busy_ms` for another process's lock."""
    return sqlite3.connect(f"{path.absolute().as_uri()}?mode={mode}", uri=True, isolation_level=None,
                           timeout=busy_ms / 1000)


def copy_database_blocking(source: sqlite3.Connection, target: Path) -> None:
    """Copy the database `source` reads into the new file `target` (mode 0600 from the start; it must not
    exist), synced, in rollback-journal mode so that the copy is one self-contained file."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    dest = sqlite3.connect(target, isolation_level=None)
    try:
        own = not source.in_transaction
        if own:
            source.execute("BEGIN")
            source.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot is taken here
        try:
            source.backup(dest, pages=STEP_PAGES)
        finally:
            if own:
                source.execute("COMMIT")
        dest.execute("PRAGMA journal_mode=DELETE")  # commits with synchronous=FULL: on disk when this returns
    finally:
        dest.close()


def replace_database_blocking(source: Path, dest: sqlite3.Connection) -> None:
    """Make the database `dest` (held exclusively by the caller) a copy of the file `source`, in one transaction
    that a crash rolls back. Rollback-journal mode meanwhile: in WAL mode SQLite refuses a copy whose page
    size differs."""
    dest.execute("PRAGMA journal_mode=DELETE")
    src = sqlite3.connect(source, isolation_level=None)
    try:
        src.backup(dest)
    finally:
        src.close()
    dest.execute("PRAGMA journal_mode=WAL")


def schema_version_blocking(conn: sqlite3.Connection) -> int:
    """The database's schema version (`PRAGMA user_version`: the number of hubd migrations applied)."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def newest_activity_blocking(conn: sqlite3.Connection) -> float | None:
    """The latest time in ACTIVITY_COLUMNS (epoch seconds), or None when the database recorded nothing."""
    newest: float | None = None
    tables = table_names_blocking(conn)
    for table, column in ACTIVITY_COLUMNS:
        if table not in tables:
            continue
        if column not in {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}:
            continue
        value = conn.execute(f"SELECT MAX({column}) FROM {table}").fetchone()[0]  # noqa: S608 (names of ours)
        if value is not None and (newest is None or float(value) > newest):
            newest = float(value)
    return newest


def table_names_blocking(conn: sqlite3.Connection) -> set[str]:
    """The tables the database has (an older schema lacks the newer ones)."""
    return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def schema_blocking(conn: sqlite3.Connection) -> set[tuple[str, str, str, str]]:
    """What `sqlite_master` holds, as (type, name, tbl_name, sql) with the sql's whitespace normalised: the
    tables, indexes, views and triggers of the database (SQLite's own automatic indexes have no sql)."""
    return {(str(t), str(n), str(tb), " ".join(str(sql or "").split()))
            for t, n, tb, sql in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")}


def holds_tables_blocking(conn: sqlite3.Connection) -> bool:
    """False for an empty database file (nothing created in it yet)."""
    return int(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]) > 0


def integrity_problems_blocking(conn: sqlite3.Connection, limit: int = 5) -> list[str]:
    """What `PRAGMA integrity_check` finds (the first `limit` problems); empty when the database is sound."""
    rows = [str(r[0]) for r in conn.execute(f"PRAGMA integrity_check({int(limit)})")]
    return [] if rows == ["ok"] else rows


def write_synced_blocking(path: Path, mode: int, fill: Callable[[BinaryIO], T], *, exclusive: bool) -> T:
    """Create the file `path` with `mode` (`exclusive`: it must not exist yet; else one there is emptied), let
    `fill` write it, and fsync it; what `fill` returns."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC), mode)
    with os.fdopen(fd, "wb") as file:
        filled = fill(file)
        file.flush()
        os.fsync(file.fileno())
    return filled


def replace_file_blocking(target: Path, partial: Path, write: Callable[[Path], None]) -> None:
    """Make `target` the file `write` makes as `partial` (a new name beside it), whole or not at all, a power
    cut included: `write` creates `partial` and syncs it (`write_synced_blocking`, or SQLite's own commit); it
    is renamed over `target` and the directory synced. Whatever fails, `partial` is removed (with the journal
    files SQLite may have left beside it); `write` raising leaves `target` as it was."""
    try:
        write(partial)
        os.replace(partial, target)
    except BaseException:
        remove_file_blocking(partial)
        raise
    sync_directory_blocking(target.parent)


def sync_directory_blocking(directory: Path) -> None:
    """fsync a directory, so that a rename in it survives a power cut."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def give_to_directory_owner_blocking(path: Path) -> None:
    """Run as root, give a file or directory just made the owner of the directory it is in: under systemd that
    is hubd's user (StateDirectory=), which must open the database and prune the backups."""
    if os.geteuid() != 0:
        return
    parent = os.stat(path.parent)
    if (parent.st_uid, parent.st_gid) != (0, 0):
        os.chown(path, parent.st_uid, parent.st_gid, follow_symlinks=False)


def remove_file_blocking(path: Path) -> None:
    """Remove a copy and the journal files SQLite may have left beside it; a file already gone is fine."""
    for leftover in (path, *(path.with_name(path.name + suffix) for suffix in ("-journal", "-wal", "-shm"))):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)
