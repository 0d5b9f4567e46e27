"""The status page and what it shows (real broker, platform simulator, hubd process; a real Chromium for the page).

`GET /api/status` is the page's data; `/` draws it and keeps it current by polling, without a reload. Each
delivered platform event is one `hubd.events` line at info level, none with `log.events: false`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from browser_helpers import CHROMIUM, chromium
from hubd_proc import REPO
from rig import LAMP, Rig

# Untrusted text that would run if the page ever took it as HTML: a device id (ids may hold anything but / + #)
# and an interface name in a refused state message (its reason quotes the name).
XSS_ID = "<img src=x onerror=window.__pwned=1><script>"
XSS_INTERFACE = "<script>window.__pwned=2</script>"
FAN = {"displayName": "Attic Fan", "displayType": "switch",
       "capabilities": [{"interface": "Switch", "supportedOperations": ["On", "Off"], "proactivelyReported": True,
                         "retrievable": True}]}


async def status(rig: Rig) -> dict[str, Any]:
    code, body = await rig.hub.get("/api/status")
    assert code == 200, body
    return dict(body)


async def lamp_changed(rig: Rig) -> None:
    """lamp-1 announced, user-1 bound, then the lamp switched on: a ChangeReport delivered."""
    rig.publish("lamp-1", "config", LAMP, retain=True)
    rig.publish("lamp-1", "state", {"Switch": "Off", "Brightness": 40})
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    rig.publish("lamp-1", "state", {"Switch": "On", "Brightness": 40})
    await rig.wait_events(1, "ChangeReport")


async def test_api_status_shows_devices_events_problems_users_and_webhooks(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await lamp_changed(rig)
    for _ in range(2):
        rig.publish("lamp-1", "state", {"Volume": 3})

    async def refused_twice() -> list[dict[str, Any]]:
        return [p for p in (await status(rig))["problems"]["rejected"] if p["count"] == 2]
    [refused] = await rig.hub.wait_for(refused_twice, what="the refused state, counted twice")
    assert refused["topic"] == "hubd/device/lamp-1/state" and "'Volume'" in refused["reason"]
    assert refused["firstSeen"] <= refused["lastSeen"]

    made = subprocess.run([sys.executable, "-m", "hubd", "webhook", "-c", str(rig.hub.config_path), "create",
                           "--name", "front door"], cwd=REPO, capture_output=True, text=True, timeout=30, check=True)
    token = json.loads(made.stdout)["token"]
    code, _, _ = await rig.hub.post(f"/trigger/with/{token}", {"type": "tts", "devices": {"isAll": True},
                                                                "data": {"text": "hello"}})
    assert code == 422  # no speaker; the call counts all the same

    async def webhook_counted() -> list[dict[str, Any]]:
        return [h for h in (await status(rig))["webhooks"] if h["callsLastMinute"] == 1]
    [hook] = await rig.hub.wait_for(webhook_counted, timeout_s=15, what="the webhook's call")
    assert hook["name"] == "front door" and hook["callsLastDay"] == 1
    assert (hook["perMinute"], hook["perDay"]) == (20, 1000) and hook["lastCallAt"] is not None

    body = await status(rig)
    assert set(body) == {"now", "ready", "checks", "devices", "unexported", "sources", "users", "pendingEvents",
                         "events", "problems", "webhooks"}
    assert body["ready"] is True and body["checks"]["mqtt"]["ok"] is True
    [lamp] = body["devices"]
    assert lamp["endpointId"] == "lamp-1" and lamp["source"] == "native" and lamp["availability"] == "unknown"
    assert isinstance(lamp["lastSeen"], float) and lamp["lastSeen"] <= body["now"]
    assert {s["interface"]: s["value"] for s in lamp["states"]} == {"Switch": "On", "Brightness": 40}

    [user] = body["users"]
    assert user["userId"] == "user-1" and user["pendingEvents"] == 0 and user["lastDeliveryError"] is None
    assert user["lastDeliveredAt"] is not None

    change = next(e for e in body["events"] if e["name"] == "ChangeReport")
    [sent] = rig.events("ChangeReport")
    assert change["messageId"] == sent.message_id and change["userId"] == "user-1"
    assert change["status"] == "delivered" and change["attempts"] == 1 and change["endpoints"] == ["lamp-1"]
    assert change["detail"] == "lamp-1 (Switch=On)"
    assert isinstance(change["latencyMs"], int) and 0 <= change["latencyMs"] < 10_000
    assert [e["name"] for e in body["events"]][-1] == "AddOrUpdateReport"  # newest first

    # Never a token: not the webhook's, not the platform's.
    text = json.dumps(body)
    assert token not in text and sent.message["header"]["authorization"]["token"] not in text

    # The older routes only gained fields.
    _, devices = await rig.hub.get("/api/devices")
    assert set(devices) == {"devices", "unexported", "sources"}
    assert devices["devices"][0]["lastSeen"] == lamp["lastSeen"] and devices["devices"][0]["online"] is None
    _, users = await rig.hub.get("/api/users")
    assert set(users["users"][0]) >= {"userId", "status", "tokenExpiresAt", "pendingEvents", "lastError",
                                      "lastDeliveredAt", "lastDeliveryError"}


@pytest.mark.parametrize("events", [True, False])
async def test_each_delivered_event_is_one_info_line_unless_log_events_is_off(
        make_rig: Callable[..., Any], events: bool) -> None:
    rig: Rig = await make_rig(hub_overrides={"log": {"level": "info", "events": events}})
    await lamp_changed(rig)
    [change] = rig.events("ChangeReport")
    # The sender logs before it forgets the row: once the outbox is empty, every line is written.
    await rig.hub.wait_for(lambda: _outbox_empty(rig), what="an empty outbox")
    log = rig.hub.log()
    lines = [line for line in log.splitlines() if " hubd.events: " in line]
    assert change.message["header"]["authorization"]["token"] not in log
    if not events:
        assert lines == []
        return
    mine = [line for line in lines if change.message_id in line]
    assert len(mine) == 1, lines
    assert re.search(rf"INFO +hubd\.events: delivered ChangeReport {change.message_id} for user user-1: "
                     r"Desk Lamp \(lamp-1\) \(Switch=On\) in \d+ ms$", mine[0]), mine[0]
    assert sum("delivered AddOrUpdateReport" in line for line in lines) == 1


async def _outbox_empty(rig: Rig) -> bool:
    _, users = await rig.hub.get("/api/users")
    return bool(users["users"]) and users["pendingEvents"] == 0


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is missing (apt-get install chromium)")
async def test_the_page_follows_devices_and_events_without_a_reload(make_rig: Callable[..., Any],
                                                                     tmp_path: Path) -> None:
    pytest.importorskip("playwright")
    from playwright.async_api import expect

    rig: Rig = await make_rig()
    rig.publish("lamp-1", "config", LAMP, retain=True)
    rig.publish(XSS_ID, "config", FAN, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2,
                                            is_mobile=True, has_touch=True)
        page = await context.new_page()
        response = await page.goto(f"{rig.hub.url}/")
        assert response is not None and response.status == 200
        devices, events, problems = page.locator("#devices"), page.locator("#events"), page.locator("#problems")
        await expect(devices).to_contain_text("Desk Lamp")
        await expect(page.locator("#live")).to_contain_text("live")
        await page.evaluate("window.__marker = 'the same page'")

        rig.publish("lamp-1", "state", {"Switch": "On", "Brightness": 40})
        await expect(devices).to_contain_text("Switch = On, Brightness = 40", timeout=15_000)
        await expect(events).to_contain_text("lamp-1 (Switch=On)", timeout=15_000)
        await expect(events.locator("tbody tr").first).to_contain_text("delivered")
        await expect(page.locator("#users")).to_contain_text("user-1")

        rig.publish("lamp-1", "state", {"states": [{"interface": XSS_INTERFACE, "value": 1}]})
        await expect(problems).to_contain_text(XSS_INTERFACE, timeout=15_000)
        await expect(problems).to_contain_text("hubd/device/lamp-1/state")
        await expect(devices).to_contain_text(XSS_ID)  # the id, as text

        assert await page.evaluate("window.__marker") == "the same page"  # never reloaded
        assert await page.evaluate("window.__pwned === undefined")
        assert await page.locator("#devices img, #problems script, #devices script").count() == 0
        await page.screenshot(path=str(tmp_path / "status-phone.png"), full_page=True)
        overflow = await page.evaluate(
            "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - window.innerWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than the phone"

        await page.set_viewport_size({"width": 1280, "height": 900})
        await page.screenshot(path=str(tmp_path / "status-desktop.png"), full_page=True)
        assert await page.evaluate("window.__marker") == "the same page"
