"""A real browser links an account: headless Chromium, phone-sized, JavaScript off, through the login page."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from aiohttp import web
from browser_helpers import CHROMIUM, chromium
from driver_helpers import ALICE_PASSWORD, command, running_driver
from mosquitto import free_port

if TYPE_CHECKING:
    from playwright.async_api import Page

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is missing (apt-get install chromium)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                       reason="the playwright package is missing (pip install playwright)"),
]


@asynccontextmanager
async def callback_site(
    other_pages: dict[str, str] | None = None, host: str = "127.0.0.1",
) -> AsyncIterator[tuple[str, list[dict[str, list[str]]]]]:
    """A stand-in for the platform's callback page on loopback; records the queries it got.

    `other_pages` maps a path on the same server to HTML it serves (filled in by the test); a page
    `REDIRECT url` answers 302 to url. On `host` 127.0.0.2 it is another *site* than the hub on 127.0.0.1
    (for an IP address the site is the address), so SameSite applies as it does on the internet.
    """
    seen: list[dict[str, list[str]]] = []

    async def landed(request: web.Request) -> web.Response:
        seen.append(parse_qs(request.query_string, keep_blank_values=True))
        return web.Response(text="<!doctype html><title>Linked</title><h1>Linked</h1>", content_type="text/html")

    async def other(request: web.Request) -> web.Response:
        page = (other_pages or {})[request.path]
        if page.startswith("REDIRECT "):
            raise web.HTTPFound(page.removeprefix("REDIRECT "))
        return web.Response(text=page, content_type="text/html")

    app = web.Application()
    app.router.add_get("/platform/callback", landed)
    app.router.add_get("/other/{name}", other)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, host, port).start()
    try:
        yield f"http://{host}:{port}/platform/callback", seen
    finally:
        await runner.cleanup()


async def test_browser_links_an_account(tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    # the callback site is on loopback: allowed by default without platform.auth_url
    async with running_driver(tmp_path, auth_url=None, hub_name="Living-room hub") as driver, \
            callback_site() as (base, seen), aiohttp.ClientSession() as session:
        callback = f"{base}?state=abc123&src=app#linked"
        reply = await command(session, driver.url, "OAuth", {"callbackURL": callback})
        assert reply["status"] == 0
        async with chromium() as browser:
            context = await browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2,
                                                is_mobile=True, has_touch=True, java_script_enabled=False)
            page = await context.new_page()
            response = await page.goto(reply["data"])
            assert response is not None and response.status == 200
            assert "Living-room hub" in await page.inner_text("h1")
            assert "127.0.0.1" in await page.inner_text("main")
            await page.screenshot(path=str(ARTIFACTS / "driver-login.png"), full_page=True)

            await page.fill("#username", "alice")
            await page.fill("#password", "not the password")
            await page.click("button[type=submit]")
            await page.wait_for_load_state()
            assert "Wrong username or password." in await page.inner_text(".error")
            assert await page.input_value("#username") == "alice"
            await page.screenshot(path=str(ARTIFACTS / "driver-login-error.png"), full_page=True)
            assert seen == []

            await page.fill("#password", ALICE_PASSWORD)
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{base}**", timeout=10_000)
            landed = urlsplit(page.url)
            assert await page.inner_text("h1") == "Linked"
        assert landed.fragment == "linked"
        query: dict[str, Any] = parse_qs(landed.query)
        assert query["state"] == ["abc123"] and query["src"] == ["app"]
        assert seen and seen[0]["code"] == query["code"]
        token = await command(session, driver.url, "OAuthGetToken", {"code": query["code"][0]})
        assert token["status"] == 0 and token["data"]["userId"] == "alice"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"], ids=["same-site", "cross-site"])
async def test_browser_refuses_a_form_posted_from_another_site(tmp_path: Path, host: str) -> None:
    """Even with a valid token, a form on another origin is refused: on the same site (127.0.0.1 on another
    port, so SameSite lets the browser's own cookie go along) and on another site (127.0.0.2, whose POST the
    Lax cookie does not even come along with)."""
    pages: dict[str, str] = {}
    async with running_driver(tmp_path, auth_url=None) as driver, callback_site(pages, host=host) as (base, seen), \
            aiohttp.ClientSession() as session:
        reply = await command(session, driver.url, "OAuth", {"callbackURL": base})
        async with chromium() as browser:
            context = await browser.new_context(java_script_enabled=False)
            page = await context.new_page()
            await page.goto(reply["data"])  # the victim's browser has the login cookie
            csrf = await page.input_value("input[name=csrf]")
            pages["/other/evil"] = (
                f'<form method="post" action="{escape(reply["data"])}">'
                f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
                f'<input type="hidden" name="callbackURL" value="{escape(base)}">'
                '<input type="hidden" name="username" value="alice">'
                f'<input type="hidden" name="password" value="{escape(ALICE_PASSWORD)}">'
                '<button type="submit">win a prize</button></form>')
            await page.goto(base.replace("/platform/callback", "/other/evil"))
            await page.click("button[type=submit]")
            await page.wait_for_load_state()
            assert page.url.startswith(driver.url)
            assert "was sent from another site" in await page.inner_text(".error")
        assert seen == []


async def test_login_pages_opened_from_another_site_all_work(tmp_path: Path) -> None:
    """The platform's page links (or redirects) to the login page; a page opened earlier in another tab
    still signs in after a second one was opened that way (the browser's cookie is kept, not replaced)."""
    pages: dict[str, str] = {}
    async with running_driver(tmp_path, auth_url=None) as driver, \
            callback_site(pages, host="127.0.0.2") as (base, seen), aiohttp.ClientSession() as session:
        callback = f"{base}?s=1"
        authorize = (await command(session, driver.url, "OAuth", {"callbackURL": callback}))["data"]
        other_site = base.replace("/platform/callback", "/other")
        pages["/other/link"] = f'<a id="go" href="{escape(authorize)}">Link your hub</a>'
        pages["/other/redirect"] = f"REDIRECT {authorize}"

        async def from_link(page: Page) -> None:
            await page.goto(f"{other_site}/link")
            await page.click("#go")
            await page.wait_for_load_state()

        async def sign_in(page: Page) -> str:
            await page.fill("#username", "alice")
            await page.fill("#password", ALICE_PASSWORD)
            await page.click("button[type=submit]")
            await page.wait_for_load_state()
            return page.url if page.url.startswith(base) else f"refused: {await page.inner_text('main')}"

        async with chromium() as browser:
            context = await browser.new_context(java_script_enabled=False, is_mobile=True)
            page = await context.new_page()
            await from_link(page)
            assert (await sign_in(page)).startswith(callback)

            context = await browser.new_context(java_script_enabled=False, is_mobile=True)
            page = await context.new_page()
            await page.goto(f"{other_site}/redirect")
            assert (await sign_in(page)).startswith(callback)

            context = await browser.new_context(java_script_enabled=False, is_mobile=True)
            first_tab = await context.new_page()
            await first_tab.goto(authorize)
            second_tab = await context.new_page()
            await from_link(second_tab)
            assert (await sign_in(first_tab)).startswith(callback)
            assert (await sign_in(second_tab)).startswith(callback)
        assert len(seen) == 4 and all(q["code"] for q in seen)
