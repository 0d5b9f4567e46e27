"""`hubd tokens list|revoke` and `hubd hash-password`, with the daemon's DB open or not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from driver_helpers import browser_session, command, error_of, log_in, make_config, running_driver, user_auth

from hubd.driver.admin import list_tokens, revoke_tokens
from hubd.driver.passwords import verify_password
from hubd.usertoken import TokenStatus

# HUBD_BIN: test another installed hubd; by default the console script of this venv
HUBD = Path(os.environ.get("HUBD_BIN") or Path(sys.executable).parent / "hubd")


async def test_list_and_revoke_while_the_service_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_driver(tmp_path) as driver, browser_session() as session:
        auth = await user_auth(session, driver.url)
        await log_in(session, driver.url, username="bob", password="plain-bob-pw")  # a code, never exchanged
        capsys.readouterr()
        assert list_tokens(driver.config) == 0
        table = capsys.readouterr().out
        assert table.splitlines()[0].split() == ["GRANT", "USER", "STATE", "LINKED", "REFRESHED", "TOKEN",
                                                 "EXPIRES", "REFRESH", "EXPIRES", "NOTE"]
        assert "alice" in table and "active" in table
        assert auth["userToken"] not in table and auth["refreshToken"] not in table

        assert revoke_tokens(driver.config, "alice") == 0
        assert "revoked 1 grant of 'alice'" in capsys.readouterr().out
        assert (await driver.service.verify_user_token(auth["userToken"])).status is TokenStatus.UNKNOWN
        assert error_of(await command(session, driver.url, "OAuthRefresh", auth))[0] == "E_INVALID_AUTHORIZATION"

        assert revoke_tokens(driver.config, "alice") == 1
        assert "no live tokens for 'alice'" in capsys.readouterr().err
    assert list_tokens(driver.config) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert "alice" in row and "revoked" in row and "hubd tokens revoke" in row


async def test_revoke_burns_unused_codes(tmp_path: Path) -> None:
    async with running_driver(tmp_path) as driver, browser_session() as session:
        await user_auth(session, driver.url)
        _, added = await log_in(session, driver.url)
        revoke_tokens(driver.config, "alice")
        name, _ = error_of(await command(session, driver.url, "OAuthGetToken", {"code": added["code"]}))
    assert name == "E_INVALID_AUTHORIZATION"


def test_list_on_a_fresh_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert list_tokens(make_config(tmp_path)) == 0
    assert capsys.readouterr().out == "no tokens issued\n"


def test_hash_password_console_script() -> None:
    result = subprocess.run([str(HUBD), "hash-password"], input="pi-password\n", capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    stored = result.stdout.strip()
    assert stored.startswith("scrypt$") and verify_password(stored, "pi-password")
    assert "pi-password" not in result.stdout


async def test_tokens_console_script(tmp_path: Path) -> None:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(f"storage:\n  path: {tmp_path / 'hubd.db'}\n"
                           "driver:\n  accounts:\n    - {username: bob, password: plain-bob-pw}\n")
    async with running_driver(tmp_path) as driver, browser_session() as session:
        _, added = await log_in(session, driver.url, username="bob", password="plain-bob-pw")
        assert (await command(session, driver.url, "OAuthGetToken", {"code": added["code"]}))["status"] == 0
    listed = subprocess.run([str(HUBD), "tokens", "-c", str(config_file), "list"], capture_output=True, text=True,
                            timeout=30, check=False)
    assert listed.returncode == 0, listed.stderr
    assert "bob" in listed.stdout and "active" in listed.stdout
    revoked = subprocess.run([str(HUBD), "tokens", "-c", str(config_file), "revoke", "bob"], capture_output=True,
                             text=True, timeout=30, check=False)
    assert revoked.returncode == 0, revoked.stderr
    again = subprocess.run([str(HUBD), "tokens", "-c", str(config_file), "revoke", "bob"], capture_output=True,
                           text=True, timeout=30, check=False)
    assert again.returncode == 1
