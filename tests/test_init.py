"""`hubd init`: a config for a real installation that refuses to run until its placeholders are filled in."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

from hubd.config.model import load_config
from hubd.driver.passwords import verify_password

HUBD = [sys.executable, "-m", "hubd"]


def _hubd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HUBD, *args], capture_output=True, text=True, timeout=60, env=env)


def _fill(config: Path, secret: Path) -> None:
    text = config.read_text()
    text = text.replace("public_url: https://CHANGE-ME.invalid", "public_url: https://hub.example.com")
    text = text.replace("base_url: https://CHANGE-ME.invalid", "base_url: https://api.example.com")
    text = text.replace("auth_url: https://CHANGE-ME.invalid", "auth_url: https://auth.example.com")
    text = text.replace("client_id: CHANGE-ME", "client_id: abc123")
    config.write_text(text)
    secret.write_text("s3cret-from-the-console\n")


def test_init_writes_a_config_without_demo_values_and_secrets_readable_only_by_their_owner(tmp_path: Path) -> None:
    config = tmp_path / "hubd" / "config.yaml"
    done = _hubd("init", "-c", str(config))
    assert done.returncode == 0, done.stderr
    secret, login = config.parent / "hubd.client-secret", config.parent / "hubd.login-password"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(login.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.stat().st_mode) == 0o644
    text = config.read_text()
    assert "demo" not in text.lower() and "127.0.0.1:9000" not in text
    password = login.read_text().strip()
    assert len(password) >= 20 and password not in text  # only its hash is in the config
    assert str(config.parent / "hubd.db") in text
    # The secrets are next to the config, where hubd finds them without CREDENTIALS_DIRECTORY.
    assert "wrote" in done.stdout and f"  hubd check-config -c {config}\n" in done.stdout

    _fill(config, secret)
    loaded = load_config(config, env={"CREDENTIALS_DIRECTORY": str(config.parent)})
    (account,) = loaded.driver.accounts
    assert verify_password(account.password.get_secret_value(), password)
    assert account.admin  # the same login signs in on the devices page
    assert loaded.platform.client_secret is not None
    assert loaded.platform.client_secret.get_secret_value() == "s3cret-from-the-console"
    assert loaded.platform.reporting_enabled


def test_check_config_names_every_placeholder_left_and_what_to_put_there(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    assert _hubd("init", "-c", str(config)).returncode == 0
    env = {"CREDENTIALS_DIRECTORY": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = _hubd("check-config", "-c", str(config), env=env)
    assert done.returncode == 2
    keys = sorted(re.findall(r"^(\S+): still the placeholder", done.stderr, re.M))
    assert keys == ["http.public_url", "platform.auth_url", "platform.base_url", "platform.client_id",
                    "platform.client_secret"]
    assert "clientSecret" in done.stderr and "(line " in done.stderr
    assert "CHANGE-ME: replace" not in done.stderr  # a secret's content is never printed

    _fill(config, tmp_path / "hubd.client-secret")
    done = _hubd("check-config", "-c", str(config), env=env)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_init_never_overwrites_and_writes_nothing_when_a_file_exists(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    (tmp_path / "hubd.login-password").write_text("mine\n")
    done = _hubd("init", "-c", str(config))
    assert done.returncode == 1
    assert "hubd.login-password exists already" in done.stderr
    assert not config.exists() and not (tmp_path / "hubd.client-secret").exists()
    assert (tmp_path / "hubd.login-password").read_text() == "mine\n"


def test_init_puts_the_secrets_where_told_and_a_config_under_etc_uses_the_units_state_directory(
        tmp_path: Path) -> None:
    from hubd.initconfig import init_config

    made = init_config(tmp_path / "config.yaml", secrets_dir=tmp_path / "credstore")
    assert made.client_secret == tmp_path / "credstore" / "hubd.client-secret"
    assert stat.S_IMODE((tmp_path / "credstore").stat().st_mode) == 0o700
    assert made.storage == tmp_path / "hubd.db"


def test_secrets_where_hubd_does_not_look_need_credentials_directory_and_the_problem_says_so(tmp_path: Path) -> None:
    config, secrets = tmp_path / "config.yaml", tmp_path / "elsewhere"
    done = _hubd("init", "-c", str(config), "--secrets-dir", str(secrets))
    assert done.returncode == 0
    assert f"  CREDENTIALS_DIRECTORY={secrets} hubd check-config -c {config}\n" in done.stdout
    done = _hubd("check-config", "-c", str(config), env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert ("platform.client_secret_file: environment variable CREDENTIALS_DIRECTORY is not set, and "
            "hubd.client-secret is in none of the directories hubd looks in instead (/etc/credstore, /run/credstore, "
            f"/usr/lib/credstore, {tmp_path}); systemd sets it") in done.stderr
