"""POST /driver/command over loopback: the envelope, OAuth, OAuthGetToken, OAuthRefresh and their failures."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from driver_helpers import (
    CALLBACK,
    RunningDriver,
    browser_session,
    command,
    error_of,
    log_in,
    running_driver,
    user_auth,
)

from hubd.driver.store import GRACE_S
from hubd.usertoken import TokenStatus


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[RunningDriver]:
    async with running_driver(tmp_path) as running:
        yield running


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with browser_session() as client:
        yield client


async def post_raw(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, dict[str, object]]:
    async with session.post(f"{url}/driver/command", data=body,
                            headers={"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.json()


async def test_oauth_returns_the_exact_authorize_url(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with running_driver(tmp_path, callback_hosts=["cdn.example.com"]) as driver:
        reply = await command(session, driver.url, "OAuth", {"callbackURL": "https://cdn.example.com/path?u=1&v=2"})
    assert reply == {"status": 0, "data": f"{driver.url}/oauth/authorize?callbackURL="
                                          "https%3A%2F%2Fcdn.example.com%2Fpath%3Fu%3D1%26v%3D2"}


async def test_oauth_reads_callbackurl_case_insensitively(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    reply = await command(session, driver.url, "OAuth", {"callbackurl": CALLBACK})
    assert reply["data"] == f"{driver.url}/oauth/authorize?callbackURL={quote(CALLBACK, safe='')}"


@pytest.mark.parametrize(("body", "needle"), [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"command": "OAuth", "params": {"callbackURL": ' + b"9" * 5000 + b"}}", "a number of more than 4300 digits"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"params": {}}', "no 'command'"),
    (b'{"command": 7}', "'command' must be a string, got a number"),
    (b'{"command": "OAuth", "params": []}', "'params' must be an object, got an array"),
    (b'{"command": "OAuth", "params": {}}', "params.callbackURL is missing"),
    (b'{"command": "OAuth", "params": {"callbackURL": 5}}', "params.callbackURL must be a string, got a number"),
    (b'{"command": "OAuthGetToken", "params": {}}', "params.code is missing"),
    (b'{"command": "OAuthGetToken", "params": {"code": null}}', "params.code is missing"),
    (b'{"command": "OAuthGetToken", "params": {"code": ["x"]}}', "params.code must be a string, got an array"),
    (b'{"command": "OAuthRefresh", "params": {"userId": "alice"}}', "params.refreshToken is missing"),
    (b'{"command": "OAuthRefresh", "params": {"refreshToken": true}}', "refreshToken must be a non-empty string"),
    (b'{"command": "OAuthRefresh", "params": {"refreshToken": "x", "userId": 1}}', "params.userId must be a string"),
])
async def test_malformed_requests_get_a_driver_error_naming_the_problem(
    driver: RunningDriver, session: aiohttp.ClientSession, body: bytes, needle: str
) -> None:
    status, reply = await post_raw(session, driver.url, body)
    assert status == 200
    name, message = error_of(reply)
    assert name == "E_DRIVER_ERROR"
    assert needle in message


async def test_deeply_nested_json_is_a_driver_error(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    for body in (b"[" * 5000 + b"]" * 5000, b'{"command": "OAuth", "params": ' + b'{"a": ' * 2000 + b"1" + b"}" * 2001):
        status, reply = await post_raw(session, driver.url, body)
        assert status == 200
        name, message = error_of(reply)
        assert name == "E_DRIVER_ERROR" and "nests arrays or objects more than 32 levels deep" in message


async def test_a_code_or_token_with_a_lone_surrogate_is_unknown_not_a_server_error(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    for body in (b'{"command": "OAuthGetToken", "params": {"code": "\\ud800"}}',
                 b'{"command": "OAuthRefresh", "params": {"refreshToken": "x\\udfff"}}'):
        status, reply = await post_raw(session, driver.url, body)
        assert status == 200 and error_of(reply)[0] == "E_INVALID_AUTHORIZATION", reply
    assert (await driver.service.verify_user_token("\ud800")).status is TokenStatus.UNKNOWN


async def test_unknown_command(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    reply = await command(session, driver.url, "OAuthLogin", {})
    expected = "unknown command 'OAuthLogin'; use OAuth, OAuthGetToken or OAuthRefresh"
    assert error_of(reply) == ("E_DRIVER_ERROR", expected)


async def test_too_large_body_is_still_http_200(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with running_driver(tmp_path, max_body_bytes=1024) as driver:
        status, reply = await post_raw(session, driver.url, b'{"command": "OAuth", "x": "' + b"a" * 4000 + b'"}')
    assert status == 200
    assert error_of(reply)[0] == "E_DRIVER_ERROR"


@pytest.mark.parametrize(("callback", "needle"), [
    ("javascript:alert(1)", "http:// or https://"),
    ("ftp://platform.example/cb", "http:// or https://"),
    ("/relative/cb", "http:// or https://"),
    ("https://user:pw@platform.example/cb", "user name or password"),
    ("https://platform.example/a b", "percent-encoded ASCII"),
    ("https://platform.example/?q=caf\u00e9", "a non-ASCII character at position 32"),
    ("https://[::1/x", "not a valid URL"),
    ("http://[zz]/x", "not a valid URL"),
    ("https://platform.example\\@evil.example/", "host"),
    ("https://platform.example;script-src/cb", "host"),
    ("https://platform.example,x'/cb", "host"),
])
async def test_oauth_rejects_bad_callbacks(
    driver: RunningDriver, session: aiohttp.ClientSession, callback: str, needle: str
) -> None:
    name, message = error_of(await command(session, driver.url, "OAuth", {"callbackURL": callback}))
    assert name == "E_DRIVER_ERROR"
    assert "callbackURL" in message and needle in message


async def test_oauth_rejects_a_host_outside_callback_hosts(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with running_driver(tmp_path, callback_hosts=["platform.example", "other.example:8443"]) as driver:
        ok = await command(session, driver.url, "OAuth", {"callbackURL": CALLBACK})
        ok_port = await command(session, driver.url, "OAuth", {"callbackURL": "https://other.example:8443/cb"})
        bad = await command(session, driver.url, "OAuth", {"callbackURL": "https://evil.example/cb"})
        bad_port = await command(session, driver.url, "OAuth", {"callbackURL": "https://other.example/cb"})
    assert ok["status"] == 0 and ok_port["status"] == 0
    for reply in (bad, bad_port):
        name, message = error_of(reply)
        assert name == "E_DRIVER_ERROR" and "driver.callback_hosts" in message


async def test_code_exchange_gives_a_user_auth(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    auth = await user_auth(session, driver.url)
    assert set(auth) == {"userId", "userToken", "expiresIn", "refreshToken"}
    assert auth["userId"] == "alice" and auth["expiresIn"] == 3600
    assert isinstance(auth["refreshToken"], str) and isinstance(auth["userToken"], str)
    check = await driver.service.verify_user_token(auth["userToken"])
    assert (check.status, check.user) == (TokenStatus.VALID, "alice")


async def test_code_is_single_use_and_reuse_revokes_its_tokens(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    _, added = await log_in(session, driver.url)
    first = await command(session, driver.url, "OAuthGetToken", {"code": added["code"]})
    assert first["status"] == 0
    again = await command(session, driver.url, "OAuthGetToken", {"code": added["code"]})
    name, message = error_of(again)
    assert name == "E_INVALID_AUTHORIZATION" and "already used" in message
    check = await driver.service.verify_user_token(first["data"]["userToken"])
    assert check.status is TokenStatus.UNKNOWN


async def test_code_reuse_is_logged(
    driver: RunningDriver, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hubd.driver")
    _, added = await log_in(session, driver.url)
    await command(session, driver.url, "OAuthGetToken", {"code": added["code"]})
    assert not caplog.records
    await command(session, driver.url, "OAuthGetToken", {"code": added["code"]})
    assert [r.getMessage() for r in caplog.records] == [
        "driver: an authorization code was used twice; revoked grant 1 (the tokens issued for it)"]
    assert added["code"] not in caplog.text


async def test_expired_code(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    _, added = await log_in(session, driver.url)
    driver.clock.advance(601)
    name, message = error_of(await command(session, driver.url, "OAuthGetToken", {"code": added["code"]}))
    assert name == "E_INVALID_AUTHORIZATION" and "expired" in message


async def test_code_just_inside_ten_minutes_works(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    _, added = await log_in(session, driver.url)
    driver.clock.advance(599)
    assert (await command(session, driver.url, "OAuthGetToken", {"code": added["code"]}))["status"] == 0


async def test_code_for_another_callback_url(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    _, added = await log_in(session, driver.url)
    reply = await command(session, driver.url, "OAuthGetToken",
                          {"code": added["code"], "callbackURL": "https://platform.example/other"})
    name, message = error_of(reply)
    assert name == "E_INVALID_AUTHORIZATION" and "another callbackURL" in message
    # the mismatch voids the code: it cannot be retried with the right URL either
    retry = await command(session, driver.url, "OAuthGetToken", {"code": added["code"], "callbackURL": CALLBACK})
    assert error_of(retry)[0] == "E_INVALID_AUTHORIZATION"


async def test_code_with_its_own_callback_url(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    _, added = await log_in(session, driver.url)
    reply = await command(session, driver.url, "OAuthGetToken", {"code": added["code"], "callbackurl": CALLBACK})
    assert reply["status"] == 0


async def test_unknown_code(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    name, message = error_of(await command(session, driver.url, "OAuthGetToken", {"code": "made-up"}))
    assert name == "E_INVALID_AUTHORIZATION" and "unknown code" in message


async def test_refresh_rotates_both_tokens(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    auth = await user_auth(session, driver.url)
    reply = await command(session, driver.url, "OAuthRefresh", auth)
    assert reply["status"] == 0
    new = reply["data"]
    assert new["userId"] == "alice" and new["expiresIn"] == 3600
    assert new["userToken"] != auth["userToken"] and new["refreshToken"] != auth["refreshToken"]
    assert (await driver.service.verify_user_token(new["userToken"])).status is TokenStatus.VALID
    # the old user token lives on through the grace period only
    assert (await driver.service.verify_user_token(auth["userToken"])).status is TokenStatus.VALID
    driver.clock.advance(GRACE_S + 1)
    assert (await driver.service.verify_user_token(auth["userToken"])).status is TokenStatus.EXPIRED
    assert (await driver.service.verify_user_token(new["userToken"])).status is TokenStatus.VALID


async def test_refresh_token_alias_command(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    auth = await user_auth(session, driver.url)
    reply = await command(session, driver.url, "refreshToken", {"refreshToken": auth["refreshToken"]})
    assert reply["status"] == 0 and reply["data"]["userId"] == "alice"


async def test_refresh_retried_within_grace_returns_the_same_pair(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    auth = await user_auth(session, driver.url)
    first = await command(session, driver.url, "OAuthRefresh", auth)
    driver.clock.advance(GRACE_S - 1)
    second = await command(session, driver.url, "OAuthRefresh", auth)
    assert second["status"] == 0
    assert second["data"]["userToken"] == first["data"]["userToken"]
    assert second["data"]["refreshToken"] == first["data"]["refreshToken"]
    assert second["data"]["expiresIn"] == 3600 - (GRACE_S - 1)
    # and the new pair still refreshes normally
    third = await command(session, driver.url, "OAuthRefresh", first["data"])
    assert third["status"] == 0


async def test_rotated_out_refresh_token_after_grace_is_rejected_and_revokes_the_link(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    auth = await user_auth(session, driver.url)
    new = (await command(session, driver.url, "OAuthRefresh", auth))["data"]
    driver.clock.advance(GRACE_S + 1)
    name, message = error_of(await command(session, driver.url, "OAuthRefresh", auth))
    assert name == "E_INVALID_AUTHORIZATION" and "already exchanged" in message
    # reuse of a rotated-out token means it leaked: the whole link is revoked
    assert (await driver.service.verify_user_token(new["userToken"])).status is TokenStatus.UNKNOWN
    assert error_of(await command(session, driver.url, "OAuthRefresh", new))[0] == "E_INVALID_AUTHORIZATION"


async def test_refresh_with_a_token_two_generations_old_is_reuse(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    auth = await user_auth(session, driver.url)
    second = (await command(session, driver.url, "OAuthRefresh", auth))["data"]
    assert (await command(session, driver.url, "OAuthRefresh", second))["status"] == 0
    # within the grace period, but its successor was already rotated: not a lost response
    assert error_of(await command(session, driver.url, "OAuthRefresh", auth))[0] == "E_INVALID_AUTHORIZATION"


async def test_refresh_token_as_a_number_is_accepted_and_unknown(
    driver: RunningDriver, session: aiohttp.ClientSession
) -> None:
    reply = await command(session, driver.url, "OAuthRefresh",
                          {"userId": "alice", "userToken": "x", "expiresIn": 3600, "refreshToken": 3600})
    name, message = error_of(reply)
    assert name == "E_INVALID_AUTHORIZATION" and "unknown refreshToken" in message


async def test_refresh_with_the_wrong_user_id(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    auth = await user_auth(session, driver.url)
    name, message = error_of(await command(session, driver.url, "OAuthRefresh", {**auth, "userId": "bob"}))
    assert name == "E_INVALID_AUTHORIZATION" and "userId" in message


async def test_expired_refresh_token(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with running_driver(tmp_path, refresh_ttl_s=7200) as driver:
        auth = await user_auth(session, driver.url)
        driver.clock.advance(7200)
        name, message = error_of(await command(session, driver.url, "OAuthRefresh", auth))
    assert name == "E_INVALID_AUTHORIZATION" and "expired" in message


async def test_get_token_in_oauth_v1_mode_explains(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with running_driver(tmp_path, mode="oauth") as driver:
        name, message = error_of(await command(session, driver.url, "OAuthGetToken", {"code": "x"}))
    assert name == "E_DRIVER_ERROR" and "driver.mode 'oauth'" in message


async def test_verify_user_token_states(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with running_driver(tmp_path, token_ttl_s=600) as driver:
        auth = await user_auth(session, driver.url)
        service = driver.service
        assert (await service.verify_user_token(auth["userToken"])).status is TokenStatus.VALID
        assert (await service.verify_user_token("nope")).status is TokenStatus.UNKNOWN
        assert (await service.verify_user_token("")).status is TokenStatus.UNKNOWN
        assert (await service.verify_user_token(auth["refreshToken"])).status is TokenStatus.UNKNOWN
        driver.clock.advance(600)
        check = await service.verify_user_token(auth["userToken"])
        assert (check.status, check.user) == (TokenStatus.EXPIRED, "alice")


async def test_tokens_of_an_account_removed_from_the_config_stop_working(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with running_driver(tmp_path) as driver:
        auth = await user_auth(session, driver.url)
    async with running_driver(tmp_path, accounts=[{"username": "bob", "password": "pw"}]) as driver:
        assert (await driver.service.verify_user_token(auth["userToken"])).status is TokenStatus.UNKNOWN
        assert error_of(await command(session, driver.url, "OAuthRefresh", auth))[0] == "E_INVALID_AUTHORIZATION"


async def test_replies_are_not_cacheable_and_counted(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    async with session.post(f"{driver.url}/driver/command", json={"command": "Nope"}) as resp:
        assert resp.headers["Cache-Control"] == "no-store"
    await command(session, driver.url, "OAuth", {"callbackURL": CALLBACK})
    text = driver.metrics.render()
    assert 'hubd_driver_commands_total{command="OAuth",result="ok"} 1' in text
    assert 'hubd_driver_commands_total{command="invalid",result="error"} 1' in text


async def test_rotated_pairs_are_pruned_after_a_week(driver: RunningDriver, session: aiohttp.ClientSession) -> None:
    def count(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT COUNT(*) FROM driver_tokens").fetchone()[0])

    auth = await user_auth(session, driver.url)
    for _ in range(3):
        auth = (await command(session, driver.url, "OAuthRefresh", auth))["data"]
    assert await driver.db.call(count) == 4
    driver.clock.advance(8 * 86400)
    auth = (await command(session, driver.url, "OAuthRefresh", auth))["data"]
    assert await driver.db.call(count) == 2  # the pair just rotated out, and the new one
    assert (await driver.service.verify_user_token(auth["userToken"])).status is TokenStatus.VALID
