"""zigbee2mqtt's scenes imported natively (hubd/dialects/zigbee2mqtt/scenes.py), pure: a device's scenes from its
`bridge/devices` endpoints and a group's from `bridge/groups` (tests/fixtures/zigbee2mqtt/z2m_group_scenes, with its
sources) are each their own endpoint, named by the scene, shown as discovery shows zigbee2mqtt's own scene config
(tests/fixtures/homeassistant/z2m_scene_7146060PH), and recalled with `{"scene_recall": <id>}` on the device's or
group's `/set` through the one publish rule."""

from __future__ import annotations

import copy
import json
from typing import Any

import homeassistant_helpers as ha
import pytest
from zigbee2mqtt_helpers import (
    announce,
    configs,
    control,
    entries,
    fixture,
    gone,
    make,
    operations,
    publish,
    request,
)

from hubd.config.model import HubdConfig
from hubd.devices.model import Route
from hubd.dialects.base import CommandRefused, ConfigReceived, DeviceInput, Dialect, Outgoing
from hubd.dialects.commands import DeviceCommands
from hubd.dialects.enabled import build_dialects, publish_rules
from hubd.dialects.homeassistant.dialect import HomeAssistantDialect
from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect

FIXTURE = "z2m_group_scenes"
HUE_GO = "0x000b57fffec6a5b4"  # bulb_color_2, its endpoint's scene 1 "Chill scene"
CHILL = f"{HUE_GO}-scene_1"
GROUP = "zigbee2mqtt-group-9"  # ha_discovery_group, its scene 4 "Scene 4"
GROUP_SCENE = f"{GROUP}-scene_4"


def both(dialect: Zigbee2MqttDialect | None = None, devices: Any = None, groups: Any = None) -> list[DeviceInput]:
    """The fixture's bridge/devices then bridge/groups (retained, as at start)."""
    dialect = dialect if dialect is not None else make()
    data = fixture(FIXTURE)
    return announce(dialect, devices if devices is not None else entries(FIXTURE)) + \
        publish(dialect, "bridge/groups", groups if groups is not None else data["groups"], retained=True)


def shown(item: ConfigReceived) -> tuple[str, str, list[tuple[str, tuple[str, ...], bool, bool]]]:
    config = item.config
    return config.displayName, config.displayType, [(c.interface, c.supportedOperations, c.proactivelyReported,
                                                     c.retrievable) for c in config.capabilities]


def test_a_device_scene_is_its_own_endpoint_named_by_the_scene_as_discovery_shows_it() -> None:
    found = configs(both())
    discovered = ha.configs(ha.announce(ha.make(), "z2m_scene_7146060PH"))

    assert sorted(found) == [HUE_GO, CHILL, GROUP, GROUP_SCENE]
    assert shown(found[CHILL]) == ("Chill scene", "scene", [("Switch", ("On",), False, False)])
    # Discovery's endpoint of the same scene: `<device id>-scene_1`, where discovery's device id is
    # `zigbee2mqtt_<ieee>` and the native import's is the ieee (CONTRACT 6); the same type and capabilities.
    assert list(discovered) == [f"zigbee2mqtt_{CHILL}"]
    assert shown(discovered[f"zigbee2mqtt_{CHILL}"]) == shown(found[CHILL])
    assert found[HUE_GO].config.displayType == "light"  # the bulb keeps its own endpoint


def test_a_group_scene_is_its_own_endpoint_beside_the_group() -> None:
    found = configs(both())

    assert shown(found[GROUP_SCENE]) == ("Scene 4", "scene", [("Switch", ("On",), False, False)])
    assert found[GROUP].config.displayType == "light"


def test_turning_a_scene_on_recalls_it_on_its_device_or_group_set_topic() -> None:
    dialect = make()
    found = configs(both(dialect))

    assert control(dialect, found[CHILL], "Switch", "On", "On") == [("zigbee2mqtt/bulb_color_2/set",
                                                                     {"scene_recall": 1})]
    assert control(dialect, found[GROUP_SCENE], "Switch", "On", "On") == [("zigbee2mqtt/ha_discovery_group/set",
                                                                          {"scene_recall": 4})]
    with pytest.raises(CommandRefused, match="only be turned on"):
        control(dialect, found[CHILL], "Switch", "Off", "Off")


