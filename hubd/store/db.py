"""The SQLite database: one connection, WAL, schema migrations by PRAGMA user_version.

Owns the connection and the one thread that touches it: every query runs in that thread through
`Database.call`, so the event loop never blocks on disk.
Repositories (`*Repo` in this package) hold the SQL; they pass blocking functions to `call`.

Also owns the storage health, in this one place since every writer goes through `call`: an error that says
the disk refused (full, read-only, I/O error) raises `StorageUnavailable` (the transaction rolled back,
nothing written), fails the `storage` check of /healthz with the reason, and starts the probe in `run()`.
Only a probe write (a file of PROBE_BYTES beside the database, then a one-page SQLite commit) declares the
disk writable again, never a caller's small write that happened to fit: so a writer that waits for
`writable()` and then retries does so at the probe's backoff, not in a loop. Any other sqlite error is a
plain `StoreError`.

Before it migrates a database to a newer schema, it copies it beside itself (`migration_backup_path`), so an
upgrade can be undone with `hubd restore`; a migration whose copy cannot be written does not start.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import sqlite3
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

from hubd.config.model import StorageConfig
from hubd.errors import StorageUnavailable, StoreError
from hubd.lifecycle import Backoff, Clock, Health, SystemClock
from hubd.metrics import Metrics
from hubd.store.snapshot import (
    copy_database_blocking,
    remove_file_blocking,
    replace_file_blocking,
    schema_blocking,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
STORAGE_NOT_OPEN = "not open yet"  # the `storage` check's detail until start() opened the database
_MIGRATION_RE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# The probe writes this much (random, so a compressing filesystem cannot cheat) before writes are retried:
# about what a full batch of device messages commits. A one-page commit alone would pass at once, into the
# room a failed commit's frames left at the end of the WAL file.
PROBE_BYTES = 1 << 20
PROBE_CAP_S = 15.0  # the longest a recovered disk waits to be noticed
# Writable for this long ends an outage: a failure after that is a new one (logged, backoff from the start).
STABLE_AFTER_S = 10.0
# SQLite's primary result codes that say the disk, not hubd, is the problem; each with what to tell the user.
_STORAGE_CODES = {
    sqlite3.SQLITE_FULL: "the disk is full",
    sqlite3.SQLITE_IOERR: "the disk failed (I/O error)",
    sqlite3.SQLITE_READONLY: "the database is read-only",
    sqlite3.SQLITE_CANTOPEN: "a database file cannot be opened",
}

_STORAGE_ERRNOS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EIO: "the disk failed (I/O error)",
    errno.EROFS: "the disk is read-only",
}


def migration_backup_path(database: Path, old: int, new: int) -> Path:
    """Where the copy of a database made before migrating it from schema `old` to `new` goes: beside it."""
    return database.with_name(f"{database.name}.pre-{old}-to-{new}.bak")


def migrations() -> list[tuple[int, str, str]]:
    """The packaged migrations as (version, name, sql), in order."""
    found: list[tuple[int, str, str]] = []
    for entry in resources.files("hubd.store").joinpath("migrations").iterdir():
        match = _MIGRATION_RE.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort()
    for index, (version, name, _) in enumerate(found, start=1):
        if version != index:
            raise StoreError(f"migration {name} is out of sequence: expected number {index:04d}")
    return found


def migrated_schema_blocking(version: int) -> set[tuple[str, str, str, str]]:
    """The schema (`hubd.store.snapshot.schema_blocking`) the first `version` migrations make, built in memory."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for _, _, sql in migrations()[:version]:
            for statement in _split_sql(sql):
                conn.execute(statement)
        return schema_blocking(conn)
    finally:
        conn.close()


