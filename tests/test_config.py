"""The config loader (hubd/config/model.py), config.example.yaml and `hubd check-config`/`hubd run` on a bad config:
secrets from files and never printed, errors in one pass naming key and line, every key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from hubd_proc import REPO, HubdProcess, free_port
from pydantic import BaseModel

from hubd.config.model import HubdConfig, load_config, parse_config
from hubd.errors import ConfigError


def problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, env or {})
    return info.value.problems


def secret_file(tmp_path: Path, name: str, value: str) -> Path:
    path = tmp_path / name
    path.write_text(value + "\n")  # a trailing newline, as `echo` or an editor leaves it
    return path


def test_secret_files_are_read_at_every_depth(tmp_path: Path) -> None:
    mqtt = secret_file(tmp_path, "mqtt-password", "mqtt-pw")
    platform = secret_file(tmp_path, "client-secret", "client-s3cret")
    anna = secret_file(tmp_path, "anna", "scrypt$8192$8$1$abc$def")
    config = parse_config(
        f"mqtt:\n  username: hubd\n  password_file: {mqtt}\n"
        f"platform:\n  client_secret_file: {platform}\n"
        f"driver:\n  accounts:\n    - username: bob\n      password: plain\n"
        f"    - username: anna\n      password_file: {anna}\n",
        {},
    )
    assert config.mqtt.password is not None and config.mqtt.password.get_secret_value() == "mqtt-pw"
    assert config.platform.client_secret is not None
    assert config.platform.client_secret.get_secret_value() == "client-s3cret"
    assert [(a.username, a.password.get_secret_value()) for a in config.driver.accounts] == [
        ("bob", "plain"), ("anna", "scrypt$8192$8$1$abc$def")
    ]


def test_secret_file_path_from_systemd_credentials_directory(tmp_path: Path) -> None:
    """The README's systemd set-up: `client_secret_file: ${CREDENTIALS_DIRECTORY}/client-secret`."""
    secret_file(tmp_path, "client-secret", "from-credstore")
    config = parse_config("platform:\n  client_secret_file: ${CREDENTIALS_DIRECTORY}/client-secret\n",
                          {"CREDENTIALS_DIRECTORY": str(tmp_path)})
    assert config.platform.client_secret is not None
    assert config.platform.client_secret.get_secret_value() == "from-credstore"
    assert problems("platform:\n  client_secret_file: ${CREDENTIALS_DIRECTORY}/client-secret\n") == [
        "platform.client_secret_file: environment variable CREDENTIALS_DIRECTORY is not set; systemd sets it for "
        "the unit, by hand set it to the directory of the secret files, e.g. "
        "`CREDENTIALS_DIRECTORY=/etc/credstore hubd ...` (line 2)"
    ]


def test_secret_file_errors_name_the_file_key(tmp_path: Path) -> None:
    given = secret_file(tmp_path, "pw", "x")
    missing = tmp_path / "missing"
    assert problems(
        f"mqtt:\n  password: inline\n  password_file: {given}\n"
        f"platform:\n  client_secret_file: {missing}\n"
        f"driver:\n  accounts:\n    - username: anna\n      password_file: {missing}\n"
    ) == [
        "mqtt.password_file: give either mqtt.password or mqtt.password_file, not both (line 3)",
        f"platform.client_secret_file: cannot read {missing}: No such file or directory (line 5)",
        # and no "driver.accounts[0].password: Field required" on top
        f"driver.accounts[0].password_file: cannot read {missing}: No such file or directory (line 9)",
    ]


