"""The driver's settings turned into its rules, with what is wrong or risky about them.

Shared by `DriverService.start` (which refuses to start on a problem and logs the warnings) and
`hubd check-config` (which reports the same problems without starting anything). Pure: imports
config, the driver's url and password rules, and hubd.web.client_address.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hubd.config.model import DriverConfig, HubdConfig
from hubd.driver.passwords import PasswordHashInvalid, check_hash, is_hash
from hubd.driver.urls import ANY_HOST, CallbackRules, callback_rules
from hubd.web.client_address import TrustedProxies, parse_trusted_proxies


@dataclass(frozen=True, slots=True)
class DriverPolicy:
    """The callback rules and trusted proxies in force, and the problems and warnings of the settings."""

    callbacks: CallbackRules
    proxies: TrustedProxies
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def driver_policy(config: DriverConfig, *, auth_url: str | None, trusted_proxies: Sequence[str]) -> DriverPolicy:
    """Check driver.accounts, driver.callback_hosts (with its default) and http.trusted_proxies."""
    callbacks, problems = callback_rules(config.callback_hosts, auth_url=auth_url, mode=config.mode)
    proxies, proxy_problems = parse_trusted_proxies(trusted_proxies)
    problems += proxy_problems
    warnings: list[str] = []
    seen: set[str] = set()
    for i, account in enumerate(config.accounts):
        if account.username in seen:
            problems.append(f"driver.accounts[{i}].username: {account.username!r} is listed twice")
        seen.add(account.username)
        stored = account.password.get_secret_value()
        if is_hash(stored):
            try:
                check_hash(stored)
            except PasswordHashInvalid as err:
                problems.append(f"driver.accounts[{i}].password: {err}")
        else:
            warnings.append(f"driver account {account.username!r} has a plain-text password in the config; "
                            "replace it with the output of `hubd hash-password`")
    if not config.accounts:
        warnings.append("driver.accounts is empty: nobody can log in on the authorize page")
    if callbacks.any_host:
        warnings.append(f'driver.callback_hosts is ["{ANY_HOST}"]: a sign-in may send its code to any https host; '
                        "list the platform's callback host instead")
    elif not config.callback_hosts and auth_url is None:
        warnings.append("driver.callback_hosts and platform.auth_url are not set: a callbackURL may point only at "
                        "this machine (loopback); set driver.callback_hosts to the platform's callback host")
    return DriverPolicy(callbacks, proxies, problems, warnings)


def config_problems(config: HubdConfig) -> list[str]:
    """What `hubd run` would refuse to start with in the driver's settings (for `hubd check-config`)."""
    return driver_policy(config.driver, auth_url=config.platform.auth_url,
                         trusted_proxies=config.http.trusted_proxies).problems
