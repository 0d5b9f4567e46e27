"""`hubd restore`: put a backup (or the bare database copy hubd makes before a migration) back, hubd stopped.

In this order: read and check the backup's manifest, config and secrets; take SQLite's exclusive lock on the
database (refused while hubd, or any process, has it open: that is how a running hubd is detected); extract
the database copy beside it and check it (checksum, `PRAGMA integrity_check`, a schema this hubd knows);
refuse a database newer than the backup without --force (`newer_than`); keep the database it replaces beside
it; write the copy into it in one transaction (same file, owner and mode), then `PRAGMA integrity_check`
again; then, only if asked, the config (--with-config: secrets the backup had redacted are taken from the config
it replaces where it holds them, and the others named) and the secret files (--secrets-dir). The broker
session's receipts are dropped from the copy: they describe the broker as it was then.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hubd.backup.archive import Head, extract_database, is_sqlite_file, read_head
from hubd.backup.redact import REDACTED, fill_in, redact
from hubd.clitable import utc_text
from hubd.config.model import HubdConfig, load_config, parse_config
from hubd.errors import ConfigError, HubdError
from hubd.store.db import migrated_schema_blocking, migrations
from hubd.store.receipts import clear_receipts_blocking
from hubd.store.snapshot import (
    copy_database_blocking,
    give_to_directory_owner_blocking,
    holds_tables_blocking,
    integrity_problems_blocking,
    newest_activity_blocking,
    remove_file_blocking,
    replace_database_blocking,
    replace_file_blocking,
    schema_blocking,
    schema_version_blocking,
    write_synced_blocking,
)

CONFIG_MODE = 0o644  # what `hubd init` writes: hubd's DynamicUser must read it; it holds no secret


@dataclass(frozen=True, slots=True)
class State:
    """What a database holds, for the "newer" rule: its schema version and the time of its newest activity."""

    schema: int
    activity: float | None


def newer_than(current: State, backup: State) -> str | None:
    """Why the current database is newer than the backup (None if it is not).

    A database that recorded nothing (`activity` None: a new one) is never newer. One that did is newer when
    it recorded something after the newest activity in the backup, or when its schema is newer."""
    if current.activity is None:
        return None
    if backup.activity is None or current.activity > backup.activity:
        since = "" if backup.activity is None else f", after the newest in the backup ({utc_text(backup.activity)})"
        return f"it recorded events, grants, tokens or webhooks until {utc_text(current.activity)}{since}"
    if current.schema > backup.schema:
        return f"its schema ({current.schema}) is newer than the backup's ({backup.schema})"
    return None


def schema_differences(found: set[tuple[str, str, str, str]], expected: set[tuple[str, str, str, str]]) -> list[str]:
    """What in `found` (a database's `schema_blocking`) is not `expected` (what the migrations make), named:
    a trigger, view, index or table they did not create, one changed, one missing. Empty when they agree."""
    made = {(kind, name): sql for kind, name, _, sql in expected}
    there = {(kind, name) for kind, name, _, _ in found}
    problems = []
    for kind, name, table, sql in sorted(found - expected):
        on = "" if kind == "table" or table == name else f" on {table}"
        if (kind, name) in made:
            problems.append(f"{kind} {name!r}{on} differs from what the migrations make ({sql})")
        else:
            problems.append(f"{kind} {name!r}{on} that the migrations do not make ({sql or 'no sql'})")
    problems += [f"{kind} {name!r} is missing" for kind, name, _, _ in sorted(expected) if (kind, name) not in there]
    return problems


def restore(config_path: Path, source: Path, *, with_config: bool, secrets_dir: Path | None, force: bool,
            clock: Callable[[], float] = time.time) -> int:
    """Restore `source` as the module docstring says; print what was done and what was left."""
    head = None if is_sqlite_file(source) else read_head(source)
    known = len(migrations())
    if head is not None and head.manifest.schema_version > known:
        raise HubdError(f"{source}: its database has schema version {head.manifest.schema_version}, newer than this "
                        f"hubd knows ({known}); restore it with hubd {head.manifest.hubd_version} or newer")
    config = _config(config_path, source, head, with_config)
    database = config.storage.path
    stamp = datetime.datetime.fromtimestamp(clock(), datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    if head is not None:
        print(f"checked {source}: made by hubd {head.manifest.hubd_version} at {utc_text(head.manifest.created_at)}, "
              f"schema {head.manifest.schema_version}")
    database.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Locked first, so that a running hubd is found before any work; a database that is not there yet has
    # nobody using it, and is made (empty, then written) once the backup has passed its checks.
    current = _open_current(database, force, stamp) if database.exists() else None
    copy = database.with_name(f".{database.name}.restore-{os.getpid()}")
    try:
        remove_file_blocking(copy)
        backup = _extract(source, head, copy, known)
        why = None if current is None else newer_than(current.state, backup)
        if why is not None and not force:
            raise HubdError(f"{database} is newer than the backup: {why}. Restore anyway with --force (the "
                            "database it replaces is kept beside it)")
        if current is None:
            _create_like_directory(database)
            current = _Exclusive(database)
        elif current.holds_tables:
            aside = _unused(database.with_name(f"{database.name}.before-restore-{stamp}"))
            current.copy_to(aside)
            print(f"kept the database it replaces as {aside}")
        current.replace_with(copy)
    finally:
        remove_file_blocking(copy)
        if current is not None:
            current.close()
    print(f"restored the database to {database} (schema {backup.schema}; integrity_check: ok)")
    _restore_config(config_path, head, with_config, stamp)
    _restore_secrets(head, secrets_dir, stamp)
    print("next: start hubd (under systemd: sudo systemctl start hubd)")
    return 0


class _Unreadable(HubdError):
    """The current database file cannot be read as a database (damaged, or not one)."""


class _Exclusive:
    """The current database under SQLite's exclusive lock, held until close(): no other process may use it.
    `state` and `holds_tables` (False for the empty file of a database that did not exist) are read at once."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            self._conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            self._conn.execute("BEGIN EXCLUSIVE")
            self.holds_tables = holds_tables_blocking(self._conn)
            self.state = State(schema_version_blocking(self._conn), newest_activity_blocking(self._conn))
            self._conn.execute("COMMIT")  # the lock stays: locking_mode=EXCLUSIVE
        except sqlite3.OperationalError as err:
            self._conn.close()
            if "locked" in str(err) or "busy" in str(err):
                raise HubdError(f"{path} is in use by another process: stop hubd first (sudo systemctl stop hubd), "
                                "and wait for any other hubd command using it; then restore again") from err
            raise HubdError(f"{path}: {err}") from err
        except sqlite3.DatabaseError as err:
            self._conn.close()
            raise _Unreadable(str(err)) from err

    def copy_to(self, target: Path) -> None:
        """Keep a copy of the current database in the new file `target`."""
        try:
            copy_database_blocking(self._conn, target)
        except FileExistsError as err:
            raise HubdError(f"{target} exists already; nothing was restored") from err
        except (OSError, sqlite3.Error) as err:
            remove_file_blocking(target)
            raise HubdError(f"cannot keep a copy of {self._path} as {target} ({err}); nothing was restored") from err

    def replace_with(self, copy: Path) -> None:
        """Write the checked copy into the database, in one transaction; then check the result."""
        try:
            replace_database_blocking(copy, self._conn)
            problems = integrity_problems_blocking(self._conn)
        except sqlite3.Error as err:
            raise HubdError(f"{self._path}: the restore failed and was rolled back ({err})") from err
        if problems:
            raise HubdError(f"{self._path} fails PRAGMA integrity_check after the restore: {'; '.join(problems)}")

    def close(self) -> None:
        """Release the lock."""
        self._conn.close()


def _open_current(database: Path, force: bool, stamp: str) -> _Exclusive | None:
    """The current database, locked; one that cannot be read is moved aside with --force (None), else refused."""
    try:
        return _Exclusive(database)
    except _Unreadable as err:
        aside = _unused(database.with_name(f"{database.name}.before-restore-{stamp}"))
        if not force:
            raise HubdError(f"{database} cannot be read as a database ({err}); restore over it with --force (it is "
                            f"moved to {aside.name})") from err
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{database}{suffix}", f"{aside}{suffix}")
        print(f"moved the database that cannot be read ({err}) to {aside}")
        return None


def _config(config_path: Path, source: Path, head: Head | None, with_config: bool) -> HubdConfig:
    """The config that says where the database goes: the backup's with --with-config, else the one at -c."""
    if not with_config:
        try:
            return load_config(config_path, secrets=False)
        except ConfigError as err:
            if head is not None and not config_path.exists():
                raise ConfigError([*err.problems, f"to take the config from {source}, add --with-config"]) from err
            raise
    if head is None:
        raise HubdError(f"{source} is a bare database, with no config in it; leave out --with-config")
    return parse_config(head.config.decode("utf-8", errors="replace"), os.environ,
                        source=f"{config_path} (from {source})", secrets=False)


def _extract(source: Path, head: Head | None, copy: Path, known: int) -> State:
    """Put the backup's database into the new file `copy`, check it and drop the broker receipts; its state."""
    try:
        if head is not None:
            extract_database(source, head.manifest, copy)
        else:
            original = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True, isolation_level=None)
            try:
                copy_database_blocking(original, copy)
            finally:
                original.close()
        conn = sqlite3.connect(copy, isolation_level=None)
        try:
            problems = integrity_problems_blocking(conn)
            if problems:
                raise HubdError(f"the database in {source} fails PRAGMA integrity_check ({'; '.join(problems)}); "
                                "nothing was restored: use another backup")
            state = State(schema_version_blocking(conn), newest_activity_blocking(conn))
            if state.schema > known:
                raise HubdError(f"{source}: its database has schema version {state.schema}, newer than this hubd "
                                f"knows ({known}); restore it with the hubd that made it, or a newer one")
            foreign = schema_differences(schema_blocking(conn), migrated_schema_blocking(state.schema))
            if foreign:
                raise HubdError(f"the database in {source} is not what hubd's migrations make (schema "
                                f"{state.schema}): {'; '.join(foreign)}; nothing was restored: use another backup")
            clear_receipts_blocking(conn)  # the broker session of the backup's time is not the broker's now
        finally:
            conn.close()
    except sqlite3.Error as err:
        raise HubdError(f"{source}: its database cannot be read ({err}); nothing was restored") from err
    except OSError as err:
        raise HubdError(f"cannot write {copy} ({err.strerror}); nothing was restored") from err
    return state


