"""`hubd backup`: one file holding a consistent copy of the database, the config and, with --with-secrets, the
secret files, made while hubd runs; into a directory, with `--keep N` keeping the newest N there. Without
--with-secrets the secrets written in the config itself are redacted too (hubd.backup.redact).

The copy is SQLite's online backup (hubd.store.snapshot), never a file copy, so a running hubd is neither
stopped nor blocked.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hubd import __version__
from hubd.backup.archive import CONFIG, SECRETS, Manifest, SecretEntry, digest_bytes, digest_database, write_archive
from hubd.backup.redact import redact
from hubd.config.model import LOGIN_PASSWORD_FILE, HubdConfig, config_secret_files
from hubd.errors import HubdError
from hubd.store.snapshot import (
    copy_database_blocking,
    give_to_directory_owner_blocking,
    integrity_problems_blocking,
    newest_activity_blocking,
    open_existing_blocking,
    schema_version_blocking,
)

BACKUP_PREFIX = "hubd-backup-"
BACKUP_SUFFIX = ".tar.gz"
_BACKUP_NAME_RE = re.compile(r"^hubd-backup-\d{8}T\d{6}Z\.tar\.gz$")
SQLITE_BUSY_TIMEOUT_MS = 5000


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret file of this installation: the config key naming it (None: `hubd init`'s login password,
    which the config names only by its hash), and where it is (None, with the problem, if not found)."""

    key: str | None
    path: Path | None
    written: str
    problem: str | None

    def describe(self) -> str:
        """`platform.client_secret_file (/etc/credstore/hubd.client-secret)` or the login password's."""
        where = str(self.path) if self.path is not None else self.written
        return f"{self.key} ({where})" if self.key is not None else f"the login password ({where})"


def find_secrets(config_path: Path, text: str) -> list[Secret]:
    """The files the config's `<secret>_file` keys name, and the login password file `hubd init` wrote
    beside them (if there)."""
    found: list[Secret] = []
    paths: set[Path] = set()
    for ref in config_secret_files(config_path, text):
        if ref.path is not None and ref.path in paths:
            continue
        found.append(Secret(ref.key, ref.path, ref.written, ref.problem))
        if ref.path is not None:
            paths.add(ref.path)
    for directory in dict.fromkeys(p.parent for p in list(paths)):
        login = directory / LOGIN_PASSWORD_FILE
        if login.is_file() and login not in paths:
            found.append(Secret(None, login, str(login), None))
            paths.add(login)
    return found


