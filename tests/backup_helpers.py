"""Shared by the backup tests: the console script as users run it, an installation made by `hubd init` (or a
small config), and reading or re-packing a backup file."""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hubd_proc import REPO

HUBD = [sys.executable, "-m", "hubd"]
CLIENT_SECRET = "s3cret-from-the-console"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a command typed by hand: no CREDENTIALS_DIRECTORY (only systemd sets it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CREDENTIALS_DIRECTORY", "NOTIFY_SOCKET")}
    return {**env, **extra}


def hubd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `hubd ARGS` (never raises on a non-zero exit)."""
    return subprocess.run([*HUBD, *args], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=env if env is not None else clean_env(), check=False)


def ok(*args: str, env: dict[str, str] | None = None) -> str:
    """Run `hubd ARGS`, which must exit 0; its stdout."""
    done = hubd(*args, env=env)
    assert done.returncode == 0, f"hubd {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


def fill_init_config(config: Path, secret_file: Path, *, secret: str = CLIENT_SECRET) -> None:
    """Replace the placeholders `hubd init` wrote, as the README says to (the config, then the client secret)."""
    text = config.read_text()
    for old, new in (("public_url: https://CHANGE-ME.invalid", "public_url: https://hub.example.com"),
                     ("base_url: https://CHANGE-ME.invalid", "base_url: https://api.example.com"),
                     ("auth_url: https://CHANGE-ME.invalid", "auth_url: https://auth.example.com"),
                     ("client_id: CHANGE-ME", "client_id: abc123")):
        assert old in text, old
        text = text.replace(old, new)
    config.write_text(text)
    secret_file.write_text(secret + "\n")


def installation(root: Path, *, secrets_dir: Path | None = None) -> Path:
    """`hubd init` under `root` (config in root/etc, database in root/state), placeholders filled; the config."""
    config = root / "etc" / "config.yaml"
    secrets = secrets_dir or root / "credstore"
    ok("init", "-c", str(config), "--secrets-dir", str(secrets), "--storage", str(root / "state" / "hubd.db"))
    fill_init_config(config, secrets / "hubd.client-secret")
    return config


def members(backup: Path) -> dict[str, bytes]:
    """Every file in a backup, by name, in order."""
    with tarfile.open(backup, "r:gz") as tar:
        out: dict[str, bytes] = {}
        for info in tar.getmembers():
            stream = tar.extractfile(info)
            assert stream is not None, info.name
            out[info.name] = stream.read()
        return out


def repack(backup: Path, target: Path, change: Callable[[dict[str, bytes]], None]) -> None:
    """Write a copy of a backup whose members `change` edited (in place, order kept)."""
    files = members(backup)
    change(files)
    with tarfile.open(target, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def manifest(backup: Path) -> dict[str, Any]:
    """A backup's manifest.json."""
    return dict(json.loads(members(backup)["manifest.json"]))


def rows(database: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    """Rows of a query on a database file (opened and closed here)."""
    conn = sqlite3.connect(database)
    try:
        return [tuple(r) for r in conn.execute(sql, args)]
    finally:
        conn.close()


def wrote_line(stdout: str) -> tuple[Path, int]:
    """The path and byte size `hubd backup` printed on its first line."""
    found = re.match(r"wrote (\S+) \((?:[\d.]+ [kMG]B, )?(\d+) bytes\)", stdout)
    assert found is not None, stdout
    return Path(found.group(1)), int(found.group(2))