def test_a_secret_file_not_utf8_or_of_any_size_is_a_problem_naming_the_key_never_a_traceback_or_its_content(
        tmp_path: Path) -> None:
    latin = tmp_path / "latin1"
    latin.write_bytes("s3cr\xe9t\n".encode("latin-1"))  # written by an editor in another encoding
    huge = tmp_path / "huge"
    huge.write_bytes(b"s3cret" * 20_000)  # the wrong file: a dump, a key ring
    found = problems(f"mqtt:\n  username: hubd\n  password_file: {latin}\nplatform:\n  client_secret_file: {huge}\n")
    assert found == [
        f"mqtt.password_file: {latin} is not UTF-8 text (byte 5 is not); write the secret as text (line 3)",
        f"platform.client_secret_file: {huge} is over 65536 bytes; a secret's file holds the secret alone, on one "
        "line (line 5)",
    ]
    # /dev/zero would never end: it is read no further than the limit.
    assert problems("mqtt:\n  username: hubd\n  password_file: /dev/zero\n") == [
        "mqtt.password_file: /dev/zero is over 65536 bytes; a secret's file holds the secret alone, on one line "
        "(line 3)"]
    config = tmp_path / "c.yaml"
    config.write_text(f"mqtt:\n  username: hubd\n  password_file: {latin}\n")
    result = run_cli("check-config", "-c", str(config))
    assert result.returncode == 2 and "Traceback" not in result.stderr and "s3cr" not in result.stderr, result.stderr
    assert "mqtt.password_file: " in result.stderr and "is not UTF-8 text" in result.stderr


def test_a_broker_login_mqtt_cannot_carry_is_a_config_problem_never_a_connect_that_fails_or_a_traceback() -> None:
    # A NUL in a username: the broker closes the connection (hubd would retry it for ever, setup said "check the
    # host"); over 65,535 bytes: paho's CONNECT raised struct.error.
    long_password = "s3cr\u00e9t" * 9_400  # 56,400 characters, 65,800 bytes
    assert problems(f'mqtt:\n  username: "hu\\0bd"\n  password: {long_password}\n') == [
        "mqtt.username: holds a control character (NUL, a line break, a tab...); give the username as the broker "
        "has it (line 2)",
        "mqtt.password: is over 65535 bytes, MQTT's limit; give the password the broker has (line 3)",
    ]
    assert "s3cr" not in " ".join(problems(f"mqtt:\n  password: {long_password}\n"))  # never quoted back
    assert problems(f"mqtt:\n  username: {'u' * 65_536}\n") == [
        "mqtt.username: is over 65535 bytes, MQTT's limit; give the username as the broker has it (line 2)"]
    assert problems('mqtt:\n  username: "hubd\\n"\n')[0].startswith("mqtt.username: holds a control character")
    assert parse_config("mqtt:\n  username: Jörg-ünd-ß\n  password: 'p a\\ss # w'\n", {}).mqtt.username == \
        "Jörg-ünd-ß"


def test_a_config_file_not_utf8_is_a_problem_naming_its_line_never_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_bytes("log:\n  level: info\nmqtt:\n  host: caf\xe9.lan\n".encode("latin-1"))  # another encoding
    for command in ("check-config", "run"):
        result = run_cli(command, "-c", str(config))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.splitlines() == [
            f"{config}: the config file is not UTF-8 text (line 4); save it as UTF-8 (an editor's other encoding, or "
            "a non-text file)"]


def test_every_problem_is_reported_in_one_pass() -> None:
    found = problems(
        "mqtt:\n  port: ${HUBD_NO_SUCH_VAR}\n  prot: 1883\n"
        "http:\n  port: 80\n  port: 81\n"
        "log:\n  level: loud\n"
    )
    assert found == [
        "mqtt.port: environment variable HUBD_NO_SUCH_VAR is not set (line 2)",
        "mqtt.prot: unknown key (check the spelling; see config.example.yaml for every key); did you mean `port`? "
        "(line 3)",
        "http.port: duplicate key: already given on line 5; keep one (line 6)",
        "log.level: Input should be 'debug', 'info', 'warning' or 'error' (line 8)",
    ]


def test_duplicate_section_is_an_error() -> None:
    assert problems("mqtt:\n  port: 1\nhttp:\n  port: 2\nmqtt:\n  host: x\n") == [
        "mqtt: duplicate key: already given on line 1; keep one (line 5)"
    ]


def test_ca_file_is_checked_by_check_config(tmp_path: Path) -> None:
    not_pem = secret_file(tmp_path, "not.pem", "hello")
    assert problems("mqtt:\n  tls: true\n  ca_file: /nonexistent.pem\n") == [
        "mqtt.ca_file: cannot read /nonexistent.pem: No such file or directory (line 3)"
    ]
    [problem] = problems(f"mqtt:\n  tls: true\n  ca_file: {not_pem}\n")
    assert problem.startswith(f"mqtt.ca_file: {not_pem} holds no PEM CA certificate") and problem.endswith("(line 3)")


