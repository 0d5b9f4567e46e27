"""`python -m tools.status_screenshot`: render hubd's status page and devices page to PNG with headless Chromium.

Starts `hubd demo` (free ports, a temporary state directory), waits until the page has devices from every
source and delivered events (a doorbell press among them, and the demo owner's rename), publishes one device
message hubd refuses (so the Problems panel has something to show), then loads `/` in Chromium through playwright
and writes a desktop-width screenshot (`docs/status-page.png`) and a phone-width one (`docs/status-page-phone.png`),
each of the top `--height` pixels of the page (a whole page of devices makes a PNG of well over 300 KiB). Then the
devices page (`/devices`): signed in as the demo's owner (the password the demo prints), a device's editor open
with a name the platform refuses and the spelling it takes offered (`docs/devices-page.png`, and
`docs/devices-page-phone.png`). Needs the test extras (`pip install -e '.[test]'`: playwright) and Chromium at
/usr/bin/chromium (or --chromium).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SOURCES = {"native", "homeassistant", "zigbee2mqtt"}
WAIT_S = 120.0
RENAMED = "sim-light-1"  # the device the demo's owner renames (hubd.demo.run)
EDITED, REFUSED_NAME = "0x000b57fffec6a5c2", "Bulb 2"  # the device edited in the picture, and a name with a digit


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def shown(status: dict[str, Any], events: int) -> bool:
    """Devices of every source, `events` delivered events with a DoorbellPress among them, and the owner's rename
    delivered."""
    delivered = [e for e in status.get("events", []) if e.get("status") == "delivered"]
    renamed = any(d.get("endpointId") == RENAMED and d.get("overrides", {}).get("name") is not None
                  and (d.get("report") or {}).get("status") == "delivered" for d in status.get("devices", []))
    return ({d.get("source") for d in status.get("devices", [])} >= SOURCES and len(delivered) >= events
            and any(e.get("name") == "DoorbellPress" for e in delivered) and renamed)


class DemoFailed(Exception):
    """The demo exited, or did not show what the screenshot needs in time."""


async def wait_for_status(url: str, demo: subprocess.Popen[bytes], events: int) -> None:
    deadline = time.monotonic() + WAIT_S
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if demo.poll() is not None:
                raise DemoFailed(f"hubd demo exited with {demo.returncode}")
            try:
                async with session.get(f"{url}/api/status") as response:
                    if response.status == 200 and shown(await response.json(), events):
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.5)
    raise DemoFailed(f"the status page showed no devices of every source and {events} delivered events within "
                     f"{WAIT_S:.0f} s")


async def refused_message(mqtt_port: int) -> None:
    """A state for an interface the demo light does not have: hubd refuses it, and the page lists it."""
    from hubd.mqtt.client import MqttClient

    client = MqttClient(host="127.0.0.1", port=mqtt_port, client_id=f"screenshot-{free_port()}")
    await client.connect()
    try:
        payload = json.dumps({"states": [{"interface": "Volume", "value": 11}]}).encode()
        await client.publish("hubd/device/sim-light-1/state", payload, qos=1, timeout_s=5.0)
    finally:
        await client.disconnect()


async def screenshots(url: str, chromium: Path, desktop: Path, phone: Path | None, height: int) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True)
        try:
            shots = [(desktop, 1280, height, False)]
            if phone is not None:
                shots.append((phone, 390, height, True))
            for path, width, height, mobile in shots:
                context = await browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1,
                                                    is_mobile=mobile, has_touch=mobile, color_scheme="light")
                page = await context.new_page()
                await page.goto(f"{url}/")
                await page.get_by_text("live · updated").wait_for()
                await page.locator("#problems .mono").first.wait_for()  # the refused message
                path.parent.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(path))  # the viewport: the top of the page
                await context.close()
                size = path.stat().st_size // 1024
                print(f"wrote {path} ({size} KiB)" + (", more than 300 KiB: try a smaller --height" if size > 300
                                                      else ""), flush=True)
        finally:
            await browser.close()


async def devices_page(url: str, password: str, chromium: Path, desktop: Path, phone: Path | None,
                       height: int) -> None:
    """The devices page, signed in, a device's editor open with a refused name and the spelling offered."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True)
        try:
            shots = [(desktop, 1280, height, False)]
            if phone is not None:
                shots.append((phone, 390, height, True))
            for path, width, height, mobile in shots:
                context = await browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1,
                                                    is_mobile=mobile, has_touch=mobile, color_scheme="light")
                page = await context.new_page()
                await page.goto(f"{url}/devices")
                await page.locator("#username").fill("demo")
                await page.locator("#password").fill(password)
                await page.locator("#signin-button").click()
                await page.locator(f'button.edit[data-id="{EDITED}"]').click()
                await page.locator("#ed-name").fill(REFUSED_NAME)
                await page.locator("#ed-save").click()
                await page.locator("#ed-name-problem .suggestion").wait_for()
                await page.locator(f'tr[data-id="{RENAMED}"] .report').get_by_text("delivered").first.wait_for()
                await page.evaluate("document.getElementById('notice').hidden = true")  # the "signed in" toast
                path.parent.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(path))
                await context.close()
                print(f"wrote {path} ({path.stat().st_size // 1024} KiB)", flush=True)
        finally:
            await browser.close()


