"""The doctor's first two checks: the config file (what `hubd run` and `check-config` accept) and its secrets
(set where the chain needs them; files and the config itself not readable by other users).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

import yaml

from hubd.config.model import HubdConfig, config_secret_files, load_config
from hubd.config.paths import secret_fields
from hubd.doctor.report import Result, failed, passed, warned
from hubd.driver.passwords import is_hash
from hubd.driver.policy import driver_policy
from hubd.errors import ConfigError

CONFIG = "config"
SECRETS = "secrets"


def check_config(path: Path, env: Mapping[str, str]) -> tuple[Result, HubdConfig | None]:
    """The config loads and passes what `hubd run` refuses at start; the settings a proxy needs are set."""
    try:
        config = load_config(path, env)
    except ConfigError as err:
        return failed(CONFIG, f"{path} has {len(err.problems)} problem(s): {'; '.join(err.problems)}; fix them "
                              f"(`hubd check-config -c {path}` lists them with their lines)"), None
    policy = driver_policy(config.driver, auth_url=config.platform.auth_url,
                           trusted_proxies=config.http.trusted_proxies)
    if policy.problems:
        return failed(CONFIG, f"hubd would refuse to start: {'; '.join(policy.problems)}"), config
    warnings = list(policy.warnings)
    if (config.http.public_url or "").startswith("https://") and config.http.local_port is None:
        warnings.append("http.local_port is not set: behind a proxy or tunnel on this machine every request comes "
                        "from 127.0.0.1 and counts as local; set it (e.g. 8081) so that the status page, /api/*, "
                        "/metrics and the webhook get a listener of their own")
    if warnings:
        return warned(CONFIG, f"{path} is valid, but: {'; '.join(warnings)}"), config
    return passed(CONFIG, f"{path} is valid"), config


def check_secrets(path: Path, config: HubdConfig, env: Mapping[str, str]) -> Result:
    """The secrets the chain needs are set; their files, and a config holding one, are private (mode 0600)."""
    problems: list[str] = []
    warnings: list[str] = []
    platform = config.platform
    if platform.client_secret is None:
        if platform.auth_url or platform.base_url or platform.client_id:
            problems.append("platform.client_secret is not set: put the clientSecret from the platform's console in "
                            "a file of its own (mode 0600) and name it with platform.client_secret_file")
    elif not platform.client_secret.get_secret_value().strip():
        problems.append("platform.client_secret is empty: put the clientSecret from the platform's console in it")
    if config.mqtt.username and config.mqtt.password is None:
        warnings.append("mqtt.username is set without mqtt.password (fine only if the broker takes that login "
                        "without one)")
    files, inline = _secret_sources(path, env)
    for key, file in files:
        try:
            mode = stat.S_IMODE(os.stat(file).st_mode)
        except OSError:
            continue  # unreadable files are the config check's problem
        if mode & 0o077:
            warnings.append(f"{file} ({key}) is readable by other users (mode {mode:04o}): chmod 600 {file}")
    if inline:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            mode = 0
        if mode & 0o044:
            warnings.append(f"{path} holds {', '.join(inline)} and is readable by other users (mode {mode:04o}): "
                            "move each into a file of its own (mode 0600) named by its `<key>_file` key")
    if problems:
        return failed(SECRETS, "; ".join(problems + warnings))
    if warnings:
        return warned(SECRETS, "; ".join(warnings))
    where = [f"{key} from {file}" for key, file in files] + [f"{key} in the config" for key in inline]
    return passed(SECRETS, ", ".join(where) if where else "no secrets needed")


def _secret_sources(path: Path, env: Mapping[str, str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The secrets the file names as `<key>_file` (key, file: found as `load_config` finds them, with
    `${CREDENTIALS_DIRECTORY}`'s fallbacks), and those it holds itself (a password hash is not one)."""
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except (OSError, yaml.YAMLError):
        return [], []
    files = [(ref.key.removesuffix("_file"), str(ref.path)) for ref in config_secret_files(path, text, env)
             if ref.path is not None]
    inline: list[str] = []
    for values, at, name in secret_fields(HubdConfig, data if isinstance(data, dict) else {}):
        value = values.get(name)
        if isinstance(value, str) and value and "${" not in value and not is_hash(value):
            inline.append(".".join(str(p) for p in (*at, name)))
    return files, inline