def test_secrets_never_appear_in_problems(tmp_path: Path) -> None:
    given = secret_file(tmp_path, "pw", "very-secret-value")
    found = problems(f"mqtt:\n  password: other-secret-value\n  password_file: {given}\n  port: nope\n")
    assert not any("secret-value" in line for line in found), found


def test_merge_keys_are_applied_and_written_keys_win() -> None:
    config = parse_config(
        "mqtt:\n  <<: {host: 10.0.0.1, port: 1999}\n  port: 1884\n"
        "driver:\n  accounts:\n    - &account {username: anna, password: same-pw}\n"
        "    - <<: *account\n      username: ben\n",
        {},
    )
    assert (config.mqtt.host, config.mqtt.port) == ("10.0.0.1", 1884)
    assert [a.username for a in config.driver.accounts] == ["anna", "ben"]
    assert config.driver.accounts[1].password.get_secret_value() == "same-pw"
    # From a list of mappings the first one wins (YAML merge keys); written twice is still a duplicate.
    assert parse_config("mqtt:\n  <<: [{host: a}, {host: b, port: 7}]\n", {}).mqtt.host == "a"
    assert problems("mqtt:\n  <<: {host: a}\n  host: b\n  host: c\n") == [
        "mqtt.host: duplicate key: already given on line 3; keep one (line 4)"
    ]


def test_merge_keys_follow_the_yaml_rules_whatever_pyyaml_does() -> None:
    # PyYAML 6.0.4 lets the last mapping of a list win; the YAML merge-key spec says the first wins.
    text = (
        "mqtt:\n  <<:\n"
        "    - {<<: &base {host: from-base, port: 1, username: u-base}, host: from-other, port: 2}\n"
        "    - {host: third, port: 3, client_id: third-id}\n"
        "    - *base\n"
        "  port: 1884\n"
    )
    mqtt = parse_config(text, {}).mqtt
    assert mqtt.host == "from-other"  # the first of the list wins over the later ones
    assert mqtt.port == 1884  # written in the mapping: wins over every merged one
    assert mqtt.username == "u-base"  # merged into the first from *base (a merge inside a merge)
    assert mqtt.client_id == "third-id"  # only the second mapping has it


def test_a_mapping_merged_into_itself_is_reported_not_a_crash() -> None:
    assert problems("mqtt: &a\n  <<: *a\n") == [
        "mqtt: cannot merge this: `<<:` takes a mapping or a list of mappings, e.g. `<<: *anchor` (line 1)"
    ]
    assert problems("mqtt:\n  <<: [{host: a}, 7]\n") == [
        "mqtt: cannot merge this: `<<:` takes a mapping or a list of mappings, e.g. `<<: *anchor` (line 2)"
    ]


def test_a_merge_of_something_else_than_a_mapping_is_reported() -> None:
    assert problems("mqtt:\n  <<: hello\n  port: 1884\n") == [
        "mqtt: cannot merge this: `<<:` takes a mapping or a list of mappings, e.g. `<<: *anchor` (line 2)"
    ]


def test_values_yaml_cannot_build_are_reported_without_the_value() -> None:
    found = problems("mqtt:\n  port: !!int abc\n  password: !!int hunter2\n  host: 2001-13-45\n")
    assert found == [
        "mqtt.port: cannot read this value (it is tagged !!int but is not an integer; fix the value or remove the"
        " tag) (line 2)",
        "mqtt.password: cannot read this value (it is tagged !!int but is not an integer; fix the value or remove"
        " the tag) (line 3)",
        "mqtt.host: cannot read this value (it looks like a date but is not a valid one; put it in quotes if it is"
        " text) (line 4)",
    ]


def test_home_assistant_and_unknown_tags_are_explained() -> None:
    found = problems(
        "mqtt:\n  password: !secret mqtt_password\n  host: !env_var MQTT_HOST\n"
        "platform: !include platform.yaml\nlog:\n  level: !!python/name:os.system info\n"
    )
    assert found == [
        "mqtt.password: !secret is Home Assistant syntax (hubd has no secrets.yaml); use"
        " `password_file: /path/to/file` or `${ENV_VAR}` (line 2)",
        "mqtt.host: !env_var is Home Assistant syntax; write `${ENV_VAR}` instead (line 3)",
        "platform: !include is Home Assistant syntax; hubd reads one file: write the values here (line 4)",
        "log.level: unknown YAML tag !!python/name:os.system; remove it (hubd reads plain YAML values, with"
        " `${ENV_VAR}`) (line 6)",
    ]


