"""`hubd setup`: after installing the package, the one command that makes hubd run (docs/cli.md).

It asks for what only the owner knows (the public URL, the platform's two URLs, clientId and clientSecret,
the owner's login password, the broker and its login), writes the config and the secret files (`hubd init`'s,
made first where there is no config yet), checks the config as `hubd check-config` does, tries the broker login
(one MQTT CONNECT), enables and (re)starts the unit and the nightly backup, runs `hubd doctor`, and says what is
left: linking the hub in the app.

The broker login is tried with the config as written, the way hubd will connect. A broker that answers and
refuses it (not authorised, bad username or password) is a config known not to work: said in one line with the
fix, and nothing is started (unless `--start-anyway`). A broker that does not answer (connection refused,
timeout: mosquitto not installed or not running yet) is a warning: hubd is started, and connects once the broker
is there, as it does after any outage.

Run again, it changes only what is answered: each question's default is the current value, a secret is
kept unless a new one is given. Every question has a flag (`--public-url ...`, `--client-secret-file ...`,
`--yes` for no questions at all) for scripted installs; a secret is never a flag's value, only a file's. The
config is edited line by line, so the comments `hubd init` wrote stay (an optional key it wrote commented out,
such as the broker's username, is uncommented); the result is read back and must say what was answered.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import yaml

from hubd.config.model import (
    LOGIN_PASSWORD_FILE,
    PLACEHOLDER,
    MqttConfig,
    broker_host_problem,
    broker_username_problem,
    load_config,
)
from hubd.config.yamlfile import read_config_file, read_secret_file
from hubd.doctor.broker import login_client
from hubd.driver.passwords import hash_password
from hubd.errors import ConfigError, HubdError, MqttRejected, MqttUnavailable
from hubd.initconfig import CLIENT_SECRET_FILE, LOGIN_USER, MQTT_PASSWORD_FILE, init_config
from hubd.untrusted.numbers import ascii_int

CREDSTORE = Path("/etc/credstore")
MOSQUITTO_DROP_IN = Path("/etc/mosquitto/conf.d/hubd.conf")
PACKAGED_DROP_IN = Path("/usr/share/hubd/mosquitto-hubd.conf")  # the Debian package's copy
UNITS = ("hubd.service", "hubd-backup.timer")
ACTIVE_TIMEOUT_S = 60.0  # READY=1 waits for the broker: a start that takes longer is reported, not waited for
MIN_PASSWORD = 12
BROKER_TIMEOUT_S = 5.0  # the broker login's CONNECT to CONNACK, as hubd doctor waits
# The config's reference to the broker password's file: the unit's LoadCredential= hands it over under this name.
MQTT_PASSWORD_REF = f"${{CREDENTIALS_DIRECTORY}}/{MQTT_PASSWORD_FILE}"
NONE = "-"  # typed for an optional answer: none (the broker's username: anonymous)
# CONNACK refusals (MQTT 5's reason codes; paho maps MQTT 3.1.1's to them), in the owner's words.
BAD_LOGIN, NOT_AUTHORISED = 0x86, 0x87
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # in a password: the wrong file, or one no broker was given

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """The real runner: the command's output captured, its exit status returned, never raised."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=300, check=False)


@dataclass(frozen=True, slots=True)
class Question:
    """A value the owner knows: where it goes in the config and how it is asked."""

    flag: str  # the option's destination in the parsed arguments
    path: tuple[str, str]  # section, key (hubd init writes each on a line of its own)
    prompt: str
    check: Callable[[str], str | None]  # the problem with an answer, or None
    optional: bool = False  # may be none: Enter keeps what is there (or none), `-` (or --flag "") makes it none


def _url(https_only: bool) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        parts = urlsplit(value)
        # Plain http only to this machine (trying hubd before the reverse proxy is there), as hubd doctor allows.
        loopback = parts.hostname in ("localhost", "::1") or (parts.hostname or "").startswith("127.")
        schemes = ("https",) if https_only and not loopback else ("https", "http")
        if parts.scheme not in schemes or not parts.hostname:
            return f"not an {'https' if https_only else 'http(s)'} URL"
        if PLACEHOLDER.lower() in value.lower():
            return "still the placeholder"
        return None

    return check


