"""The one rule of where a device command may go (hubd/dialects/topics.py), pure: the dialects as `build_dialects`
binds them, configs in, refusals (problems, not exported) and the command port's publish-time check out.

The same findings end to end, through mosquitto and a real hubd: tests/chaos/test_topic_abuse.py.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from tasmota_helpers import NOW, PREFIX, basic_config, configs, rejected
from zigbee2mqtt_helpers import announce, entries

from hubd.config.model import HubdConfig
from hubd.dialects.base import CommandRefused, ControlRequest, DeviceInput, Dialect, Outgoing, topic_matches
from hubd.dialects.commands import DeviceCommands
from hubd.dialects.enabled import build_dialects, publish_rules
from hubd.dialects.homeassistant.dialect import HomeAssistantDialect
from hubd.dialects.tasmota.dialect import TasmotaDialect
from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect

ON = ControlRequest("c1", "Switch", "On", "On", None, {})
PLUG, TWIN = "A4CF12000001", "A4CF12000002"


def hub(**sections: Any) -> tuple[list[Dialect], DeviceCommands]:
    """The dialects of a config with these sections enabled, and the command port over them (as hubd.app builds
    them), with a publisher that must never be asked."""
    class Never:
        connected = True

        async def publish(self, message: Outgoing, *, timeout_s: float | None = None) -> None:
            raise AssertionError("nothing is sent in this test")

    config = HubdConfig.model_validate({name: {"enabled": True, **extra} for name, extra in sections.items()})
    dialects = build_dialects(config)
    return dialects, DeviceCommands(dialects, Never(), publish_rules(config))


def of(dialects: list[Dialect], kind: type[Dialect]) -> Any:
    return next(d for d in dialects if isinstance(d, kind))


def relay(mac: str, topic: str, **changes: Any) -> dict[str, Any]:
    """A one-relay Tasmota's native discovery config with FullTopic %prefix%/%topic%/."""
    return basic_config(**{"mac": mac, "t": topic, "ft": "%prefix%/%topic%/", "dn": f"Plug {topic}",
                           "hn": f"host-{topic}", "rl": [1, 0, 0, 0, 0, 0, 0, 0], **changes})


def send(dialect: Dialect, topic: str, payload: Any) -> list[DeviceInput]:
    raw = payload if isinstance(payload, str) else json.dumps(payload)
    assert dialect.claims(topic), topic
    return dialect.decode(topic, raw.encode(), NOW, True)


