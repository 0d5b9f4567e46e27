"""Issue 33 items 1 and 2 as the platform sees them: a real mosquitto, the platform simulator and a real hubd
process, fed the real payloads of tests/fixtures (each with its source). The device's own endpoint carries its
primary function (an ESPHome garage board's door, never its status LED); a multi-relay Tasmota's relay 1 is called
by its own friendly name; a device named after its model says so in /api/devices. The rig is tests/rig.py's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import tasmota_helpers as tasmota
from homeassistant_helpers import fixture
from rig import Rig, announced, send, wait_devices

from simulators.platform_directives import DirectiveClient

MakeRig = Callable[..., Awaitable[Rig]]
GARAGE = "20500de464ec"  # tests/fixtures/homeassistant/esphome_garagedoor1_sht3x.json (ESPHome, captured)
LED = f"{GARAGE}-garage_esp_status_led"
RTL = "ID51778"  # tests/fixtures/homeassistant/rtl_433_P40_ID51778.json (rtl_433_mqtt_hass.py)


def send_fixture(rig: Rig, name: str) -> None:
    """A Home Assistant fixture's discovery configs and states, retained as their producers publish them."""
    data = fixture(name)
    for item in data["configs"] + data["states"]:
        send(rig, item["topic"], item["payload"], retain=True)


def _interfaces(endpoint: dict[str, Any]) -> dict[str, list[str]]:
    return {c["interface"]: c.get("supportedOperations", []) for c in endpoint["capabilities"]}


async def test_an_esphome_garage_boards_endpoint_is_its_door_and_its_status_led_is_split_off(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    send_fixture(rig, "esphome_garagedoor1_sht3x")
    send_fixture(rig, "rtl_433_P40_ID51778")
    shown = await wait_devices(rig, GARAGE, LED, RTL)
    bound = await rig.bind()

    endpoints = await announced(rig, GARAGE, LED, RTL)
    board, led = endpoints[GARAGE], endpoints[LED]
    assert (board["displayName"], board["displayType"]) == ("GarageDoor One", "unknown")
    assert _interfaces(board) == {"Switch": [], "Temperature": [], "Humidity": []}  # the door and its readings
    assert (led["displayName"], led["displayType"]) == ("GarageDoor One Garage ESP Status LED", "light")
    assert _interfaces(led)["Switch"] == ["On", "Off"]
    async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
        refused = await client.control(GARAGE, "Switch.Off")  # "turn off GarageDoor One" never switches the LED
    assert refused.error == "E_NOT_SUPPORTED_DIRECTIVE", refused

    # An rtl_433 sensor: "Thermometer", not "rtl Four Hundred Thirty Three", and /api/devices says why.
    assert endpoints[RTL]["displayName"] == "Thermometer"
    assert "named after its model" in shown[RTL]["naming"]
    assert "naming" not in shown[GARAGE]  # its own name, as its owner gave it


async def test_a_multi_relay_tasmotas_first_relay_is_called_by_its_own_friendly_name(make_rig: MakeRig) -> None:
    """Home Assistant's Tasmota test config (tests/fixtures/tasmota/ha_default_config_49A3BC.json) with two relays
    named as an owner names them: `dn` the board, `fn` each relay."""
    rig = await make_rig(hub_overrides={"tasmota": {"enabled": True}})
    config = tasmota.basic_config(dn="Kitchen Board", fn=["Kitchen", "Hall", None, None, None],
                                  rl=[1, 1, 0, 0, 0, 0, 0, 0])
    send(rig, f"{tasmota.PREFIX}/{tasmota.BASIC}/config", config, retain=True)
    relay2 = f"{tasmota.BASIC}-relay2"
    await wait_devices(rig, tasmota.BASIC, relay2)
    await rig.bind()

    endpoints = await announced(rig, tasmota.BASIC, relay2)
    assert {e["displayName"]: i for i, e in endpoints.items() if i in (tasmota.BASIC, relay2)} == \
        {"Kitchen": tasmota.BASIC, "Hall": relay2}  # "turn off the kitchen" finds relay 1