def _nonempty(value: str) -> str | None:
    return None if value.strip() and PLACEHOLDER.lower() not in value.lower() else "empty, or the placeholder"


def _port(value: str) -> str | None:
    # As YAML reads it back: no leading zero (`0777` is YAML 1.1's octal 511), ASCII digits ("١٨٨٣" is written as
    # YAML's string, which the config refuses).
    port = ascii_int(value, max_digits=5, leading_zeros=False)
    return None if port is not None and 0 < port < 65536 else "not a port number (1..65535)"


def _username(value: str) -> str | None:
    return _nonempty(value) or broker_username_problem(value)


def _host(value: str) -> str | None:
    problem = broker_host_problem(value)
    return None if problem is None and PLACEHOLDER.lower() not in value.lower() else problem or "the placeholder"


QUESTIONS = (
    Question("public_url", ("http", "public_url"),
             "hubd's public https URL (your reverse proxy's name for it, e.g. https://hub.example.com)", _url(True)),
    Question("base_url", ("platform", "base_url"), "the platform's event API URL (its developer console)",
             _url(False)),
    Question("auth_url", ("platform", "auth_url"), "the platform's OAuth token host URL (its developer console)",
             _url(False)),
    Question("client_id", ("platform", "client_id"), "the clientId (the console, once state reporting is on)",
             _nonempty),
    Question("mqtt_host", ("mqtt", "host"), "the MQTT broker's host (127.0.0.1: mosquitto on this Pi)", _host),
    Question("mqtt_port", ("mqtt", "port"), "the MQTT broker's port", _port),
    Question("mqtt_username", ("mqtt", "username"), "the MQTT broker's username (none: it takes anonymous clients)",
             _username, optional=True),
)