def demo_password(log: Path) -> str:
    """The password of the demo's owner account, as `hubd demo` prints it."""
    found = re.search(r"sign in as demo, password (\S+)\)", log.read_text(errors="replace"))
    if found is None:
        raise DemoFailed("hubd demo printed no password for the devices page")
    return found.group(1)


async def capture(url: str, mqtt_port: int, demo: subprocess.Popen[bytes], args: argparse.Namespace,
                  log: Path) -> None:
    await wait_for_status(url, demo, args.events)
    await refused_message(mqtt_port)
    await screenshots(url, args.chromium, args.out, None if args.no_phone else args.phone_out, args.height)
    await devices_page(url, demo_password(log), args.chromium, args.devices_out,
                       None if args.no_phone else args.devices_phone_out, args.devices_height)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.status_screenshot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "status-page.png", help="the desktop PNG")
    parser.add_argument("--phone-out", type=Path, default=REPO / "docs" / "status-page-phone.png",
                        help="the phone-width PNG")
    parser.add_argument("--devices-out", type=Path, default=REPO / "docs" / "devices-page.png",
                        help="the devices page's desktop PNG")
    parser.add_argument("--devices-phone-out", type=Path, default=REPO / "docs" / "devices-page-phone.png",
                        help="the devices page's phone-width PNG")
    parser.add_argument("--devices-height", type=int, default=1100, help="pixels of the devices page shown [1100]")
    parser.add_argument("--no-phone", action="store_true", help="only the desktop PNGs")
    parser.add_argument("--height", type=int, default=1400, help="pixels of the page shown, from the top [1400]")
    parser.add_argument("--events", type=int, default=8, help="delivered events to wait for [8]")
    parser.add_argument("--chromium", type=Path, default=Path("/usr/bin/chromium"))
    args = parser.parse_args(argv)
    if not args.chromium.exists():
        raise SystemExit(f"{args.chromium} is missing (apt-get install chromium, or pass --chromium)")
    http_port, mqtt_port, platform_port = free_port(), free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="hubd-screenshot-") as tmp:
        log = Path(tmp) / "demo.log"
        with open(log, "wb") as out:
            demo = subprocess.Popen(
                [sys.executable, "-m", "hubd", "demo", "--state-dir", str(Path(tmp) / "state"), "--http-port",
                 str(http_port), "--mqtt-port", str(mqtt_port), "--platform-port", str(platform_port),
                 "--doorbell-every-s", "6"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
            try:
                asyncio.run(capture(f"http://127.0.0.1:{http_port}", mqtt_port, demo, args, log))
            except DemoFailed as err:
                raise SystemExit(f"{err}:\n{log.read_text(errors='replace')[-3000:]}") from None
            finally:
                if demo.poll() is None:
                    demo.send_signal(signal.SIGINT)
                    try:
                        demo.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        demo.kill()
                        demo.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
