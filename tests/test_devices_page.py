"""The devices page in a real Chromium (a real broker, the platform simulator and a real hubd): the owner signs in,
renames a device (a name the platform would refuse is refused in the form, with a spelling that passes one click
away), sets a room for several at once and hides one; the platform simulator gets each AddOrUpdateReport or
DeleteReport and the page shows its delivery; at phone and desktop width. A button left out is made the doorbell
from the presses it announces. A page of another site, open in the same browser, can change nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from browser_helpers import CHROMIUM, chromium
from owner_helpers import device, endpoint_in
from rig import BELL, LAMP, Rig, send
from zigbee2mqtt_helpers import entries

MakeRig = Callable[..., Awaitable[Rig]]
OWNER = {"driver": {"accounts": [{"username": "demo", "password": "demo"},
                                 {"username": "owner", "password": "owner-pw", "admin": True}]}}
XSS_ID = "<img src=x onerror=window.__pwned=1>"
BUTTON = "0x0017880104e45520"  # aqara_WXKG11LM_button: only an action, so not exported until it is a doorbell

pytestmark = [pytest.mark.browser, pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is missing (apt-get install chromium)")]


async def home(make_rig: MakeRig) -> Rig:
    """lamp-1, bell-1 and a device whose id is markup, announced; user-1 bound, their AddOrUpdateReport delivered."""
    rig = await make_rig(hub_overrides=OWNER)
    rig.publish("lamp-1", "config", LAMP, retain=True)
    rig.publish("bell-1", "config", BELL, retain=True)
    rig.publish(XSS_ID, "config", {**BELL, "displayName": "Odd Button"}, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="lamp-1")
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="bell-1")
    return rig


async def sign_in(page: Any) -> None:
    await page.locator("#username").fill("owner")
    await page.locator("#password").fill("owner-pw")
    await page.locator("#signin-button").click()
    await page.locator("#who").get_by_text("owner").wait_for()


async def test_the_owner_renames_places_and_hides_devices_in_the_page_at_phone_and_desktop_width(
        make_rig: MakeRig, tmp_path: Path) -> None:
    pytest.importorskip("playwright")
    from playwright.async_api import expect

    rig = await home(make_rig)
    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2,
                                            is_mobile=True, has_touch=True)
        page = await context.new_page()
        response = await page.goto(f"{rig.hub.url}/devices")
        assert response is not None and response.status == 200
        rows = page.locator("#devices tbody tr")
        await expect(page.locator("#devices")).to_contain_text("Desk Lamp")
        await expect(page.locator("#devices")).to_contain_text(XSS_ID)  # as text
        assert await page.locator("button.edit").count() == 0  # read-only until signed in
        await sign_in(page)
        await page.evaluate("window.__marker = 'the same page'")

        # A name the platform refuses: refused in the form, with a spelling that passes.
        await page.locator('button.edit[data-id="lamp-1"]').click()
        await page.locator("#ed-name").fill("Lamp 2")
        await page.locator("#ed-save").click()
        problem = page.locator("#ed-name-problem")
        await expect(problem).to_contain_text("digits")
        await expect(page.locator("#ed-name")).to_have_attribute("aria-invalid", "true")
        await problem.get_by_role("button", name="Use “Lamp Two”").click()
        await expect(page.locator("#ed-name")).to_have_value("Lamp Two")
        await page.locator("#ed-save").click()
        await expect(page.locator("#editor")).to_be_hidden()
        renamed = await rig.wait_events(2, "AddOrUpdateReport", endpoint="lamp-1")
        assert endpoint_in(renamed[-1], "lamp-1")["displayName"] == "Lamp Two"
        lamp = rows.filter(has=page.locator('[data-id="lamp-1"]'))
        await expect(lamp).to_contain_text("its own name: Desk Lamp")
        await expect(lamp.locator(".report")).to_contain_text("delivered", timeout=15_000)
        await page.screenshot(path=str(tmp_path / "devices-phone.png"), full_page=True)
        overflow = await page.evaluate(
            "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - window.innerWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than the phone"

        # Desktop width: one room for two devices at once, then one hidden.
        await page.set_viewport_size({"width": 1280, "height": 900})
        await page.locator('input[type=checkbox][data-id="lamp-1"]').check()
        await page.locator('input[type=checkbox][data-id="bell-1"]').check()
        await expect(page.locator("#bulk-h")).to_have_text("2 selected")
        await page.locator("#bulk-room").fill("Hallway")
        await page.locator("#bulk-apply").click()
        await rig.sim.wait_until(lambda: any(
            {e["endpointId"]: e.get("recommendRoomName") for e in r.message["payload"]["endpoints"]}
            == {"lamp-1": "Hallway", "bell-1": "Hallway"} for r in rig.events("AddOrUpdateReport")), timeout_s=15)
        await expect(rows.filter(has=page.locator('[data-id="bell-1"]'))).to_contain_text("Hallway")

        await page.locator('button.edit[data-id="bell-1"]').click()
        await page.locator("#ed-exposed").uncheck()
        await page.locator("#ed-save").click()
        await rig.wait_events(1, "DeleteReport", endpoint="bell-1")
        bell = rows.filter(has=page.locator('[data-id="bell-1"]'))
        await expect(bell).to_contain_text("hidden")
        await expect(bell.locator(".report")).to_contain_text("DeleteReport", timeout=15_000)
        await page.screenshot(path=str(tmp_path / "devices-desktop.png"), full_page=True)

        assert await page.evaluate("window.__marker") == "the same page"  # never reloaded
        assert await page.evaluate("window.__pwned === undefined")
        assert await page.locator("#devices img").count() == 0
    assert (await device(rig.hub, "bell-1"))["exposed"] is False
    assert not rig.sim.rejections


@asynccontextmanager
async def hostile_site(hub_url: str) -> AsyncIterator[str]:
    """Another site (another origin: another port) whose page tries to change lamp-1 on the hub."""
    page = f"""<!doctype html><html><body>
