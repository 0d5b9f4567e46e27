"""`hubd demo`: hub, embedded broker, platform simulator and simulated devices in one process.

Binds a demo user the way the platform does (the driver's login flow, then AcceptGrant) and prints
one line per message the platform receives, until Ctrl-C. A small home automation (what Home
Assistant or Node-RED would be) rings the speakers through hubd's webhook at every doorbell press.
Picks free ports when the usual ones are taken (a mosquitto may already hold 1883).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import socket
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from hubd.app import build
from hubd.config import HubdConfig
from hubd.driver.passwords import hash_password
from hubd.errors import MqttUnavailable
from hubd.mqtt.client import MqttClient
from hubd.store.db import Database
from hubd.webhook import store
from hubd.webhook.trigger import parse

DEMO_USER = "demo-user"
CALLBACK_URL = "https://platform.example/callback?src=demo"
RANDOM_INTERVAL_S = 4.0
DOORBELL_EVERY_S = 25.0
DOORBELL_ACTION = {"type": "tts", "devices": {"tag": "announce"}, "data": {"text": "Someone is at the front door"}}
DOORBELL_WEBHOOK = "demo doorbell"


def free_or_other(port: int) -> int:
    """`port` if nothing listens on 127.0.0.1:port, else a free one."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
            return port
        except OSError:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])


def describe(record: Any) -> str:
    """One readable line for a message the platform received."""
    message = record.message
    name = record.name
    payload = message.get("payload", {})
    if name == "ChangeReport":
        changed = ", ".join(f"{s['interface']}={s['value']}" for s in payload["change"]["states"])
        detail = f"{message['endpoint']['endpointId']}: {changed}"
    elif name == "AddOrUpdateReport":
        detail = ", ".join(f"{e['endpointId']} ({e['displayName']})" for e in payload["endpoints"])
    elif name == "DeleteReport":
        detail = ", ".join(e["endpointId"] for e in payload["endpoints"])
    elif name == "DoorbellPress":
        detail = f"{payload['endpointId']} at {payload['timestamp']}"
    elif name == "Response":
        states = ", ".join(f"{s['interface']}={s['value']}" for s in message["endpoint"]["states"])
        token = message["header"]["correlationToken"]
        detail = f"{message['endpoint']['endpointId']}: {states} (correlationToken {token})"
    else:
        detail = ""
    clock = time.strftime("%H:%M:%S", time.localtime(record.received_at))
    return f"{clock}  platform ◀ {name:<17} user={record.user_id}  {detail}"


