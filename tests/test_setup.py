"""`hubd setup`: scripted answers, the files and their modes, a re-run that changes only what is answered, and
the systemctl calls (an injected runner stands for systemd here; tests/system/test_deb_package.py runs the real
one)."""

from __future__ import annotations

import io
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml

from hubd.config.model import load_config
from hubd.driver.passwords import verify_password
from hubd.errors import HubdError
from hubd.setup import Setup

PUBLIC = "https://hub.example.com"
BASE = "https://api.example.com"
AUTH = "https://auth.example.com"


class FakeSystemd:
    """Records the commands; `systemctl is-active` says `state`; `hubd doctor` prints one line."""

    def __init__(self, state: str = "active") -> None:
        self.calls: list[list[str]] = []
        self.state = state

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        out = ""
        if argv[:2] == ["systemctl", "is-active"]:
            out = self.state + "\n"
        elif "doctor" in argv:
            out = "PASS config: ok\n"
        return subprocess.CompletedProcess(list(argv), 0, out, "")


def _scripted(answers: Sequence[str]) -> Iterator[str]:
    yield from answers


def _setup(tmp_path: Path, *, typed: Sequence[str] = (), secrets: Sequence[str] = (),
           systemd: FakeSystemd | None = None, flags: dict[str, str | None] | None = None,
           **kwargs: object) -> tuple[Setup, io.StringIO, FakeSystemd]:
    replies, secret_replies = _scripted(typed), _scripted(secrets)
    out, runner = io.StringIO(), systemd or FakeSystemd()
    setup = Setup(tmp_path / "etc" / "config.yaml", secrets_dir=tmp_path / "credstore", out=out,
                  ask=lambda prompt: next(replies), ask_secret=lambda prompt: next(secret_replies), runner=runner,
                  answers=flags or {},
                  mosquitto_drop_in=tmp_path / "mosquitto" / "conf.d" / "hubd.conf",
                  packaged_drop_in=tmp_path / "share" / "mosquitto-hubd.conf", active_timeout_s=5, **kwargs)  # type: ignore[arg-type]
    return setup, out, runner


def _first_answers() -> list[str]:
    # public URL, base URL, auth URL, clientId, broker host (Enter: 127.0.0.1), broker port (Enter: 1883)
    return [PUBLIC, BASE, AUTH, "client-123", "", ""]


def test_first_setup_writes_the_config_and_secrets_with_their_modes_starts_hubd_and_runs_doctor(
        tmp_path: Path) -> None:
    setup, out, systemd = _setup(tmp_path, typed=_first_answers(),
                                 secrets=["the-secret-from-the-console", "a long owner password"])
    assert setup.run() == 0, out.getvalue()

    config, credstore = tmp_path / "etc" / "config.yaml", tmp_path / "credstore"
    assert stat.S_IMODE(config.stat().st_mode) == 0o644
    for name in ("hubd.client-secret", "hubd.login-password"):
        assert stat.S_IMODE((credstore / name).stat().st_mode) == 0o600, name
    assert (credstore / "hubd.client-secret").read_text() == "the-secret-from-the-console\n"
    loaded = load_config(config, env={"CREDENTIALS_DIRECTORY": str(credstore)})
    assert str(loaded.http.public_url).rstrip("/") == PUBLIC
    assert str(loaded.platform.base_url).rstrip("/") == BASE
    assert loaded.platform.client_id == "client-123"
    assert loaded.mqtt.host == "127.0.0.1" and loaded.mqtt.port == 1883
    (account,) = loaded.driver.accounts
    assert verify_password(account.password.get_secret_value(), "a long owner password")
    assert "# the https:// URL the platform reaches this hub at" in config.read_text()  # init's comments kept

    assert ["systemctl", "enable", "hubd.service", "hubd-backup.timer"] in systemd.calls
    assert ["systemctl", "restart", "--no-block", "hubd.service"] in systemd.calls
    assert any("doctor" in call for call in systemd.calls)
    text = out.getvalue()
    assert "check-config: ok" in text and "hubd is running" in text and "PASS config: ok" in text
    assert "link the hub in the platform's app" in text and str(credstore / "hubd.login-password") in text


