"""A start no restart can mend (the data directory not writable, the port taken) is one line with its fix and exit
78, which the unit's RestartPreventExitStatus= keeps from a restart loop: a real `hubd run` each time."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubd_proc import free_port

from hubd.initconfig import init_config
from hubd.lifecycle import EXIT_CANNOT_START


@pytest.fixture
def config_dir() -> Iterator[Path]:
    """A config `hubd init` wrote with its placeholders filled in."""
    where = Path(tempfile.mkdtemp(prefix="hubd-start-"))
    made = init_config(where / "config.yaml", storage=where / "data" / "hubd.db")
    text = made.config.read_text().replace("https://CHANGE-ME.invalid", "http://127.0.0.1:9")
    made.config.write_text(text.replace("client_id: CHANGE-ME", "client_id: start-test")
                           .replace("port: 8080", f"port: {free_port()}").replace("local_port: 8081",
                                                                                  f"local_port: {free_port()}"))
    made.client_secret.write_text("secret\n")
    (where / "data").mkdir()
    try:
        yield where
    finally:
        shutil.rmtree(where)


def _run(config: Path, *, without_capabilities: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hubd", "run", "-c", str(config)]
    if without_capabilities:
        # root with no capability: a 0555 directory refuses it as it refuses any user, while the checkout (which may
        # be a 0700 `mktemp -d` no other user can read) stays its own to read.
        argv = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--", *argv]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)


def _critical(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CRITICAL" in line or "Traceback" in line]


def test_a_data_directory_hubd_may_not_write_is_one_line_with_the_fix_and_no_restart(config_dir: Path) -> None:
    root = os.geteuid() == 0
    if root and shutil.which("setpriv") is None:
        pytest.skip("root needs setpriv (util-linux) to run hubd without the capability to write anywhere")
    (config_dir / "data").chmod(0o555)
    done = _run(config_dir / "config.yaml", without_capabilities=root)
    assert done.returncode == EXIT_CANNOT_START, done.stderr
    (line,) = _critical(done.stderr)
    assert f"hubd cannot write {config_dir / 'data' / 'hubd.db'}: Permission denied" in line
    assert "StateDirectory" in line


def test_a_port_taken_is_one_line_asking_whether_hubd_runs_already(config_dir: Path) -> None:
    config = config_dir / "config.yaml"
    port = int(next(line for line in config.read_text().splitlines() if line.strip().startswith("port: ")
                    and "1883" not in line).split()[1])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        done = _run(config)
    assert done.returncode == EXIT_CANNOT_START, done.stderr
    (line,) = _critical(done.stderr)
    assert f"hubd cannot listen on 127.0.0.1:{port}: Address already in use:" in line
    assert "is hubd already running? (systemctl status hubd)" in line
