"""`hubd setup`: after installing the package, the one command that makes hubd run (docs/cli.md).

It asks for what only the owner knows (the public URL, the platform's two URLs, clientId and clientSecret,
the owner's login password, the broker), writes the config and the secret files (`hubd init`'s, made first
where there is no config yet), checks the config as `hubd check-config` does, enables and (re)starts the
unit and the nightly backup, runs `hubd doctor`, and says what is left: linking the hub in the app.

Run again, it changes only what is answered: each question's default is the current value, a secret is
kept unless a new one is given. Every question has a flag (`--public-url ...`, `--client-secret-file ...`,
`--yes` for no questions at all) for scripted installs. The config is edited line by line, so the comments
`hubd init` wrote stay; the result is read back and must say what was answered.
"""

from __future__ import annotations

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

from hubd.config.model import LOGIN_PASSWORD_FILE, PLACEHOLDER, load_config
from hubd.driver.passwords import hash_password
from hubd.errors import ConfigError, HubdError
from hubd.initconfig import CLIENT_SECRET_FILE, LOGIN_USER, init_config

CREDSTORE = Path("/etc/credstore")
MOSQUITTO_DROP_IN = Path("/etc/mosquitto/conf.d/hubd.conf")
PACKAGED_DROP_IN = Path("/usr/share/hubd/mosquitto-hubd.conf")  # the Debian package's copy
UNITS = ("hubd.service", "hubd-backup.timer")
ACTIVE_TIMEOUT_S = 60.0  # READY=1 waits for the broker: a start that takes longer is reported, not waited for
MIN_PASSWORD = 12

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
    return None if value.isdigit() and 0 < int(value) < 65536 else "not a port number"


QUESTIONS = (
    Question("public_url", ("http", "public_url"),
             "hubd's public https URL (your reverse proxy's name for it, e.g. https://hub.example.com)", _url(True)),
    Question("base_url", ("platform", "base_url"), "the platform's event API URL (its developer console)",
             _url(False)),
    Question("auth_url", ("platform", "auth_url"), "the platform's OAuth token host URL (its developer console)",
             _url(False)),
    Question("client_id", ("platform", "client_id"), "the clientId (the console, once state reporting is on)",
             _nonempty),
    Question("mqtt_host", ("mqtt", "host"), "the MQTT broker's host (127.0.0.1: mosquitto on this Pi)", _nonempty),
    Question("mqtt_port", ("mqtt", "port"), "the MQTT broker's port", _port),
)


@dataclass
class Setup:
    """One run of `hubd setup`; its inputs injectable, so that a test scripts the answers and the commands."""

    config: Path
    secrets_dir: Path = CREDSTORE
    answers: dict[str, str | None] = field(default_factory=dict)  # flag values given on the command line
    client_secret_file: Path | None = None
    password_file: Path | None = None
    assume_yes: bool = False
    start: bool = True
    out: TextIO = sys.stdout
    ask: Callable[[str], str] = input
    ask_secret: Callable[[str], str] = getpass.getpass
    runner: Runner = run_command
    hubd: Sequence[str] = (sys.executable, "-m", "hubd")
    mosquitto_drop_in: Path = MOSQUITTO_DROP_IN
    packaged_drop_in: Path = PACKAGED_DROP_IN
    active_timeout_s: float = ACTIVE_TIMEOUT_S

    def run(self) -> int:
        """The whole setup; the exit status (0: hubd runs, or was told not to start; 2: a config problem)."""
        self.config = self.config.absolute()
        if not self.config.exists():
            made = init_config(self.config, secrets_dir=self.secrets_dir)
            self.say(f"wrote {made.config} and the secrets {made.client_secret}, {made.login_password} (mode 0600)")
        current = yaml.safe_load(self.config.read_text(encoding="utf-8")) or {}
        text = self.config.read_text(encoding="utf-8")
        changed: list[str] = []
        for question in QUESTIONS:
            old = _get(current, question.path)
            new = self._answer(question, None if old is None or PLACEHOLDER.lower() in str(old).lower() else str(old))
            if new != (None if old is None else str(old)):
                text = _set_line(text, question.path, new)
                changed.append(".".join(question.path))
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
        given = self.answers.get(question.flag)
        if given is not None:
            problem = question.check(given)
            if problem:
                raise HubdError(f"--{question.flag.replace('_', '-')} {given}: {problem}")
            return given
        if self.assume_yes:
            if current is None:
                raise HubdError(f"--{question.flag.replace('_', '-')} is needed: {question.prompt} is not set yet")
            return current
        while True:
            reply = self.ask(f"{question.prompt} [{current or 'required'}]: ").strip()
            if not reply and current is not None:
                return current
            problem = question.check(reply) if reply else "an answer is needed"
            if problem is None:
                return reply
            self.say(f"  {reply!r}: {problem}")

    def _secret(self, what: str, given: Path | None, where: Path, *, minimum: int) -> str | None:
        """A new secret from its file or typed (None: keep the one there)."""
        if given is not None:
            value = given.read_text(encoding="utf-8").strip()
            if len(value) < minimum or PLACEHOLDER.lower() in value.lower():
                raise HubdError(f"{given}: {what}: empty, the placeholder, or shorter than {minimum} characters")
            return value
        kept = where.exists() and PLACEHOLDER.lower() not in where.read_text(encoding="utf-8").lower()
        if self.assume_yes:
            if not kept:
                raise HubdError(f"{what}: not set yet in {where}; give it with its --...-file option")
            return None
        while True:
            value = self.ask_secret(f"{what} [{'Enter keeps the current one' if kept else 'required'}]: ").strip()
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


def _get(data: Any, path: tuple[str, str]) -> Any:
    section = data.get(path[0]) if isinstance(data, dict) else None
    return section.get(path[1]) if isinstance(section, dict) else None


def _set_line(text: str, path: tuple[str, str], value: str) -> str:
    """The config with the first `key:` line in `section:` set to `value` (its comment kept)."""
    section, key = path
    lines = text.splitlines(keepends=True)
    inside = False
    for i, line in enumerate(lines):
        if line[:1] not in (" ", "\t", "#", "\n", "") and line.rstrip().endswith(":"):
            inside = line.rstrip() == f"{section}:"
            continue
        stripped = line.lstrip(" -")
        if inside and stripped.startswith(f"{key}:"):
            indent = line[: len(line) - len(stripped)]
            found = re.search(r"\s+#[^\"']*$", stripped[len(key) + 1:].rstrip("\n"))
            comment = f"   {found.group().strip()}" if found else ""
            lines[i] = f"{indent}{key}: {_scalar(value)}{comment}\n"
            return "".join(lines)
    raise HubdError(f"no `{key}:` under `{section}:` in the config: set it by hand (docs/configuration.md)")


def _scalar(value: str) -> str:
    """`value` as YAML reads it back: plain where it is a plain string or a port, else double-quoted (JSON)."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9:/._~%+@=&?-]*", value) and yaml.safe_load(value) in (value, _int(value)):
        return value
    return json.dumps(value)


def _int(value: str) -> int | None:
    return int(value) if value.isdigit() else None


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