def back_up(config_path: Path, config: HubdConfig, target: Path, *, into_directory: bool, with_secrets: bool,
            keep: int | None, clock: Callable[[], float] = time.time) -> int:
    """Write the backup and print its path and size, what was left out, and what --keep removed."""
    database = config.storage.path
    if not database.is_file():
        raise HubdError(f"{database}: there is no database there (storage.path of {config_path}); nothing to back up")
    if keep is not None and keep < 1:
        raise HubdError(f"--keep {keep}: keep at least 1 backup")
    if keep is not None and not into_directory:
        raise HubdError(f"--keep needs a directory as FILE (it keeps the newest backups there), not {target}")
    now = clock()
    if into_directory:
        if not target.exists():
            target.mkdir(mode=0o700, parents=True)
            give_to_directory_owner_blocking(target)
        stamp = datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        final = target / f"{BACKUP_PREFIX}{stamp}{BACKUP_SUFFIX}"
    else:
        final = target
        if not final.parent.is_dir():
            raise HubdError(f"{final.parent} is not a directory; create it first, or give another FILE")
    config_bytes = _read(config_path, "the config")
    secrets = find_secrets(config_path, config_bytes.decode("utf-8", errors="replace"))
    redacted: list[str] = []
    if not with_secrets:
        text, redacted = redact(config_bytes.decode("utf-8", errors="replace"))
        if redacted:
            config_bytes = text.encode()
    contents, entries = (_gather(secrets) if with_secrets else ({}, []))
    work = Path(tempfile.mkdtemp(prefix=".hubd-backup-", dir=final.parent))
    try:
        copy = work / "hubd.db"
        schema, activity = _copy(database, copy)
        manifest = Manifest(
            hubd_version=__version__, created_at=now, schema_version=schema, newest_activity=activity,
            database_path=str(database.absolute()), database=digest_database(copy),
            config_path=str(config_path.absolute()), config=digest_bytes(CONFIG, config_bytes),
            secrets=tuple(entries), secrets_left_out=() if with_secrets else tuple(s.describe() for s in secrets))
        write_archive(final, manifest, config_bytes, contents, copy)
        give_to_directory_owner_blocking(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    held = f", {len(entries)} secret file{'s' if len(entries) != 1 else ''}" if entries else ""
    print(f"wrote {final.absolute()} ({_size(final.stat().st_size)}): the database {database} "
          f"({_size(manifest.database.size)}, schema {schema}), the config {config_path}{held}")
    if manifest.secrets_left_out:
        print("left out the secrets (add --with-secrets to include them, or keep your own copy of these files): "
              + "; ".join(manifest.secrets_left_out))
    if redacted:
        print("redacted the secrets written in the config itself (add --with-secrets to keep them; a restore puts "
              "back those the config it replaces holds, and names the others): " + ", ".join(redacted))
    if keep is not None:
        removed = _prune(target, keep)
        if removed:
            print(f"kept the newest {keep} backups in {target}; removed {', '.join(removed)}")
    return 0


def _gather(secrets: list[Secret]) -> tuple[dict[str, bytes], list[SecretEntry]]:
    """Each secret file's content, by file name, and its entry; HubdError for one that cannot be read."""
    contents: dict[str, bytes] = {}
    entries: list[SecretEntry] = []
    for secret in secrets:
        if secret.path is None:
            raise HubdError(f"{secret.key}: {secret.problem}")
        name = secret.path.name
        if name in contents:
            raise HubdError(f"two secret files are called {name}; a backup keeps them by file name, so rename one")
        data = _read(secret.path, f"the secret file of {secret.key or 'the login password'}",
                     "; run the backup as root (e.g. with sudo), or leave out --with-secrets")
        contents[name] = data
        entries.append(SecretEntry(secret.key, name, digest_bytes(SECRETS + name, data)))
    return contents, entries


def _copy(database: Path, copy: Path) -> tuple[int, float | None]:
    """Copy the database online into `copy` and check the copy; its schema version and newest activity."""
    try:
        source = open_existing_blocking(database, "rw", SQLITE_BUSY_TIMEOUT_MS)
        try:
            copy_database_blocking(source, copy)
        finally:
            source.close()
        check = sqlite3.connect(copy)
        try:
            problems = integrity_problems_blocking(check)
            schema, activity = schema_version_blocking(check), newest_activity_blocking(check)
        finally:
            check.close()
    except sqlite3.Error as err:
        raise HubdError(f"{database}: cannot copy the database: {err}") from err
    except OSError as err:
        raise HubdError(f"cannot write the copy of {database} beside the backup: {err.strerror}") from err
    if problems:
        raise HubdError(f"the copy of {database} fails PRAGMA integrity_check ({'; '.join(problems)}): the "
                        "database itself is damaged; keep your older backups, and see docs/backup.md")
    return schema, activity


def _prune(directory: Path, keep: int) -> list[str]:
    """Remove all but the newest `keep` backups (by the time in their names) in `directory`; their names."""
    names = sorted(n for n in os.listdir(directory) if _BACKUP_NAME_RE.match(n))
    removed = names[:-keep]
    for name in removed:
        os.unlink(directory / name)
    return removed


def _read(path: Path, what: str, hint: str = "") -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise HubdError(f"cannot read {path} ({what}): {err.strerror}{hint}") from err


def _size(size: int) -> str:
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}, {size} bytes"
    return f"{size} bytes"