<form id="f" method="post" action="{hub_url}/api/session" enctype="text/plain">
<input name='{{"username":"owner","password":"owner-pw","x":"' value='"}}'></form>
<iframe name="sink" id="sink"></iframe>
<script>
window.results = {{}};
async function attack() {{
  try {{
    const r = await fetch("{hub_url}/api/devices/lamp-1", {{method: "PATCH", credentials: "include",
      headers: {{"Content-Type": "application/json"}}, body: JSON.stringify({{name: "Pwned"}})}});
    window.results.patch = r.status;
  }} catch (err) {{ window.results.patch = "blocked"; }}
  try {{
    await fetch("{hub_url}/api/devices", {{method: "POST", mode: "no-cors", credentials: "include",
      headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{endpointIds: ["lamp-1"], name: "Pwned"}})}});
    window.results.post = "sent";
  }} catch (err) {{ window.results.post = "blocked"; }}
  try {{
    const r = await fetch("{hub_url}/api/session", {{credentials: "include"}});
    window.results.csrf = (await r.json()).csrf;
  }} catch (err) {{ window.results.csrf = "unreadable"; }}
  const form = document.getElementById("f");
  form.target = "sink";
  form.submit();
  window.results.done = true;
}}
attack();
</script></body></html>"""

    async def serve(request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_page_of_another_site_can_change_nothing_even_in_the_owners_signed_in_browser(
        make_rig: MakeRig) -> None:
    pytest.importorskip("playwright")
    rig = await home(make_rig)
    async with chromium() as browser, hostile_site(rig.hub.url) as evil:
        context = await browser.new_context()
        owner = await context.new_page()
        await owner.goto(f"{rig.hub.url}/devices")
        await sign_in(owner)  # the session cookie is in this browser now
        forbidden = await rig.hub.metric("hubd_http_requests_total", 'status="403"')

        page = await context.new_page()
        await page.goto(f"{evil}/")
        await page.wait_for_function("window.results && window.results.done")

        async def refused() -> bool:
            return await rig.hub.metric("hubd_http_requests_total", 'status="403"') > forbidden
        await rig.hub.wait_for(refused, what="the cross-origin form post refused")
        results = await page.evaluate("window.results")
        assert results["patch"] == "blocked"  # the browser's preflight found no CORS: the PATCH never went
        assert results["csrf"] == "unreadable"  # nor can it read the session's CSRF token
        assert f"refused, sent from {evil}" in rig.hub.log()
    shown = await device(rig.hub, "lamp-1")
    assert shown["displayName"] == "Desk Lamp" and shown["overrides"]["name"] is None
    assert len(rig.events("AddOrUpdateReport", endpoint="lamp-1")) == 1


async def test_a_button_left_out_is_made_the_doorbell_in_the_page_from_the_presses_it_announces(
        make_rig: MakeRig) -> None:
    pytest.importorskip("playwright")
    from playwright.async_api import expect

    rig = await make_rig(hub_overrides={**OWNER, "zigbee2mqtt": {"enabled": True}})
    send(rig, "zigbee2mqtt/bridge/state", {"state": "online"}, retain=True)
    send(rig, "zigbee2mqtt/bridge/devices", entries("aqara_WXKG11LM_button"), retain=True)
    await rig.bind()
    async with chromium() as browser:
        page = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
        await page.goto(f"{rig.hub.url}/devices")
        await sign_in(page)
        button = page.locator(f'#devices tbody tr[data-id="{BUTTON}"]')
        await expect(button).to_contain_text("not exported")
        await button.locator("button.edit").click()
        offered = await page.locator("#ed-events option").evaluate_all("options => options.map(o => o.value)")
        assert "single" in offered  # what its action announces
        await expect(page.locator("#ed-doorbell-hint")).to_contain_text("single")
        await page.locator("#ed-doorbell").fill("single")
        await page.locator("#ed-save").click()
        await rig.wait_events(1, "AddOrUpdateReport", endpoint=BUTTON)
        await expect(button).to_contain_text("doorbell single")
        await expect(button.get_by_text("exported", exact=True)).to_be_visible()  # no longer "not exported"
    send(rig, "zigbee2mqtt/button", {"action": "single", "battery": 100, "linkquality": 10})
    await rig.wait_events(1, "DoorbellPress", endpoint=BUTTON)
