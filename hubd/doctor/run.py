"""`hubd doctor -c CONFIG`: the checks in the order of the chain, each line printed when its check is done.

A check that needs what an earlier one could not give (a config, a resolvable name, an answer at the public
URL) prints a `WARN <check>: not checked: <why>` line. After a TLS failure other than an unreachable host the
routes are still checked, without verifying the certificate (and say so), so that one run shows every broken
link. Runs beside the service: nothing here writes to the database, takes over hubd's MQTT session or needs
hubd stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from hubd.doctor.address import DNS, PUBLIC_URL, check_dns, check_public_url
from hubd.doctor.broker import MQTT, check_broker
from hubd.doctor.database import DATABASE, DATABASE_WRITE, check_database, check_database_write
from hubd.doctor.mosquitto import LIMITS, check_broker_limits
from hubd.doctor.report import Report, not_checked
from hubd.doctor.routes import (
    HEALTHZ,
    LOCAL_ROUTES,
    LOGIN_PAGE,
    VENDOR_PATH,
    PublicRoutes,
    check_healthz,
    check_local_routes,
    check_login_page,
    check_vendor_path,
)
from hubd.doctor.settings import CONFIG, SECRETS, check_config, check_secrets
from hubd.doctor.tls import TLS, check_tls
from hubd.doctor.tokenhost import CLOCK, TOKEN_HOST, check_clock, check_token_host

# Every check, in the order the report prints them.
CHECKS = (CONFIG, SECRETS, DATABASE, DATABASE_WRITE, MQTT, LIMITS, TOKEN_HOST, CLOCK, PUBLIC_URL, DNS, TLS, HEALTHZ,
          VENDOR_PATH, LOGIN_PAGE, LOCAL_ROUTES)
ROUTE_CHECKS = (HEALTHZ, VENDOR_PATH, LOGIN_PAGE, LOCAL_ROUTES)


def doctor(config_path: Path, out: TextIO, env: Mapping[str, str]) -> int:
    """Run every check, printing one line each to `out`; 0 when none failed, else 1."""
    return asyncio.run(run_checks(config_path, out, env))


async def run_checks(config_path: Path, out: TextIO, env: Mapping[str, str]) -> int:
    """The checks in order (CHECKS); the exit code."""
    report = Report(out)
    result, config = check_config(config_path, env)
    report.add(result)
    if config is None:
        for check in CHECKS[1:]:
            report.add(not_checked(check, "the config did not load"))
        return report.exit_code
    report.add(check_secrets(config_path, config, env))
    result, secret = await asyncio.to_thread(check_database, config.storage)
    report.add(result)
    report.add(await asyncio.to_thread(check_database_write, config.storage))
    report.add(await check_broker(config.mqtt))
    report.add(await asyncio.to_thread(check_broker_limits, config))
    result, reading = await check_token_host(config.platform)
    report.add(result)
    report.add(check_clock(reading, "the token host did not answer"))

    result, address = check_public_url(config.http)
    report.add(result)
    if address is None:
        for check in (DNS, TLS, *ROUTE_CHECKS):
            report.add(not_checked(check, "no public URL"))
        return report.exit_code
    result, resolved = await check_dns(address)
    report.add(result)
    if not resolved:
        for check in (TLS, *ROUTE_CHECKS):
            report.add(not_checked(check, f"{address.host} does not resolve"))
        return report.exit_code
    tls = await check_tls(address)
    report.add(tls.result)
    if not tls.reachable:
        for check in ROUTE_CHECKS:
            report.add(not_checked(check, f"nothing answers TLS at {address.hostport}"))
        return report.exit_code
    async with PublicRoutes(address.url, verify=tls.verified) as routes:
        report.add(await check_healthz(routes, secret, config))
        report.add(await check_vendor_path(routes, config))
        report.add(await check_login_page(routes, config))
        report.add(await check_local_routes(routes, config))
    return report.exit_code
