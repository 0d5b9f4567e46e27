"""`hubd setup`: scripted answers, the files and their modes, a re-run that changes only what is answered, the
broker login tried against a real mosquitto, and the systemctl calls (an injected runner stands for systemd here;
tests/system/test_deb_package.py runs the real one)."""

from __future__ import annotations

import io
import logging
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import yaml
from mosquitto import Mosquitto, free_port

from hubd.config.model import load_config, parse_config
from hubd.driver.passwords import verify_password
from hubd.errors import ConfigError, HubdError
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
                  packaged_drop_in=tmp_path / "share" / "mosquitto-hubd.conf", active_timeout_s=5,
                  **{"start_anyway": True, **kwargs})  # type: ignore[arg-type]
    # start_anyway: the tests not about the broker start hubd whatever the machine's 127.0.0.1:1883 says.
    return setup, out, runner


def _first_answers() -> list[str]:
    # public URL, base URL, auth URL, clientId, broker host (Enter: 127.0.0.1), broker port (Enter: 1883),
    # broker username (Enter: none)
    return [PUBLIC, BASE, AUTH, "client-123", "", "", ""]


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
    again, out, _ = _setup(tmp_path, typed=["", "", "", "", "192.168.1.5", "", ""], secrets=["", ""],
                           start=False)  # no broker login tried on a LAN address from a test
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
                 "--mqtt-host", "--mqtt-port", "--mqtt-username", "--mqtt-password-file", "--start-anyway",
                 "--yes"):
        assert flag in done.stdout, flag


# The broker login: a real mosquitto that refuses anonymous clients (allow_anonymous false, a password_file made
# with mosquitto_passwd -b -c), on a free port.

MQTT_PASSWORD = "broker pass-word 7"


def _with_login(broker: Mosquitto, username: str = "hubd") -> list[str]:
    # as _first_answers, with the test broker's port and a username
    return [PUBLIC, BASE, AUTH, "client-123", "", str(broker.port), username]


def _never_shown(tmp_path: Path, out: io.StringIO, caplog: pytest.LogCaptureFixture, password: str) -> None:
    """The broker's password is in its 0600 file and nowhere else: not in setup's output, its log, or the config."""
    assert password not in out.getvalue()
    assert password not in caplog.text
    assert password not in (tmp_path / "etc" / "config.yaml").read_text()


