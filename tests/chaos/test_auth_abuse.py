"""Abuse of hubd's credentials against a real hubd process: open redirects, planted codes, guessers next door.

Each case runs `hubd run` with the shipped defaults where it can (driver.callback_hosts unset,
http.trusted_proxies empty). Other machines are other loopback addresses: a client bound to
127.0.0.2 is, as far as hubd can tell, a neighbour on the LAN.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from html import unescape
from urllib.parse import quote

import aiohttp
import pytest
from hubd_proc import REPO, HubdProcess
from rig import Rig

from hubd.driver.limits import ACCOUNT_FREE
from simulators.platform_binding import bind_user

EVIL = "https://evil.example/steal"
NEIGHBOURS = [f"127.0.0.{i}" for i in range(2, 7)]
MakeRig = Callable[..., Awaitable[Rig]]
BODY = {"type": "tts", "devices": {"isAll": True}, "data": {"text": "hello"}}


def browser(source: str = "127.0.0.1") -> aiohttp.ClientSession:
    """A client that keeps cookies like a browser, its connections coming from `source`."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True),
                                 connector=aiohttp.TCPConnector(local_addr=(source, 0)))


async def sign_in(session: aiohttp.ClientSession, hub: HubdProcess, callback: str, password: str) -> int:
    """Open the login page for `callback` as the driver hands it out, submit the form; the status."""
    async with session.post(f"{hub.url}/driver/command", json={"command": "OAuth",
                                                               "params": {"callbackURL": callback}}) as resp:
        reply = await resp.json()
    assert reply["status"] == 0, reply
    async with session.get(reply["data"]) as resp:
        page = await resp.text()
    csrf = re.search(r'name="csrf" value="([^"]*)"', page)
    assert csrf, page
    form = [("csrf", unescape(csrf.group(1))), ("callbackURL", callback), ("username", "demo"),
            ("password", password)]
    async with session.post(reply["data"], data=form, allow_redirects=False) as resp:
        return resp.status


async def test_a_foreign_callback_never_gets_a_code_by_default(make_rig: MakeRig) -> None:
    rig = await make_rig()
    hub, platform_sim = rig.hub, rig.sim
    async with browser() as session:
        async with session.get(f"{hub.url}/oauth/authorize?callbackURL={quote(EVIL, safe='')}",
                               allow_redirects=False) as resp:
            page = await resp.text()
        assert resp.status == 400 and "driver.callback_hosts" in page and "<form" not in page
        async with session.post(f"{hub.url}/driver/command",
                                json={"command": "OAuth", "params": {"callbackURL": EVIL}}) as resp:
            reply = await resp.json()
        assert reply["status"] != 0 and "driver.callback_hosts" in reply["message"]
    # the platform's own host (the simulator's, on loopback) still links
    bound = await bind_user(hub_url=hub.url, vendor_path="/vendor", sim=platform_sim, username="demo",
                            password="demo", user_id="owner")
    assert bound.ok, bound.reply


async def test_any_host_takes_an_explicit_star_and_a_warning(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"driver": {"callback_hosts": ["*"]}})
    hub, platform_sim = rig.hub, rig.sim
    assert 'driver.callback_hosts is ["*"]: a sign-in may send its code to any https host' in hub.log()
    bound = await bind_user(hub_url=hub.url, vendor_path="/vendor", sim=platform_sim, username="demo",
                            password="demo", user_id="owner", callback_url="https://anywhere.example/cb?src=sim")
    assert bound.ok, bound.reply
    async with browser() as session, session.post(f"{hub.url}/driver/command", json={
            "command": "OAuth", "params": {"callbackURL": "http://anywhere.example/cb"}}) as resp:
        reply = await resp.json()  # still no plain http to another machine
    assert reply["status"] != 0 and "plain http to another machine" in reply["message"]