class Database:
    """The store component: opens and migrates the database; runs queries off the event loop."""

    name = "store"

    def __init__(self, path: Path, *, synchronous: Literal["full", "normal"] = "full", health: Health | None = None,
                 metrics: Metrics | None = None, backoff: Backoff | None = None, clock: Clock | None = None) -> None:
        self._path = path
        self._synchronous = synchronous.upper()
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._health = health
        self._backoff = backoff or Backoff(initial_s=0.5, cap_s=PROBE_CAP_S)
        self._clock: Clock = clock or SystemClock()
        self._writable = asyncio.Event()
        self._unwritable = asyncio.Event()
        self._writable_since: float | None = None
        self._failing_since: float | None = None
        self.migration_backup: Path | None = None  # the copy made before the last migration this object ran
        self._failures = None if metrics is None else metrics.counter(
            "hubd_storage_failures_total", "database calls and probes the disk refused (full, read-only, I/O error)")
        if metrics is not None:
            metrics.gauge("hubd_storage_writable", "1 while the database takes writes",
                          lambda: float(self._writable.is_set()))
        if health is not None:
            health.require("storage", STORAGE_NOT_OPEN)

    @classmethod
    def of(cls, storage: StorageConfig, *, health: Health | None = None, metrics: Metrics | None = None) -> Database:
        """The database `storage.path` names, with its `storage.synchronous` setting."""
        return cls(storage.path, synchronous=storage.synchronous, health=health, metrics=metrics)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    async def start(self) -> None:
        """Create (mode 0600) or open the database and apply pending migrations; probe the disk once.

        A disk that refuses the probe does not stop the start: hubd serves what needs no write, with the
        `storage` check failing, and run() probes until the disk takes writes.
        """
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hubd-db")
        await asyncio.get_running_loop().run_in_executor(self._executor, self._open_blocking)
        try:
            await self._in_thread(self._probe_blocking)
        except StorageUnavailable:
            return  # _in_thread noted it
        self._recovered()

    async def run(self) -> None:
        """While writes fail for want of storage, probe with backoff until a probe write goes through."""
        while True:
            await self._unwritable.wait()
            await self._backoff.sleep()
            try:
                await self._in_thread(self._probe_blocking)
            except StorageUnavailable:
                continue  # _in_thread noted it: the check shows the latest reason
            self._recovered()

    async def stop(self) -> None:
        """Close the connection; idempotent."""
        if self._executor is None:
            return
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_blocking)
        self._executor.shutdown(wait=True)
        self._executor = None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(connection, *args)` in the database thread; sqlite errors become StoreError, and those that
        say the disk refused become StorageUnavailable (and fail the `storage` check until a probe passes)."""
        return await self._in_thread(self._call, fn, args)

    async def writable(self) -> None:
        """Return once writes may go through: at once, or when a probe write after a refused one has."""
        await self._writable.wait()

    def call_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Open, run `fn(connection, *args)`, close: for CLI commands that work without the daemon."""
        self._open_blocking()
        try:
            return self._call(fn, args)
        finally:
            self._close_blocking()

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = self._conn
        if conn is None:
            raise StoreError("the database is not open")
        try:
            return fn(conn, *args)
        except sqlite3.Error as err:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # a failed disk may refuse the rollback too
                    conn.rollback()
            what = _STORAGE_CODES.get(getattr(err, "sqlite_errorcode", -1) & 0xFF)
            if what is not None:
                raise StorageUnavailable(f"{what}: cannot write {self._path} ({err})") from err
            raise StoreError(f"{self._path}: {err}") from err

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            raise StoreError("the database is not open")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except StorageUnavailable as err:
            self._failed(str(err))
            raise

    def _failed(self, reason: str) -> None:
        """A write was refused: fail the check, wake the probe; logged once per outage (a flap is not a new one)."""
        if self._failures is not None:
            self._failures.inc()
        if self._health is not None:
            self._health.set("storage", False, reason)
        if self._unwritable.is_set():
            return
        self._writable.clear()
        self._unwritable.set()
        now = self._clock.monotonic()
        if self._writable_since is not None and now - self._writable_since < STABLE_AFTER_S \
                and self._failing_since is not None:
            log.debug("the database refused a write again: %s", reason)
            return
        self._failing_since = now
        self._backoff.reset()
        log.warning("%s; device messages stay unacknowledged (the broker keeps them) and writes wait until a probe "
                    "write goes through", reason)

    def _recovered(self) -> None:
        now = self._clock.monotonic()
        if self._failing_since is not None:
            log.info("the database takes writes again (%.0f s after the first refused one)", now - self._failing_since)
        self._writable_since = now
        self._unwritable.clear()
        self._writable.set()
        if self._health is not None:
            self._health.set("storage", True, "writable")

    def _probe_blocking(self) -> None:
        """Write PROBE_BYTES to a file beside the database and sync it, then commit one page in SQLite."""
        probe = self._path.with_name(self._path.name + "-probe")
        try:
            try:
                fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    data = memoryview(os.urandom(PROBE_BYTES))
                    while data:
                        data = data[os.write(fd, data):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(probe)
        except OSError as err:
            what = _STORAGE_ERRNOS.get(err.errno or 0, "the disk refused a write")
            raise StorageUnavailable(f"{what}: cannot write beside {self._path} ({err.strerror})") from err
        self._call(_probe_commit_blocking, ())

    def _open_blocking(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as err:
            raise StoreError(f"{self._path}: cannot open the database: {err.strerror}") from err
        os.close(fd)
        mode = stat.S_IMODE(os.stat(self._path).st_mode)
        if mode & 0o077:
            os.chmod(self._path, 0o600)
            log.warning("%s was readable by others (mode %o); set it to 0600", self._path, mode)
        # sqlite gives the -wal and -shm files it creates the database file's mode: 0600 too. (No umask
        # change here: this runs in a thread, and the umask is the whole process's.)
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.row_factory = sqlite3.Row
        self._conn = conn
        try:
            self._migrate_blocking(conn)
        except sqlite3.Error as err:
            raise StoreError(f"{self._path}: migration failed: {err}") from err

    def _close_blocking(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _migrate_blocking(self, conn: sqlite3.Connection) -> None:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        known = migrations()
        if current > len(known):
            raise StoreError(
                f"{self._path} has schema version {current}, newer than this hubd knows ({len(known)}); "
                "upgrade hubd or point storage.path at another file"
            )
        if 0 < current < len(known):
            self._backup_before_migration_blocking(conn, current, len(known))
        for version, name, sql in known[current:]:
            log.info("applying database migration %s", name)
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _split_sql(sql):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version={version}")
                conn.execute("COMMIT")
            except sqlite3.Error:
                conn.execute("ROLLBACK")
                raise


    def _backup_before_migration_blocking(self, conn: sqlite3.Connection, old: int, new: int) -> None:
        """Copy the database beside itself before migrating it; a copy that fails stops the migration."""
        target = migration_backup_path(self._path, old, new)
        partial = target.with_name(target.name + ".partial")
        try:
            remove_file_blocking(partial)  # from an attempt that died half-way
            # The newest copy wins over one already there: it is the state this migration starts from.
            replace_file_blocking(target, partial, lambda path: copy_database_blocking(conn, path))
        except (OSError, sqlite3.Error) as err:
            raise StoreError(f"{self._path}: not migrated from schema {old} to {new}: the copy to go back to "
                             f"cannot be written ({err}); free space beside the database, then start again") from err
        self.migration_backup = target
        log.info("copied %s to %s before migrating it from schema %d to %d (to go back: hubd restore --force "
                    "with that file, then the older hubd)", self._path, target, old, new)


def _probe_commit_blocking(conn: sqlite3.Connection) -> None:
    """A write transaction of one page (the header's user_version, rewritten unchanged)."""
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        conn.execute(f"PRAGMA user_version={version}")


def _split_sql(sql: str) -> list[str]:
    """Split a migration into statements (sqlite3.complete_statement knows about triggers and quotes)."""
    statements: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not buffer.strip().startswith("--"):
        statements.append(buffer.strip())
    return statements
