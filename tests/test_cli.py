"""The command line as users type it: every form CONTRACT.md section 1 and README.md show is accepted.

The console script runs as a subprocess against a real config file and a real SQLite database.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs import shown_commands

from hubd.cli import _parser

# HUBD_BIN: test another installed hubd; by default the console script of this venv
HUBD = Path(os.environ.get("HUBD_BIN") or Path(sys.executable).parent / "hubd")
README = Path(__file__).resolve().parents[1] / "README.md"


def hubd(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the console script; never raises on a non-zero exit."""
    return subprocess.run([str(HUBD), *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"storage:\n  path: {tmp_path / 'hubd.db'}\n"
                    "driver:\n  accounts:\n    - {username: bob, password: plain-bob-pw}\n")
    return path


def test_webhook_forms_of_the_contract(config_file: Path) -> None:
    cfg = str(config_file)
    created = hubd("webhook", "create", "-c", cfg, "--name", "kitchen")
    assert created.returncode == 0, created.stderr
    hook = json.loads(created.stdout)
    assert set(hook) >= {"id", "name", "token", "url"} and hook["name"] == "kitchen"
    default_name = hubd("webhook", "create", "-c", cfg)
    assert default_name.returncode == 0, default_name.stderr
    assert json.loads(default_name.stdout)["name"] == "webhook"

    listed = hubd("webhook", "list", "-c", cfg)
    assert listed.returncode == 0, listed.stderr
    assert "kitchen" in listed.stdout and hook["token"] not in listed.stdout
    as_json = hubd("webhook", "list", "-c", cfg, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout.splitlines()[0])["name"] == "kitchen"

    rotated = hubd("webhook", "rotate", "-c", cfg, str(hook["id"]))
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout)["token"] != hook["token"]
    revoked = hubd("webhook", "revoke", "-c", cfg, "kitchen")
    assert revoked.returncode == 0, revoked.stderr

    # the config option before the action keeps working
    assert hubd("webhook", "-c", cfg, "list").returncode == 0


def test_tokens_forms_of_the_readme(config_file: Path) -> None:
    cfg = str(config_file)
    listed = hubd("tokens", "list", "-c", cfg)
    assert (listed.returncode, listed.stdout) == (0, "no tokens issued\n"), listed.stderr
    revoked = hubd("tokens", "revoke", "-c", cfg, "bob")
    assert revoked.returncode == 1 and "no live tokens for 'bob'" in revoked.stderr
    assert hubd("tokens", "-c", cfg, "list").returncode == 0


def test_config_after_the_action_wins(config_file: Path) -> None:
    args = _parser().parse_args(["tokens", "-c", "/nowhere.yaml", "list", "-c", str(config_file)])
    assert args.config == config_file
    args = _parser().parse_args(["webhook", "revoke", "7"])
    assert str(args.config) == "/etc/hubd/config.yaml"


def readme_commands() -> list[str]:
    """Every `hubd ...` command README.md shows, in shell blocks and in inline code."""
    return shown_commands(README.read_text(encoding="utf-8"))


def test_readme_shows_commands() -> None:
    commands = readme_commands()
    assert "hubd tokens list -c CONFIG" in commands and "hubd webhook revoke ID" in commands


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_parses(command: str) -> None:
    words = shlex.split(command)[1:]
    try:
        args = _parser().parse_args(words)
    except SystemExit as exit_:
        pytest.fail(f"README.md shows `{command}`, which hubd refuses (exit {exit_.code})")
    assert getattr(args, "handler", None) is not None, command
