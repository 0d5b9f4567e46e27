"""GET/POST /oauth/authorize over loopback: the page, the redirect, CSRF, login limits, callback rules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from driver_helpers import (
    ALICE_PASSWORD,
    BOB_PASSWORD,
    CALLBACK,
    RunningDriver,
    added_params,
    browser_session,
    command,
    error_of,
    log_in,
    make_config,
    open_page,
    running_driver,
)
from yarl import URL

from hubd.driver.csrf import COOKIE_NAME as CSRF_COOKIE
from hubd.driver.limits import ACCOUNT_FREE, SOURCE_FREE, TRUST_S
from hubd.driver.passwords import verify_password
from hubd.driver.service import DriverService
from hubd.driver.trust import COOKIE_NAME as DEVICE_COOKIE
from hubd.errors import ConfigError
from hubd.metrics import Metrics
from hubd.store.db import Database
from hubd.usertoken import TokenStatus


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[RunningDriver]:
    async with running_driver(tmp_path) as running:
        yield running


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with browser_session() as client:
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
    # not no-referrer: under it browsers send `Origin: null` with the form, which the login refuses
    assert headers["Referrer-Policy"] == "same-origin" and '<meta name="referrer" content="same-origin">' in page
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
    location, added = await log_in(session, driver.url, callback="https://platform.example/cb")
    assert location == f"https://platform.example/cb?code={added['code']}"


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
    assert not any("callback_hosts" in w for w in warnings)  # unset: the host of platform.auth_url


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


def count_scrypt_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Patch the sign-in check's verify_password to record every scrypt run (the real check still runs)."""
    runs: list[str] = []
    real = verify_password

    def counting(stored: str, candidate: str) -> bool:
        if stored.startswith("scrypt$"):
            runs.append(candidate)
        return real(stored, candidate)

    monkeypatch.setattr("hubd.driver.passwords.verify_password", counting)
    return runs