def test_a_broker_login_that_works_is_written_with_its_password_in_a_0600_file_and_hubd_is_started(
        tmp_path: Path, make_mosquitto: Callable[..., Mosquitto], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    broker = make_mosquitto(users={"hubd": MQTT_PASSWORD})
    setup, out, systemd = _setup(tmp_path, typed=_with_login(broker), start_anyway=False,
                                 secrets=[MQTT_PASSWORD, "the-secret-from-the-console", "a long owner password"])
    assert setup.run() == 0, out.getvalue()

    credstore = tmp_path / "credstore"
    stored = credstore / "hubd.mqtt-password"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stored.read_text() == MQTT_PASSWORD + "\n"
    text = (tmp_path / "etc" / "config.yaml").read_text()
    assert "  username: hubd" in text
    assert "  password_file: ${CREDENTIALS_DIRECTORY}/hubd.mqtt-password\n" in text  # as the unit's LoadCredential=
    loaded = load_config(tmp_path / "etc" / "config.yaml", env={"CREDENTIALS_DIRECTORY": str(credstore)})
    assert loaded.mqtt.port == broker.port and loaded.mqtt.username == "hubd"
    assert loaded.mqtt.password is not None and loaded.mqtt.password.get_secret_value() == MQTT_PASSWORD
    assert f"broker login: ok (127.0.0.1:{broker.port}, user 'hubd')" in out.getvalue()
    assert ["systemctl", "restart", "--no-block", "hubd.service"] in systemd.calls
    assert "hubd is running" in out.getvalue()
    _never_shown(tmp_path, out, caplog, MQTT_PASSWORD)


def test_a_wrong_broker_password_is_refused_in_one_line_with_the_fix_and_hubd_is_not_started(
        tmp_path: Path, make_mosquitto: Callable[..., Mosquitto], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    broker = make_mosquitto(users={"hubd": MQTT_PASSWORD})
    (tmp_path / "wrong").write_text("not the broker's password\n")
    setup, out, systemd = _setup(tmp_path, typed=_with_login(broker), start_anyway=False,
                                 mqtt_password_file=tmp_path / "wrong",
                                 secrets=["the-secret-from-the-console", "a long owner password"])
    assert setup.run() == 2, out.getvalue()

    (line,) = [line for line in out.getvalue().splitlines() if line.startswith("broker login:")]
    assert line.startswith(f"broker login: FAILED, refused: not authorised (127.0.0.1:{broker.port}, user 'hubd'); "
                           "fix: check the password (`sudo mosquitto_passwd /etc/mosquitto/passwd hubd`"), line
    assert "hubd was not started" in out.getvalue()
    assert not any(call[:2] in (["systemctl", "enable"], ["systemctl", "restart"]) for call in systemd.calls)
    _never_shown(tmp_path, out, caplog, "not the broker's password")

    # --start-anyway: the same refusal said, and hubd started all the same.
    anyway, out, systemd = _setup(tmp_path, assume_yes=True, start_anyway=True)
    assert anyway.run() == 0, out.getvalue()
    assert "broker login: FAILED, refused: not authorised" in out.getvalue()
    assert ["systemctl", "restart", "--no-block", "hubd.service"] in systemd.calls


def test_a_rerun_keeps_the_broker_login(tmp_path: Path, make_mosquitto: Callable[..., Mosquitto],
                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    broker = make_mosquitto(users={"hubd": MQTT_PASSWORD})
    (tmp_path / "mqtt-password").write_text(MQTT_PASSWORD + "\n")
    (tmp_path / "secret").write_text("scripted-secret\n")
    (tmp_path / "password").write_text("a scripted owner password\n")
    first, out, _ = _setup(tmp_path, assume_yes=True, start_anyway=False,
                           mqtt_password_file=tmp_path / "mqtt-password", client_secret_file=tmp_path / "secret",
                           password_file=tmp_path / "password",
                           flags={"public_url": PUBLIC, "base_url": BASE, "auth_url": AUTH, "client_id": "scripted",
                                  "mqtt_port": str(broker.port), "mqtt_username": "hubd"})
    assert first.run() == 0, out.getvalue()
    config = tmp_path / "etc" / "config.yaml"
    before = config.read_text()

    # Asked again: Enter everywhere (the username's question shows it), Enter keeps the broker's password too.
    prompts: list[str] = []
    answers = iter(["", "", "", "", "", "", ""])
    again, out, systemd = _setup(tmp_path, secrets=["", "", ""], start_anyway=False)
    again.ask = lambda prompt: prompts.append(prompt) or next(answers)  # type: ignore[func-returns-value]
    assert again.run() == 0, out.getvalue()
    assert "the MQTT broker's username (none: it takes anonymous clients) [hubd; - for none]: " in prompts
    assert config.read_text() == before
    assert (tmp_path / "credstore" / "hubd.mqtt-password").read_text() == MQTT_PASSWORD + "\n"
    assert "nothing changed" in out.getvalue()
    assert f"broker login: ok (127.0.0.1:{broker.port}, user 'hubd')" in out.getvalue()
    assert ["systemctl", "restart", "--no-block", "hubd.service"] in systemd.calls

    # Scripted, --yes: kept as well.
    scripted, out, _ = _setup(tmp_path, assume_yes=True, start_anyway=False)
    assert scripted.run() == 0, out.getvalue()
    assert config.read_text() == before and "broker login: ok" in out.getvalue()
    _never_shown(tmp_path, out, caplog, MQTT_PASSWORD)


def test_no_username_for_a_broker_that_takes_no_anonymous_client_says_to_give_one_and_leaves_the_login_out(
        tmp_path: Path, make_mosquitto: Callable[..., Mosquitto]) -> None:
    broker = make_mosquitto(users={"hubd": MQTT_PASSWORD})
    (tmp_path / "mqtt-password").write_text(MQTT_PASSWORD + "\n")
    first, out, _ = _setup(tmp_path, typed=_with_login(broker), mqtt_password_file=tmp_path / "mqtt-password",
                           secrets=["the-secret-from-the-console", "a long owner password"], start_anyway=False)
    assert first.run() == 0, out.getvalue()

    # "-" answers none: anonymous; the login's lines are commented out again, as hubd init wrote them.
    again, out, systemd = _setup(tmp_path, typed=["", "", "", "", "", "", "-"], secrets=["", ""],
                                 start_anyway=False)
    assert again.run() == 2, out.getvalue()
    text = (tmp_path / "etc" / "config.yaml").read_text()
    assert "  # username: hubd" in text and "  # password_file: ${CREDENTIALS_DIRECTORY}/hubd.mqtt-password" in text
    loaded = load_config(tmp_path / "etc" / "config.yaml", env={"CREDENTIALS_DIRECTORY": str(tmp_path / "credstore")})
    assert loaded.mqtt.username is None and loaded.mqtt.password is None
    assert "changed: mqtt.username, mqtt.password_file" in out.getvalue()
    assert (f"broker login: FAILED, refused: not authorised (127.0.0.1:{broker.port}, anonymous); fix: the broker "
            "takes no anonymous client: give its username and password (--mqtt-username, --mqtt-password-file)"
            in out.getvalue())
    assert systemd.calls == []


def test_a_broker_not_there_yet_is_a_warning_and_hubd_is_started_to_connect_once_it_is(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there: mosquitto not installed yet
    setup, out, systemd = _setup(tmp_path, typed=[PUBLIC, BASE, AUTH, "client-123", "", str(port), ""],
                                 secrets=["the-secret-from-the-console", "a long owner password"], start_anyway=False)
    assert setup.run() == 0, out.getvalue()
    assert (f"broker login: WARNING, connection refused (127.0.0.1:{port}: nothing listens there); fix: install or "
            "start the broker" in out.getvalue())
    assert ["systemctl", "restart", "--no-block", "hubd.service"] in systemd.calls


def test_a_broker_that_never_answers_is_a_timeout_warning(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:  # takes the connection, never a CONNACK
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        setup, out, systemd = _setup(tmp_path, typed=[PUBLIC, BASE, AUTH, "client-123", "", str(port), ""],
                                     secrets=["the-secret-from-the-console", "a long owner password"],
                                     start_anyway=False, broker_timeout_s=1.0)
        assert setup.run() == 0, out.getvalue()
    assert f"broker login: WARNING, timeout (no answer from 127.0.0.1:{port} within 1 s)" in out.getvalue()
    assert ["systemctl", "restart", "--no-block", "hubd.service"] in systemd.calls


def test_a_config_written_by_hand_gets_the_broker_login_added_to_its_mqtt_section(
        tmp_path: Path, make_mosquitto: Callable[..., Mosquitto]) -> None:
    broker = make_mosquitto(users={"1234": MQTT_PASSWORD})
    first, out, _ = _setup(tmp_path, typed=_first_answers(), secrets=["the-secret", "a long owner password"],
                           start=False)
    assert first.run() == 0, out.getvalue()
    config = tmp_path / "etc" / "config.yaml"
    # Without hubd init's commented-out login lines, and the broker's port the last line of the section.
    config.write_text("".join(line for line in config.read_text().splitlines(keepends=True)
                              if "username: hubd" not in line and "hubd.mqtt-password" not in line))
    (tmp_path / "mqtt-password").write_text(MQTT_PASSWORD + "\n")
    again, out, _ = _setup(tmp_path, assume_yes=True, mqtt_password_file=tmp_path / "mqtt-password",
                           flags={"mqtt_port": str(broker.port), "mqtt_username": "1234"}, start_anyway=False)
    assert again.run() == 0, out.getvalue()
    loaded = load_config(config, env={"CREDENTIALS_DIRECTORY": str(tmp_path / "credstore")})
    assert loaded.mqtt.username == "1234"  # a string, though it looks like a number
    assert loaded.mqtt.password is not None and loaded.mqtt.password.get_secret_value() == MQTT_PASSWORD
    assert f"broker login: ok (127.0.0.1:{broker.port}, user '1234')" in out.getvalue()


def test_a_broker_host_given_as_a_url_with_a_port_or_spaces_is_asked_again_and_never_written(tmp_path: Path) -> None:
    typed = [PUBLIC, BASE, AUTH, "client-123", "mqtt://broker.lan:1883", "broker.lan:1883", "my broker", "[::1]",
             "broker.lan", "", ""]
    setup, out, _ = _setup(tmp_path, typed=typed, secrets=["the-secret", "a long owner password"], start=False)
    assert setup.run() == 0, out.getvalue()
    said = out.getvalue()
    assert "'mqtt://broker.lan:1883' is not a host name or IP address alone: write 'broker.lan'" in said
    assert "'broker.lan:1883' is not a host name or IP address alone: write 'broker.lan'" in said
    assert "'my broker' is not a host name or IP address" in said and "write '::1'" in said
    assert load_config(tmp_path / "etc" / "config.yaml", env={"CREDENTIALS_DIRECTORY": str(tmp_path / "credstore")}
                       ).mqtt.host == "broker.lan"
    scripted, _, _ = _setup(tmp_path, assume_yes=True, flags={"mqtt_host": "tcp://broker.lan"})
    with pytest.raises(HubdError) as refused:
        scripted.run()
    assert str(refused.value).startswith("--mqtt-host tcp://broker.lan: 'tcp://broker.lan' is not a host name or IP "
                                         "address alone: write 'broker.lan'")
    # And a config written by hand says so at load, not as a connection that can never be made.
    with pytest.raises(ConfigError) as info:
        parse_config("mqtt:\n  host: mqtt://broker.lan\n", {})
    assert info.value.problems == [
        "mqtt.host: 'mqtt://broker.lan' is not a host name or IP address alone: write 'broker.lan' (the "
        "port goes in mqtt.port, TLS in mqtt.tls) (line 2)"]


@pytest.mark.parametrize("port", ["²", "١٨٨٣", "0777", "01883", "65536"])
def test_a_port_in_other_scripts_digits_or_with_a_leading_zero_is_asked_again_never_a_traceback(
        tmp_path: Path, port: str) -> None:
    typed = [PUBLIC, BASE, AUTH, "client-123", "", port, "1884", ""]
    setup, out, _ = _setup(tmp_path, typed=typed, secrets=["the-secret", "a long owner password"], start=False)
    assert setup.run() == 0, out.getvalue()
    assert f"  {port!r}: not a port number (1..65535)" in out.getvalue()
    assert load_config(tmp_path / "etc" / "config.yaml", env={"CREDENTIALS_DIRECTORY": str(tmp_path / "credstore")}
                       ).mqtt.port == 1884
    scripted, _, _ = _setup(tmp_path, assume_yes=True, flags={"mqtt_port": port})
    with pytest.raises(HubdError, match="not a port number"):
        scripted.run()


@pytest.mark.parametrize(("content", "said"), [
    ("s3cr\xe9t-latin1\n".encode("latin-1"), "is not UTF-8 text (byte 5 is not)"),  # an editor's other encoding
    (b"s3cret" * 20_000, "is over 65536 bytes"),  # the wrong file
    (b"   \n", "blank"),  # typed, spaces alone are no password: from a file neither
    (b"s3cret\x00tail\n", "a control character"),  # a binary file; no broker's password file holds a NUL
    (b"s3cret-first\r\ns3cret-second\r\n", "more than one line"),
])
def test_a_broker_password_file_not_one_line_of_text_is_refused_naming_the_flag_and_never_shown(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, said: str) -> None:
    caplog.set_level(logging.DEBUG)
    first, out, _ = _setup(tmp_path, typed=_first_answers(), secrets=["the-secret", "a long owner password"],
                           start=False)
    assert first.run() == 0, out.getvalue()
    config = (tmp_path / "etc" / "config.yaml").read_text()
    (tmp_path / "mqtt-password").write_bytes(content)
    again, out, systemd = _setup(tmp_path, assume_yes=True, mqtt_password_file=tmp_path / "mqtt-password",
                                 flags={"mqtt_username": "hubd"})
    with pytest.raises(HubdError) as info:
        again.run()
    assert said in str(info.value) and str(tmp_path / "mqtt-password") in str(info.value), str(info.value)
    assert "s3cr" not in str(info.value) + out.getvalue() + caplog.text
    assert (tmp_path / "etc" / "config.yaml").read_text() == config and systemd.calls == []
    assert not (tmp_path / "credstore" / "hubd.mqtt-password").exists()


def test_a_broker_username_with_a_control_character_is_refused_naming_the_option(tmp_path: Path) -> None:
    first, out, _ = _setup(tmp_path, typed=_first_answers(), secrets=["the-secret", "a long owner password"],
                           start=False)
    assert first.run() == 0, out.getvalue()
    config = (tmp_path / "etc" / "config.yaml").read_text()
    for username in ("hu\tbd", "hubd\nmqtt:"):
        again, _, _ = _setup(tmp_path, assume_yes=True, flags={"mqtt_username": username})
        with pytest.raises(HubdError) as info:
            again.run()
        assert str(info.value).startswith(f"--mqtt-username {username}: holds a control character"), str(info.value)
        assert (tmp_path / "etc" / "config.yaml").read_text() == config


@pytest.mark.parametrize(("content", "said"), [
    (b'mqtt:\n  host: 127.0.0.1\n  password: "s3cret-inline\n', "is not valid YAML (line 4): "),
    (b"mqtt:\n  password: !secret s3cret-inline\n", "is not valid YAML (line 2): "),
    ("mqtt:\n  password: s3cret-caf\xe9\n".encode("latin-1"), "is not UTF-8 text (line 2)"),
    (b"- s3cret-inline\n", "is not a config (its top level is not `key: value` lines)"),
])
def test_a_config_setup_cannot_read_is_named_with_its_line_never_a_traceback_or_its_content(
        tmp_path: Path, content: bytes, said: str) -> None:
    config = tmp_path / "etc" / "config.yaml"
    config.parent.mkdir()
    config.write_bytes(content)
    setup, out, systemd = _setup(tmp_path, typed=_first_answers(), secrets=["the-secret", "a long owner password"])
    with pytest.raises(HubdError) as info:
        setup.run()
    assert said in str(info.value) and str(config) in str(info.value), str(info.value)
    assert "s3cret" not in str(info.value) + out.getvalue()
    assert config.read_bytes() == content and systemd.calls == []
