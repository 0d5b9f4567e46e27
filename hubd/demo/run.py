"""`hubd demo`: hub, embedded broker, platform simulator and simulated devices in one process.

Binds a demo user the way the platform does (the driver's login flow, then AcceptGrant) and prints
one line per message the platform receives, until Ctrl-C. A small home automation (what Home
Assistant or Node-RED would be, `hubd.demo.automation`) rings the speakers through hubd's webhook at every
doorbell press.
Beside hubd's own simulated devices, three announce themselves with Home Assistant MQTT discovery as real
ones do (an ESPHome sensor, and a bulb and a button of a zigbee2mqtt on base topic zigbee2mqtt), and a
simulated zigbee2mqtt bridge (base topic zigbee2mqtt-home) brings a zigbee2mqtt home that hubd imports
natively, a simulated Tasmota bulb announces itself with Tasmota's own discovery and a simulated Shelly Plus
1PM answers hubd's RPC, both of which hubd imports natively too; a button of each zigbee2mqtt is declared as a
doorbell. Short scripts, kept here with the demo home they act on, show a reading, a door opening, a click of
each button, the Tasmota bulb and the Shelly switched on, a control of each bulb and of the Shelly (each a show:
a failure prints a line and the demo goes on); and the owner renames one device once through the devices page's
API (`PATCH /api/devices/{endpointId}` with an admin token), so the AddOrUpdateReport that
follows shows. Picks free ports when the usual ones are taken (a mosquitto may already hold 1883). The hub
itself comes from the builder cli.py hands in (`hubd.app.build`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from hubd.config.model import HubdConfig
from hubd.demo.automation import call, doorbell_automation, doorbell_webhook_blocking
from hubd.dialects.mapping import endpoint_id
from hubd.driver.passwords import hash_password
from hubd.lifecycle import Supervisor
from hubd.store import admin_tokens
from hubd.store.db import Database

DEMO_USER = "demo-user"
CALLBACK_URL = "https://platform.example/callback?src=demo"
RANDOM_INTERVAL_S = 4.0
DOORBELL_EVERY_S = 25.0
# The simulated zigbee2mqtt's base topic, imported natively: not `zigbee2mqtt`, the base of the bulb and button of
# simulators.discovery_demo, a second installation that hubd imports through discovery.
Z2M_BASE_TOPIC = "zigbee2mqtt-home"
# The demo home, which the config above names and the scripts below act on.
DOORBELL_BUTTON_ACTION = "single"  # the zigbee2mqtt buttons' click that makes them doorbells
# Devices of simulators.zigbee2mqtt_bridge's demo home; the button is a doorbell.
Z2M_CONTACT, Z2M_DOORBELL, Z2M_BULB = "Back Door Contact", "Garden Gate Button", "Living Room Bulb"
TASMOTA_BULB, TASMOTA_MAC = "Kitchen Light", "A4CF12D4E5F6"  # simulators.discovery_tasmota's bulb; the MAC is its id
SHELLY_NAME, SHELLY_ID = "Porch Switch", "shellyplus1pm-a8032ab12345"  # simulators.discovery_shelly's; its id is its id
DISCOVERY_IMPORT_TIMEOUT_S = 30.0
LIGHT_BRIGHTNESS_PERCENT = 40
# What the owner does on the devices page, once: the native demo light gets a name of the owner's choosing.
RENAMED, RENAMED_TO = "sim-light-1", "Counter Light"
DEMO_OWNER = "demo owner"  # the name of the demo's admin token


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


async def run_demo(build: Callable[[HubdConfig], Supervisor], *, state_dir: Path | None, http_port: int,
                   mqtt_port: int, platform_port: int, doorbell_every_s: float = DOORBELL_EVERY_S) -> int:
    """Run the demo until Ctrl-C; the exit code. `build` makes the hub from its config (`hubd.app.build`)."""
    # The simulators are optional product code beside hubd; import them only for the demo.
    from simulators.devices import make_demo_fleet
    from simulators.discovery_demo import make_demo_discovery_devices
    from simulators.discovery_shelly import ShellyPlus
    from simulators.discovery_tasmota import TasmotaBulb
    from simulators.platform import PlatformSimulator
    from simulators.platform_binding import bind_user
    from simulators.platform_directives import DirectiveClient
    from simulators.zigbee2mqtt_bridge import make_demo_bridge

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
    # The discovery bulb and button are on base topic `zigbee2mqtt`: hubd leaves to the native import only what
    # is under its base topic, so they come in through discovery beside the bridge's home.
    discovered = make_demo_discovery_devices("127.0.0.1", mqtt_port)
    bridge = make_demo_bridge("127.0.0.1", mqtt_port, base_topic=Z2M_BASE_TOPIC)
    tasmota = TasmotaBulb("127.0.0.1", mqtt_port, mac=TASMOTA_MAC, device_name=TASMOTA_BULB)
    shelly = ShellyPlus("127.0.0.1", mqtt_port, name=SHELLY_NAME)
    config = HubdConfig.model_validate({
        "storage": {"path": str(directory / "hubd.db"), "synchronous": "normal"},
        "mqtt": {"host": "127.0.0.1", "port": mqtt_port, "embedded": True, "client_id": "hubd-demo"},
        "http": {"host": "127.0.0.1", "port": http_port},
        "platform": {"base_url": sim.url, "auth_url": sim.url, "client_id": "demo-client",
                     "client_secret": client_secret},
        "driver": {"accounts": [{"username": "demo", "password": hash_password(password), "admin": True}],
                   "hub_name": "hubd demo",
                   "callback_hosts": [urlsplit(CALLBACK_URL).hostname]},
        "zeroconf": {"enabled": False},
        "log": {"level": "warning"},
        # Devices that announce themselves with Home Assistant MQTT discovery, and a zigbee2mqtt home imported
        # natively; a click of either zigbee2mqtt's button is a doorbell.
        "homeassistant": {"enabled": True},
        "zigbee2mqtt": {"enabled": True, "base_topic": Z2M_BASE_TOPIC},
        "tasmota": {"enabled": True},
        "shelly": {"enabled": True},
        "doorbells": [{"device": discovered[2].name, "event": DOORBELL_BUTTON_ACTION},
                      {"device": Z2M_DOORBELL, "event": DOORBELL_BUTTON_ACTION}],
    })
    hub_url = f"http://127.0.0.1:{http_port}"
    # The automation's webhook (called without a body, it runs its default action) and the owner's admin token.
    token, admin = Database.of(config.storage).call_blocking(_tokens_blocking, time.time())
    supervisor = build(config)
    print(f"hubd demo: hub {hub_url}, MQTT broker 127.0.0.1:{mqtt_port} (embedded), "
          f"platform simulator {sim.url}, state in {directory}", flush=True)
    print(f"hubd demo: open the status page at {hub_url}/ (devices, users, what is delivered)", flush=True)
    print(f"hubd demo: rename, place, hide devices and declare doorbells on the devices page at {hub_url}/devices "
          f"(sign in as demo, password {password})", flush=True)
    code = 0
    fleet = None
    try:
        async with asyncio.TaskGroup() as group:
            hub = group.create_task(supervisor.run(), name="demo.hub")
            helpers: list[asyncio.Task[Any]] = []
            try:
                await _wait_ready(hub_url, hub)
                # amqtt 0.12.1 drops a client that connects while the broker's subscriptions change (its CONNECT
                # handling iterates them), and hubd subscribes to the topics of each device discovery announces.
                # So every other client connects first, and each discovery device only once hubd reads the one
                # before (subscribed to its topics). (The native zigbee2mqtt's topics are all under its base
                # topic, to which hubd subscribed when it started.)
                automation_ready = asyncio.Event()
                helpers.append(group.create_task(doorbell_automation(mqtt_port, f"{hub_url}/trigger/with/{token}",
                                                                     hub_url, automation_ready),
                                                 name="demo.automation"))
                await automation_ready.wait()
                fleet = make_demo_fleet(host="127.0.0.1", port=mqtt_port, out_dir=directory / "speech",
                                        press_every_s=doorbell_every_s)
                await fleet.start()
                await bridge.start()
                await _start_one(hub_url, tasmota, TASMOTA_MAC, {"Switch"}, "Tasmota's discovery")
                await _start_discovered(hub_url, discovered)
                helpers.append(group.create_task(_print_events(sim), name="demo.print"))
                result = await bind_user(hub_url=hub_url, vendor_path=config.http.vendor_path, sim=sim,
                                         username="demo", password=password, user_id=DEMO_USER,
                                         callback_url=CALLBACK_URL)
                if not result.ok:
                    raise RuntimeError(f"binding the demo user failed: {result.reply}")
                print(f"bound platform user {DEMO_USER!r} through the driver's login page and AcceptGrant; "
                      "devices change every few seconds, the doorbell rings at random (every "
                      f"{doorbell_every_s:.0f} s on average) and the speakers tagged 'announce' say so through the "
                      "webhook. Ctrl-C stops.", flush=True)
                helpers.append(group.create_task(fleet.run_random(RANDOM_INTERVAL_S), name="demo.devices"))
                helpers.append(group.create_task(_discovery_script(sim, discovered, DirectiveClient(
                    hub_url, token=result.user_token, vendor_path=config.http.vendor_path)), name="demo.discovery"))
                helpers.append(group.create_task(_zigbee2mqtt_script(sim, bridge, DirectiveClient(
                    hub_url, token=result.user_token, vendor_path=config.http.vendor_path)), name="demo.zigbee2mqtt"))
                helpers.append(group.create_task(_tasmota_script(sim, tasmota, DirectiveClient(
                    hub_url, token=result.user_token, vendor_path=config.http.vendor_path)), name="demo.tasmota"))
                helpers.append(group.create_task(_owner_script(sim, hub_url, admin), name="demo.owner"))
                # Last to connect (see above): hubd asks a Shelly who it is once subscribed to its topics.
                helpers.append(group.create_task(_shelly_script(sim, hub_url, shelly, DirectiveClient(
                    hub_url, token=result.user_token, vendor_path=config.http.vendor_path)), name="demo.shelly"))
            except Exception as err:  # any setup failure ends the demo with one clear line
                print(f"hubd demo: {err}", file=sys.stderr, flush=True)
                supervisor.request_stop()
                code = 1
            code = max(code, await hub)
            for task in helpers:
                task.cancel()
            if fleet is not None:
                await fleet.stop()
            for device in discovered:
                await device.stop()
            await bridge.stop()
            await tasmota.stop()
            await shelly.stop()
    finally:
        await sim.stop()
    return code


async def _start_discovered(hub_url: str, devices: tuple[Any, Any, Any]) -> None:
    """Start the discovery devices one by one, each once hubd shows the one before online with its states."""
    sensor, light, button = devices
    waits: tuple[tuple[Any, str | None, set[str]], ...] = (
        (sensor, endpoint_id(sensor.mac), {"Temperature", "Humidity"}),
        (light, _discovered_id(light), set()),
        (button, None, set()),  # nothing connects after it
    )
    for device, endpoint, states in waits:
        if endpoint is None:
            await device.start()
        else:
            await _start_one(hub_url, device, endpoint, states, "Home Assistant discovery")


async def _start_one(hub_url: str, device: Any, endpoint: str, states: set[str], source: str) -> None:
    """Start one device and return once hubd shows it online with these states."""
    await device.start()
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + DISCOVERY_IMPORT_TIMEOUT_S
        while not await _shown(session, f"{hub_url}/api/devices", endpoint, states):
            if time.monotonic() > deadline:
                raise RuntimeError(f"hubd did not import {endpoint} from {source} in "
                                   f"{DISCOVERY_IMPORT_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.1)


async def _shown(session: aiohttp.ClientSession, url: str, endpoint: str, states: set[str]) -> bool:
    """Whether hubd lists the device online with these states (it subscribed to its topics)."""
    status, body = await call(session, "GET", url)
    devices = body.get("devices") if status == 200 and isinstance(body, dict) else None
    for device in devices if isinstance(devices, list) else []:
        if isinstance(device, dict) and device.get("endpointId") == endpoint and device.get("online"):
            return states <= {s.get("interface") for s in device.get("states", []) if isinstance(s, dict)}
    return False


def _discovered_id(device: Any) -> str:
    """The endpointId of a zigbee2mqtt device imported through discovery: from its identifier."""
    return endpoint_id(f"zigbee2mqtt_{device.ieee}")


async def _discovery_script(sim: Any, devices: tuple[Any, Any, Any], directives: Any) -> None:
    """Once the platform knows the discovery devices: a reading, a click of the button, a bulb set brighter."""
    sensor, light, button = devices
    sensor_id, light_id, button_id = endpoint_id(sensor.mac), _discovered_id(light), _discovered_id(button)
    wanted = {sensor_id, light_id, button_id}
    try:
        if not await _platform_knows(sim, wanted, "discovery", "is homeassistant discovery on?"):
            return
        celsius = round(sensor.temperature_c + 0.5, 1)
        await sensor.set_temperature(celsius)
        _say(f"esphome ▶ {sensor.friendly_name} reads {celsius} °C on {sensor.temperature_topic}")
        await button.press(DOORBELL_BUTTON_ACTION)
        _say(f"zigbee2mqtt ▶ {button.name} clicked {DOORBELL_BUTTON_ACTION!r} on {button.state_topic}: "
            f"{_declared(button.name)}")
        await _dim(directives, light_id, light.name, light.received, light.state)
    except (TimeoutError, RuntimeError, ValueError, aiohttp.ClientError) as err:  # a show: the demo goes on
        _say(f"discovery ▶ the demo script stopped: {err!r}")
    finally:
        await directives.close()


async def _zigbee2mqtt_script(sim: Any, bridge: Any, directives: Any) -> None:
    """Once the platform knows the zigbee2mqtt devices: a door opens, the doorbell button clicks, a bulb is dimmed."""
    contact, button, bulb = (bridge.device(name) for name in (Z2M_CONTACT, Z2M_DOORBELL, Z2M_BULB))
    wanted = {contact.ieee_address, button.ieee_address, bulb.ieee_address}  # endpointIds: the ieee_address
    try:
        if not await _platform_knows(sim, wanted, "zigbee2mqtt", "is zigbee2mqtt enabled?"):
            return
        await bridge.set_contact(contact.friendly_name, closed=False)
        _say(f"zigbee2mqtt ▶ {contact.friendly_name} opened: contact false on "
            f"{bridge.state_topic(contact.friendly_name)}")
        await bridge.press(button.friendly_name, DOORBELL_BUTTON_ACTION)
        _say(f"zigbee2mqtt ▶ {button.friendly_name} clicked {DOORBELL_BUTTON_ACTION!r} on "
            f"{bridge.state_topic(button.friendly_name)}: {_declared(button.friendly_name)}")
        await _dim(directives, bulb.ieee_address, bulb.friendly_name, bridge.received, bulb.state)
    except (TimeoutError, RuntimeError, ValueError, aiohttp.ClientError) as err:  # a show: the demo goes on
        _say(f"zigbee2mqtt ▶ the demo script stopped: {err!r}")
    finally:
        await directives.close()


async def _tasmota_script(sim: Any, bulb: Any, directives: Any) -> None:
    """Once the platform knows the Tasmota bulb: switched on at the wall, then dimmed from the platform."""
    try:
        if not await _platform_knows(sim, {TASMOTA_MAC}, "tasmota", "is tasmota enabled?"):
            return
        await bulb.turn(True)
        _say(f"tasmota ▶ {TASMOTA_BULB} switched on: {{\"POWER\":\"ON\",...}} on stat/{bulb.topic}/RESULT")
        heard = len(bulb.commands)
        reply = await directives.control(TASMOTA_MAC, "Brightness.Set", {"value": LIGHT_BRIGHTNESS_PERCENT})
        shown = ", ".join(f"{k}={v}" for k, v in reply.states.items()) or reply.error_message
        _say(f"platform ▶ Brightness.Set {LIGHT_BRIGHTNESS_PERCENT} to {TASMOTA_MAC}: {reply.name} {shown}")
        for command in bulb.commands[heard:]:
            _say(f"tasmota ▶ {TASMOTA_BULB} obeyed {command.payload.decode()} on {command.topic}: "
                f"power {bulb.state['POWER']}, dimmer {bulb.state['Dimmer']}")
    except (TimeoutError, RuntimeError, ValueError, aiohttp.ClientError) as err:  # a show: the demo goes on
        _say(f"tasmota ▶ the demo script stopped: {err!r}")
    finally:
        await directives.close()


async def _shelly_script(sim: Any, hub_url: str, shelly: Any, directives: Any) -> None:
    """The Shelly connects, hubd asks it who it is over RPC; switched on at the wall, then off from the platform."""
    try:
        await _start_one(hub_url, shelly, SHELLY_ID, {"Switch"}, "Shelly's RPC")
        if not await _platform_knows(sim, {SHELLY_ID}, "shelly", "is shelly enabled?"):
            return
        await shelly.turn(True)
        _say(f"shelly ▶ {SHELLY_NAME} switched on: NotifyStatus on {shelly.prefix}/events/rpc")
        reply = await directives.control(SHELLY_ID, "Switch.Off")
        shown = ", ".join(f"{k}={v}" for k, v in reply.states.items()) or reply.error_message
        _say(f"platform ▶ Switch.Off to {SHELLY_ID}: {reply.name} {shown}")
        sets = [r for r in shelly.requests if r.get("method") == "Switch.Set"]
        if sets:
            _say(f"shelly ▶ {SHELLY_NAME} obeyed Switch.Set {sets[-1].get('params')} on {shelly.prefix}/rpc")
    except (TimeoutError, RuntimeError, ValueError, aiohttp.ClientError) as err:  # a show: the demo goes on
        _say(f"shelly ▶ the demo script stopped: {err!r}")
    finally:
        await directives.close()


async def _dim(directives: Any, endpoint_id: str, name: str, received: list[Any], state: dict[str, Any]) -> None:
    """Brightness.Set from the platform, its Response, and the command the zigbee2mqtt bulb got (`received`)."""
    heard = len(received)
    reply = await directives.control(endpoint_id, "Brightness.Set", {"value": LIGHT_BRIGHTNESS_PERCENT})
    shown = ", ".join(f"{k}={v}" for k, v in reply.states.items()) or reply.error_message
    _say(f"platform ▶ Brightness.Set {LIGHT_BRIGHTNESS_PERCENT} to {endpoint_id}: {reply.name} {shown}")
    if len(received) > heard:
        command = received[heard]
        _say(f"zigbee2mqtt ▶ {name} obeyed {command.payload.decode()} on {command.topic}: "
            f"state {state['state']}, brightness {state['brightness']}/254")


async def _owner_script(sim: Any, hub_url: str, admin_token: str) -> None:
    """Once the platform knows the demo light: the owner renames it through the devices page's API, once."""
    try:
        if not await _platform_knows(sim, {RENAMED}, "owner", "nothing renamed"):
            return
        async with aiohttp.ClientSession() as session, session.patch(
                f"{hub_url}/api/devices/{RENAMED}", json={"name": RENAMED_TO},
                headers={"Authorization": f"Bearer {admin_token}"}) as response:
            body = await response.json()
        if response.status != 200:
            _say(f"owner ▶ renaming {RENAMED} failed: HTTP {response.status} {str(body.get('error'))[:200]}")
            return
        own = body.get("described", {}).get("displayName")
        _say(f"owner ▶ renamed {RENAMED} ({own}) to {RENAMED_TO!r} with PATCH /api/devices/{RENAMED} and an admin "
            f"token, as the devices page does: the platform gets an AddOrUpdateReport")
    except (aiohttp.ClientError, ValueError) as err:  # a show: the demo goes on
        _say(f"owner ▶ the demo script stopped: {err!r}")


