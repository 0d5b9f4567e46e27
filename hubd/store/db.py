"""The SQLite database: one connection, WAL, schema migrations by PRAGMA user_version.

Owns the connection and the one thread that touches it: every query runs in that thread through
`Database.run`, so the event loop never blocks on disk and paho's thread never sees the database.
Repositories (`*Repo` in this package) hold the SQL; they pass blocking functions to `run`.
"""

from __future__ import annotations

import asyncio
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

from hubd.config import StorageConfig
from hubd.errors import StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")
_MIGRATION_RE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


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


class Database:
    """The store component: opens and migrates the database; runs queries off the event loop."""

    name = "store"

    def __init__(self, path: Path, *, synchronous: Literal["full", "normal"] = "full") -> None:
        self._path = path
        self._synchronous = synchronous.upper()
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    @classmethod
    def of(cls, storage: StorageConfig) -> Database:
        """The database `storage.path` names, with its `storage.synchronous` setting."""
        return cls(storage.path, synchronous=storage.synchronous)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    async def start(self) -> None:
        """Create (mode 0600) or open the database and apply pending migrations."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hubd-db")
        await asyncio.get_running_loop().run_in_executor(self._executor, self._open_blocking)

    async def run(self) -> None:
        """Nothing to do between start and stop."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Close the connection; idempotent."""
        if self._executor is None:
            return
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_blocking)
        self._executor.shutdown(wait=True)
        self._executor = None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(connection, *args)` in the database thread; sqlite errors become StoreError."""
        if self._executor is None:
            raise StoreError("the database is not open")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._call, fn, args)

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
                conn.rollback()
            raise StoreError(f"{self._path}: {err}") from err

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