@dataclass
class Setup:
    """One run of `hubd setup`; its inputs injectable, so that a test scripts the answers and the commands."""

    config: Path
    secrets_dir: Path = CREDSTORE
    answers: dict[str, str | None] = field(default_factory=dict)  # flag values given on the command line
    client_secret_file: Path | None = None
    password_file: Path | None = None
    mqtt_password_file: Path | None = None
    assume_yes: bool = False
    start: bool = True
    start_anyway: bool = False  # start even when the broker refused the login
    out: TextIO = sys.stdout
    ask: Callable[[str], str] = input
    ask_secret: Callable[[str], str] = getpass.getpass
    runner: Runner = run_command
    hubd: Sequence[str] = (sys.executable, "-m", "hubd")
    mosquitto_drop_in: Path = MOSQUITTO_DROP_IN
    packaged_drop_in: Path = PACKAGED_DROP_IN
    active_timeout_s: float = ACTIVE_TIMEOUT_S
    broker_timeout_s: float = BROKER_TIMEOUT_S

    def run(self) -> int:
        """The whole setup; the exit status (0: hubd runs, or was told not to start; 2: a config problem, or the
        broker refused the login)."""
        self.config = self.config.absolute()
        if not self.config.exists():
            made = init_config(self.config, secrets_dir=self.secrets_dir)
            self.say(f"wrote {made.config} and the secrets {made.client_secret}, {made.login_password} (mode 0600)")
        text = read_config_file(self.config, "config file")
        current = _current(self.config, text)
        changed: list[str] = []
        answered: dict[str, str] = {}
        for question in QUESTIONS:
            old = _get(current, question.path)
            new = self._answer(question, None if old is None or PLACEHOLDER.lower() in str(old).lower() else str(old))
            answered[question.flag] = new
            if new != ("" if old is None and question.optional else None if old is None else str(old)):
                text = (_set_line(text, question.path, new, plain=question.check is _port) if new
                        else _unset_line(text, question.path))
                changed.append(".".join(question.path))
        text = self._mqtt_password(current, text, changed)
        _read_back(text, {question.path: answered[question.flag] for question in QUESTIONS})
        secret = self._secret("the clientSecret (from the console)", self.client_secret_file,
                              self.secrets_dir / CLIENT_SECRET_FILE, minimum=1)
        if secret is not None:
            _write_secret(self.secrets_dir / CLIENT_SECRET_FILE, secret)
            changed.append(f"{self.secrets_dir / CLIENT_SECRET_FILE}")
        password = self._secret(f"{LOGIN_USER}'s login password (the authorize page and the devices page)",
                                self.password_file, self.secrets_dir / LOGIN_PASSWORD_FILE, minimum=MIN_PASSWORD)
        if password is not None:
            _write_secret(self.secrets_dir / LOGIN_PASSWORD_FILE, password)
            text = _set_line(text, ("driver", "password"), hash_password(password))
            changed.append(f"driver.accounts ({LOGIN_USER}'s password hash)")
        if text != self.config.read_text(encoding="utf-8"):
            _replace(self.config, text)
        self.say(f"changed: {', '.join(changed)}" if changed else "nothing changed")
        self._mosquitto_limits()
        try:
            config = load_config(self.config, env={**os.environ, "CREDENTIALS_DIRECTORY": str(self.secrets_dir)})
            from hubd.driver.policy import config_problems

            problems = config_problems(config)
            if problems:
                raise ConfigError(problems)
        except ConfigError as err:
            for problem in err.problems:
                self.say(problem)
            self.say(f"the config has problems: fix them (in {self.config}, or run hubd setup again); "
                     "hubd was not started")
            return 2
        self.say("check-config: ok")
        if not self.start:
            return 0
        if not config.mqtt.embedded:
            login = try_broker_login(config.mqtt, self.broker_timeout_s)
            self.say(login.line)
            if login.refused and not self.start_anyway:
                self.say("hubd was not started: its broker login does not work (run hubd setup again with the "
                         "right one, or with --start-anyway to start it all the same)")
                return 2
        self._start()
        self._systemctl_free(["systemctl", "start", "hubd-backup.timer"])
        self.say("hubd doctor:")
        doctor = self.runner([*self.hubd, "doctor", "-c", str(self.config)])
        self.out.write(doctor.stdout)
        self._next_steps(config.http.public_url)
        return 0

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _answer(self, question: Question, current: str | None) -> str:
        """The answer; "" for none (an optional question only)."""
        given = self.answers.get(question.flag)
        if given is not None:
            problem = None if question.optional and not given else question.check(given)
            if problem:
                raise HubdError(f"--{question.flag.replace('_', '-')} {given}: {problem}")
            return given
        if question.optional:
            current = current or ""
        if self.assume_yes:
            if current is None:
                raise HubdError(f"--{question.flag.replace('_', '-')} is needed: {question.prompt} is not set yet")
            return current
        shown = (f"{current}; {NONE} for none" if current else "none") if question.optional else current or "required"
        while True:
            reply = self.ask(f"{question.prompt} [{shown}]: ").strip()
            if not reply and current is not None:
                return current
            if question.optional and reply == NONE:
                return ""
            problem = question.check(reply) if reply else "an answer is needed"
            if problem is None:
                return reply
            self.say(f"  {reply!r}: {problem}")

    def _mqtt_password(self, current: Any, text: str, changed: list[str]) -> str:
        """The broker's password, for the username the config now has: a new one goes into its 0600 file, which
        `mqtt.password_file` names; none (anonymous) takes the password's keys out of the config."""
        username = _get(yaml.safe_load(text) or {}, ("mqtt", "username"))
        had = {key for key in ("password", "password_file") if _get(current, ("mqtt", key)) is not None}
        if username is None:
            if self.mqtt_password_file is not None:
                raise HubdError("--mqtt-password-file: the broker's password needs its username: give "
                                "--mqtt-username too")
            for key in sorted(had):
                text = _unset_line(text, ("mqtt", key))
                changed.append(f"mqtt.{key}")
            return text
        where = self.secrets_dir / MQTT_PASSWORD_FILE
        password = self._secret(f"the MQTT broker's password for {username!r}", self.mqtt_password_file, where,
                                minimum=1, kept=bool(had), flag="--mqtt-password-file", exact=True)
        if password is None:
            return text
        _write_secret(where, password)
        if "password" in had:  # inline in the config: the file takes its place
            text = _unset_line(text, ("mqtt", "password"))
        text = _set_line(text, ("mqtt", "password_file"), MQTT_PASSWORD_REF, plain=True)
        changed.append(f"{where}")
        return text

    def _secret(self, what: str, given: Path | None, where: Path, *, minimum: int, kept: bool | None = None,
                flag: str = "its --...-file option", exact: bool = False) -> str | None:
        """A new secret from its file or typed (None: keep the one there). `kept`: whether there is one to keep (by
        default: `where` holds one). `exact`: the secret as given (a file's trailing newline aside, as the config's
        `_file` keys read it), not stripped of spaces."""
        if given is not None:
            try:
                read = read_secret_file(given)  # as hubd reads the config's `_file` keys: UTF-8, bounded
            except ValueError as err:
                raise HubdError(f"{flag}: {what}: {err}") from None
            value = read if exact else read.strip()
            if len(value) < minimum or not value.strip() or PLACEHOLDER.lower() in value.lower() or \
                    (exact and _CONTROL_RE.search(value)):
                raise HubdError(f"{given}: {what}: empty, blank, the placeholder, more than one line or a control "
                                f"character (NUL, CR...), or shorter than {minimum} characters")
            return value
        unset = f"not set yet in {where}" if kept is None else "not set yet"
        if kept is None:
            try:
                kept = where.exists() and PLACEHOLDER.lower() not in read_secret_file(where).lower()
            except ValueError:
                kept = False  # unreadable, not text: a new one is needed
        if self.assume_yes:
            if not kept:
                raise HubdError(f"{what}: {unset}; give it with {flag}")
            return None
        while True:
            typed = self.ask_secret(f"{what} [{'Enter keeps the current one' if kept else 'required'}]: ")
            value = typed if exact and typed.strip() else typed.strip()
            if not value and kept:
                return None
            if len(value) >= minimum and PLACEHOLDER.lower() not in value.lower():
                return value
            self.say(f"  at least {minimum} characters")

    def _mosquitto_limits(self) -> None:
        """mosquitto's limits for hubd, where mosquitto is and the drop-in is not yet (the package's copy)."""
        if self.mosquitto_drop_in.exists() or not self.mosquitto_drop_in.parent.is_dir():
            return
        if not self.packaged_drop_in.exists():
            return
        shutil.copyfile(self.packaged_drop_in, self.mosquitto_drop_in)
        self.mosquitto_drop_in.chmod(0o644)
        self.say(f"installed mosquitto's limits for hubd: {self.mosquitto_drop_in}")
        self._systemctl_free(["systemctl", "try-restart", "mosquitto.service"])

    def _start(self) -> None:
        self._systemctl_free(["systemctl", "daemon-reload"])
        self._systemctl_free(["systemctl", "enable", *UNITS])
        # --no-block: hubd is "activating" for as long as the broker is down; that is reported below.
        self._systemctl_free(["systemctl", "restart", "--no-block", "hubd.service"])
        deadline = time.monotonic() + self.active_timeout_s
        state = ""
        while time.monotonic() < deadline:
            state = self.runner(["systemctl", "is-active", "hubd.service"]).stdout.strip()
            if state in ("active", "failed"):
                break
            time.sleep(0.5)
        if state == "active":
            self.say("hubd is running (systemctl status hubd; journalctl -u hubd -f for its log)")
        else:
            why = "it waits for the broker" if state == "activating" else "fix it, then systemctl restart hubd"
            self.say(f"hubd is {state or 'not active'}: journalctl -u hubd says why ({why})")

    def _systemctl_free(self, argv: Sequence[str]) -> None:
        done = self.runner(argv)
        if done.returncode != 0:
            raise HubdError(f"{' '.join(argv)} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()}")

    def _next_steps(self, public_url: Any) -> None:
        self.say("left to do:")
        self.say(f"  - the platform must reach {public_url}: your reverse proxy in front of hubd "
                 "(docs/reverse-proxy.md); hubd doctor above says what does not work yet")
        self.say(f"  - link the hub in the platform's app: sign in as {LOGIN_USER!r} with the password in "
                 f"{self.secrets_dir / LOGIN_PASSWORD_FILE}")


