"""`hubd check-driver`: the four checks pass against our driver in both modes and fail with reasons elsewhere."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from driver_helpers import ALICE_PASSWORD, CALLBACK, running_driver
from mosquitto import free_port

from hubd.driver.checks import run_checks

# HUBD_BIN: test another installed hubd; by default the console script of this venv
HUBD = Path(os.environ.get("HUBD_BIN") or Path(sys.executable).parent / "hubd")
FRAGMENT_CALLBACK = "https://platform.example/cb/path?u=1&v=2#done"


@pytest.mark.parametrize("mode", ["oauth2", "oauth"])
async def test_run_checks_pass_against_hubd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    async with running_driver(tmp_path, mode=mode) as driver:
        code = await run_checks(driver.url, callback_url=FRAGMENT_CALLBACK, username="alice", password=ALICE_PASSWORD)
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    assert [line.split(":")[0] for line in lines] == [
        "PASS 1 OAuth", "PASS 2 authorize", "PASS 3 OAuthGetToken", "PASS 4 OAuthRefresh"]
    assert "exact authorize URL" in lines[0]
    assert f"(mode {mode})" in lines[1]
    if mode == "oauth":
        assert "not used in OAuth (v1) mode" in lines[2]


@pytest.mark.parametrize("mode", ["oauth2", "oauth"])
async def test_console_script_passes_against_hubd(tmp_path: Path, mode: str) -> None:
    assert HUBD.exists(), "run `pip install -e .` to get the hubd console script"
    async with running_driver(tmp_path, mode=mode) as driver:
        proc = await asyncio.create_subprocess_exec(
            str(HUBD), "check-driver", driver.url, "--callback-url", CALLBACK, "--username", "alice",
            "--password", ALICE_PASSWORD, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = out.decode().splitlines()
    assert proc.returncode == 0, (lines, err.decode())
    assert len(lines) == 4 and all(line.startswith("PASS ") for line in lines)


async def test_console_script_fails_on_a_wrong_password(tmp_path: Path) -> None:
    async with running_driver(tmp_path) as driver:
        proc = await asyncio.create_subprocess_exec(
            str(HUBD), "check-driver", driver.url, "--callback-url", CALLBACK, "--username", "alice",
            "--password", "nope", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    lines = out.decode().splitlines()
    assert proc.returncode == 1
    assert lines[0].startswith("PASS 1 OAuth")
    assert lines[1] == ("FAIL 2 authorize: the login did not redirect: POST "
                        f"{lines[1].split('POST ')[1].split(' ->')[0]} -> HTTP 200; the page says: "
                        "'Wrong username or password.' (wrong username or password?)")
    assert lines[2] == "FAIL 3 OAuthGetToken: skipped: check 2 gave no redirect"
    assert lines[3] == "FAIL 4 OAuthRefresh: skipped: no UserAuth from checks 2-3"


async def test_missing_credentials_fail_check_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_driver(tmp_path) as driver:
        code = await run_checks(driver.url, callback_url=CALLBACK, username=None, password=None)
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    assert lines[1] == "FAIL 2 authorize: the page asks for a username and password; pass --username and --password"


async def test_a_refused_callback_fails_check_1_with_the_reply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_driver(tmp_path, callback_hosts=["platform.example"]) as driver:
        code = await run_checks(driver.url, callback_url="https://evil.example/cb", username="a", password="b")
    line = capsys.readouterr().out.splitlines()[0]
    assert code == 1
    assert line.startswith("FAIL 1 OAuth: status 1, not 0: ")
    assert '"errorName": "E_DRIVER_ERROR"' in line and "driver.callback_hosts" in line


async def test_an_unreachable_driver(capsys: pytest.CaptureFixture[str]) -> None:
    code = await run_checks(f"http://127.0.0.1:{free_port()}", callback_url=CALLBACK, username=None, password=None)
    lines = capsys.readouterr().out.splitlines()
    assert code == 1 and len(lines) == 4
    assert lines[0].startswith("FAIL 1 OAuth: no answer from the driver: ")


# -- a deliberately broken driver --------------------------------------------------------------

Fault = str


def broken_driver(fault: Fault) -> web.Application:
    """A small OAuth 2.0 driver with one fault."""
    state: dict[str, Any] = {}

    async def command(request: web.Request) -> web.Response:
        body = await request.json()
        params = body["params"]
        if body["command"] == "OAuth":
            callback = params["callbackURL"]
            encoded = callback if fault == "unencoded" else quote(callback, safe="")
            base = f"http://{request.host}"
            return web.json_response({"status": 0, "data": f"{base}/oauth/authorize?callbackURL={encoded}"})
        if body["command"] == "OAuthGetToken":
            if fault == "no-refresh-token":
                return web.json_response({"status": 0, "data": {"userId": "u", "userToken": "t", "expiresIn": 60}})
            return web.json_response({"status": 0, "data": {"userId": "u", "userToken": "token-1",
                                                            "expiresIn": 60, "refreshToken": 3600}})
        if fault == "refresh-fails":
            return web.json_response({"status": 1, "errorName": "E_INVALID_AUTHORIZATION",
                                      "message": "no", "userToken": "secret-token-value"})
        return web.json_response({"status": 0, "data": {"userId": "u", "userToken": "token-2",
                                                        "expiresIn": 60, "refreshToken": "r2"}})

    async def page(request: web.Request) -> web.Response:
        state["callback"] = request.query["callbackURL"]
        return web.Response(text='<form method="post"><input name="user"><input type="password" name="pw">'
                                 '<button>go</button></form>', content_type="text/html")

    async def login(request: web.Request) -> web.Response:
        form = await request.post()
        assert (form["user"], form["pw"]) == ("u", "p")
        callback: str = state["callback"]
        if fault == "drops-query":
            location = callback.split("?")[0] + "?code=abc"
        elif fault == "no-code":
            location = callback + "&token=abc"
        else:
            location = callback + "&code=abcdefgh"
        raise web.HTTPFound(location)

    app = web.Application()
    app.router.add_post("/driver/command", command)
    app.router.add_get("/oauth/authorize", page)
    app.router.add_post("/oauth/authorize", login)
    return app


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("fault", "check", "needle"), [
    ("none", 0, ""),
    ("unencoded", 1, "callbackURL is there but not fully percent-encoded: expected ?callbackURL=https%3A%2F%2F"),
    ("drops-query", 2, "the redirect lost the callback's query parameter u=1: Location https://platform.example"),
    ("no-code", 2, "the redirect adds ['token']; expected code (OAuth 2.0)"),
    ("no-refresh-token", 3, "UserAuth.refreshToken must be a non-empty string or a number"),
    ("refresh-fails", 4, 'status 1, not 0: {"status": 1, "errorName": "E_INVALID_AUTHORIZATION"'),
])
async def test_checks_against_someone_elses_driver(
    capsys: pytest.CaptureFixture[str], fault: Fault, check: int, needle: str
) -> None:
    async with serving(broken_driver(fault)) as url:
        code = await run_checks(url, callback_url=CALLBACK, username="u", password="p")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    if check == 0:
        assert code == 0 and all(line.startswith("PASS") for line in lines), lines
        assert "(note: the userToken did not change)" not in lines[3]
        return
    assert code == 1
    failed: Callable[[str], bool] = lambda line: line.startswith(f"FAIL {check} ")  # noqa: E731
    line = next(line for line in lines if failed(line))
    assert needle in line, line
    assert all(line.startswith("PASS") for line in lines[:check - 1])
    assert "secret-token-value" not in line


# -- where check 2 goes after the login: never away from the driver --------------------------------


async def good_command(request: web.Request) -> web.Response:
    """A correct OAuth 2.0 driver's /driver/command: the authorize URL on this host, then a UserAuth."""
    body = await request.json()
    if body["command"] == "OAuth":
        callback = body["params"]["callbackURL"]
        return web.json_response({"status": 0, "data": f"http://{request.host}/oauth/authorize?callbackURL="
                                                        f"{quote(callback, safe='')}"})
    return web.json_response({"status": 0, "data": {"userId": "u", "userToken": f"t-{body['command']}",
                                                    "expiresIn": 60, "refreshToken": "r"}})


