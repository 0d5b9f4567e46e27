"""The backup file: a gzip-compressed tar of `manifest.json`, the config, the secret files (if asked) and the
database copy, in that order; written atomically, readable only by its owner; read back with every member's
size and SHA-256 checked against the manifest.

The manifest comes first and the database last, so that restore learns what the file holds (and where the
database goes) from its first few kilobytes. `tar -xzf FILE config.yaml` gets the config out by hand. Pure
file work.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from hubd.errors import HubdError
from hubd.store.snapshot import replace_file_blocking, write_synced_blocking

FORMAT = "hubd-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CONFIG = "config.yaml"
DATABASE = "hubd.db"
SECRETS = "secrets/"
SMALL_MEMBER_BYTES = 1 << 20  # the manifest, the config and each secret: more is not a backup of ours
_CHUNK_BYTES = 1 << 20
# What a damaged or foreign file raises while it is read: tar's errors, gzip's (OSError, EOFError, zlib.error).
_READ_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error)


class BackupInvalid(HubdError):
    """The file is not a backup this hubd can read, or it is damaged."""


@dataclass(frozen=True, slots=True)
class Member:
    """One file in the archive: its name there, size and SHA-256 (hex)."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class SecretEntry:
    """A secret file in the archive: the config key that names it (None: the login password `hubd init`
    wrote beside the others), its file name, and the member."""

    key: str | None
    file: str
    member: Member


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a backup holds."""

    hubd_version: str
    created_at: float  # epoch seconds
    schema_version: int
    newest_activity: float | None  # hubd.store.snapshot.newest_activity_blocking of the copy
    database_path: str  # storage.path when it was made
    database: Member
    config_path: str
    config: Member
    secrets: tuple[SecretEntry, ...]
    secrets_left_out: tuple[str, ...]  # what --with-secrets would have added: "<key> (<path>)"

    def to_json(self) -> bytes:
        """The manifest as stored."""
        return json.dumps({
            "format": FORMAT, "formatVersion": FORMAT_VERSION, "hubdVersion": self.hubd_version,
            "createdAt": self.created_at, "schemaVersion": self.schema_version,
            "newestActivity": self.newest_activity, "databasePath": self.database_path,
            "database": _member_json(self.database), "configPath": self.config_path,
            "config": _member_json(self.config),
            "secrets": [{"key": s.key, "file": s.file, **_member_json(s.member)} for s in self.secrets],
            "secretsLeftOut": list(self.secrets_left_out),
        }, indent=2).encode()

    @classmethod
    def from_json(cls, raw: bytes, source: Path) -> Manifest:
        """Read a stored manifest; BackupInvalid if it is not one this hubd reads."""
        try:
            data = json.loads(raw)
            if data.get("format") != FORMAT:
                raise BackupInvalid(f"{source} is not a hubd backup (its manifest.json is another program's)")
            if data.get("formatVersion") != FORMAT_VERSION:
                raise BackupInvalid(f"{source} is a hubd backup of format {data.get('formatVersion')}, which this "
                                    f"hubd cannot read (it reads {FORMAT_VERSION}); restore it with the hubd "
                                    f"{data.get('hubdVersion')} that made it, or a newer one")
            return cls(
                hubd_version=str(data["hubdVersion"]), created_at=float(data["createdAt"]),
                schema_version=int(data["schemaVersion"]),
                newest_activity=None if data["newestActivity"] is None else float(data["newestActivity"]),
                database_path=str(data["databasePath"]), database=_member(data["database"]),
                config_path=str(data["configPath"]), config=_member(data["config"]),
                secrets=tuple(SecretEntry(None if s["key"] is None else str(s["key"]), _plain_name(s["file"]),
                                          _member(s)) for s in data["secrets"]),
                secrets_left_out=tuple(str(s) for s in data["secretsLeftOut"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise BackupInvalid(f"{source}: its manifest.json cannot be read ({err!r}); the file is damaged") from err


@dataclass(frozen=True, slots=True)
class Head:
    """The small members of a backup, checked: the manifest, the config, the secrets (file name -> content)."""

    manifest: Manifest
    config: bytes
    secrets: dict[str, bytes]


def digest_database(path: Path) -> Member:
    """The database member: the copy's size and SHA-256."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            sha.update(chunk)
            size += len(chunk)
    return Member(DATABASE, size, sha.hexdigest())


def digest_bytes(name: str, data: bytes) -> Member:
    """A member holding `data`."""
    return Member(name, len(data), hashlib.sha256(data).hexdigest())


def write_archive(target: Path, manifest: Manifest, config: bytes, secrets: dict[str, bytes], database: Path) -> None:
    """Write the backup to `target` (which must not exist): into a temporary file beside it, created with mode
    0600, synced, then renamed, so that `target` is either the whole backup or absent."""
    if target.exists():
        raise HubdError(f"{target} exists already; give a new file name, or a directory")

    def fill(file: BinaryIO) -> None:
        with tarfile.open(fileobj=file, mode="w:gz", compresslevel=6) as tar:
            _add_bytes(tar, MANIFEST, manifest.to_json(), manifest.created_at)
            _add_bytes(tar, CONFIG, config, manifest.created_at)
            for entry in manifest.secrets:
                _add_bytes(tar, entry.member.name, secrets[entry.file], manifest.created_at)
            info = _info(DATABASE, manifest.database.size, manifest.created_at)
            with open(database, "rb") as db:
                tar.addfile(info, db)

    def write(partial: Path) -> None:
        write_synced_blocking(partial, 0o600, fill, exclusive=True)
        if target.exists():
            raise HubdError(f"{target} appeared while the backup was written; it is left as it is")

    replace_file_blocking(target, target.with_name(f".{target.name}.partial-{os.getpid()}"), write)


