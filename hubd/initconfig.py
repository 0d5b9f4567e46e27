"""`hubd init`: a config for a real installation, with its secrets in files of their own.

Writes the config (mode 0644: it holds no secret, only a password hash) and, next to it unless told
otherwise, `hubd.client-secret` (a placeholder for the secret the platform's console issues) and
`hubd.login-password` (a generated password for the authorize page; the config keeps its hash), both
mode 0600. Nothing is a demo value: every setting only the user knows is `config.PLACEHOLDER`, which
`hubd check-config` and `hubd run` refuse, naming the key and what to put there. The config reads the
client secret as `${CREDENTIALS_DIRECTORY}/hubd.client-secret`, the way systemd's `LoadCredential=`
hands it over; run by hand, hubd finds it in /etc/credstore or next to the config (hubd.config.model's
`credential_dirs`). Existing files are never overwritten. Each dialect's section is the block its row in
`hubd.dialects.enabled` gives.
"""

from __future__ import annotations

import datetime
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from hubd.config.model import LOGIN_PASSWORD_FILE, PLACEHOLDER
from hubd.dialects.enabled import KINDS
from hubd.driver.passwords import hash_password
from hubd.errors import HubdError

CLIENT_SECRET_FILE = "hubd.client-secret"  # noqa: S105 (a file name; it matches the unit's LoadCredential=)
MQTT_PASSWORD_FILE = "hubd.mqtt-password"  # noqa: S105 (a file name; it matches the unit's LoadCredential=)
SYSTEMD_STATE = Path("/var/lib/hubd/hubd.db")  # the unit's StateDirectory
LOGIN_USER = "owner"


@dataclass(frozen=True, slots=True)
class Written:
    """What `hubd init` made."""

    config: Path
    client_secret: Path
    login_password: Path
    storage: Path


def init_config(config_path: Path, *, secrets_dir: Path | None = None, storage: Path | None = None) -> Written:
    """Write a new config and its secret files; HubdError (nothing written) if any of them exists already."""
    config_path = config_path.absolute()
    secrets_dir = (secrets_dir or config_path.parent).absolute()
    if storage is None:
        storage = SYSTEMD_STATE if config_path.is_relative_to("/etc") else config_path.parent / "hubd.db"
    client_secret = secrets_dir / CLIENT_SECRET_FILE
    login_password = secrets_dir / LOGIN_PASSWORD_FILE
    existing = [str(p) for p in (config_path, client_secret, login_password) if p.exists()]
    if existing:
        raise HubdError(f"{', '.join(existing)} {'exists' if len(existing) == 1 else 'exist'} already; hubd init "
                        "never overwrites a file (move it away, or choose other paths with -c and --secrets-dir)")
    password = secrets.token_urlsafe(15)  # 120 bits, 20 characters
    config_path.parent.mkdir(parents=True, exist_ok=True)
    secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write(client_secret, f"{PLACEHOLDER}: replace this line with the clientSecret from the platform's console\n",
           0o600)
    _write(login_password, password + "\n", 0o600)
    _write(config_path, _config_text(storage, hash_password(password)), 0o644)
    return Written(config_path, client_secret, login_password, storage)


def _write(path: Path, text: str, mode: int) -> None:
    """Create `path` with `mode` from the start (never readable by others, even for a moment)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    os.chmod(path, mode)  # the umask may have taken bits away from 0644


def _dialect_sections() -> str:
    """Each dialect's section, as its row in the table says, in the table's order."""
    return "".join(f"{kind.init}\n" for kind in KINDS if kind.init)


def _config_text(storage: Path, password_hash: str) -> str:
    today = datetime.date.today().isoformat()
    return f"""\
# hubd's configuration for this installation, written by `hubd init` on {today}.
# Replace every {PLACEHOLDER} below: `hubd check-config -c <this file>` names each one left and what it
# needs. Every key is described in docs/configuration.md of hubd's source. This file holds no secret:
# the client secret and the login password are in files of their own (mode 0600), read through
# ${{CREDENTIALS_DIRECTORY}}: systemd sets it for the unit; by hand (unset), hubd looks in /etc/credstore
# and then next to this file.

storage:
  path: {storage}
  synchronous: full                 # every event is on disk before the broker is acknowledged

mqtt:
  host: 127.0.0.1                   # your broker (mosquitto)
  port: 1883
  # username: hubd                  # if your broker wants a login; its password in a file:
  # password_file: ${{CREDENTIALS_DIRECTORY}}/{MQTT_PASSWORD_FILE}

http:
  host: 127.0.0.1                   # behind your reverse proxy, which terminates TLS
  port: 8080
  public_url: https://{PLACEHOLDER}.invalid   # the https:// URL the platform reaches this hub at
  trusted_proxies: [127.0.0.1]      # the reverse proxy on this machine
  local_port: 8081                  # the status page, /api/*, /metrics and the webhook: only here, never public

platform:
  # From the platform's developer console, once state reporting is switched on for your brand.
  base_url: https://{PLACEHOLDER}.invalid   # the event API
  auth_url: https://{PLACEHOLDER}.invalid   # the OAuth token host
  client_id: {PLACEHOLDER}
  client_secret_file: ${{CREDENTIALS_DIRECTORY}}/{CLIENT_SECRET_FILE}

driver:
  # The login on the authorize page when you link the hub in the app. The password was generated by
  # `hubd init` into {LOGIN_PASSWORD_FILE} next to the client secret; this is its hash
  # (a new one: `hubd hash-password`). admin: the same login signs in on the devices page, where the
  # owner names, places, hides the devices and declares doorbells.
  accounts:
    - username: {LOGIN_USER}
      password: "{password_hash}"
      admin: true

{_dialect_sections()}log:
  level: info
  events: true                      # one line per event delivered to the platform
"""