async def _platform_knows(sim: Any, wanted: set[str], who: str, hint: str) -> bool:
    """Wait until the platform got an AddOrUpdateReport for each of `wanted`; else say which not, and `hint`."""
    try:
        await sim.wait_until(lambda: wanted <= _added(sim), timeout_s=DISCOVERY_IMPORT_TIMEOUT_S)
    except TimeoutError:
        _say(f"{who} ▶ the platform got no AddOrUpdateReport for {', '.join(sorted(wanted - _added(sim)))} in "
            f"{DISCOVERY_IMPORT_TIMEOUT_S:.0f} s; {hint}")
        return False
    return True


def _declared(device: str) -> str:
    """What a click of a declared doorbell button is, and its entry in the config's `doorbells`."""
    return f"a doorbell, declared in doorbells as {{device: {device!r}, event: {DOORBELL_BUTTON_ACTION!r}}}"


def _added(sim: Any) -> set[str]:
    """The endpointIds the platform got an AddOrUpdateReport for."""
    return {e for r in sim.events if r.name == "AddOrUpdateReport" for e in r.endpoint_ids}


def _say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')}  {text}", flush=True)


def _tokens_blocking(conn: Any, now: float) -> tuple[str, str]:
    """The demo's webhook token and admin token, both new each run."""
    return doorbell_webhook_blocking(conn, now), _admin_token_blocking(conn, now)


def _admin_token_blocking(conn: Any, now: float) -> str:
    """The demo owner's admin token: a new one each run, the last run's revoked (only hashes are kept)."""
    for token in admin_tokens.list_blocking(conn):
        if token.name == DEMO_OWNER and token.revoked_at is None:
            admin_tokens.revoke_blocking(conn, token.id, now)
    return admin_tokens.create_blocking(conn, DEMO_OWNER, now)[1]


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