def redirecting_driver(location: Callable[[str, str], str]) -> web.Application:
    """A correct OAuth 2.0 driver whose login redirects to `location(callback, own base URL)`."""
    state: dict[str, str] = {}

    async def page(request: web.Request) -> web.Response:
        state["callback"] = request.query["callbackURL"]
        return web.Response(text='<form method="post"><input name="user"><input type="password" name="pw">'
                                 "</form>", content_type="text/html")

    # Location byte for byte: web.HTTPFound would normalise it through yarl
    async def login(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": location(state["callback"], f"http://{request.host}")})

    async def hop(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": state["callback"] + "&code=after-a-hop"})

    app = web.Application()
    app.router.add_post("/driver/command", good_command)
    app.router.add_get("/oauth/authorize", page)
    app.router.add_post("/oauth/authorize", login)
    app.router.add_get("/oauth/hop", hop)
    return app


def recording_site() -> tuple[web.Application, list[str]]:
    """Stands in for the callback's host: records every request it gets."""
    hits: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        hits.append(str(request.rel_url))
        return web.Response(text="callback page")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    return app, hits


@pytest.mark.parametrize(("callback_path", "redirect_path"), [
    ("/~user/cb", "/%7Euser/cb"), ("/%7Euser/cb", "/~user/cb"), ("/a%2fb/cb", "/a%2Fb/cb"),
])
async def test_a_differently_encoded_callback_path_is_the_callback(
    capsys: pytest.CaptureFixture[str], callback_path: str, redirect_path: str
) -> None:
    site, hits = recording_site()
    async with serving(site) as site_url:
        callback = f"{site_url}{callback_path}?u=1"
        moved = lambda cb, _base: cb.replace(callback_path, redirect_path) + "&code=abcdefgh"  # noqa: E731
        async with serving(redirecting_driver(moved)) as url:
            code = await run_checks(url, callback_url=callback, username="u", password="p")
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    assert lines[1].startswith("PASS 2 authorize: HTTP 302 to the callback"), lines
    assert hits == []  # the redirect is read, never followed


@pytest.mark.parametrize("where", ["other-path", "other-origin"])
async def test_a_redirect_to_the_platform_or_with_a_code_elsewhere_is_not_followed(
    capsys: pytest.CaptureFixture[str], where: str
) -> None:
    site, hits = recording_site()
    async with serving(site) as site_url, serving(recording_site()[0]) as other_url:
        callback = f"{site_url}/cb?u=1"
        target = f"{site_url}/elsewhere?u=1&code=abc" if where == "other-path" else f"{other_url}/cb?u=1&code=abc"
        async with serving(redirecting_driver(lambda _cb, _base: target)) as url:
            code = await run_checks(url, callback_url=callback, username="u", password="p")
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    why = ("a redirect to the callback's origin that is not the callback is not followed" if where == "other-path"
           else "a redirect that carries a code or token away from the driver is not followed")
    carries = "" if where == "other-path" else " with code"
    assert lines[1] == (f"FAIL 2 authorize: the login redirected to {target}{carries}, "
                        f"expected path /cb on {site_url}; {why}"), lines
    assert hits == []


async def test_a_redirect_within_the_driver_is_followed(capsys: pytest.CaptureFixture[str]) -> None:
    site, hits = recording_site()
    async with serving(site) as site_url:
        callback = f"{site_url}/cb?u=1"
        async with serving(redirecting_driver(lambda _cb, base: f"{base}/oauth/hop")) as url:
            code = await run_checks(url, callback_url=callback, username="u", password="p")
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    assert hits == []


async def test_a_malformed_location_fails_check_2(capsys: pytest.CaptureFixture[str]) -> None:
    async with serving(redirecting_driver(lambda _cb, _base: "http://[zz]/cb")) as url:
        code = await run_checks(url, callback_url=CALLBACK, username="u", password="p")
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    assert lines[1].startswith("FAIL 2 authorize: the driver sent a malformed URL"), lines


# -- single sign-on: the login page on another origin; the password goes only where the form came from ----

Hits = list[tuple[str, str, dict[str, str]]]  # (method, path, form fields) of each request


def sso_site(*, form_action: str | None = None) -> tuple[web.Application, Hits]:
    """A single sign-on host: GET /login?back=URL serves the form, POST /login sends the browser back with a
    ticket; any other request is only recorded. `form_action`: where its form is sent."""
    hits: Hits = []

    async def login_page(request: web.Request) -> web.Response:
        hits.append(("GET", request.path, {}))
        action = form_action or f"/login?back={quote(request.query['back'], safe='')}"
        return web.Response(text=f'<form method="post" action="{action}"><input name="user">'
                                 '<input type="password" name="pw"></form>', content_type="text/html")

    async def log_in(request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        hits.append(("POST", request.path, form))
        if (form.get("user"), form.get("pw")) != ("u", "p"):
            return web.Response(text="wrong password", content_type="text/html")
        return web.Response(status=302, headers={"Location": f"{request.query['back']}?ticket=t-1"})

    async def anything(request: web.Request) -> web.Response:
        hits.append((request.method, request.path, {k: str(v) for k, v in (await request.post()).items()}))
        return web.Response(text="elsewhere")

    app = web.Application()
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", log_in)
    app.router.add_route("*", "/{tail:.*}", anything)
    return app, hits


def sso_driver(sso_url: str, *, form_action: str | None = None) -> web.Application:
    """An OAuth 2.0 driver that signs its users in at `sso_url` and takes them back with a ticket; with
    `form_action`, it serves the login form itself, sent to that URL."""
    state: dict[str, str] = {}

    async def page(request: web.Request) -> web.Response:
        state["callback"] = request.query["callbackURL"]
        if form_action is not None:
            return web.Response(text=f'<form method="post" action="{form_action}"><input name="user">'
                                     '<input type="password" name="pw"></form>', content_type="text/html")
        back = quote(f"http://{request.host}/oauth/return", safe="")
        return web.Response(status=302, headers={"Location": f"{sso_url}/login?back={back}"})

    async def back(request: web.Request) -> web.Response:
        assert request.query["ticket"] == "t-1"
        return web.Response(status=302, headers={"Location": state["callback"] + "&code=via-sso"})

    app = web.Application()
    app.router.add_post("/driver/command", good_command)
    app.router.add_get("/oauth/authorize", page)
    app.router.add_get("/oauth/return", back)
    return app


async def test_a_login_on_a_single_sign_on_host_is_followed(capsys: pytest.CaptureFixture[str]) -> None:
    site, callback_hits = recording_site()
    sso, sso_hits = sso_site()
    async with serving(site) as site_url, serving(sso) as sso_url, serving(sso_driver(sso_url)) as url:
        code = await run_checks(url, callback_url=f"{site_url}/cb?u=1", username="u", password="p")
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    assert lines[1].startswith("PASS 2 authorize: HTTP 302 to the callback"), lines
    assert [(method, path) for method, path, _ in sso_hits] == [("GET", "/login"), ("POST", "/login")]
    assert sso_hits[1][2] == {"user": "u", "pw": "p"}  # the origin that served the form got the password
    assert callback_hits == []


@pytest.mark.parametrize("served_by", ["driver", "sso"])
async def test_a_login_form_sent_to_another_origin_fails_and_gets_no_password(
    capsys: pytest.CaptureFixture[str], served_by: str
) -> None:
    collector, collected = sso_site()
    async with serving(collector) as collector_url:
        action = f"{collector_url}/collect"
        sso, sso_hits = sso_site(form_action=None if served_by == "driver" else action)
        async with serving(sso) as sso_url, \
                serving(sso_driver(sso_url, form_action=action if served_by == "driver" else None)) as url:
            code = await run_checks(url, callback_url=CALLBACK, username="u", password="p")
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    page_origin = url if served_by == "driver" else sso_url
    assert lines[1] == (f"FAIL 2 authorize: the login form on {page_origin} is sent to {action}, another origin; "
                        "check-driver sends the username and password only to the origin that served the form"), lines
    assert collected == []
    assert [(method, path) for method, path, _ in sso_hits] == ([] if served_by == "driver" else [("GET", "/login")])
