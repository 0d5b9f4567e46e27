"""Signing in on the devices page over loopback (a real hubd): an owner account's session in an HttpOnly,
SameSite=Strict cookie, a CSRF token on every write, the Origin check, signing out, accounts that are not owners,
and the login page's fair lock-outs, counted together with it (the guesser waits, the owner's trusted address does
not)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from driver_helpers import PageForm, browser_session, open_page
from owner_helpers import device
from rig import LAMP, Rig

from hubd.driver.limits import ACCOUNT_FREE, SOURCE_FREE
from hubd.owner.signin import SESSION_COOKIE, SESSION_TTL_S

MakeRig = Callable[..., Awaitable[Rig]]
ACCOUNTS = {"driver": {"accounts": [{"username": "demo", "password": "demo"},
                                    {"username": "owner", "password": "owner-pw", "admin": True}]}}


async def call(session: aiohttp.ClientSession, rig: Rig, method: str, path: str, body: Any = None,
               headers: dict[str, str] | None = None) -> tuple[int, Any, aiohttp.ClientResponse]:
    async with session.request(method, f"{rig.hub.url}{path}", json=body, headers=headers or {}) as response:
        return response.status, await response.json(), response


async def test_an_owner_signs_in_and_each_write_needs_the_sessions_csrf_token(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides=ACCOUNTS)
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.hub.wait_for(lambda: _known(rig), what="lamp-1")
    async with browser_session() as browser:
        status, body, _ = await call(browser, rig, "GET", "/api/session")
        assert status == 200 and body == {"signedIn": False, "owners": True}

        status, body, response = await call(browser, rig, "POST", "/api/session",
                                            {"username": "owner", "password": "owner-pw"})
        assert status == 200 and body["signedIn"] is True and body["username"] == "owner"
        cookie = response.cookies[SESSION_COOKIE]
        assert cookie["httponly"] is True and cookie["samesite"] == "Strict" and cookie["path"] == "/"
        assert int(cookie["max-age"]) == SESSION_TTL_S
        csrf = body["csrf"]
        status, again, _ = await call(browser, rig, "GET", "/api/session")
        assert again["signedIn"] is True and again["csrf"] == csrf

        status, body, _ = await call(browser, rig, "PATCH", "/api/devices/lamp-1", {"name": "Hall Lamp"})
        assert status == 403 and "X-CSRF-Token" in body["error"]
        status, _, _ = await call(browser, rig, "PATCH", "/api/devices/lamp-1", {"name": "Hall Lamp"},
                                  {"X-CSRF-Token": csrf[:-2] + "xx"})
        assert status == 403
        status, body, _ = await call(browser, rig, "PATCH", "/api/devices/lamp-1", {"name": "Hall Lamp"},
                                     {"X-CSRF-Token": csrf, "Origin": "http://evil.example:8080"})
        assert status == 403 and body["details"][0]["path"] == "(header) Origin"
        status, _, _ = await call(browser, rig, "PATCH", "/api/devices/lamp-1", {"name": "Hall Lamp"},
                                  {"X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"})
        assert status == 403
        status, body, _ = await call(browser, rig, "PATCH", "/api/devices/lamp-1", {"name": "Hall Lamp"},
                                     {"X-CSRF-Token": csrf, "Origin": rig.hub.url, "Sec-Fetch-Site": "same-origin"})
        assert status == 200 and body["displayName"] == "Hall Lamp"

        status, _, response = await call(browser, rig, "DELETE", "/api/session")
        assert status == 200 and response.cookies[SESSION_COOKIE].value == ""
        status, _, _ = await call(browser, rig, "PATCH", "/api/devices/lamp-1", {"name": "Other Lamp"},
                                  {"X-CSRF-Token": csrf})
        assert status == 401
    # Another browser holding the old cookie gets nowhere either: the session ended on the hub.
    async with browser_session() as other:
        other.cookie_jar.update_cookies({SESSION_COOKIE: cookie.value})
        status, body, _ = await call(other, rig, "GET", "/api/session")
        assert body["signedIn"] is False

    async with browser_session() as browser:
        status, body, _ = await call(browser, rig, "POST", "/api/session", {"username": "demo", "password": "demo"})
        assert status == 403 and "admin: true" in body["error"]  # may link the hub, may not change devices
        assert SESSION_COOKIE not in {c.key for c in browser.cookie_jar}
        status, body, _ = await call(browser, rig, "POST", "/api/session", {"username": "owner", "password": "x"})
        assert status == 401 and body["error"] == "wrong username or password"
        status, body, _ = await call(browser, rig, "POST", "/api/session", {"username": "owner"})
        assert status == 422
        status, _, _ = await call(browser, rig, "POST", "/api/session", {"username": "owner", "password": "owner-pw"},
                                  {"Origin": "http://evil.example"})
        assert status == 403
    assert (await device(rig.hub, "lamp-1"))["displayName"] == "Hall Lamp"
    assert "owner-pw" not in rig.hub.log()


async def test_behind_a_proxy_that_ends_https_the_hubs_own_page_signs_in_and_writes_and_other_sites_cannot(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides=ACCOUNTS)
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.hub.wait_for(lambda: _known(rig), what="lamp-1")
    # What a proxy on port 443 forwards: the browser's https Origin, the Host it was sent to; hubd sees plain http.
    proxied = {"Origin": "https://127.0.0.1", "Host": "127.0.0.1", "Sec-Fetch-Site": "same-origin"}
    async with browser_session() as browser:
        status, body, _ = await call(browser, rig, "POST", "/api/session",
                                     {"username": "owner", "password": "owner-pw"}, proxied)
        assert status == 200, body
        csrf = {"X-CSRF-Token": body["csrf"]}
        status, body, _ = await call(browser, rig, "PATCH", "/api/devices/lamp-1", {"name": "Hall Lamp"},
                                     {**proxied, **csrf})
        assert status == 200 and body["displayName"] == "Hall Lamp"
        for other in ("https://evil.example", "https://127.0.0.1:8443", "http://evil.example"):
            status, body, _ = await call(browser, rig, "PATCH", "/api/devices/lamp-1", {"name": "Other Lamp"},
                                         {**proxied, **csrf, "Origin": other})
            assert status == 403 and body["details"][0]["path"] == "(header) Origin", other
    assert (await device(rig.hub, "lamp-1"))["displayName"] == "Hall Lamp"


async def test_a_guesser_waits_while_the_owner_at_a_trusted_address_signs_in(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides=ACCOUNTS)
    right = {"username": "owner", "password": "owner-pw"}
    wrong = {"username": "owner", "password": "guess"}
    async with browser_session("127.0.0.2") as owner:  # the owner's phone: signed in once, trusted since
        assert (await call(owner, rig, "POST", "/api/session", right))[0] == 200

    async with browser_session("127.0.0.1") as guesser, browser_session("127.0.0.3") as second:
        for _ in range(SOURCE_FREE):
            assert (await call(guesser, rig, "POST", "/api/session", wrong))[0] == 401
        status, body, response = await call(guesser, rig, "POST", "/api/session", wrong)
        assert status == 429 and int(response.headers["Retry-After"]) >= 1 and "too many" in body["error"]
        # Even the right password waits at the guesser's address.
        assert (await call(guesser, rig, "POST", "/api/session", right))[0] == 429
        for _ in range(ACCOUNT_FREE - SOURCE_FREE):
            assert (await call(second, rig, "POST", "/api/session", wrong))[0] == 401
        # The account now makes every untrusted address wait ...
        async with browser_session("127.0.0.4") as stranger:
            assert (await call(stranger, rig, "POST", "/api/session", right))[0] == 429
    # ... but not the owner's trusted one.
    async with browser_session("127.0.0.2") as owner:
        status, body, _ = await call(owner, rig, "POST", "/api/session", right)
        assert status == 200 and body["signedIn"] is True


async def test_failed_sign_ins_here_and_on_the_authorize_page_count_against_one_account_lock_out(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides=ACCOUNTS)
    right = {"username": "owner", "password": "owner-pw"}
    wrong = {"username": "owner", "password": "guess"}
    callback = f"{rig.sim.url}/callback?src=sim"  # the platform's host: allowed by default
    # Half the account's budget on each page, from two addresses: neither page alone locks the account ...
    async with browser_session("127.0.0.1") as devices_page, browser_session("127.0.0.3") as authorize_page:
        for _ in range(ACCOUNT_FREE - SOURCE_FREE):
            assert (await call(devices_page, rig, "POST", "/api/session", wrong))[0] == 401
        page_url, form = await open_page(authorize_page, rig.hub.url, callback)
        for _ in range(SOURCE_FREE):
            status, text = await authorize(authorize_page, page_url, form, **wrong)
            assert status == 200 and "Wrong username or password." in text
    # ... together they make every untrusted address wait, on either page, even with the right password.
    async with browser_session("127.0.0.4") as stranger:
        status, body, response = await call(stranger, rig, "POST", "/api/session", right)
        assert status == 429 and "too many" in body["error"] and int(response.headers["Retry-After"]) >= 1
        page_url, form = await open_page(stranger, rig.hub.url, callback)
        status, text = await authorize(stranger, page_url, form, **right)
        assert status == 429 and "Too many failed sign-in attempts" in text


async def authorize(session: aiohttp.ClientSession, page_url: str, form: PageForm, *, username: str,
                    password: str) -> tuple[int, str]:
    """Submit the authorize page's form like a browser; the status and the page (a sign-in redirects: 302)."""
    async with session.post(page_url, data=form.data(username, password), allow_redirects=False) as response:
        return response.status, await response.text()


async def _known(rig: Rig) -> bool:
    _, body = await rig.hub.get("/api/devices")
    return any(d["endpointId"] == "lamp-1" for d in body["devices"])