# -- config.example.yaml --------------------------------------------------------------------------------------


def _fields(model: type[BaseModel], path: str = "") -> list[tuple[str, str]]:
    """(section, key) for every field of every model below HubdConfig, lists of models included."""
    out: list[tuple[str, str]] = []
    for name, field in model.model_fields.items():
        annotation: Any = field.annotation
        item = typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else None
        sub = next((t for t in (annotation, item) if isinstance(t, type) and issubclass(t, BaseModel)), None)
        if sub is not None:
            out += _fields(sub, path or name)
        if path:
            out.append((path, name))
    return out


def _example_sections() -> dict[str, str]:
    text = (REPO / "config.example.yaml").read_text()
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"^([a-z_0-9]+):", line)
        if match:
            current = match.group(1)
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def test_example_config_has_every_key() -> None:
    sections = _example_sections()
    assert set(sections) == set(HubdConfig.model_fields)
    missing = [
        f"{section}.{key}" for section, key in _fields(HubdConfig)
        # a key may be shown commented out (an example or an optional key): `# key:` or `- key:` count too
        if not re.search(rf"^[ \t#-]*{key}:", sections[section], re.MULTILINE)
    ]
    assert not missing, f"config.example.yaml lacks {missing}"


def test_example_config_comments_every_key() -> None:
    lines = (REPO / "config.example.yaml").read_text().splitlines()
    uncommented = []
    for number, line in enumerate(lines):
        if not re.match(r"^\s+-?\s*[a-z_]+:", line):  # keys inside sections (the sections have their own header)
            continue
        previous = lines[number - 1].strip()
        if "#" not in line and not previous.startswith("#"):
            uncommented.append(f"line {number + 1}: {line.strip()}")
    assert not uncommented, uncommented


def test_example_config_marks_what_is_not_a_default() -> None:
    """The header says every value shown is the default unless marked "example"."""
    config = load_config(REPO / "config.example.yaml", env={})
    defaults = HubdConfig()
    lines = (REPO / "config.example.yaml").read_text().splitlines()
    sections = [(name, field.annotation) for name, field in HubdConfig.model_fields.items()
                if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)]
    for section, key in [(name, key) for name, model in sections for key in model.model_fields]:  # type: ignore[union-attr]
        value = getattr(getattr(config, section), key)
        if value == getattr(getattr(defaults, section), key):
            continue
        # Not the default: the line (or the comment above it) must say "example".
        index = next(i for i, line in enumerate(lines) if re.match(rf"^\s+-?\s*{key}:", line)
                     and _section_of(lines, i) == section)
        context = lines[index] + lines[index - 1] + lines[index - 2]
        assert "example" in context, f"{section}.{key} is not the default but not marked as an example"


def _section_of(lines: list[str], index: int) -> str:
    for line in reversed(lines[: index + 1]):
        match = re.match(r"^([a-z_0-9]+):", line)
        if match:
            return match.group(1)
    return ""


def test_an_unknown_key_names_the_closest_one() -> None:
    assert problems("mqtt:\n  hots: a\n") == [
        "mqtt.hots: unknown key (check the spelling; see config.example.yaml for every key); did you mean `host`? "
        "(line 2)"
    ]
    assert problems("mqttt: {}\n")[0].endswith("did you mean `mqtt`? (line 1)")
    found = problems("driver:\n  accounts:\n    - {usrname: a, password: b}\n")
    assert "driver.accounts[0].usrname: unknown key" in found[-1] and "did you mean `username`?" in found[-1]
    assert "did you mean" not in problems("mqtt:\n  zzzzz: 1\n")[0]  # nothing close: no guess


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hubd", *args], capture_output=True, text=True, timeout=30, cwd=cwd, check=False
    )


