"""`hubd backup` and `hubd restore` as users run them, on an installation `hubd init` made: one private file with
a consistent online copy of the database and the config (secrets only when asked); restore refuses a damaged
backup, a database newer than the backup (unless --force, which keeps it beside), and writes the config and
the secrets only when asked. Real files, real SQLite, the console script as a subprocess."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from backup_helpers import (
    CLIENT_SECRET,
    clean_env,
    hubd,
    installation,
    manifest,
    members,
    ok,
    repack,
    rows,
    wrote_line,
)

from hubd.backup.make import back_up
from hubd.backup.redact import REDACTED
from hubd.config.model import load_config
from hubd.store.db import migrations


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """An installation `hubd init` made, its placeholders filled, its database created, one webhook made."""
    path = installation(tmp_path / "pi")
    ok("db-migrate", "-c", str(path))
    ok("webhook", "create", "-c", str(path), "--name", "kitchen")
    return path


def database(config: Path) -> Path:
    return config.parents[1] / "state" / "hubd.db"


def test_backup_is_one_private_file_with_the_database_and_the_config_and_no_secret(config: Path,
                                                                                   tmp_path: Path) -> None:
    out = ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz"))
    path, size = wrote_line(out)
    assert path == tmp_path / "b.tar.gz" and size == path.stat().st_size
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    files = members(path)
    assert list(files) == ["manifest.json", "config.yaml", "hubd.db"]
    # The config as it is, but for the account's password hash `hubd init` wrote in it: redacted.
    written = config.read_text()
    [hashed] = re.findall(r'password: "(scrypt\$[^"]+)"', written)
    assert files["config.yaml"].decode() == written.replace(hashed, REDACTED)
    assert "redacted the secrets written in the config itself" in out and "driver.accounts[0].password" in out
    assert CLIENT_SECRET.encode() not in gzip.decompress(path.read_bytes())
    assert hashed.encode() not in gzip.decompress(path.read_bytes())
    meta = manifest(path)
    assert meta["schemaVersion"] == len(migrations()) and meta["secrets"] == []
    # What was left out is named, with how to include it.
    assert "left out the secrets (add --with-secrets" in out and "platform.client_secret_file" in out
    assert "the login password" not in out  # not found: CREDENTIALS_DIRECTORY unset and the secrets elsewhere
    # The database copy is a database, with the webhook.
    copy = tmp_path / "copy.db"
    copy.write_bytes(files["hubd.db"])
    assert rows(copy, "SELECT name FROM webhook_tokens") == [("kitchen",)]
    assert rows(copy, "PRAGMA integrity_check") == [("ok",)]
    # Never an existing file overwritten.
    again = hubd("backup", "-c", str(config), str(path))
    assert again.returncode == 1 and "exists already" in again.stderr and path.stat().st_size == size


def test_with_secrets_they_come_along_and_restore_puts_them_only_where_told(config: Path, tmp_path: Path) -> None:
    credstore = config.parents[1] / "credstore"
    env = clean_env(CREDENTIALS_DIRECTORY=str(credstore))
    out = ok("backup", "-c", str(config), "--with-secrets", str(tmp_path / "b.tar.gz"), env=env)
    path, _ = wrote_line(out)
    files = members(path)
    assert files["secrets/hubd.client-secret"] == (CLIENT_SECRET + "\n").encode()
    assert files["secrets/hubd.login-password"] == (credstore / "hubd.login-password").read_bytes()
    assert "left out" not in out

    out = ok("restore", "-c", str(config), str(path))  # secrets not asked for: named, not written
    assert "add --secrets-dir DIR" in out
    target = tmp_path / "new-credstore"
    out = ok("restore", "-c", str(config), "--secrets-dir", str(target), str(path))
    for name in ("hubd.client-secret", "hubd.login-password"):
        assert (target / name).read_bytes() == (credstore / name).read_bytes()
        assert stat.S_IMODE((target / name).stat().st_mode) == 0o600
    # A different file there is kept beside, never overwritten.
    (target / "hubd.client-secret").write_text("rotated since\n")
    out = ok("restore", "-c", str(config), "--secrets-dir", str(target), str(path))
    [kept] = target.glob("hubd.client-secret.before-restore-*")
    assert kept.read_text() == "rotated since\n" and str(kept) in out
    assert (target / "hubd.client-secret").read_text() == CLIENT_SECRET + "\n"


# A writer like hubd's: WAL, nothing checkpointed (so a copy of the database file alone would hold none of its
# rows), two rows per transaction; it says how many pairs it committed after each commit.
_WRITER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("CREATE TABLE IF NOT EXISTS pairs (n INTEGER, half INTEGER)")
n = 0
while True:
    n += 1
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO pairs VALUES (?, 0)", (n,))
    conn.execute("INSERT INTO pairs VALUES (?, 1)", (n,))
    conn.execute("COMMIT")
    print(n, flush=True)
"""