def read_head(source: Path) -> Head:
    """The manifest, config and secrets of a backup, each checked against the manifest; BackupInvalid if the
    file is not a backup, or is damaged."""
    with _open(source) as tar:
        members = _members(tar, source)
        first = next(members, None)
        if first is None or first.name != MANIFEST:
            raise BackupInvalid(f"{source} is not a hubd backup: it does not begin with {MANIFEST}")
        manifest = Manifest.from_json(_small(tar, first, source), source)
        config = _checked(tar, next(members, None), manifest.config, source)
        secrets = {entry.file: _checked(tar, next(members, None), entry.member, source) for entry in manifest.secrets}
    return Head(manifest, config, secrets)


def extract_database(source: Path, manifest: Manifest, target: Path) -> None:
    """Write the backup's database to the new file `target` (mode 0600), checking its size and SHA-256."""
    with _open(source) as tar:
        for info in _members(tar, source):
            if info.name != DATABASE:
                continue
            if info.size != manifest.database.size:
                raise BackupInvalid(f"{source}: the database in it is not the size its manifest says; the file is "
                                    "damaged")
            stream = tar.extractfile(info)
            if stream is None:
                break
            copied = write_synced_blocking(target, 0o600, functools.partial(_copy_out, stream, source), exclusive=True)
            if copied != (manifest.database.size, manifest.database.sha256):
                raise BackupInvalid(f"{source}: the database in it does not match its checksum; the file is damaged")
            return
    raise BackupInvalid(f"{source} holds no database ({DATABASE}); the file is damaged or cut short")


def _copy_out(stream: IO[bytes], source: Path, out: BinaryIO) -> tuple[int, str]:
    """Copy a member into `out`; its size and SHA-256."""
    sha = hashlib.sha256()
    size = 0
    while chunk := _read(stream, source):
        sha.update(chunk)
        size += len(chunk)
        out.write(chunk)
    return size, sha.hexdigest()


def is_sqlite_file(path: Path) -> bool:
    """True for a bare SQLite database (such as the copy hubd makes before a migration)."""
    try:
        with open(path, "rb") as file:
            return file.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _member_json(member: Member) -> dict[str, Any]:
    return {"name": member.name, "size": member.size, "sha256": member.sha256}


def _member(data: dict[str, Any]) -> Member:
    return Member(str(data["name"]), int(data["size"]), str(data["sha256"]))


def _plain_name(name: Any) -> str:
    """A secret's file name, never a path (restore writes it into a directory the user gives)."""
    text = str(name)
    if not text or "/" in text or text in (".", ".."):
        raise ValueError(f"{text!r} is not a file name")
    return text


def _info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o600
    info.mtime = int(mtime)
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    tar.addfile(_info(name, len(data), mtime), io.BytesIO(data))


@contextlib.contextmanager
def _open(source: Path) -> Iterator[tarfile.TarFile]:
    try:
        tar = tarfile.open(source, mode="r|gz")  # noqa: SIM115 (closed by the with below)
    except _READ_ERRORS as err:
        if isinstance(err, OSError) and err.errno is not None:  # the file itself: missing, unreadable
            raise HubdError(f"cannot read {source}: {err.strerror}") from err
        raise BackupInvalid(f"{source} is not a hubd backup, or it is damaged or cut short ({err})") from err
    with tar:
        yield tar


def _members(tar: tarfile.TarFile, source: Path) -> Iterator[tarfile.TarInfo]:
    while True:
        try:
            info = tar.next()
        except _READ_ERRORS as err:
            raise BackupInvalid(f"{source} is damaged or cut short ({err})") from err
        if info is None:
            return
        if not info.isfile():
            raise BackupInvalid(f"{source}: {info.name!r} is not a plain file; this is not a hubd backup")
        yield info


def _small(tar: tarfile.TarFile, info: tarfile.TarInfo, source: Path) -> bytes:
    if info.size > SMALL_MEMBER_BYTES:
        raise BackupInvalid(f"{source}: {info.name} is {info.size} bytes, more than a hubd backup holds there")
    stream = tar.extractfile(info)
    if stream is None:
        raise BackupInvalid(f"{source}: {info.name} cannot be read")
    return _read(stream, source, info.size)


def _checked(tar: tarfile.TarFile, info: tarfile.TarInfo | None, expected: Member, source: Path) -> bytes:
    if info is None or info.name != expected.name:
        found = "nothing" if info is None else repr(info.name)
        raise BackupInvalid(f"{source}: {expected.name} should come next but {found} does; the file is damaged")
    data = _small(tar, info, source)
    if digest_bytes(expected.name, data) != expected:
        raise BackupInvalid(f"{source}: {expected.name} does not match its checksum; the file is damaged")
    return data


def _read(stream: IO[bytes], source: Path, size: int = _CHUNK_BYTES) -> bytes:
    try:
        return stream.read(size)
    except _READ_ERRORS as err:
        raise BackupInvalid(f"{source} is damaged or cut short ({err})") from err