async def test_unknown_username_costs_one_scrypt_run(
    driver: RunningDriver, session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed = count_scrypt_runs(monkeypatch)
    page_url, form = await open_page(session, driver.url)
    for username in ("nobody", "alice", "bob"):
        hashed.clear()
        await submit(session, page_url, form.data(username, "wrong"))
        assert len(hashed) == 1, username


@pytest.mark.parametrize("case", ["missing", "tampered", "non-ascii", "other-callback", "expired"])
async def test_csrf_token_is_required(driver: RunningDriver, session: aiohttp.ClientSession, case: str) -> None:
    page_url, form = await open_page(session, driver.url)
    data = form.data("alice", ALICE_PASSWORD)
    if case == "missing":
        data = [pair for pair in data if pair[0] != "csrf"]
    elif case == "tampered":
        data[0] = ("csrf", form.csrf[:-1] + ("0" if form.csrf[-1] != "0" else "1"))
    elif case == "non-ascii":
        data[0] = ("csrf", form.csrf[:-1] + "\u00e9")
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


async def test_wrong_passwords_make_their_browser_wait_longer_and_longer(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    page_url, form = await open_page(session, driver.url)
    for _ in range(SOURCE_FREE):
        assert (await submit(session, page_url, form.data("alice", "wrong")))[0] == 200
    for wait in (1, 2, 4):
        status, page, headers = await submit(session, page_url, form.data("alice", ALICE_PASSWORD))
        assert status == 429 and "Location" not in headers  # checked no password: says nothing about it
        assert f"Too many failed sign-in attempts. Try again in {wait} second{'s' if wait > 1 else ''}." in page
        assert headers["Retry-After"] == str(wait)
        driver.clock.advance(wait)
        assert (await submit(session, page_url, form.data("alice", "wrong")))[0] == 200
    # other accounts at the same address are not slowed by alice's failures
    assert (await submit(session, page_url, form.data("bob", BOB_PASSWORD)))[0] == 302
    driver.clock.advance(8)
    assert (await submit(session, page_url, form.data("alice", ALICE_PASSWORD)))[0] == 302


async def test_success_clears_the_account_count(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    page_url, form = await open_page(session, driver.url)
    for _ in range(4):
        await submit(session, page_url, form.data("alice", "wrong"))
    assert (await submit(session, page_url, form.data("alice", ALICE_PASSWORD)))[0] == 302
    for _ in range(4):
        await submit(session, page_url, form.data("alice", "wrong"))
    assert (await submit(session, page_url, form.data("alice", ALICE_PASSWORD)))[0] == 302


async def test_guessing_many_usernames_from_one_address_locks_nobody_else_out(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    page_url, form = await open_page(session, driver.url)
    for i in range(30):
        assert (await submit(session, page_url, form.data(f"guess{i}", "wrong")))[0] == 200
    async with browser_session() as neighbour:  # someone else behind the same address
        assert (await log_in(neighbour, driver.url, username="bob", password=BOB_PASSWORD))[1]["code"]


async def guess_hard(driver: RunningDriver, session: aiohttp.ClientSession, guesses: int) -> None:
    """Wrong passwords for alice, each the moment this browser may try again (the fake clock skips the waits)."""
    for i in range(guesses):
        page_url, form = await open_page(session, driver.url)
        status, _, headers = await submit(session, page_url, form.data("alice", f"guess-{i}"))
        if status == 429:
            driver.clock.advance(int(headers["Retry-After"]))
            page_url, form = await open_page(session, driver.url)
            status, _, _ = await submit(session, page_url, form.data("alice", f"guess-{i}"))
        assert status == 200


async def test_the_owner_gets_in_while_another_address_guesses(driver: RunningDriver) -> None:
    async with browser_session("127.0.0.1") as owner, browser_session("127.0.0.2") as guesser, \
            browser_session("127.0.0.3") as stranger:
        await log_in(owner, driver.url)  # once, at home: the address is now trusted for alice
        await guess_hard(driver, guesser, ACCOUNT_FREE + 5)
        # the owner's address passes the account's throttle, and the guesser still waits
        owner.cookie_jar.clear()  # not even the device cookie is needed from a trusted address
        assert "code" in (await log_in(owner, driver.url))[1]
        page_url, form = await open_page(guesser, driver.url)
        assert (await submit(guesser, page_url, form.data("alice", ALICE_PASSWORD)))[0] == 429
        # a browser never seen before, at a new address, waits with the guesser (README: the cost)
        page_url, form = await open_page(stranger, driver.url)
        status, page, _ = await submit(stranger, page_url, form.data("alice", ALICE_PASSWORD))
        assert status == 429 and "Too many failed sign-in attempts" in page


async def test_a_device_cookie_lets_the_owner_in_at_the_guessers_own_address(driver: RunningDriver) -> None:
    async with browser_session("127.0.0.2") as owner, browser_session("127.0.0.2") as guesser, \
            browser_session("127.0.0.2") as other:
        await log_in(owner, driver.url)
        device = [c for c in owner.cookie_jar if c.key == DEVICE_COOKIE]
        assert len(device) == 1 and device[0]["httponly"] and device[0]["samesite"] == "Lax"
        assert device[0]["path"] == "/oauth/authorize" and int(device[0]["max-age"]) > 300 * 86400
        assert ALICE_PASSWORD not in device[0].value and "alice" not in device[0].value
        driver.clock.advance(TRUST_S + 1)  # the address is no longer trusted; the cookie still is
        await guess_hard(driver, guesser, ACCOUNT_FREE + 5)
        assert "code" in (await log_in(owner, driver.url))[1]
        # the same password from a browser without the cookie, at the same address, waits
        page_url, form = await open_page(other, driver.url)
        assert (await submit(other, page_url, form.data("alice", ALICE_PASSWORD)))[0] == 429


async def test_a_device_cookie_of_another_account_or_a_forged_one_is_no_help(driver: RunningDriver) -> None:
    async with browser_session("127.0.0.2") as guesser:
        await log_in(guesser, driver.url, username="bob", password=BOB_PASSWORD)  # a cookie for bob
        driver.clock.advance(TRUST_S + 1)
        page_url, form = await open_page(guesser, driver.url)
        answers = [(await submit(guesser, page_url, form.data("alice", f"guess-{i}")))[0] for i in range(8)]
        assert answers == [200] * SOURCE_FREE + [429] * 3
        for forged in ("1.forged.0000", f"{int(driver.clock.time())}.forged.\u00e9\u00e9"):
            guesser.cookie_jar.update_cookies({DEVICE_COOKIE: forged}, URL(driver.url + "/oauth/authorize"))
            assert (await submit(guesser, page_url, form.data("alice", "guess-x")))[0] == 429


@pytest.mark.parametrize("trusted", [False, True])
async def test_x_forwarded_for_counts_only_from_a_trusted_proxy(tmp_path: Path, trusted: bool) -> None:
    proxies = ("127.0.0.1",) if trusted else ()
    async with running_driver(tmp_path, trusted_proxies=proxies) as driver, browser_session() as proxy, \
            browser_session("127.0.0.2") as client:
        page_url, form = await open_page(proxy, driver.url)

        async def guess(session: aiohttp.ClientSession, forwarded: str) -> int:
            async with session.post(page_url, data=form.data("alice", "wrong"), allow_redirects=False,
                                    headers={"X-Forwarded-For": forwarded}) as resp:
                return resp.status

        for i in range(SOURCE_FREE):
            assert await guess(proxy, f"198.51.100.{i}, 203.0.113.7") == 200
        # through a trusted proxy each client is its own source (the rightmost hop the proxy added);
        # without one the header is ignored and every guess counts against the proxy's address
        assert await guess(proxy, "203.0.113.8") == (200 if trusted else 429)
        assert await guess(proxy, "203.0.113.7") == 429
        # a peer that is not a trusted proxy is counted by its own address, whatever its header says
        page_url, form = await open_page(client, driver.url)
        for _ in range(3):
            assert await guess(client, "203.0.113.7") == 200


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


async def start_problems(tmp_path: Path, trusted_proxies: tuple[str, ...] = (), **driver: Any) -> list[str]:
    """The problems DriverService.start refuses this driver config with."""
    config = make_config(tmp_path, **driver)
    db = Database(config.storage.path)
    await db.start()
    try:
        service = DriverService(db, config.driver, public_url="http://hub", metrics=Metrics(),
                                trusted_proxies=trusted_proxies)
        with pytest.raises(ConfigError) as caught:
            await service.start()
    finally:
        await db.stop()
    return caught.value.problems


async def test_start_rejects_duplicate_accounts_and_broken_hashes(tmp_path: Path) -> None:
    problems = await start_problems(tmp_path, accounts=[
        {"username": "a", "password": "x"}, {"username": "a", "password": "y"},
        {"username": "c", "password": "scrypt$1$2$3$bad$hash"},
    ])
    assert problems[0] == "driver.accounts[1].username: 'a' is listed twice"
    assert problems[1].startswith("driver.accounts[2].password: ")


async def test_added_params_helper_sanity() -> None:
    assert added_params("https://x/cb?a=1&code=z", "https://x/cb?a=1") == {"code": "z"}


# -- concurrent attempts: the limits hold when many POSTs arrive at once --------------------------


async def test_parallel_wrong_passwords_hit_the_browsers_limit(
    driver: RunningDriver, session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = count_scrypt_runs(monkeypatch)
    page_url, form = await open_page(session, driver.url)
    answers = await asyncio.gather(*(submit(session, page_url, form.data("alice", f"guess-{i}")) for i in range(50)))
    checked = [status for status, _, _ in answers if status != 429]
    assert checked == [200] * SOURCE_FREE
    assert len(runs) == SOURCE_FREE
    # the real password is refused as well from this browser until its wait passes
    assert (await submit(session, page_url, form.data("alice", ALICE_PASSWORD)))[0] == 429


async def test_parallel_wrong_passwords_from_many_addresses_hit_the_accounts_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = count_scrypt_runs(monkeypatch)
    async with running_driver(tmp_path, trusted_proxies=("127.0.0.1",)) as driver, browser_session() as session:
        page_url, form = await open_page(session, driver.url)

        async def guess(i: int) -> int:
            async with session.post(page_url, data=form.data("alice", f"guess-{i}"), allow_redirects=False,
                                    headers={"X-Forwarded-For": f"198.51.100.{i}"}) as resp:
                return resp.status

        answers = await asyncio.gather(*(guess(i) for i in range(60)))
        assert sorted(answers) == [200] * ACCOUNT_FREE + [429] * (60 - ACCOUNT_FREE)
        assert len(runs) == ACCOUNT_FREE


async def test_right_passwords_use_up_no_limit(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    page_url, form = await open_page(session, driver.url)
    for _ in range(SOURCE_FREE + ACCOUNT_FREE + 5):
        assert (await submit(session, page_url, form.data("bob", BOB_PASSWORD)))[0] == 302


# -- CSRF: the token is bound to a cookie of this browser, and the POST must come from this hub ----


async def test_page_sets_a_lax_httponly_cookie(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    reply = await command(session, driver.url, "OAuth", {"callbackURL": CALLBACK})
    async with session.get(reply["data"]) as resp:
        cookie = resp.cookies[CSRF_COOKIE]
    assert len(cookie.value) >= 40
    # Lax: the page is opened from the platform's site, and a Strict cookie would not come along
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/oauth/authorize"
    assert not cookie["secure"]  # the public URL of this test hub is http://
    async with session.get(reply["data"]) as resp:  # opened again: the browser keeps its id
        assert resp.cookies[CSRF_COOKIE].value == cookie.value


async def test_cookie_is_secure_behind_an_https_public_url(tmp_path: Path) -> None:
    async with running_driver(tmp_path, public_url="https://hub.example") as driver, browser_session() as session:
        reply = await command(session, driver.url, "OAuth", {"callbackURL": CALLBACK})
        assert reply["data"].startswith("https://hub.example/oauth/authorize?")
        async with session.get(f"{driver.url}/oauth/authorize?callbackURL={quote(CALLBACK, safe='')}") as resp:
            assert resp.cookies[CSRF_COOKIE]["secure"]


async def test_form_without_the_cookie_is_refused(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    page_url, form = await open_page(session, driver.url)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as cookieless:
        status, page, headers = await submit(cookieless, page_url, form.data("alice", ALICE_PASSWORD))
    assert status == 400 and "Location" not in headers
    assert "did not send this hub's sign-in cookie" in unescape(page)
    assert '<form method="post">' in page


async def test_form_with_another_pages_cookie_is_refused(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    page_url, form = await open_page(session, driver.url)
    async with browser_session() as other:
        await open_page(other, driver.url)  # another browser, with a cookie of its own
        status, page, headers = await submit(other, page_url, form.data("alice", ALICE_PASSWORD))
    assert status == 400 and "Location" not in headers
    assert "expired or did not come from this hub" in page and '<form method="post">' in page
    # the page it got back carries a token for its own cookie: signing in from it works
    status, _, headers = await submit(session, page_url, form.data("alice", ALICE_PASSWORD))
    assert status == 302


@pytest.mark.parametrize(("header", "value"), [
    ("Origin", "https://attacker.example"),
    ("Origin", "null"),
    ("Referer", "https://attacker.example/page"),
])
async def test_form_posted_from_another_site_is_refused(
    driver: RunningDriver, session: aiohttp.ClientSession, header: str, value: str
) -> None:
    page_url, form = await open_page(session, driver.url)
    async with session.post(page_url, data=form.data("alice", ALICE_PASSWORD), allow_redirects=False,
                            headers={header: value}) as resp:
        status, page = resp.status, await resp.text()
        assert "Location" not in resp.headers
    assert status == 403
    assert "was sent from another site" in page and '<form method="post">' in page


@pytest.mark.parametrize(("header", "own"), [("Origin", "{url}"), ("Referer", "{url}/oauth/authorize?x=1"),
                                             ("Origin", "http://hub.example")])
async def test_form_posted_from_this_hub_is_accepted(tmp_path: Path, header: str, own: str) -> None:
    # own origin: the public URL's, or the one the request was addressed to (its Host header)
    async with running_driver(tmp_path) as driver, browser_session() as session:
        page_url, form = await open_page(session, driver.url)
        value = own.format(url=driver.url)
        extra = {header: value}
        if "hub.example" in value:
            extra["Host"] = "hub.example"
        async with session.post(page_url, data=form.data("alice", ALICE_PASSWORD), allow_redirects=False,
                                headers=extra) as resp:
            assert resp.status == 302, await resp.text()


# -- malformed callback URLs are a 400 page, never a 500 --------------------------------------------


@pytest.mark.parametrize("callback", ["https://[::1/x", "http://[zz]/x", "https://platform.example\\@evil/",
                                      "https://platform.example;x/", "https://it's.example/"])
async def test_page_refuses_a_malformed_callback(
    driver: RunningDriver, session: aiohttp.ClientSession, callback: str
) -> None:
    async with session.get(f"{driver.url}/oauth/authorize?callbackURL={quote(callback, safe='')}") as resp:
        page = await resp.text()
    assert resp.status == 400, page
    assert "This hub will not link to that app: callbackURL" in page and "<form" not in page
    page_url, form = await open_page(session, driver.url)
    data = form.data("alice", ALICE_PASSWORD)
    data[1] = ("callbackURL", callback)
    status, page, _ = await submit(session, page_url, data)
    assert status == 400 and "This hub will not link to that app: callbackURL" in page


# -- callback hosts: safe by default -----------------------------------------------------------------


@pytest.mark.parametrize("auth_url", ["https://platform.example", None])
async def test_no_code_ever_goes_to_a_foreign_host_by_default(
    tmp_path: Path, session: aiohttp.ClientSession, auth_url: str | None
) -> None:
    steal = "https://evil.example/steal"
    async with running_driver(tmp_path, auth_url=auth_url) as driver:
        async with session.get(f"{driver.url}/oauth/authorize?callbackURL={quote(steal, safe='')}") as resp:
            page = await resp.text()
            assert resp.status == 400 and "driver.callback_hosts" in page and "<form" not in page
        # a form made for an allowed callback, sent with the foreign one instead: no redirect either
        allowed = CALLBACK if auth_url else "http://127.0.0.1:9/cb"
        page_url, form = await open_page(session, driver.url, allowed)
        data = form.data("alice", ALICE_PASSWORD)
        data[1] = ("callbackURL", steal)
        status, page, headers = await submit(session, page_url, data)
        assert status == 400 and "Location" not in headers and "driver.callback_hosts" in page
        name, message = error_of(await command(session, driver.url, "OAuth", {"callbackURL": steal}))
        assert name == "E_DRIVER_ERROR" and "driver.callback_hosts" in message


async def test_any_host_is_allowed_only_when_asked_for(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with running_driver(tmp_path, callback_hosts=["*"]) as driver:
        location, added = await log_in(session, driver.url, callback="https://anywhere.example/cb")
        assert location == f"https://anywhere.example/cb?code={added['code']}"
        async with session.get(f"{driver.url}/oauth/authorize?callbackURL=http%3A%2F%2Fanywhere.example%2Fcb") as resp:
            assert resp.status == 400 and "plain http to another machine" in await resp.text()


@pytest.mark.parametrize(("mode", "callback", "param"), [
    ("oauth2", "https://platform.example/cb?code=planted", "code"),
    ("oauth2", "https://platform.example/cb?x=1&CODE=planted", "code"),
    ("oauth", "https://platform.example/cb?userToken=planted", "userToken"),
    ("oauth", "https://platform.example/cb?userId=mallory&expiresIn=1", "userId"),
])
async def test_a_callback_that_already_carries_a_code_gets_no_second_one(
    tmp_path: Path, session: aiohttp.ClientSession, mode: str, callback: str, param: str
) -> None:
    async with running_driver(tmp_path, mode=mode) as driver:
        async with session.get(f"{driver.url}/oauth/authorize?callbackURL={quote(callback, safe='')}") as resp:
            page = unescape(await resp.text())
        assert resp.status == 400 and "<form" not in page
        assert f"already carries a '{param}' parameter; this hub adds its own" in page
        page_url, form = await open_page(session, driver.url)
        data = form.data("alice", ALICE_PASSWORD)
        data[1] = ("callbackURL", callback)
        status, page, headers = await submit(session, page_url, data)
        assert status == 400 and "Location" not in headers
        name, message = error_of(await command(session, driver.url, "OAuth", {"callbackURL": callback}))
        assert name == "E_DRIVER_ERROR" and "already carries" in message


async def test_start_rejects_a_bad_callback_hosts_entry(tmp_path: Path) -> None:
    problems = await start_problems(tmp_path, callback_hosts=["platform.example", "https://platform.example/cb", "a b",
                                                              "http://platform.example:8080", "http://localhost:8080"])
    assert [p.split(":")[0] for p in problems] == ["driver.callback_hosts[1]", "driver.callback_hosts[2]",
                                                   "driver.callback_hosts[3]"]
    assert problems[2] == ("driver.callback_hosts[3]: 'http://platform.example:8080' allows plain http to a host that "
                           "is not this machine: the login's code would cross the network unencrypted; write "
                           "https://platform.example:8080 or the bare host (http:// is only for localhost, "
                           "127.0.0.1 and [::1])")


async def test_start_rejects_a_bad_trusted_proxy(tmp_path: Path) -> None:
    problems = await start_problems(tmp_path, trusted_proxies=("127.0.0.1", "10.1.2.3/8", "proxy.lan"))
    assert problems == [
        "http.trusted_proxies[1]: '10.1.2.3/8' has host bits set; write the network as 10.0.0.0/8, or the proxy's "
        "address alone",
        "http.trusted_proxies[2]: 'proxy.lan' is not an IP address or network; give the proxy's address (e.g. "
        "127.0.0.1 or ::1) or its network (e.g. 10.0.0.0/24)"]


@pytest.mark.parametrize(("hosts", "auth_url", "warning"), [
    (["*"], "https://platform.example",
     'driver.callback_hosts is ["*"]: a sign-in may send its code to any https host; list the platform\'s callback '
     "host instead"),
    ([], None, "driver.callback_hosts and platform.auth_url are not set: a callbackURL may point only at this "
               "machine (loopback); set driver.callback_hosts to the platform's callback host"),
    ([], "https://platform.example", None),
])
async def test_start_warns_about_any_host_and_about_loopback_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, hosts: list[str], auth_url: str | None, warning: str | None
) -> None:
    caplog.set_level(logging.WARNING, logger="hubd.driver")
    async with running_driver(tmp_path, auth_url=auth_url, callback_hosts=hosts):
        pass
    said = [r.getMessage() for r in caplog.records if "callback" in r.getMessage()]
    assert said == ([warning] if warning else [])


@pytest.mark.parametrize(("public_url", "warned"), [
    ("http://0.0.0.0:8080", True), ("http://[::]:8080", True), ("http://192.168.1.5:8080", False),
])
async def test_start_warns_about_an_unusable_public_url(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, public_url: str, warned: bool
) -> None:
    caplog.set_level(logging.WARNING, logger="hubd.driver")
    async with running_driver(tmp_path, public_url=public_url, callback_hosts=["platform.example"]):
        pass
    warnings = [r.getMessage() for r in caplog.records if "http.public_url" in r.getMessage()]
    if warned:
        assert warnings == [f"the driver hands out {public_url}/oauth/authorize?... as the login page, which no "
                            "phone can open; set http.public_url to the URL browsers reach this hub at"]
    else:
        assert warnings == []
