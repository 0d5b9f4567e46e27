"""A scene is its own endpoint, named by the scene (CONTRACT section 6): zigbee2mqtt's scene of a bulb
(tests/fixtures/homeassistant/z2m_scene_7146060PH, with its source) is `<device id>-<object_id>` and "Chill scene"
whether it comes alone, before the bulb's light or after it, and after a restart. Pure: no broker."""

from __future__ import annotations

import copy
from typing import Any

from homeassistant_helpers import NOW, configs, fixture, make, raw, request

from hubd.dialects.base import ConfigReceived, DeviceGone, DeviceInput
from hubd.dialects.homeassistant.dialect import HomeAssistantDialect

SCENE = "zigbee2mqtt_0x000b57fffec6a5b4-scene_1"
BULB = "zigbee2mqtt_0x000b57fffec6a5b4"


def scene_config() -> tuple[str, dict[str, Any]]:
    config = fixture("z2m_scene_7146060PH")["configs"][0]
    return config["topic"], config["payload"]


def light_config() -> tuple[str, dict[str, Any]]:
    """The Hue Go's own light config, in the shape zigbee2mqtt announces a bulb (z2m_light_LED1545G12), under the
    scene's device block."""
    payload = copy.deepcopy(fixture("z2m_light_LED1545G12")["configs"][0]["payload"])
    payload.update(device=scene_config()[1]["device"], command_topic="zigbee2mqtt/bulb_color_2/set",
                   state_topic="zigbee2mqtt/bulb_color_2", object_id="bulb_color_2",
                   unique_id="0x000b57fffec6a5b4_light_zigbee2mqtt")
    return "homeassistant/light/0x000b57fffec6a5b4/light/config", payload


def arrive(dialect: HomeAssistantDialect, *messages: tuple[str, dict[str, Any]]) -> list[DeviceInput]:
    out: list[DeviceInput] = []
    for topic, payload in messages:
        out += dialect.decode(topic, raw(payload), NOW, True)
    return out


def named(inputs: list[DeviceInput]) -> dict[str, tuple[str, str]]:
    return {i.device_id: (i.config.displayName, i.config.displayType) for i in inputs if isinstance(i, ConfigReceived)}


def test_a_scene_announced_alone_is_its_own_endpoint_named_by_the_scene() -> None:
    found = configs(arrive(make(), scene_config()))

    assert list(found) == [SCENE]
    scene = found[SCENE].config
    assert (scene.displayName, scene.displayType) == ("Chill scene", "scene")
    assert [(c.interface, c.supportedOperations) for c in scene.capabilities] == [("Switch", ("On",))]


def test_a_scene_keeps_its_endpoint_and_name_whether_the_bulb_came_before_or_after_it() -> None:
    scene_first = make()
    early = arrive(scene_first, scene_config(), light_config())
    light_first = make()
    late = arrive(light_first, light_config(), scene_config())

    assert not [i for i in early if isinstance(i, DeviceGone)]  # the scene never moved
    assert named(early)[SCENE] == named(late)[SCENE] == ("Chill scene", "scene")
    assert named(early)[BULB] == named(late)[BULB] == ("bulb_color_2", "light")  # spelled by conformance
    assert configs(early)[SCENE].route == configs(late)[SCENE].route


def test_a_restored_scene_recalls_itself_on_its_bulbs_command_topic() -> None:
    routes = [(i.device_id, i.route) for i in configs(arrive(make(), light_config(), scene_config())).values()]
    again = make()
    again.restore(routes)

    back = arrive(again, scene_config(), light_config())  # the scene's config back first, after a restart
    assert not [i for i in back if isinstance(i, DeviceGone)]
    assert set(named(back).values()) <= {("Chill scene", "scene"), ("bulb_color_2", "light")}
    sent = again.encode_control(SCENE, dict(routes)[SCENE], request("Switch", "On", "On"))
    assert [(o.topic, o.payload.decode()) for o in sent] == [("zigbee2mqtt/bulb_color_2/set", '{ "scene_recall": 1 }')]
