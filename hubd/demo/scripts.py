"""The demo's short scripts (`hubd demo`): once the platform knows a source's devices, what each shows, printed a
line at a time: a reading, a door opening, a click of each doorbell button, the Tasmota bulb switched on, a control of
each bulb from the platform, and the owner renaming a device once through the devices page's API. Each is a show:
a failure prints a line and the demo goes on. Imports the endpointId rule; the devices and the simulators are
handed in.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from hubd.dialects.mapping import endpoint_id

DOORBELL_BUTTON_ACTION = "single"  # the zigbee2mqtt buttons' click that makes them doorbells
# Devices of simulators.zigbee2mqtt_bridge's demo home; the button is a doorbell.
Z2M_CONTACT, Z2M_DOORBELL, Z2M_BULB = "Back Door Contact", "Garden Gate Button", "Living Room Bulb"
TASMOTA_BULB, TASMOTA_MAC = "Kitchen Light", "A4CF12D4E5F6"  # simulators.discovery_tasmota's bulb; the MAC is its id
DISCOVERY_IMPORT_TIMEOUT_S = 30.0
LIGHT_BRIGHTNESS_PERCENT = 40
# What the owner does on the devices page, once: the native demo light gets a name of the owner's choosing.
RENAMED, RENAMED_TO = "sim-light-1", "Counter Light"


def discovered_id(device: Any) -> str:
    """The endpointId of a zigbee2mqtt device imported through discovery: from its identifier."""
    return endpoint_id(f"zigbee2mqtt_{device.ieee}")


async def discovery_script(sim: Any, devices: tuple[Any, Any, Any], directives: Any) -> None:
    """Once the platform knows the discovery devices: a reading, a click of the button, a bulb set brighter."""
    sensor, light, button = devices
    sensor_id, light_id, button_id = endpoint_id(sensor.mac), discovered_id(light), discovered_id(button)
    wanted = {sensor_id, light_id, button_id}
    try:
        if not await _platform_knows(sim, wanted, "discovery", "is homeassistant discovery on?"):
            return
        celsius = round(sensor.temperature_c + 0.5, 1)
        await sensor.set_temperature(celsius)
        say(f"esphome ▶ {sensor.friendly_name} reads {celsius} °C on {sensor.temperature_topic}")
        await button.press(DOORBELL_BUTTON_ACTION)
        say(f"zigbee2mqtt ▶ {button.name} clicked {DOORBELL_BUTTON_ACTION!r} on {button.state_topic}: "
            f"{_declared(button.name)}")
        await _dim(directives, light_id, light.name, light.received, light.state)
    except (TimeoutError, RuntimeError, ValueError, aiohttp.ClientError) as err:  # a show: the demo goes on
        say(f"discovery ▶ the demo script stopped: {err!r}")
    finally:
        await directives.close()


async def zigbee2mqtt_script(sim: Any, bridge: Any, directives: Any) -> None:
    """Once the platform knows the zigbee2mqtt devices: a door opens, the doorbell button clicks, a bulb is dimmed."""
    contact, button, bulb = (bridge.device(name) for name in (Z2M_CONTACT, Z2M_DOORBELL, Z2M_BULB))
    wanted = {contact.ieee_address, button.ieee_address, bulb.ieee_address}  # endpointIds: the ieee_address
    try:
        if not await _platform_knows(sim, wanted, "zigbee2mqtt", "is zigbee2mqtt enabled?"):
            return
        await bridge.set_contact(contact.friendly_name, closed=False)
        say(f"zigbee2mqtt ▶ {contact.friendly_name} opened: contact false on "
            f"{bridge.state_topic(contact.friendly_name)}")
        await bridge.press(button.friendly_name, DOORBELL_BUTTON_ACTION)
        say(f"zigbee2mqtt ▶ {button.friendly_name} clicked {DOORBELL_BUTTON_ACTION!r} on "
            f"{bridge.state_topic(button.friendly_name)}: {_declared(button.friendly_name)}")
        await _dim(directives, bulb.ieee_address, bulb.friendly_name, bridge.received, bulb.state)
    except (TimeoutError, RuntimeError, ValueError, aiohttp.ClientError) as err:  # a show: the demo goes on
        say(f"zigbee2mqtt ▶ the demo script stopped: {err!r}")
    finally:
        await directives.close()


async def tasmota_script(sim: Any, bulb: Any, directives: Any) -> None:
    """Once the platform knows the Tasmota bulb: switched on at the wall, then dimmed from the platform."""
    try:
        if not await _platform_knows(sim, {TASMOTA_MAC}, "tasmota", "is tasmota enabled?"):
            return
        await bulb.turn(True)
        say(f"tasmota ▶ {TASMOTA_BULB} switched on: {{\"POWER\":\"ON\",...}} on stat/{bulb.topic}/RESULT")
        heard = len(bulb.commands)
        reply = await directives.control(TASMOTA_MAC, "Brightness.Set", {"value": LIGHT_BRIGHTNESS_PERCENT})
        shown = ", ".join(f"{k}={v}" for k, v in reply.states.items()) or reply.error_message
        say(f"platform ▶ Brightness.Set {LIGHT_BRIGHTNESS_PERCENT} to {TASMOTA_MAC}: {reply.name} {shown}")
        for command in bulb.commands[heard:]:
            say(f"tasmota ▶ {TASMOTA_BULB} obeyed {command.payload.decode()} on {command.topic}: "
                f"power {bulb.state['POWER']}, dimmer {bulb.state['Dimmer']}")
    except (TimeoutError, RuntimeError, ValueError, aiohttp.ClientError) as err:  # a show: the demo goes on
        say(f"tasmota ▶ the demo script stopped: {err!r}")
    finally:
        await directives.close()


async def _dim(directives: Any, endpoint_id: str, name: str, received: list[Any], state: dict[str, Any]) -> None:
    """Brightness.Set from the platform, its Response, and the command the zigbee2mqtt bulb got (`received`)."""
    heard = len(received)
    reply = await directives.control(endpoint_id, "Brightness.Set", {"value": LIGHT_BRIGHTNESS_PERCENT})
    shown = ", ".join(f"{k}={v}" for k, v in reply.states.items()) or reply.error_message
    say(f"platform ▶ Brightness.Set {LIGHT_BRIGHTNESS_PERCENT} to {endpoint_id}: {reply.name} {shown}")
    if len(received) > heard:
        command = received[heard]
        say(f"zigbee2mqtt ▶ {name} obeyed {command.payload.decode()} on {command.topic}: "
            f"state {state['state']}, brightness {state['brightness']}/254")


async def owner_script(sim: Any, hub_url: str, admin_token: str) -> None:
    """Once the platform knows the demo light: the owner renames it through the devices page's API, once."""
    try:
        if not await _platform_knows(sim, {RENAMED}, "owner", "nothing renamed"):
            return
        async with aiohttp.ClientSession() as session, session.patch(
                f"{hub_url}/api/devices/{RENAMED}", json={"name": RENAMED_TO},
                headers={"Authorization": f"Bearer {admin_token}"}) as response:
            body = await response.json()
        if response.status != 200:
            say(f"owner ▶ renaming {RENAMED} failed: HTTP {response.status} {str(body.get('error'))[:200]}")
            return
        own = body.get("described", {}).get("displayName")
        say(f"owner ▶ renamed {RENAMED} ({own}) to {RENAMED_TO!r} with PATCH /api/devices/{RENAMED} and an admin "
            f"token, as the devices page does: the platform gets an AddOrUpdateReport")
    except (aiohttp.ClientError, ValueError) as err:  # a show: the demo goes on
        say(f"owner ▶ the demo script stopped: {err!r}")


async def _platform_knows(sim: Any, wanted: set[str], who: str, hint: str) -> bool:
    """Wait until the platform got an AddOrUpdateReport for each of `wanted`; else say which not, and `hint`."""
    try:
        await sim.wait_until(lambda: wanted <= _added(sim), timeout_s=DISCOVERY_IMPORT_TIMEOUT_S)
    except TimeoutError:
        say(f"{who} ▶ the platform got no AddOrUpdateReport for {', '.join(sorted(wanted - _added(sim)))} in "
            f"{DISCOVERY_IMPORT_TIMEOUT_S:.0f} s; {hint}")
        return False
    return True


def _declared(device: str) -> str:
    """What a click of a declared doorbell button is, and its entry in the config's `doorbells`."""
    return f"a doorbell, declared in doorbells as {{device: {device!r}, event: {DOORBELL_BUTTON_ACTION!r}}}"


def _added(sim: Any) -> set[str]:
    """The endpointIds the platform got an AddOrUpdateReport for."""
    return {e for r in sim.events if r.name == "AddOrUpdateReport" for e in r.endpoint_ids}


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')}  {text}", flush=True)
