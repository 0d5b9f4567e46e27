"""GET/POST /oauth/authorize over loopback: the page, the redirect, CSRF, login limits, callback rules."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from test_driver_support import (
    ALICE_PASSWORD,
    BOB_PASSWORD,
    CALLBACK,
    RunningDriver,
    added_params,
    command,
    log_in,
    open_page,
    running_driver,
)

from hubd.driver.passwords import verify_password
from hubd.driver.service import DriverService, TokenStatus
from hubd.errors import ConfigError
from hubd.metrics import Metrics
from hubd.store.db import Database


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[RunningDriver]:
    async with running_driver(tmp_path) as running:
        yield running


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def submit(
    session: aiohttp.ClientSession, url: str, data: list[tuple[str, str]]
) -> tuple[int, str, dict[str, str]]:
    async with session.post(url, data=data, allow_redirects=False) as resp:
        return resp.status, await resp.text(), {str(k): v for k, v in resp.headers.items()}


async def test_page_is_a_clean_phone_friendly_form(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    page_url, _ = await open_page(session, driver.url)
    async with session.get(page_url) as resp:
        page = await resp.text()
        headers = resp.headers
    assert resp.status == 200 and resp.content_type == "text/html"
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert "Test hub" in page and "platform.example" in page
    assert '<form method="post">' in page
    for field in ('name="username"', 'name="password" type="password"', 'type="hidden" name="csrf"',
                  'type="hidden" name="callbackURL"'):
        assert field in page
    assert "<script" not in page.lower()
    assert headers["Cache-Control"] == "no-store"
    assert headers["X-Frame-Options"] == "DENY"
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "form-action 'self' https://platform.example" in csp
    assert "style-src 'sha256-" in csp


async def test_page_escapes_everything(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    evil = 'https://platform.example/cb?x="><script>alert(1)</script>'
    async with running_driver(tmp_path, hub_name="<b>Hub</b> & co") as driver, \
            session.get(f"{driver.url}/oauth/authorize?callbackURL={quote(evil, safe='')}") as resp:
        page = await resp.text()
    assert "<script>" not in page and "<b>Hub" not in page
    assert "&lt;b&gt;Hub&lt;/b&gt; &amp; co" in page
    assert "&quot;&gt;&lt;script&gt;" in page


async def test_page_reads_callbackurl_case_insensitively(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    async with session.get(f"{driver.url}/oauth/authorize?callbackurl={quote(CALLBACK, safe='')}") as resp:
        assert resp.status == 200
        assert '<form method="post">' in await resp.text()


@pytest.mark.parametrize(("query", "needle"), [
    ("", "no callbackURL"),
    ("?callbackURL=javascript%3Aalert(1)", "http:// or https://"),
    ("?callbackURL=ftp%3A%2F%2Fplatform.example%2F", "http:// or https://"),
])
async def test_page_refuses_a_broken_link(
    driver: RunningDriver, session: aiohttp.ClientSession, query: str, needle: str
) -> None:
    async with session.get(f"{driver.url}/oauth/authorize{query}") as resp:
        page = await resp.text()
    assert resp.status == 400
    assert needle in page and "<form" not in page


async def test_redirect_keeps_path_query_and_fragment(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    callback = "https://platform.example/a/b/c?u=1&v=two%20words&u=3&empty=#frag/ment"
    location, added = await log_in(session, driver.url, callback=callback)
    assert location.startswith("https://platform.example/a/b/c?u=1&v=two%20words&u=3&empty=&code=")
    assert location.endswith("#frag/ment")
    assert list(added) == ["code"] and len(added["code"]) >= 40


async def test_redirect_to_a_callback_without_query(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    location, added = await log_in(session, driver.url, callback="http://127.0.0.1:9/cb")
    assert location == f"http://127.0.0.1:9/cb?code={added['code']}"


async def test_oauth_v1_mode_redirect_carries_user_auth(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with running_driver(tmp_path, mode="oauth", token_ttl_s=1200) as driver:
        location, added = await log_in(session, driver.url)
        assert location.startswith(f"{CALLBACK}&userId=alice&userToken=")
        assert set(added) == {"userId", "userToken", "expiresIn", "refreshToken"}
        assert added["expiresIn"] == "1200"
        assert (await driver.service.verify_user_token(added["userToken"])).status is TokenStatus.VALID
        reply = await command(session, driver.url, "OAuthRefresh", {**added, "expiresIn": 1200})
        assert reply["status"] == 0 and reply["data"]["userToken"] != added["userToken"]


async def test_plain_text_password_works_and_is_warned_about_once(
    tmp_path: Path, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hubd.driver")
    async with running_driver(tmp_path) as driver:
        _, added = await log_in(session, driver.url, username="bob", password=BOB_PASSWORD)
        assert "code" in added
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if "plain-text" in w] == [
        "driver account 'bob' has a plain-text password in the config; "
        "replace it with the output of `hubd hash-password`"]
    assert any("driver.callback_hosts is empty" in w for w in warnings)


async def test_nothing_secret_is_logged(
    tmp_path: Path, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_driver(tmp_path) as driver:
        page_url, form = await open_page(session, driver.url)
        await submit(session, page_url, form.data("alice", "wrong-password-123"))
        await submit(session, page_url, form.data(ALICE_PASSWORD, ALICE_PASSWORD))
        _, added = await log_in(session, driver.url)
        auth = (await command(session, driver.url, "OAuthGetToken", {"code": added["code"]}))["data"]
        new = (await command(session, driver.url, "OAuthRefresh", auth))["data"]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "alice" in text
    for secret in ("wrong-password-123", ALICE_PASSWORD, BOB_PASSWORD, added["code"], auth["userToken"],
                   auth["refreshToken"], new["userToken"], new["refreshToken"], form.csrf):
        assert secret not in text


async def test_wrong_password_shows_the_page_again(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    page_url, form = await open_page(session, driver.url)
    for username in ("alice", "nobody"):
        status, page, headers = await submit(session, page_url, form.data(username, "wrong"))
        assert status == 200 and "Location" not in headers
        assert "Wrong username or password." in page
        assert f'value="{username}"' in page and '<form method="post">' in page


async def test_unknown_username_costs_one_scrypt_run(
    driver: RunningDriver, session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[str] = []
    real = verify_password

    def counting(stored: str, candidate: str) -> bool:
        if stored.startswith("scrypt$"):
            hashed.append(stored)
        return real(stored, candidate)

    monkeypatch.setattr("hubd.driver.service.verify_password", counting)
    page_url, form = await open_page(session, driver.url)
    for username in ("nobody", "alice", "bob"):
        hashed.clear()
        await submit(session, page_url, form.data(username, "wrong"))
        assert len(hashed) == 1, username


@pytest.mark.parametrize("case", ["missing", "tampered", "other-callback", "expired"])
async def test_csrf_token_is_required(driver: RunningDriver, session: aiohttp.ClientSession, case: str) -> None:
    page_url, form = await open_page(session, driver.url)
    data = form.data("alice", ALICE_PASSWORD)
    if case == "missing":
        data = [pair for pair in data if pair[0] != "csrf"]
    elif case == "tampered":
        data[0] = ("csrf", form.csrf[:-1] + ("0" if form.csrf[-1] != "0" else "1"))
    elif case == "other-callback":
        data[1] = ("callbackURL", "https://platform.example/elsewhere")
    else:
        driver.clock.advance(601)
    status, page, headers = await submit(session, page_url, data)
    assert status == 400 and "Location" not in headers
    assert "expired or did not come from this hub" in page
    assert '<form method="post">' in page  # with a fresh token: the user can simply try again


async def test_login_rejects_a_tampered_callback(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with running_driver(tmp_path, callback_hosts=["platform.example"]) as driver:
        page_url, form = await open_page(session, driver.url)
        for callback, needle in (("https://evil.example/cb", "driver.callback_hosts"),
                                 ("javascript:alert(1)", "http:// or https://")):
            data = form.data("alice", ALICE_PASSWORD)
            data[1] = ("callbackURL", callback)
            status, page, headers = await submit(session, page_url, data)
            assert status == 400 and "Location" not in headers
            assert needle in page and "<form" not in page
        async with session.get(f"{driver.url}/oauth/authorize?callbackURL=https%3A%2F%2Fevil.example%2F") as resp:
            assert resp.status == 400 and "driver.callback_hosts" in await resp.text()


async def test_failed_logins_are_limited_per_account(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    page_url, form = await open_page(session, driver.url)
    for _ in range(5):
        assert (await submit(session, page_url, form.data("alice", "wrong")))[0] == 200
    status, page, headers = await submit(session, page_url, form.data("alice", ALICE_PASSWORD))
    assert status == 429 and "Location" not in headers
    assert "Too many failed sign-in attempts. Try again in 15 minutes." in page
    assert headers["Retry-After"] == "900"
    # other accounts are not locked by alice's failures
    assert (await submit(session, page_url, form.data("bob", BOB_PASSWORD)))[0] == 302
    driver.clock.advance(14 * 60)
    _, form = await open_page(session, driver.url)  # the form itself lives 10 minutes
    assert "Try again in 1 minute." in (await submit(session, page_url, form.data("alice", ALICE_PASSWORD)))[1]
    driver.clock.advance(60)
    _, form = await open_page(session, driver.url)
    assert (await submit(session, page_url, form.data("alice", ALICE_PASSWORD)))[0] == 302


async def test_success_clears_the_account_count(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    page_url, form = await open_page(session, driver.url)
    for _ in range(4):
        await submit(session, page_url, form.data("alice", "wrong"))
    assert (await submit(session, page_url, form.data("alice", ALICE_PASSWORD)))[0] == 302
    for _ in range(4):
        await submit(session, page_url, form.data("alice", "wrong"))
    assert (await submit(session, page_url, form.data("alice", ALICE_PASSWORD)))[0] == 302


async def test_failed_logins_are_limited_per_address(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    page_url, form = await open_page(session, driver.url)
    for i in range(20):
        assert (await submit(session, page_url, form.data(f"guess{i}", "wrong")))[0] == 200
    status, page, _ = await submit(session, page_url, form.data("bob", BOB_PASSWORD))
    assert status == 429 and "Too many failed sign-in attempts" in page


async def test_empty_fields(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    page_url, form = await open_page(session, driver.url)
    status, page, _ = await submit(session, page_url, form.data("alice", ""))
    assert status == 200 and "Enter your username and password." in page


async def test_logins_are_counted(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    page_url, form = await open_page(session, driver.url)
    await submit(session, page_url, form.data("alice", "wrong"))
    await submit(session, page_url, form.data("alice", ALICE_PASSWORD))
    text = driver.metrics.render()
    assert 'hubd_driver_logins_total{result="ok"} 1' in text
    assert 'hubd_driver_logins_total{result="wrong_password"} 1' in text


async def test_start_rejects_duplicate_accounts_and_broken_hashes(tmp_path: Path) -> None:
    from test_driver_support import make_config

    config = make_config(tmp_path, accounts=[
        {"username": "a", "password": "x"}, {"username": "a", "password": "y"},
        {"username": "c", "password": "scrypt$1$2$3$bad$hash"},
    ])
    db = Database(config.storage.path)
    await db.start()
    try:
        service = DriverService(db, config.driver, public_url="http://hub", metrics=Metrics())
        with pytest.raises(ConfigError) as caught:
            await service.start()
    finally:
        await db.stop()
    assert caught.value.problems[0] == "driver.accounts[1].username: 'a' is listed twice"
    assert caught.value.problems[1].startswith("driver.accounts[2].password: ")


async def test_added_params_helper_sanity() -> None:
    assert added_params("https://x/cb?a=1&code=z", "https://x/cb?a=1") == {"code": "z"}