@dataclass(frozen=True, slots=True)
class BrokerLogin:
    """What the broker made of the login setup tried, in one line with the fix."""

    line: str
    refused: bool  # the broker answered and refused it: a config known not to work (retrying cannot fix it)


def try_broker_login(mqtt: MqttConfig, timeout_s: float) -> BrokerLogin:
    """One MQTT CONNECT with the config's host, port, login and TLS (a clean session, under a client id of its own,
    so that hubd's session is never touched), and a DISCONNECT once accepted."""
    where = f"{mqtt.host}:{mqtt.port}"
    who = f"user {mqtt.username!r}" if mqtt.username else "anonymous"
    try:
        client = login_client(mqtt, "setup")
    except ConfigError as err:
        return BrokerLogin(f"broker login: FAILED, {'; '.join(err.problems)}", refused=True)

    async def attempt() -> None:
        await client.connect(timeout_s=timeout_s)
        await client.disconnect()

    try:
        asyncio.run(attempt())
    except MqttRejected as err:
        return BrokerLogin(_refusal(err.code, mqtt, where, who), refused=True)
    except MqttUnavailable as err:
        return BrokerLogin(_no_answer(err, where, timeout_s), refused=False)
    return BrokerLogin(f"broker login: ok ({where}, {who})", refused=False)


