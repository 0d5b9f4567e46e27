"""Shared helpers of the driver tests (no tests here): a DriverService served over loopback, a fake clock.

The driver tests import it by name (tests/ is on sys.path, see conftest.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aiohttp
from mosquitto import free_port

from hubd.config.model import HubdConfig
from hubd.driver.passwords import hash_password
from hubd.driver.service import DriverService
from hubd.lifecycle import Component, Health
from hubd.metrics import Metrics
from hubd.store.db import Database
from hubd.web.server import HttpServer, RouteSource

ALICE_PASSWORD = "correct horse battery"
BOB_PASSWORD = "plain-bob-pw"
CALLBACK = "https://platform.example/cb/path?u=1&v=2"
AUTH_URL = "https://platform.example"


@cache
def alice_hash() -> str:
    """One scrypt hash for the whole run (each costs ~25 ms)."""
    return hash_password(ALICE_PASSWORD)


class FakeClock:
    """A Clock that moves only when told."""

    def __init__(self) -> None:
        # starts at the real time, so what `hubd tokens list` reads with the real clock is current
        self.now = time.time()
        self.mono = 1000.0

    def time(self) -> float:
        """Seconds since the epoch."""
        return self.now

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        return self.mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        self.now += seconds
        self.mono += seconds


@dataclass
class RunningDriver:
    """A DriverService behind the real HttpServer on 127.0.0.1."""

    url: str
    service: DriverService
    db: Database
    clock: FakeClock
    config: HubdConfig
    metrics: Metrics


def make_config(tmp_path: Path, **driver: Any) -> HubdConfig:
    """A config with a tmp database and two accounts: alice (hashed) and bob (plain text)."""
    section: dict[str, Any] = {
        "accounts": [{"username": "alice", "password": alice_hash()},
                     {"username": "bob", "password": BOB_PASSWORD}],
        "hub_name": "Test hub",
    }
    section.update(driver)
    return HubdConfig.model_validate({"storage": {"path": str(tmp_path / "hubd.db")}, "driver": section})


@asynccontextmanager
async def running_driver(
    tmp_path: Path, *, max_body_bytes: int = 65536, public_url: str | None = None,
    auth_url: str | None = AUTH_URL, trusted_proxies: tuple[str, ...] = (), **driver: Any
) -> AsyncIterator[RunningDriver]:
    """Start a Database, a DriverService and an HttpServer serving its routes; stop them after.

    The service's public URL is the loopback URL it listens on unless `public_url` is given; its
    platform.auth_url is https://platform.example (so callbacks there are allowed by default).
    """
    config = make_config(tmp_path, **driver)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    clock = FakeClock()
    metrics = Metrics()
    db = Database(config.storage.path)
    service = DriverService(db, config.driver, public_url=public_url or url, metrics=metrics, clock=clock,
                            auth_url=auth_url, trusted_proxies=trusted_proxies)
    server = HttpServer(host="127.0.0.1", port=port, max_body_bytes=max_body_bytes, health=Health(),
                        metrics=metrics, sources=[service])
    await db.start()
    try:
        await service.start()
        await server.start()
        try:
            yield RunningDriver(url, service, db, clock, config, metrics)
        finally:
            await server.stop()
            await service.stop()
    finally:
        await db.stop()


def browser_session(source: str | None = None) -> aiohttp.ClientSession:
    """A client that keeps cookies like a browser, also for 127.0.0.1 (the login form needs its cookie).

    `source`: the loopback address its connections come from (e.g. 127.0.0.2: another client on this machine).
    """
    connector = aiohttp.TCPConnector(local_addr=(source, 0)) if source else None
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True), connector=connector)


async def command(session: aiohttp.ClientSession, base: str, name: str, params: Any) -> dict[str, Any]:
    """POST one driver command; assert HTTP 200 and JSON; the reply."""
    async with session.post(f"{base}/driver/command", json={"command": name, "params": params}) as resp:
        assert resp.status == 200, await resp.text()
        reply: dict[str, Any] = await resp.json()
        return reply


@dataclass
class PageForm:
    """The login form's hidden fields, as a browser would send them."""

    csrf: str
    callback: str

    def data(self, username: str, password: str) -> list[tuple[str, str]]:
        """Form fields to POST."""
        return [("csrf", self.csrf), ("callbackURL", self.callback), ("username", username),
                ("password", password)]


def parse_form(page: str) -> PageForm:
    """The hidden fields of the authorize page."""
    csrf = re.search(r'name="csrf" value="([^"]*)"', page)
    callback = re.search(r'name="callbackURL" value="([^"]*)"', page)
    assert csrf and callback, page
    return PageForm(unescape(csrf.group(1)), unescape(callback.group(1)))


async def open_page(session: aiohttp.ClientSession, base: str, callback: str = CALLBACK) -> tuple[str, PageForm]:
    """OAuth, then GET the authorize page; (authorize URL, its form)."""
    reply = await command(session, base, "OAuth", {"callbackURL": callback})
    assert reply["status"] == 0, reply
    async with session.get(reply["data"]) as resp:
        assert resp.status == 200
        return reply["data"], parse_form(await resp.text())


async def log_in(
    session: aiohttp.ClientSession, base: str, username: str = "alice", password: str = ALICE_PASSWORD,
    callback: str = CALLBACK,
) -> tuple[str, dict[str, str]]:
    """The whole login; (Location, the parameters it added to the callback)."""
    page_url, form = await open_page(session, base, callback)
    async with session.post(page_url, data=form.data(username, password), allow_redirects=False) as resp:
        assert resp.status == 302, await resp.text()
        location = resp.headers["Location"]
    return location, added_params(location, callback)


def added_params(location: str, callback: str) -> dict[str, str]:
    """The query parameters `location` has that `callback` does not."""
    got = parse_qsl(urlsplit(location).query, keep_blank_values=True)
    for pair in parse_qsl(urlsplit(callback).query, keep_blank_values=True):
        got.remove(pair)
    return dict(got)


async def user_auth(session: aiohttp.ClientSession, base: str, callback: str = CALLBACK) -> dict[str, Any]:
    """Log alice in and exchange the code (oauth2 mode); the UserAuth."""
    _, added = await log_in(session, base, callback=callback)
    reply = await command(session, base, "OAuthGetToken", {"code": added["code"]})
    assert reply["status"] == 0, reply
    data: dict[str, Any] = reply["data"]
    return data


def error_of(reply: dict[str, Any]) -> tuple[str, str]:
    """(errorName, message) of an error reply, after checking the envelope."""
    assert isinstance(reply["status"], int) and reply["status"] > 0, reply
    assert set(reply) == {"status", "errorName", "message"}, reply
    return reply["errorName"], reply["message"]


def _static_checks(service: DriverService) -> tuple[Component, RouteSource]:
    """mypy proves here that DriverService is a lifecycle Component and a RouteSource."""
    return service, service
