"""The database checks, safe beside a running hubd: `database` opens it read-only (WAL lets a reader in while
hubd writes) for the schema version, `PRAGMA integrity_check` and the installation's secret; `database-write`
takes the write lock and gives it back (`BEGIN IMMEDIATE`, `ROLLBACK`: nothing is written), waiting at most
WRITE_LOCK_WAIT_MS for hubd to release it, and looks at the free space. Neither migrates anything.
"""

from __future__ import annotations

import shutil
import sqlite3

from hubd.config.model import StorageConfig
from hubd.doctor.report import Result, failed, passed, warned
from hubd.errors import StoreError
from hubd.store.db import PROBE_BYTES, migrations
from hubd.store.identity import read_instance_secret_blocking
from hubd.store.snapshot import integrity_problems_blocking, open_existing_blocking, schema_version_blocking

DATABASE = "database"
DATABASE_WRITE = "database-write"
WRITE_LOCK_WAIT_MS = 2000  # hubd's commits take milliseconds; a lock held longer is a long write, not ours to wait
LOW_DISK_BYTES = 100 * 1024 * 1024  # below this much free space the outbox has little room while the platform is away
_SHOWN_PROBLEMS = 3
_COUNTED_PROBLEMS = 100  # what a bare integrity_check reports at most (SQLite's default): the count stops there


def check_database(storage: StorageConfig) -> tuple[Result, bytes | None]:
    """The database exists, is hubd's, passes `PRAGMA integrity_check`; with the installation's secret."""
    path = storage.path
    if not path.exists():
        return failed(DATABASE, f"{path} does not exist: start hubd (`sudo systemctl start hubd`), which creates "
                                "it, or run `hubd db-migrate` with this config"), None
    try:
        conn = open_existing_blocking(path, "ro", WRITE_LOCK_WAIT_MS)
    except sqlite3.Error as err:
        return failed(DATABASE, f"cannot open {path}: {err}; run the doctor as the user hubd runs as, or with "
                                "sudo"), None
    try:
        version = schema_version_blocking(conn)
        problems = integrity_problems_blocking(conn, _COUNTED_PROBLEMS)
        secret = read_instance_secret_blocking(conn)
    except sqlite3.Error as err:
        return failed(DATABASE, f"{path} cannot be read as a database ({err}): stop hubd and put back a copy from "
                                "a backup, or point storage.path at the right file"), None
    finally:
        conn.close()
    if problems:
        shown = "; ".join(problems[:_SHOWN_PROBLEMS]) + ("; ..." if len(problems) > _SHOWN_PROBLEMS else "")
        return failed(DATABASE, f"PRAGMA integrity_check found {len(problems)} problem(s) in {path}: {shown}; stop "
                                "hubd and put back a copy from a backup (`sqlite3 FILE .recover` saves what it can)"
                      ), secret
    try:
        known = len(migrations())
    except StoreError as err:
        return failed(DATABASE, f"this hubd's migrations are broken: {err}; reinstall hubd"), secret
    if version > known:
        return failed(DATABASE, f"{path} has schema version {version}, newer than this hubd knows ({known}): run "
                                "the doctor of the hubd that made it"), secret
    if version < known:
        return warned(DATABASE, f"{path} passes integrity_check but has schema version {version}, older than this "
                                f"hubd's ({known}): the running hubd is older than this doctor; restart it "
                                "(`sudo systemctl restart hubd`) to upgrade the database"), secret
    return passed(DATABASE, f"{path}: integrity_check ok, schema version {version}"), secret


def check_database_write(storage: StorageConfig) -> Result:
    """The database takes a write lock (given back at once, nothing written) and its disk has room."""
    path = storage.path
    if not path.exists():
        return failed(DATABASE_WRITE, f"{path} does not exist (see the database check)")
    try:
        conn = open_existing_blocking(path, "rw", WRITE_LOCK_WAIT_MS)
    except sqlite3.Error as err:
        return failed(DATABASE_WRITE, f"cannot open {path} for writing: {err}; check its owner and mode, and that "
                                      "its filesystem is not mounted read-only")
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    except sqlite3.OperationalError as err:
        code = getattr(err, "sqlite_errorcode", 0) & 0xFF
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return warned(DATABASE_WRITE, f"hubd held the write lock for over {WRITE_LOCK_WAIT_MS} ms (a long "
                                          "write); whether the disk takes writes was not checked: run the doctor "
                                          "again")
        return failed(DATABASE_WRITE, f"{path} refuses writes ({err}): check its owner and mode, and that its "
                                      "filesystem is not full or mounted read-only")
    except sqlite3.Error as err:
        return failed(DATABASE_WRITE, f"{path} refuses writes ({err})")
    finally:
        conn.close()
    free = shutil.disk_usage(path.parent).free
    if free < PROBE_BYTES:
        return failed(DATABASE_WRITE, f"the disk holding {path} is full ({_size(free)} free): hubd cannot commit "
                                      "device messages; free some space")
    if free < LOW_DISK_BYTES:
        return warned(DATABASE_WRITE, f"{path} takes writes, but its disk has only {_size(free)} free: free some "
                                      "space (events wait in the database while the platform is away)")
    return passed(DATABASE_WRITE, f"{path} takes writes (the write lock taken and given back, nothing written); "
                                  f"{_size(free)} free")


def _size(count: int) -> str:
    if count >= 1 << 30:
        return f"{count / (1 << 30):.1f} GiB"
    return f"{count / (1 << 20):.0f} MiB"