def test_a_rerun_changes_only_what_is_answered_and_keeps_the_secrets(tmp_path: Path) -> None:
    first, _, _ = _setup(tmp_path, typed=_first_answers(), secrets=["the-secret", "a long owner password"])
    assert first.run() == 0
    config = tmp_path / "etc" / "config.yaml"
    before = yaml.safe_load(config.read_text())
    secret_before = (tmp_path / "credstore" / "hubd.client-secret").read_text()

    # Enter everywhere but the broker's host; Enter for both secrets keeps them.
    again, out, _ = _setup(tmp_path, typed=["", "", "", "", "192.168.1.5", ""], secrets=["", ""])
    assert again.run() == 0, out.getvalue()

    after = yaml.safe_load(config.read_text())
    assert after["mqtt"]["host"] == "192.168.1.5"
    after["mqtt"]["host"] = before["mqtt"]["host"]
    assert after == before  # nothing else changed, the password hash included
    assert (tmp_path / "credstore" / "hubd.client-secret").read_text() == secret_before
    assert "changed: mqtt.host\n" in out.getvalue()


def test_a_scripted_install_takes_every_answer_from_flags_and_files(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("scripted-secret\n")
    (tmp_path / "password").write_text("a scripted owner password\n")
    (tmp_path / "mosquitto" / "conf.d").mkdir(parents=True)
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "mosquitto-hubd.conf").write_text("# mosquitto's limits for hubd\n")
    setup, out, systemd = _setup(
        tmp_path, assume_yes=True, client_secret_file=tmp_path / "secret", password_file=tmp_path / "password",
        flags={"public_url": PUBLIC, "base_url": BASE, "auth_url": AUTH, "client_id": "scripted"})
    assert setup.run() == 0, out.getvalue()
    assert (tmp_path / "credstore" / "hubd.client-secret").read_text() == "scripted-secret\n"
    assert (tmp_path / "mosquitto" / "conf.d" / "hubd.conf").read_text() == "# mosquitto's limits for hubd\n"
    assert ["systemctl", "try-restart", "mosquitto.service"] in systemd.calls


def test_scripted_without_a_value_never_set_names_the_flag_and_writes_no_half_config(tmp_path: Path) -> None:
    setup, _, systemd = _setup(tmp_path, assume_yes=True, flags={"public_url": PUBLIC})
    with pytest.raises(HubdError, match="--base-url is needed"):
        setup.run()
    assert "CHANGE-ME" in (tmp_path / "etc" / "config.yaml").read_text()  # `hubd init`'s, untouched
    assert systemd.calls == []


def test_a_wrong_answer_is_asked_again_and_a_config_problem_starts_nothing(tmp_path: Path) -> None:
    # "http://hub" is no https URL: asked again.
    setup, out, systemd = _setup(tmp_path, typed=["http://hub.example.com", *_first_answers()],
                                 secrets=["s", "short", "a long owner password"])
    assert setup.run() == 0
    assert "not an https URL" in out.getvalue() and "at least 12 characters" in out.getvalue()

    (tmp_path / "etc" / "config.yaml").write_text((tmp_path / "etc" / "config.yaml").read_text()
                                                   .replace("level: info", "level: loud"))
    again, out, systemd = _setup(tmp_path, assume_yes=True)
    assert again.run() == 2
    assert "log.level" in out.getvalue() and "hubd was not started" in out.getvalue()
    assert systemd.calls == []


def test_hubd_setup_has_a_flag_for_every_question() -> None:
    done = subprocess.run([sys.executable, "-m", "hubd", "setup", "--help"], capture_output=True, text=True,
                          timeout=60, check=False)
    for flag in ("--public-url", "--base-url", "--auth-url", "--client-id", "--client-secret-file", "--password-file",
                 "--mqtt-host", "--yes"):
        assert flag in done.stdout, flag