def test_a_backup_taken_while_another_process_commits_is_one_consistent_moment(config: Path, tmp_path: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(database(config))], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert writer.stdout is not None
        for i in range(3):
            before = 0
            while before < 500 * (i + 1):  # it commits on while the backups are taken
                before = int(writer.stdout.readline())
            path, _ = wrote_line(ok("backup", "-c", str(config), str(tmp_path / f"b{i}.tar.gz")))
            copy = tmp_path / f"copy{i}.db"
            copy.write_bytes(members(path)["hubd.db"])
            [(count, pairs)] = rows(copy, "SELECT count(*), count(DISTINCT n) FROM pairs")
            assert count == 2 * pairs, "a transaction was copied half"
            assert pairs >= before, "rows committed before the backup began are missing (a file copy?)"
            assert rows(copy, "PRAGMA integrity_check") == [("ok",)]
    finally:
        writer.kill()
        writer.wait()


def test_restore_refuses_a_newer_database_unless_forced_and_then_keeps_it_beside(config: Path, tmp_path: Path) -> None:
    path, _ = wrote_line(ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz")))
    ok("webhook", "create", "-c", str(config), "--name", "made-after-the-backup")

    refused = hubd("restore", "-c", str(config), str(path))
    assert refused.returncode == 1
    assert "is newer than the backup: it recorded events, grants, tokens or webhooks until" in refused.stderr
    assert "--force" in refused.stderr
    assert len(rows(database(config), "SELECT id FROM webhook_tokens")) == 2  # untouched
    assert not list(database(config).parent.glob("*.before-restore-*"))

    out = ok("restore", "-c", str(config), "--force", str(path))
    assert rows(database(config), "SELECT name FROM webhook_tokens") == [("kitchen",)]
    [kept] = database(config).parent.glob("hubd.db.before-restore-*")
    assert f"kept the database it replaces as {kept}" in out
    assert sorted(rows(kept, "SELECT name FROM webhook_tokens")) == [("kitchen",), ("made-after-the-backup",)]
    assert "integrity_check: ok" in out


def test_a_new_database_that_recorded_nothing_is_not_newer(config: Path, tmp_path: Path) -> None:
    path, _ = wrote_line(ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz")))
    for leftover in database(config).parent.iterdir():
        leftover.unlink()
    ok("db-migrate", "-c", str(config))  # what a hubd started before the restore would make
    ok("restore", "-c", str(config), str(path))
    assert rows(database(config), "SELECT name FROM webhook_tokens") == [("kitchen",)]


def test_restore_onto_a_wiped_disk_takes_the_config_only_when_asked(config: Path, tmp_path: Path) -> None:
    path, _ = wrote_line(ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz")))
    original = config.read_bytes()
    shutil.rmtree(config.parents[1] / "state")
    config.unlink()

    refused = hubd("restore", "-c", str(config), str(path))
    assert refused.returncode == 2 and "add --with-config" in refused.stderr
    out = ok("restore", "-c", str(config), "--with-config", str(path))
    [hashed] = re.findall(r'password: "(scrypt\$[^"]+)"', original.decode())
    assert config.read_text() == original.decode().replace(hashed, REDACTED)  # nothing to take it from
    assert stat.S_IMODE(config.stat().st_mode) == 0o644
    assert f"restored the config to {config}" in out
    assert "fill in the secrets the backup left out" in out and "driver.accounts[0].password" in out
    assert rows(database(config), "SELECT name FROM webhook_tokens") == [("kitchen",)]
    assert stat.S_IMODE(database(config).stat().st_mode) == 0o600
    assert "add --secrets-dir" not in out and "put these back by hand" in out  # made without --with-secrets

    # A config that differs is kept beside, never overwritten.
    config.write_text(original.decode().replace("level: info", "level: debug"))
    out = ok("restore", "-c", str(config), "--with-config", str(path))
    [kept] = config.parent.glob("config.yaml.before-restore-*")
    assert "level: debug" in kept.read_text() and config.read_bytes() == original  # its password hash put back


def test_restore_refuses_a_damaged_or_foreign_file_and_changes_nothing(config: Path, tmp_path: Path) -> None:
    path, _ = wrote_line(ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz")))
    before = database(config).read_bytes()

    def flip_a_database_byte(files: dict[str, bytes]) -> None:
        db = bytearray(files["hubd.db"])
        db[len(db) // 2] ^= 0xFF
        files["hubd.db"] = bytes(db)

    def tamper_the_config(files: dict[str, bytes]) -> None:
        files["config.yaml"] += b"\n# edited\n"

    for name, change in (("db", flip_a_database_byte), ("config", tamper_the_config)):
        bad = tmp_path / f"bad-{name}.tar.gz"
        repack(path, bad, change)
        done = hubd("restore", "-c", str(config), "--force", str(bad))
        assert done.returncode == 1 and "does not match its checksum; the file is damaged" in done.stderr, name
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    done = hubd("restore", "-c", str(config), "--force", str(cut))
    assert done.returncode == 1 and "damaged or cut short" in done.stderr
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a backup")
    done = hubd("restore", "-c", str(config), "--force", str(foreign))
    assert done.returncode == 1 and "is not a hubd backup" in done.stderr

    assert database(config).read_bytes() == before
    assert not list(database(config).parent.glob("*.before-restore-*"))
    assert sorted(p.name for p in database(config).parent.iterdir()) == ["hubd.db"]  # no copy left behind


def test_a_backup_of_a_schema_this_hubd_does_not_know_is_refused(config: Path, tmp_path: Path) -> None:
    path, _ = wrote_line(ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz")))

    def from_the_future(files: dict[str, bytes]) -> None:
        meta = json.loads(files["manifest.json"])
        meta["schemaVersion"], meta["hubdVersion"] = len(migrations()) + 1, "9.9.9"
        files["manifest.json"] = json.dumps(meta).encode()

    newer = tmp_path / "newer.tar.gz"
    repack(path, newer, from_the_future)
    done = hubd("restore", "-c", str(config), "--force", str(newer))
    assert done.returncode == 1
    assert f"newer than this hubd knows ({len(migrations())}); restore it with hubd 9.9.9 or newer" in done.stderr


def test_keep_leaves_the_newest_backups_in_a_directory(config: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load_config(config, env={}, secrets=False)
    backups = tmp_path / "backups"
    day_s = 86400.0
    for night in range(4):
        assert back_up(config, loaded, backups, into_directory=True, with_secrets=False, keep=2,
                       clock=lambda night=night: 1_800_000_000.0 + night * day_s) == 0
    assert sorted(os.listdir(backups)) == ["hubd-backup-20270117T080000Z.tar.gz",
                                           "hubd-backup-20270118T080000Z.tar.gz"]
    assert stat.S_IMODE(backups.stat().st_mode) == 0o700
    assert f"kept the newest 2 backups in {backups}; removed hubd-backup-20270116T080000Z.tar.gz" in \
        capsys.readouterr().out
    done = hubd("backup", "-c", str(config), "--keep", "2", str(tmp_path / "one-file.tar.gz"))
    assert done.returncode == 1 and "--keep needs a directory" in done.stderr


def test_restore_leaves_no_receipts_of_the_backups_broker_session(config: Path, tmp_path: Path) -> None:
    conn = sqlite3.connect(database(config))
    conn.execute("INSERT INTO mqtt_receipts (mid, topic, digest, batch) VALUES (7, 'hubd/device/bell-1/event', 1, 1)")
    conn.commit()
    conn.close()
    path, _ = wrote_line(ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz")))
    ok("restore", "-c", str(config), str(path))
    assert rows(database(config), "SELECT count(*) FROM mqtt_receipts") == [(0,)]
    assert rows(database(config), "SELECT name FROM webhook_tokens") == [("kitchen",)]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can hand files to another user")
def test_run_as_root_what_backup_and_restore_make_belongs_to_hubds_user(config: Path, tmp_path: Path) -> None:
    # Under systemd, hubd's state directory belongs to its (dynamic) user, and the nightly backup runs as that user.
    state = database(config).parent
    hubs_user = 61234
    os.chown(state, hubs_user, hubs_user)
    path, _ = wrote_line(ok("backup", "-c", str(config), str(state / "backups") + "/"))
    assert (path.parent.stat().st_uid, path.stat().st_uid) == (hubs_user, hubs_user)
    for leftover in state.glob("hubd.db*"):
        leftover.unlink()
    ok("restore", "-c", str(config), str(path))
    assert (database(config).stat().st_uid, database(config).stat().st_gid) == (hubs_user, hubs_user)


def test_a_database_that_cannot_be_read_is_replaced_only_with_force_and_moved_aside(config: Path,
                                                                                    tmp_path: Path) -> None:
    path, _ = wrote_line(ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz")))
    garbage = b"this was a database before the SD card failed\n" * 100
    database(config).write_bytes(garbage)
    refused = hubd("restore", "-c", str(config), str(path))
    assert refused.returncode == 1 and "cannot be read as a database" in refused.stderr and "--force" in refused.stderr
    assert database(config).read_bytes() == garbage
    out = ok("restore", "-c", str(config), "--force", str(path))
    [moved] = database(config).parent.glob("hubd.db.before-restore-*")
    assert moved.read_bytes() == garbage and f"to {moved}" in out
    assert rows(database(config), "SELECT name FROM webhook_tokens") == [("kitchen",)]


def _with_database_changed(backup: Path, target: Path, sql: str, tmp_path: Path) -> None:
    """A copy of `backup` whose database ran `sql`, its manifest's checksum rebuilt to match (as an attacker
    who can write the file would)."""
    def change(files: dict[str, bytes]) -> None:
        db = tmp_path / "tampered.db"
        db.write_bytes(files["hubd.db"])
        conn = sqlite3.connect(db, isolation_level=None)
        conn.executescript(sql)
        conn.close()
        files["hubd.db"] = db.read_bytes()
        db.unlink()
        meta = json.loads(files["manifest.json"])
        meta["database"]["size"] = len(files["hubd.db"])
        meta["database"]["sha256"] = hashlib.sha256(files["hubd.db"]).hexdigest()
        files["manifest.json"] = json.dumps(meta).encode()

    repack(backup, target, change)


@pytest.mark.parametrize(("sql", "named"), [
    ("CREATE TRIGGER pwn AFTER INSERT ON outbox BEGIN SELECT RAISE(ABORT, 'pwned by trigger'); END;",
     "trigger 'pwn' on outbox that the migrations do not make"),
    ("CREATE VIEW peek AS SELECT access_token FROM grants;", "view 'peek' that the migrations do not make"),
    ("CREATE INDEX by_token ON grants (access_token);", "index 'by_token' on grants that the migrations do not make"),
    ("ALTER TABLE devices ADD COLUMN extra TEXT;", "table 'devices' differs from what the migrations make"),
    ("DROP INDEX outbox_by_user;", "index 'outbox_by_user' is missing"),
], ids=["trigger", "view", "index", "altered-table", "dropped-index"])
def test_restore_refuses_a_database_whose_schema_the_migrations_did_not_make_naming_it(
        config: Path, tmp_path: Path, sql: str, named: str) -> None:
    path, _ = wrote_line(ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz")))
    before = database(config).read_bytes()
    tampered = tmp_path / "tampered.tar.gz"
    _with_database_changed(path, tampered, sql, tmp_path)
    done = hubd("restore", "-c", str(config), "--force", str(tampered))
    assert done.returncode == 1, done.stdout
    assert named in done.stderr and "nothing was restored" in done.stderr
    assert database(config).read_bytes() == before
    assert sorted(p.name for p in database(config).parent.iterdir()) == ["hubd.db"]
    # The genuine backup still restores.
    ok("restore", "-c", str(config), "--force", str(path))
    assert rows(database(config), "SELECT name FROM webhook_tokens") == [("kitchen",)]


def test_without_secrets_a_backup_carries_no_secret_written_in_the_config_and_restore_puts_them_back_or_names_them(
        config: Path, tmp_path: Path) -> None:
    text = config.read_text()
    text = re.sub(r"client_secret_file: .*", 'client_secret: "inline-client-s3cret"', text)
    text = text.replace("  port: 1883\n", "  port: 1883\n  username: hubd\n  password: 'broker-pa55word'\n")
    text = text.replace("      admin: true\n", "      admin: true\n    - {username: guest, password: plain-guest-pw}\n")
    config.write_text(text)
    original = config.read_bytes()
    before = load_config(config, env={}, secrets=True)

    out = ok("backup", "-c", str(config), str(tmp_path / "b.tar.gz"))
    path, _ = wrote_line(out)
    everything = gzip.decompress(path.read_bytes())
    for secret in (b"inline-client-s3cret", b"broker-pa55word", b"plain-guest-pw", b"scrypt$"):
        assert secret not in everything, secret
    for key in ("platform.client_secret", "mqtt.password", "driver.accounts[0].password",
                "driver.accounts[1].password"):
        assert key in out, key
    assert "# the event API" in members(path)["config.yaml"].decode()  # the rest as it was, comments too
    with_secrets = wrote_line(ok("backup", "-c", str(config), "--with-secrets", str(tmp_path / "all.tar.gz"),
                                 env=clean_env(CREDENTIALS_DIRECTORY=str(config.parents[1] / "credstore"))))[0]
    assert members(with_secrets)["config.yaml"] == original

    # Restored over the config it came from: the secrets are taken from it, the same config again.
    out = ok("restore", "-c", str(config), "--with-config", str(path))
    assert "fill in" not in out
    assert load_config(config, env={}, secrets=True) == before

    # Onto a wiped disk: each one to fill in is named, and until then the config does not check.
    config.unlink()
    out = ok("restore", "-c", str(config), "--with-config", str(path))
    assert "fill in the secrets the backup left out" in out and "hubd hash-password" in out
    for key in ("platform.client_secret", "mqtt.password", "driver.accounts[0].password",
                "driver.accounts[1].password"):
        assert key in out, key
    checked = hubd("check-config", "-c", str(config))
    assert checked.returncode != 0 and "platform.client_secret" in checked.stdout + checked.stderr
    assert "driver.accounts[1].password" in checked.stdout + checked.stderr