def _refusal(code: int | None, mqtt: MqttConfig, where: str, who: str) -> str:
    """The broker's refusal and its fix, in one line."""
    again = "then run hubd setup again"
    passwd = f"`sudo mosquitto_passwd /etc/mosquitto/passwd {mqtt.username}` sets it there"
    if code == BAD_LOGIN:
        why, fix = "bad username or password", f"give the password the broker has for {mqtt.username!r} ({passwd})"
    elif code == NOT_AUTHORISED and not mqtt.username:
        why, fix = "not authorised", ("the broker takes no anonymous client: give its username and password "
                                      "(--mqtt-username, --mqtt-password-file)")
    elif code == NOT_AUTHORISED:
        # mosquitto 2.0 answers a wrong password, an unknown user and a user its ACL leaves out alike.
        why, fix = "not authorised", (f"check the password ({passwd}), and that the broker's acl_file lets "
                                      f"{mqtt.username!r} in")
    else:
        why, fix = f"code 0x{code or 0:02x}", "see the broker's log (journalctl -u mosquitto)"
    return f"broker login: FAILED, refused: {why} ({where}, {who}); fix: {fix}, {again}"


def _no_answer(err: MqttUnavailable, where: str, timeout_s: float) -> str:
    """No answer from the broker (not there yet, or not reachable), and the fix, in one line."""
    cause = err.__cause__
    later = "hubd is started all the same and connects once the broker answers"
    if isinstance(cause, ConnectionRefusedError):
        why = f"connection refused ({where}: nothing listens there)"
        fix = ("install or start the broker (sudo apt install mosquitto; systemctl status mosquitto), or give its "
               "host and port (--mqtt-host, --mqtt-port)")
    elif isinstance(cause, TimeoutError):
        why = f"timeout (no answer from {where} within {timeout_s:g} s)"
        fix = "check the host and port (--mqtt-host, --mqtt-port), and any firewall between"
    else:
        why = f"no connection ({where}: {err})"
        fix = "check the host, the port and mqtt.tls (--mqtt-host, --mqtt-port)"
    return f"broker login: WARNING, {why}; fix: {fix}; {later}"


def _read_back(text: str, answers: dict[tuple[str, str], str]) -> None:
    """The edited config must say what was answered ("": the key is not set): else a HubdError, nothing written."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise HubdError(f"the config would not be YAML after editing ({err}): edit it by hand") from err
    for path, answer in answers.items():
        value = _get(data, path)
        if (None if value is None else str(value)) != (answer or None):
            raise HubdError(f"{'.'.join(path)}: the config would not say {answer!r} after editing: set it by hand "
                            "(docs/configuration.md)")


def _current(path: Path, text: str) -> dict[str, Any]:
    """The config as it is, to edit: a HubdError naming the line where it is no YAML mapping setup can edit (never
    quoting it: a secret may be written inline)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise HubdError(f"{path} is not valid YAML{where}: {getattr(err, 'problem', None) or 'unreadable'}; fix it "
                        "(hubd check-config says where) or move it away, then run hubd setup again") from None
    if data is not None and not isinstance(data, dict):
        raise HubdError(f"{path} is not a config (its top level is not `key: value` lines); fix it or move it away, "
                        "then run hubd setup again")
    return data or {}


def _get(data: Any, path: tuple[str, str]) -> Any:
    section = data.get(path[0]) if isinstance(data, dict) else None
    return section.get(path[1]) if isinstance(section, dict) else None