async def run_demo(*, state_dir: Path | None, http_port: int, mqtt_port: int, platform_port: int,
                   doorbell_every_s: float = DOORBELL_EVERY_S) -> int:
    """Run the demo until Ctrl-C; the exit code."""
    # The simulators are optional product code beside hubd; import them only for the demo.
    from simulators.devices import make_demo_fleet
    from simulators.platform import PlatformSimulator, bind_user

    # The simulated devices see the embedded broker go away as the hub stops: expected, not news.
    for name in ("simulators", "amqtt"):
        logging.getLogger(name).setLevel(logging.ERROR)
    directory = state_dir or Path(tempfile.mkdtemp(prefix="hubd-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    http_port, mqtt_port = free_or_other(http_port), free_or_other(mqtt_port)
    client_secret = secrets.token_urlsafe(16)
    password = secrets.token_urlsafe(12)
    sim = PlatformSimulator(port=free_or_other(platform_port), client_id="demo-client",
                            client_secret=client_secret)
    await sim.start()
    config = HubdConfig.model_validate({
        "storage": {"path": str(directory / "hubd.db"), "synchronous": "normal"},
        "mqtt": {"host": "127.0.0.1", "port": mqtt_port, "embedded": True, "client_id": "hubd-demo"},
        "http": {"host": "127.0.0.1", "port": http_port},
        "platform": {"base_url": sim.url, "auth_url": sim.url, "client_id": "demo-client",
                     "client_secret": client_secret},
        "driver": {"accounts": [{"username": "demo", "password": hash_password(password)}], "hub_name": "hubd demo",
                   "callback_hosts": [urlsplit(CALLBACK_URL).hostname]},
        "zeroconf": {"enabled": False},
        "log": {"level": "warning"},
    })
    hub_url = f"http://127.0.0.1:{http_port}"
    # The automation's webhook: called without a body, it runs its default action.
    token = Database.of(config.storage).call_blocking(_doorbell_webhook_blocking, time.time())
    supervisor = build(config)
    print(f"hubd demo: hub {hub_url}, MQTT broker 127.0.0.1:{mqtt_port} (embedded), "
          f"platform simulator {sim.url}, state in {directory}", flush=True)
    code = 0
    fleet = None
    try:
        async with asyncio.TaskGroup() as group:
            hub = group.create_task(supervisor.run(), name="demo.hub")
            helpers: list[asyncio.Task[Any]] = []
            try:
                await _wait_ready(hub_url, hub)
                fleet = make_demo_fleet(host="127.0.0.1", port=mqtt_port, out_dir=directory / "speech",
                                        press_every_s=doorbell_every_s)
                await fleet.start()
                helpers.append(group.create_task(_print_events(sim), name="demo.print"))
                result = await bind_user(hub_url=hub_url, vendor_path=config.http.vendor_path, sim=sim,
                                         username="demo", password=password, user_id=DEMO_USER,
                                         callback_url=CALLBACK_URL)
                if not result.ok:
                    raise RuntimeError(f"binding the demo user failed: {result.reply}")
                print(f"bound platform user {DEMO_USER!r} through the driver's login page and AcceptGrant; "
                      f"devices change every few seconds, the doorbell rings every {doorbell_every_s:.0f} s "
                      "and the speakers tagged 'announce' say so through the webhook. Ctrl-C stops.", flush=True)
                helpers.append(group.create_task(fleet.run_random(RANDOM_INTERVAL_S), name="demo.devices"))
                helpers.append(group.create_task(_doorbell_automation(mqtt_port, f"{hub_url}/trigger/with/{token}",
                                                                      hub_url), name="demo.automation"))
            except Exception as err:  # any setup failure ends the demo with one clear line
                print(f"hubd demo: {err}", file=sys.stderr, flush=True)
                supervisor.request_stop()
                code = 1
            code = max(code, await hub)
            for task in helpers:
                task.cancel()
            if fleet is not None:
                await fleet.stop()
    finally:
        await sim.stop()
    return code


def _doorbell_webhook_blocking(conn: sqlite3.Connection, now: float) -> str:
    """A token for the demo's doorbell webhook: the one from an earlier run with a new token, else a new one.

    Tokens are stored only as hashes, so an earlier run's token cannot be reused; rotating keeps
    one webhook however often the demo runs in the same state directory.
    """
    action = parse(DOORBELL_ACTION)
    for hook in store.find_blocking(conn, DOORBELL_WEBHOOK):
        if hook.default_action == action.as_body():  # find_blocking by name finds live webhooks only
            token = store.rotate_blocking(conn, hook.id, now)
            if token is not None:
                return token
        store.revoke_blocking(conn, hook.id, now)
    return store.create_blocking(conn, DOORBELL_WEBHOOK, action, now)[1]


async def _wait_ready(url: str, hub: asyncio.Task[int], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if hub.done():
                raise RuntimeError("the hub stopped while starting; see the messages above")
            try:
                async with session.get(f"{url}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the hub was not ready after {timeout_s:.0f} s")


async def _print_events(sim: Any) -> None:
    shown = 0
    rejected = 0
    while True:
        def news(seen: int = shown, refused: int = rejected) -> bool:
            return len(sim.events) > seen or len(sim.rejections) > refused

        try:
            await sim.wait_until(news, timeout_s=60)
        except TimeoutError:
            continue
        for record in sim.events[shown:]:
            print(describe(record), flush=True)
        for rejection in sim.rejections[rejected:]:
            print(f"platform rejected an event: HTTP {rejection.status} {rejection.error}", flush=True)
        shown, rejected = len(sim.events), len(sim.rejections)


async def _doorbell_automation(mqtt_port: int, webhook_url: str, hub_url: str) -> None:
    """What a user's home automation does: on every doorbell event, POST the webhook (no body: its default)."""
    client = MqttClient(host="127.0.0.1", port=mqtt_port, client_id=f"demo-automation-{secrets.token_hex(3)}")
    await client.connect()
    await client.subscribe([("hubd/device/+/event", 1)])
    try:
        async with aiohttp.ClientSession() as session:
            while True:
                batch = await client.next_batch()
                client.ack(batch)
                for message in batch:
                    # amqtt hands a new subscriber every retained message, whatever its filter: check the topic.
                    if message.retain or not message.topic.endswith("/event"):
                        continue
                    doorbell = message.topic.split("/")[2]
                    try:
                        await _ring(session, doorbell, webhook_url, hub_url)
                    except aiohttp.ClientConnectionError:
                        raise
                    except aiohttp.ClientError as err:  # one failed call; the next press tries again
                        print(f"{time.strftime('%H:%M:%S')}  automation ▶ webhook for {doorbell} failed: {err}",
                              flush=True)
    except (MqttUnavailable, aiohttp.ClientConnectionError):
        return  # the hub, and with it the embedded broker, is stopping
    finally:
        await client.disconnect()


async def _ring(session: aiohttp.ClientSession, doorbell: str, webhook_url: str, hub_url: str) -> None:
    """One doorbell press: call the webhook, then show what the speakers said. An odd reply is shown, not fatal."""
    status, body = await _call(session, "POST", webhook_url)
    clock = time.strftime("%H:%M:%S")
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("devices"), list):
        error = body.get("error") if isinstance(body, dict) else body
        print(f"{clock}  automation ▶ webhook for {doorbell}: HTTP {status} {str(error)[:200]}", flush=True)
        return
    command_id = str(body.get("id"))
    speakers = ", ".join(str(d.get("endpointId")) for d in body["devices"] if isinstance(d, dict))
    print(f"{clock}  automation ▶ webhook: {doorbell} pressed, tts to {speakers} (command {command_id[:8]})",
          flush=True)
    await asyncio.sleep(1.0)  # what the demo shows: the results a second later, whatever they are by then
    status, shown = await _call(session, "GET", f"{hub_url}/api/commands/{command_id}")
    targets = shown.get("targets") if isinstance(shown, dict) else None
    if status != 200 or not isinstance(targets, list):
        print(f"{time.strftime('%H:%M:%S')}  speakers ▶ no results: HTTP {status} {str(shown)[:200]}", flush=True)
        return
    results = ", ".join(f"{t.get('endpointId')} {t.get('status')}" for t in targets if isinstance(t, dict))
    print(f"{time.strftime('%H:%M:%S')}  speakers ▶ {results}", flush=True)


async def _call(session: aiohttp.ClientSession, method: str, url: str) -> tuple[int, Any]:
    """Status and JSON body (or the text, when the reply is not JSON)."""
    async with session.request(method, url) as response:
        text = await response.text(errors="replace")
    try:
        return response.status, json.loads(text)
    except json.JSONDecodeError:
        return response.status, text