def test_the_example_config_passes_check_config() -> None:
    result = run_cli("check-config", "-c", str(REPO / "config.example.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_config_errors_name_key_and_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "mqtt:\n  host: 127.0.0.1\n  prot: 1883\nhttp:\n  port: eighty\nplatform:\n  client_auth: digest\n"
    )
    result = run_cli("check-config", "-c", str(config))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert any(line.startswith("mqtt.prot: unknown key") and "(line 3)" in line for line in lines), lines
    assert any(line.startswith("http.port:") and "(line 5)" in line for line in lines), lines
    assert any(
        line.startswith("platform.client_auth:") and "'basic'" in line and "(line 7)" in line for line in lines
    ), lines
    assert len(lines) == 3


def test_check_config_reads_env_vars_and_secret_files_and_names_a_missing_var(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t-value\n")
    config = tmp_path / "c.yaml"
    config.write_text(
        f"mqtt:\n  port: ${{HUBD_TEST_PORT}}\n  password_file: {secret}\n"
        "platform:\n  client_secret: ${HUBD_MISSING_VAR}\n"
    )
    env = {**os.environ, "HUBD_TEST_PORT": "1999"}
    result = subprocess.run(
        [sys.executable, "-m", "hubd", "check-config", "-c", str(config)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 2
    assert "platform.client_secret: environment variable HUBD_MISSING_VAR is not set (line 5)" in result.stderr
    assert "s3cr3t" not in result.stderr + result.stdout


def test_check_config_explains_yaml_it_cannot_read_without_a_traceback(tmp_path: Path) -> None:
    """Home Assistant's `!secret`, a value its tag does not fit, merge keys: problems, exit 2, no value shown."""
    config = tmp_path / "c.yaml"
    config.write_text("mqtt:\n  <<: {host: 10.0.0.1}\n  port: !!int s3cr3t\n  password: !secret mqtt_pw\n")
    result = run_cli("check-config", "-c", str(config))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "s3cr3t" not in result.stderr
    assert result.stderr.splitlines() == [
        "mqtt.port: cannot read this value (it is tagged !!int but is not an integer; fix the value or remove the"
        " tag) (line 3)",
        "mqtt.password: !secret is Home Assistant syntax (hubd has no secrets.yaml); use"
        " `password_file: /path/to/file` or `${ENV_VAR}` (line 4)",
    ]


def test_run_exits_2_on_a_config_error_even_one_found_at_start(tmp_path: Path) -> None:
    """Exit 2 is what the unit's RestartPreventExitStatus=2 keeps from being restarted in a loop."""
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("mqtt:\n  port: !secret p\n")
    result = run_cli("run", "-c", str(bad_yaml))
    assert result.returncode == 2 and "mqtt.port: !secret" in result.stderr, result.stderr
    # The driver refuses an account listed twice when it starts; check-config says the same beforehand.
    hub = HubdProcess(tmp_path / "hub", mqtt_port=free_port(), overrides={"driver": {"accounts": [
        {"username": "anna", "password": "pw-1"}, {"username": "anna", "password": "pw-2"}]}})
    hub.start()
    try:
        checked = run_cli("check-config", "-c", str(hub.config_path))
        assert checked.returncode == 2 and "driver.accounts[1].username: 'anna' is listed twice" in checked.stderr
        assert hub.wait(30) == 2, hub.log()
        assert "driver.accounts[1].username: 'anna' is listed twice" in hub.log()
        assert "Traceback" not in hub.log() and "pw-1" not in hub.log()
    finally:
        hub.kill()


def test_secrets_are_never_printed(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("platform:\n  client_secret: very-secret-value\nmqtt:\n  password: other-secret\n")
    loaded = load_config(config)
    assert "very-secret-value" not in repr(loaded) and "other-secret" not in str(loaded)
    assert loaded.platform.client_secret is not None
    assert loaded.platform.client_secret.get_secret_value() == "very-secret-value"


def test_check_config_rejects_a_missing_ca_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("mqtt:\n  tls: true\n  ca_file: /nonexistent.pem\n")
    result = run_cli("check-config", "-c", str(config))
    assert result.returncode == 2
    assert result.stderr.strip() == "mqtt.ca_file: cannot read /nonexistent.pem: No such file or directory (line 3)"