def test_a_scene_recall_passes_the_one_publish_rule_with_both_imports_on() -> None:
    class Never:
        connected = True

        async def publish(self, message: Outgoing, *, timeout_s: float | None = None) -> None:
            raise AssertionError("nothing is sent in this test")

    config = HubdConfig.model_validate({"zigbee2mqtt": {"enabled": True}, "homeassistant": {"enabled": True}})
    dialects: list[Dialect] = build_dialects(config)
    port = DeviceCommands(dialects, Never(), publish_rules(config))
    native = next(d for d in dialects if isinstance(d, Zigbee2MqttDialect))
    found = configs(both(native))

    sent = port.encode_control(CHILL, found[CHILL].route, request("Switch", "On", "On"))
    assert [(o.topic, json.loads(o.payload)) for o in sent] == [("zigbee2mqtt/bulb_color_2/set", {"scene_recall": 1})]
    # Discovery leaves zigbee2mqtt's own scene config to the native import: no second endpoint.
    discovery = next(d for d in dialects if isinstance(d, HomeAssistantDialect))
    assert ha.configs(ha.announce(discovery, "z2m_scene_7146060PH")) == {}


def test_a_renamed_device_scene_keeps_its_endpoint_and_follows_the_new_name() -> None:
    dialect = make()
    before = configs(both(dialect))
    renamed = entries(FIXTURE)
    renamed[0]["friendly_name"] = "Sofa Lamp"
    after = announce(dialect, renamed)

    assert not gone(after)
    assert control(dialect, before[CHILL], "Switch", "On", "On") == [("zigbee2mqtt/Sofa Lamp/set",
                                                                      {"scene_recall": 1})]


def test_a_restored_scene_recalls_before_the_device_list_comes_again() -> None:
    routes = [(device_id, item.route) for device_id, item in configs(both()).items()]
    again = make()
    again.restore(routes)

    sent = again.encode_control(GROUP_SCENE, dict(routes)[GROUP_SCENE], request("Switch", "On", "On"))
    assert [(o.topic, o.payload) for o in sent] == [("zigbee2mqtt/ha_discovery_group/set", b'{"scene_recall":4}')]


def test_scenes_of_excluded_devices_and_groups_are_excluded_too() -> None:
    found = configs(both(make(exclude=["bulb_color_2"])))
    assert not {CHILL, GROUP_SCENE} & set(found)  # the group's only imported member is left out: the group too

    found = configs(both(make(exclude=["ha_discovery_group"])))
    assert sorted(found) == [HUE_GO, CHILL]


def test_a_scene_removed_from_zigbee2mqtt_is_gone_and_the_rest_stays() -> None:
    dialect = make()
    both(dialect)
    without = entries(FIXTURE)
    for endpoint in without[0]["endpoints"].values():
        endpoint["scenes"] = []
    groups = copy.deepcopy(fixture(FIXTURE)["groups"])
    groups[0]["scenes"] = []

    assert gone(announce(dialect, without)) == [CHILL]
    assert gone(publish(dialect, "bridge/groups", groups, retained=True)) == [GROUP_SCENE]


def test_malformed_and_repeated_scenes_are_skipped_and_one_id_is_one_endpoint() -> None:
    devices = entries(FIXTURE)
    endpoints = devices[0]["endpoints"]
    first = next(iter(endpoints.values()))
    first["scenes"] += [{"id": "2", "name": "text id"}, {"id": True, "name": "bool"}, {"name": "no id"}, 7,
                        {"id": 1, "name": "Chill scene again"}, {"id": 3}]
    endpoints["99"] = {"scenes": [{"id": 1, "name": "another endpoint's 1"}, {"id": 5, "name": "Movie night"}]}
    found = configs(announce(make(), devices))

    scenes = {k: v.config.displayName for k, v in found.items() if k.startswith(f"{HUE_GO}-scene_")}
    # A scene without a name is named after its device (as a split-off part); conformance spells the digits.
    assert scenes == {CHILL: "Chill scene", f"{HUE_GO}-scene_3": "bulb_color_2 Scene 3",
                      f"{HUE_GO}-scene_5": "Movie night"}
    assert operations(found[f"{HUE_GO}-scene_5"]) == {"Switch": ("On",)}


def test_a_scene_route_reads_no_state() -> None:
    dialect = make()
    found = configs(both(dialect))
    states = publish(dialect, "bulb_color_2", {"state": "ON", "brightness": 254, "scene_recall": 1})

    assert {getattr(i, "device_id", None) for i in states} == {HUE_GO}
    assert isinstance(found[CHILL].route, Route) and json.loads(found[CHILL].route.address)["ieee"] == HUE_GO