def light(object_id: str, command_topic: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return f"homeassistant/light/{object_id}/config", {"name": object_id, "uniq_id": object_id,
                                                       "cmd_t": command_topic, "dev": {"ids": [object_id]}, **extra}


def test_topic_filters_match_as_mqtt_says() -> None:
    assert topic_matches("a/+/c", "a/b/c") and not topic_matches("a/+/c", "a/b/c/d")
    assert topic_matches("a/#", "a") and topic_matches("a/#", "a/b/c") and not topic_matches("a/#", "b/a")
    assert topic_matches("+/+/BTtoMQTT/AA", "home/gw/BTtoMQTT/AA") and not topic_matches("a/b", "a/b/c")


def test_a_light_on_another_devices_state_topic_is_refused_when_its_config_comes() -> None:
    dialects, _ = hub(homeassistant={})
    discovery = of(dialects, HomeAssistantDialect)
    send(discovery, "homeassistant/lock/door/config", {"name": "Door", "uniq_id": "door", "cmd_t": "locks/door/set",
                                                       "stat_t": "locks/door/state", "dev": {"ids": ["door"]}})
    topic, config = light("spoof", "locks/door/state", pl_on="LOCKED")
    [reason] = rejected(send(discovery, topic, config))
    assert "'locks/door/state' is where lock.door of door is read from" in reason
    assert "spoof" in configs(send(discovery, *light("spoof", "lights/spoof/set")))  # on its own topic: imported


def test_a_topic_read_after_the_light_was_accepted_refuses_its_publish_reads_win() -> None:
    dialects, commands = hub(homeassistant={})
    discovery = of(dialects, HomeAssistantDialect)
    [early] = configs(send(discovery, *light("early", "sensors/hall/state"))).values()
    send(discovery, "homeassistant/sensor/hall/config", {"name": "Hall", "uniq_id": "hall", "dev_cla": "temperature",
                                                         "unit_of_meas": "°C", "stat_t": "sensors/hall/state",
                                                         "dev": {"ids": ["hall"]}})
    with pytest.raises(CommandRefused, match=r"'sensors/hall/state' is where sensor\.hall of hall is read from"):
        commands.encode_control(early.device_id, early.route, ON)


def test_tasmota_stat_tele_and_group_topics_take_no_command_in_either_full_topic_order() -> None:
    dialects, _ = hub(homeassistant={}, tasmota={})
    discovery, tasmota = of(dialects, HomeAssistantDialect), of(dialects, TasmotaDialect)
    send(tasmota, f"{PREFIX}/{PLUG}/config", relay(PLUG, "plug"))
    send(tasmota, f"{PREFIX}/{TWIN}/config", relay(TWIN, "attic", ft="%topic%/%prefix%/", gt="upstairs"))
    expected = {"stat/plug/POWER": "where Tasmota device Plug plug (A4CF12000001) reports",
                "tele/plug/STATE": "where Tasmota device Plug plug (A4CF12000001) reports",
                "cmnd/tasmotas/POWER": "the group topic 'tasmotas'",
                "tasmotas/cmnd/POWER": "the group topic 'tasmotas'",
                "upstairs/cmnd/POWER": "the group topic of Tasmota device Plug attic (A4CF12000002)"}
    for number, (target, why) in enumerate(expected.items()):
        [reason] = rejected(send(discovery, *light(f"evil{number}", target)))
        assert why in reason, (target, reason)
    for dialect in dialects:
        assert dialect.guards("cmnd/plug/POWER1") is None  # the plug's own command topic is its own


def test_a_second_tasmota_with_the_same_topic_is_refused_and_gets_it_once_the_first_is_gone() -> None:
    dialects, commands = hub(tasmota={})
    tasmota = of(dialects, TasmotaDialect)
    [first] = configs(send(tasmota, f"{PREFIX}/{PLUG}/config", relay(PLUG, "plug"))).values()
    second = send(tasmota, f"{PREFIX}/{TWIN}/config", relay(TWIN, "plug", dn="Twin"))
    assert configs(second) == {}
    [reason] = rejected(second)
    assert "cmnd/plug/... (t 'plug') is already Tasmota device Plug plug (A4CF12000001)'s" in reason
    assert "one command topic, one owner" in reason
    [left_out] = tasmota.unexported_devices()
    assert left_out.endpoint_id == TWIN and "one command topic, one owner" in left_out.reasons[0]
    [message] = commands.encode_control(first.device_id, first.route, ON)
    assert message.topic == "cmnd/plug/POWER1"  # the holder keeps it

    handed = send(tasmota, f"{PREFIX}/{PLUG}/config", "")  # the first removed: the second takes its topic
    assert PLUG not in configs(handed) and TWIN in configs(handed)
    assert tasmota.unexported_devices() == []


@pytest.mark.parametrize("zigbee2mqtt", [True, False])
def test_a_tasmota_command_prefix_under_zigbee2mqtt_or_hubds_tree_is_refused(zigbee2mqtt: bool) -> None:
    dialects, _ = hub(tasmota={}, **({"zigbee2mqtt": {}} if zigbee2mqtt else {}))
    tasmota = of(dialects, TasmotaDialect)
    for mac, prefix, why in ((PLUG, "zigbee2mqtt", "under zigbee2mqtt/"), (TWIN, "hubd", "under hubd's own topics"),
                             ("A4CF12000003", "homeassistant", "under homeassistant/")):
        [reason] = rejected(send(tasmota, f"{PREFIX}/{mac}/config", relay(mac, "plug", tp=[prefix, "stat", "tele"])))
        assert why in reason, reason
    assert [u.endpoint_id for u in tasmota.unexported_devices()] == [PLUG, TWIN, "A4CF12000003"]


def test_a_refused_publish_is_logged_once_a_minute_per_topic_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    dialects, commands = hub(homeassistant={})
    discovery = of(dialects, HomeAssistantDialect)
    [early] = configs(send(discovery, *light("early", "sensors/hall/state"))).values()
    send(discovery, "homeassistant/sensor/hall/config", {"name": "Hall", "uniq_id": "hall", "dev_cla": "temperature",
                                                         "unit_of_meas": "°C", "stat_t": "sensors/hall/state",
                                                         "dev": {"ids": ["hall"]}})
    with caplog.at_level(logging.WARNING, logger="hubd.dialects.commands"):
        for _ in range(3):
            with pytest.raises(CommandRefused):
                commands.encode_control(early.device_id, early.route, ON)
    lines = [r.getMessage() for r in caplog.records if "refused a command on sensors/hall/state" in r.getMessage()]
    assert len(lines) == 1 and "hubd publishes only to a device's own command topics" in lines[0]



def test_a_zigbee2mqtt_devices_own_set_passes_while_its_state_topic_is_guarded() -> None:
    dialects, commands = hub(zigbee2mqtt={}, homeassistant={})
    zigbee, discovery = of(dialects, Zigbee2MqttDialect), of(dialects, HomeAssistantDialect)
    listed = entries("ikea_LED1545G12_bulb")
    [bulb] = configs(announce(zigbee, listed)).values()
    name = next(e["friendly_name"] for e in listed if e.get("ieee_address") == bulb.device_id)
    [message] = commands.encode_control(bulb.device_id, bulb.route, ON)
    assert message.topic == f"zigbee2mqtt/{name}/set"  # its own command topic, under the tree it subscribes to
    for target, why in ((f"zigbee2mqtt/{name}", f"where zigbee2mqtt device {name!r} reports"),
                        (f"zigbee2mqtt/{name}/availability", f"where zigbee2mqtt device {name!r} reports"),
                        (f"zigbee2mqtt/{name}/set", "a topic of the devices hubd imports natively (zigbee2mqtt)")):
        [reason] = rejected(send(discovery, *light("spoof", target)))
        assert why in reason, reason