def _restore_config(config_path: Path, head: Head | None, with_config: bool, stamp: str) -> None:
    if head is None:
        return
    raw = config_path.read_bytes() if config_path.exists() else None
    current = None if raw is None else raw.decode("utf-8", errors="replace")
    if not with_config:
        if current is None or (raw != head.config and redact(current)[0].encode() != head.config):
            print(f"the backup's config was not restored (it differs from {config_path}); add --with-config to "
                  "put it there, or read it with: tar -xzOf FILE config.yaml")
        return
    text, left = fill_in(head.config.decode("utf-8", errors="replace"), current)
    data = text.encode() if text.encode() != head.config else head.config
    kept = _put(config_path, data, CONFIG_MODE, stamp)
    print(f"restored the config to {config_path}" + (f" (the one it replaces: {kept})" if kept else ""))
    if data != head.config:
        print("put back the secrets written in the config it replaces, where the backup had them redacted")
    if left:
        print(f"fill in the secrets the backup left out (it was made without --with-secrets) in {config_path}, "
              f"each in place of {REDACTED}, or give it as <key>_file: " + ", ".join(left)
              + ("; an account's password: the output of hubd hash-password" if any("accounts" in k for k in left)
                 else "") + ". Until then hubd refuses to start and names them")


def _restore_secrets(head: Head | None, secrets_dir: Path | None, stamp: str) -> None:
    if head is None:
        return
    manifest = head.manifest
    if not manifest.secrets:
        if manifest.secrets_left_out:
            print("the backup holds no secrets (it was made without --with-secrets); put these back by hand: "
                  + "; ".join(manifest.secrets_left_out))
        return
    if secrets_dir is None:
        names = ", ".join(e.file for e in manifest.secrets)
        print(f"the backup's secret files ({names}) were not restored; add --secrets-dir DIR to put them in DIR "
              "(under systemd: /etc/credstore)")
        return
    secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for entry in manifest.secrets:
        target = secrets_dir / entry.file
        kept = _put(target, head.secrets[entry.file], 0o600, stamp)
        what = entry.key or "the login password"
        print(f"restored {what} to {target}" + (f" (the one it replaces: {kept})" if kept else ""))


def _put(target: Path, data: bytes, mode: int, stamp: str) -> Path | None:
    """Write `data` to `target` atomically with `mode`; a different file there is kept as
    `<target>.before-restore-<stamp>` (returned), never overwritten."""
    kept: Path | None = None
    if target.exists():
        if target.read_bytes() == data:
            return None
        mode = os.stat(target).st_mode & 0o777
        kept = _unused(target.with_name(f"{target.name}.before-restore-{stamp}"))
        os.link(target, kept)

    def write(partial: Path) -> None:
        write_synced_blocking(partial, mode, lambda file: file.write(data), exclusive=False)
        os.chmod(partial, mode)  # the umask may have taken bits away

    replace_file_blocking(target, target.with_name(f".{target.name}.partial-{os.getpid()}"), write)
    return kept


def _unused(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`, ...: the first name not taken (two restores within a second)."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _create_like_directory(path: Path) -> None:
    """Create an empty database file, mode 0600, owned (when run as root) by its directory's owner: under
    systemd that is hubd's user, who must be able to open it."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    give_to_directory_owner_blocking(path)
