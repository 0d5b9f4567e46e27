"""Issue 35 item 5 in the devices page, in a real Chromium (a real broker, the platform simulator and a real hubd):
rtl_433's door contact, kept back by rule (its contact_open is `entity_category: diagnostic`), is listed with why and
an Expose button that exports it; a restart button says the rule that keeps it back and offers no Expose."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from browser_helpers import CHROMIUM, chromium
from homeassistant_helpers import fixture
from owner_helpers import endpoint_in
from rig import Rig, send

MakeRig = Callable[..., Awaitable[Rig]]
OWNER = {"driver": {"accounts": [{"username": "demo", "password": "demo"},
                                 {"username": "owner", "password": "owner-pw", "admin": True}]}}
CONTACT = "Honeywell-Security-8-702442"  # tests/fixtures/homeassistant/rtl_433_honeywell_door_contact.json
RESTART = "20500de464ec"  # tests/fixtures/homeassistant/esphome_garagedoor1_restart_button.json

pytestmark = [pytest.mark.browser, pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is missing (apt-get install chromium)")]


async def sign_in(page: Any) -> None:
    await page.locator("#username").fill("owner")
    await page.locator("#password").fill("owner-pw")
    await page.locator("#signin-button").click()
    await page.locator("#who").get_by_text("owner").wait_for()


async def test_the_page_says_why_an_entity_is_kept_back_and_exposes_it_where_the_rule_allows(
        make_rig: MakeRig) -> None:
    pytest.importorskip("playwright")
    from playwright.async_api import expect

    rig = await make_rig(hub_overrides={**OWNER, "homeassistant": {"enabled": True}})
    for name in ("rtl_433_honeywell_door_contact", "esphome_garagedoor1_restart_button"):
        for config in fixture(name)["configs"]:
            send(rig, config["topic"], config["payload"], retain=True)
    await rig.bind()
    async with chromium() as browser:
        page = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
        await page.goto(f"{rig.hub.url}/devices")
        contact = page.locator(f'#devices tbody tr[data-id="{CONTACT}"]')
        restart = page.locator(f'#devices tbody tr[data-id="{RESTART}"]')
        await expect(contact).to_contain_text("diagnostic entity (entity_category diagnostic): kept back by rule; "
                                              "expose it if it is a real device function")
        await expect(contact.locator("button.expose")).to_have_count(0)  # read-only until the owner signs in
        await sign_in(page)
        await expect(contact.locator("button.expose")).to_be_visible()
        await expect(restart).to_contain_text("Kept back by rule: maintenance actions")
        await expect(restart.locator("button.expose")).to_have_count(0)

        await contact.locator("button.expose").click()
        [added] = await rig.wait_events(1, "AddOrUpdateReport", endpoint=CONTACT)
        assert [c["interface"] for c in endpoint_in(added, CONTACT)["capabilities"]] == ["Switch"]
        await expect(contact.get_by_text("exported", exact=True)).to_be_visible()
        await expect(contact.locator("button.expose")).to_have_count(0)
