"""Issue 35, end to end through a real mosquitto, a real hubd process and the platform simulator: a PIR on a Tasmota
switch input (SetOption114, SwitchText `Motion`) is a motion sensor split off its relay whose motion reaches the
platform as a ChangeReport, a push-on PIR (SwitchMode 13) reports its moment of motion On then Off; and a
zigbee2mqtt scene announced alone (tests/fixtures/homeassistant/z2m_scene_7146060PH) is its own endpoint named by
the scene, which keeps its endpoint when its bulb's light comes. The rig and the waiting helpers are tests/rig.py's.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rig import Rig, announced, changes, send, settle, wait_change, wait_devices

MakeRig = Callable[..., Awaitable[Rig]]
FIXTURES = Path(__file__).parent / "fixtures"
MAC = "A4CF12C0FFEE"


def fixture(path: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / path).read_text(encoding="utf-8"))
    return data


def tasmota_with_inputs() -> dict[str, Any]:
    """Home Assistant's tests' Sonoff Basic (tests/fixtures/tasmota/ha_binary_sensor_49A3BC) with one relay, a PIR
    in SwitchMode 1 named by `SwitchText1 Motion` and a PIR in SwitchMode 13 (push-on), SetOption114 on."""
    message = fixture("tasmota/ha_binary_sensor_49A3BC.json")["messages"][0]
    config: dict[str, Any] = json.loads(message["payload"])
    config.update(mac=MAC, t="hallway", hn="tasmota-C0FFEE-0001", ft="%prefix%/%topic%/", dn="Hallway",
                  rl=[1, 0, 0, 0, 0, 0, 0, 0], swc=[1, 13, -1, -1, -1, -1, -1, -1],
                  swn=["Motion", None, None, None, None], so={**config["so"], "114": 1})
    return config


async def test_a_tasmota_pir_on_a_switch_input_reports_motion_as_a_change_report(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"tasmota": {"enabled": True}})
    send(rig, f"tasmota/discovery/{MAC}/config", tasmota_with_inputs(), retain=True)
    send(rig, "tele/hallway/LWT", "Online", retain=True)
    pir, push_on = f"{MAC}-switch1", f"{MAC}-switch2"
    await wait_devices(rig, MAC, pir, push_on, check=lambda d: d["online"] is True)
    await rig.bind()
    shown = await announced(rig, MAC, pir, push_on)
    assert (shown[pir]["displayName"], shown[pir]["displayType"]) == ("Hallway Motion", "unknown")
    assert [(c["interface"], c.get("supportedOperations", [])) for c in shown[pir]["capabilities"]] == \
        [("Switch", [])]

    send(rig, "stat/hallway/RESULT", {"Motion": {"Action": "ON"}})
    await wait_change(rig, pir, "Switch", "On")
    send(rig, "tele/hallway/SENSOR", {"Time": "2021-01-01T00:00:01", "Motion": "OFF", "Switch2": "OFF"})
    await wait_change(rig, pir, "Switch", "Off")

    send(rig, "stat/hallway/RESULT", {"Switch2": {"Action": "ON"}})
    await wait_change(rig, push_on, "Switch", "Off")
    assert [c.get("Switch") for c in changes(rig, push_on)] == ["On", "Off"]
    assert not changes(rig, MAC)  # the relay heard nothing of its inputs


async def test_a_zigbee2mqtt_scene_announced_alone_is_its_own_endpoint_named_by_the_scene(make_rig: MakeRig) -> None:
    scene = fixture("homeassistant/z2m_scene_7146060PH.json")["configs"][0]
    light = copy.deepcopy(fixture("homeassistant/z2m_light_LED1545G12.json")["configs"][0]["payload"])
    light.update(device=scene["payload"]["device"], command_topic="zigbee2mqtt/bulb_color_2/set",
                 state_topic="zigbee2mqtt/bulb_color_2", object_id="bulb_color_2",
                 unique_id="0x000b57fffec6a5b4_light_zigbee2mqtt")
    scene_id, bulb_id = "zigbee2mqtt_0x000b57fffec6a5b4-scene_1", "zigbee2mqtt_0x000b57fffec6a5b4"
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    await rig.bind()
    send(rig, scene["topic"], scene["payload"], retain=True)
    await wait_devices(rig, scene_id)
    shown = await announced(rig, scene_id)
    assert (shown[scene_id]["displayName"], shown[scene_id]["displayType"]) == ("Chill scene", "scene")
    assert bulb_id not in shown

    send(rig, "homeassistant/light/0x000b57fffec6a5b4/light/config", light, retain=True)
    await wait_devices(rig, scene_id, bulb_id)
    await settle(rig)
    assert not rig.events("DeleteReport", endpoint=scene_id)
    latest = await announced(rig, scene_id, bulb_id)
    assert (latest[scene_id]["displayName"], latest[bulb_id]["displayType"]) == ("Chill scene", "light")