async def test_a_plain_http_callback_host_stops_run_and_check_config(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"driver": {"callback_hosts": ["http://platform.example:8080"]}}, ready=False)
    hub = rig.hub
    assert hub.wait(30) == 2
    expected = ("driver.callback_hosts[0]: 'http://platform.example:8080' allows plain http to a host that is not "
                "this machine: the login's code would cross the network unencrypted; write "
                "https://platform.example:8080 or the bare host")
    assert expected in hub.log()
    checked = subprocess.run([sys.executable, "-m", "hubd", "check-config", "-c", str(hub.config_path)],
                             cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 2 and expected in checked.stderr and checked.stdout == ""


@pytest.mark.parametrize(("mode", "planted"), [("oauth2", "code=planted"), ("oauth", "userToken=planted")])
async def test_a_callback_that_carries_a_code_gets_no_second_one(
    make_rig: MakeRig, mode: str, planted: str
) -> None:
    rig = await make_rig(hub_overrides={"driver": {"mode": mode}})
    hub, platform_sim = rig.hub, rig.sim
    callback = f"{platform_sim.url}/callback?{planted}"
    async with browser() as session:
        async with session.get(f"{hub.url}/oauth/authorize?callbackURL={quote(callback, safe='')}") as resp:
            page = unescape(await resp.text())
        assert resp.status == 400 and "<form" not in page
        assert f"already carries a '{planted.split('=')[0]}' parameter; this hub adds its own" in page
        async with session.post(f"{hub.url}/driver/command",
                                json={"command": "OAuth", "params": {"callbackURL": callback}}) as resp:
            reply = await resp.json()
        assert reply["status"] != 0 and "already carries" in reply["message"]


async def test_the_owner_signs_in_while_neighbours_guess_the_password(make_rig: MakeRig) -> None:
    rig = await make_rig()
    hub, platform_sim = rig.hub, rig.sim
    callback = f"{platform_sim.url}/callback?src=owner"
    async with browser() as owner:
        assert await sign_in(owner, hub, callback, "demo") == 302  # once: this address is now the owner's
    answers: list[int] = []
    for neighbour in NEIGHBOURS:  # each guesses until it is made to wait (the waits double: it soon is)
        async with browser(neighbour) as session:
            for i in range(40):
                answers.append(await sign_in(session, hub, callback, f"guess-{i}"))
                if answers[-1] == 429:
                    break
    assert set(answers) == {200, 429} and answers.count(429) == len(NEIGHBOURS)
    # together they got about as many checks as one: the account's free ones and a few doubling waits
    assert answers.count(200) <= ACCOUNT_FREE + 8
    async with browser() as owner:
        assert await sign_in(owner, hub, callback, "demo") == 302  # never made to wait with them
    assert "wrong password for account 'demo' from 127.0.0.2" in hub.log()


async def test_the_right_webhook_token_works_while_a_neighbour_guesses(make_rig: MakeRig) -> None:
    rig = await make_rig()
    hub = rig.hub
    created = subprocess.run([sys.executable, "-m", "hubd", "webhook", "-c", str(hub.config_path), "create"],
                             cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    token = re.search(r'"token": "(whk_[^"]+)"', created.stdout)
    assert token, created.stdout

    async def call(session: aiohttp.ClientSession, path_token: str, forwarded: str | None = None) -> int:
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        async with session.post(f"{hub.url}/trigger/with/{path_token}", json=BODY, headers=headers) as resp:
            return resp.status

    async with browser("127.0.0.2") as neighbour, browser() as owner:
        # a new X-Forwarded-For each time: ignored (no trusted proxy), so it does not help the guesser
        answers = [await call(neighbour, f"whk_{i:043d}", forwarded=f"198.51.100.{i}") for i in range(40)]
        assert answers[:10] == [404] * 10 and answers[-1] == 429
        assert await call(owner, token.group(1)) == 422  # past the token: no speaker is known
        assert await call(neighbour, token.group(1)) == 422  # from the guesser's own address too
        assert await call(owner, "whk_" + "x" * 43) == 404  # the owner's address is not slowed


async def test_bodies_nested_2000_deep_are_refused_in_the_house_shape(make_rig: MakeRig) -> None:
    rig = await make_rig()
    hub = rig.hub
    created = subprocess.run([sys.executable, "-m", "hubd", "webhook", "-c", str(hub.config_path), "create"],
                             cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    token = re.search(r'"token": "(whk_[^"]+)"', created.stdout)
    assert token, created.stdout
    deep = b"[" * 2000 + b"]" * 2000
    status, body, _ = await hub.post(f"/trigger/with/{token.group(1)}", data=deep,
                                     headers={"Content-Type": "application/json"})
    assert status == 422 and "more than 32 levels deep" in body["error"]
    assert body["details"] == [{"path": "(body)", "message": body["error"]}]
    status, reply, _ = await hub.post("/driver/command", data=b'{"command": "OAuth", "params": ' + deep + b"}")
    assert status == 200 and reply["status"] != 0 and "more than 32 levels deep" in reply["message"]
    assert "Traceback" not in hub.log()