def _set_line(text: str, path: tuple[str, str], value: str, *, plain: bool = False) -> str:
    """The config with the first `key:` line in `section:` set to `value` (its comment kept); else its commented-out
    line (`# key: ...`, as `hubd init` writes the optional ones) set and uncommented; else the key added at the
    section's end (the section at the file's end, where there is none). `plain`: `value` is written as it is."""
    section, key = path
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    shown = value if plain else _scalar(value)
    found = _section(lines, section)
    if found is None:
        if any(re.match(rf"{re.escape(section)}\s*:", line) for line in lines):  # a flow mapping: `mqtt: {...}`
            raise HubdError(f"no `{key}:` under `{section}:` in the config: set it by hand (docs/configuration.md)")
        return "".join([*lines, f"{section}:\n", f"  {key}: {shown}\n"])
    start, end = found
    i = _key_line(lines, start, end, key)
    if i is None:
        i = _key_line(lines, start, end, key, commented=True)
    if i is None:
        inside = [j for j in range(start + 1, end) if lines[j].strip() and lines[j][:1] in (" ", "\t")]
        first = lines[inside[0]] if inside else "  "
        indent = first[: len(first) - len(first.lstrip(" \t"))]
        at = inside[-1] + 1 if inside else start + 1
        return "".join([*lines[:at], f"{indent}{key}: {shown}\n", *lines[at:]])
    line = lines[i]
    stripped = line.lstrip(" -\t")
    indent = line[: len(line) - len(stripped)]
    rest = re.sub(r"^#[ \t]*", "", stripped)[len(key) + 1:].rstrip("\n")
    comment = re.search(r"\s+#[^\"']*$", rest)
    lines[i] = f"{indent}{key}: {shown}{f'   {comment.group().strip()}' if comment else ''}\n"
    return "".join(lines)


def _unset_line(text: str, path: tuple[str, str]) -> str:
    """The config without `section.key`: its line commented out (`# key: value`, to be set again by a later run), or
    taken out where its value is a secret (an inline `password:`); unchanged where there is no such line."""
    section, key = path
    lines = text.splitlines(keepends=True)
    found = _section(lines, section)
    i = None if found is None else _key_line(lines, *found, key)
    if i is None:
        return text
    if key == "password":
        del lines[i]
    else:
        stripped = lines[i].lstrip(" \t")
        lines[i] = f"{lines[i][: len(lines[i]) - len(stripped)]}# {stripped}"
    return "".join(lines)


def _section(lines: Sequence[str], section: str) -> tuple[int, int] | None:
    """The header line of the block `section:` and the end of its block (the next top-level key), or None."""
    start = None
    for i, line in enumerate(lines):
        top = line[:1] not in (" ", "\t", "#", "\r", "\n", "")
        if start is None and top and re.fullmatch(rf"{re.escape(section)}:[ \t]*(#.*)?", line.rstrip()):
            start = i
        elif start is not None and top:
            return start, i
    return None if start is None else (start, len(lines))


def _key_line(lines: Sequence[str], start: int, end: int, key: str, *, commented: bool = False) -> int | None:
    """The first line of `lines[start + 1:end]` that sets `key` (`key:`, or `- key:` in a list), or that does once
    uncommented (`commented`: `# key:` indented in the block)."""
    for i in range(start + 1, end):
        if lines[i][:1] not in (" ", "\t"):
            continue
        stripped = lines[i].lstrip(" -\t")
        if commented:
            stripped = stripped[1:].lstrip(" \t") if stripped.startswith("#") else ""
        if re.match(rf"{re.escape(key)}:(\s|$)", stripped):
            return i
    return None


def _scalar(value: str) -> str:
    """`value` as YAML reads it back, a string: plain where YAML reads it as this string, else double-quoted (JSON;
    `1234` as a username or a clientId is `"1234"`)."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9:/._~%+@=&?-]*", value) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)


def _write_secret(path: Path, value: str) -> None:
    """The secret in a file of mode 0600 (never readable by others, even for a moment); its directory 0700."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.new")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(value + "\n")
    os.replace(temporary, path)


def _replace(path: Path, text: str) -> None:
    """The config replaced at once, keeping its mode (0644: it holds no secret)."""
    mode = path.stat().st_mode & 0o777
    temporary = path.with_name(f".{path.name}.new")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(mode)
    os.replace(temporary, path)
