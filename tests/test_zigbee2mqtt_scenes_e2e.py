"""zigbee2mqtt's scenes with both imports on, end to end: a real mosquitto, the platform simulator and a real hubd
process (`zigbee2mqtt` and `homeassistant` enabled), fed zigbee2mqtt's retained `bridge/devices` and `bridge/groups`
(tests/fixtures/zigbee2mqtt/z2m_group_scenes) and its own discovery config of the same scene
(tests/fixtures/homeassistant/z2m_scene_7146060PH). Each scene reaches the platform once, from the native import,
and turning it on publishes `{"scene_recall": <id>}` on the device's or group's `/set`. The rig and the waiting
helpers are tests/rig.py's; the watcher is tests/test_zigbee2mqtt_e2e.py's.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from homeassistant_helpers import fixture as ha_fixture
from rig import Rig, announced, devices, send, settle, wait_devices
from test_zigbee2mqtt_e2e import next_message, watching
from zigbee2mqtt_helpers import entries, fixture

from simulators.platform_directives import DirectiveClient

MakeRig = Callable[..., Awaitable[Rig]]

HUE_GO = "0x000b57fffec6a5b4"
CHILL = f"{HUE_GO}-scene_1"  # bulb_color_2's "Chill scene"
GROUP_SCENE = "zigbee2mqtt-group-9-scene_4"  # ha_discovery_group's "Scene 4"
DISCOVERED = f"zigbee2mqtt_{CHILL}"  # the endpoint discovery alone would give the same scene


async def test_with_both_imports_a_zigbee2mqtt_scene_appears_once_and_turning_it_on_recalls_it(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}, "homeassistant": {"enabled": True}})
    send(rig, "zigbee2mqtt/bridge/state", {"state": "online"}, retain=True)
    send(rig, "zigbee2mqtt/bridge/devices", entries("z2m_group_scenes"), retain=True)
    send(rig, "zigbee2mqtt/bridge/groups", fixture("z2m_group_scenes")["groups"], retain=True)
    for config in ha_fixture("z2m_scene_7146060PH")["configs"]:  # zigbee2mqtt's own discovery of the scene
        send(rig, config["topic"], config["payload"], retain=True)
    await wait_devices(rig, CHILL, GROUP_SCENE, check=lambda d: d["online"] is True)
    bound = await rig.bind()
    shown = await announced(rig, HUE_GO, CHILL, GROUP_SCENE)
    await settle(rig)

    assert (shown[CHILL]["displayName"], shown[CHILL]["displayType"]) == ("Chill scene", "scene")
    assert (shown[GROUP_SCENE]["displayName"], shown[GROUP_SCENE]["displayType"]) == ("Scene Four", "scene")
    assert [(c["interface"], c["supportedOperations"]) for c in shown[CHILL]["capabilities"]] == [("Switch", ["On"])]
    found = await devices(rig)
    assert found[CHILL]["source"] == "zigbee2mqtt" and DISCOVERED not in found
    assert not rig.events(endpoint=DISCOVERED)
    _, body = await rig.hub.get("/api/devices")
    assert body["unexported"] == []  # discovery's scene is left to the native import, not left out

    async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
        async with watching(rig.broker, "zigbee2mqtt/bulb_color_2/set") as watcher:
            reply = await client.control(CHILL, "Switch.On")
            assert reply.error is None
            assert json.loads((await next_message(watcher)).payload) == {"scene_recall": 1}
        async with watching(rig.broker, "zigbee2mqtt/ha_discovery_group/set") as watcher:
            reply = await client.control(GROUP_SCENE, "Switch.On")
            assert reply.error is None
            assert json.loads((await next_message(watcher)).payload) == {"scene_recall": 4}
    assert not rig.sim.rejections
