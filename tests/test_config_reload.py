"""SIGHUP (`systemctl reload hubd`) end to end: a real mosquitto, the platform simulator and a real hubd whose config
file is rewritten and re-read. include/exclude (of every dialect in the table), doorbells and the log level take
effect without a new MQTT connection; a file that does not check changes nothing; keys that need a restart are named.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from homeassistant_helpers import fixture
from hubd_proc import HubdProcess
from owner_helpers import request
from rig import Rig, announced, send, settle, wait_devices
from shelly_helpers import messages as shelly_messages
from tasmota_helpers import ATOM, messages
from zigbee2mqtt_helpers import entries

from hubd.dialects.enabled import KINDS, DialectKind

MakeRig = Callable[..., Awaitable[Rig]]
CONTACT = "0x00158d00091e7bd6"  # aqara_MCCGQ11LM_contact: "Contact sensor"
BULB = "0x000b57fffec6a5b2"  # ikea_LED1545G12_bulb: "bulb"
BUTTON = "0x0017880104e45520"  # aqara_WXKG11LM_button: "button"


async def reload(hub: HubdProcess, config: dict[str, Any] | str) -> str:
    """Write the config file, send SIGHUP, and return the log lines of that reload once it is over."""
    before = hub.log().count("SIGHUP: reading")
    hub.config_path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    hub.signal(signal.SIGHUP)

    async def over() -> str | None:
        text = hub.log()
        if text.count("SIGHUP: reading") <= before:
            return None
        tail = text[[i for i in range(len(text)) if text.startswith("SIGHUP: reading", i)][before]:]
        # Its last line: done (info), or at the warning level the keys that need a restart, or the file refused.
        ends = ("reload: done", "which takes a restart", "hubd keeps running with the config it has")
        return tail if any(end in tail for end in ends) else None
    result: str = await hub.wait_for(over, what="the reload to finish")
    return result


@dataclass(frozen=True)
class OneDevice:
    """A device of one dialect: the retained messages that announce it, its endpointId and a glob of its name."""

    messages: list[tuple[str, object]]
    endpoint: str
    glob: str


GARAGE = fixture("esphome_garagedoor1_sht3x")  # an ESPHome board, device identifier 20500de464ec
# One device of each dialect whose section reloads: a new dialect's row is tested here once it has one.
DEVICES = {
    "zigbee2mqtt": OneDevice([("zigbee2mqtt/bridge/state", {"state": "online"}),
                              ("zigbee2mqtt/bridge/devices", entries("ikea_LED1545G12_bulb"))], BULB, "bulb"),
    "tasmota": OneDevice(list(messages("atomlite2_rgb_light")), ATOM, "AtomLite2"),
    "shelly": OneDevice(shelly_messages("gen1_messages")[:3], "shelly1", "shelly1"),  # a Gen1 Shelly 1
    "homeassistant": OneDevice([(m["topic"], m["payload"]) for m in GARAGE["configs"] + GARAGE["states"]],
                               "20500de464ec", "GarageDoor1"),
}
RELOADABLE = [kind for kind in KINDS if kind.live_keys]


@pytest.mark.parametrize("kind", RELOADABLE, ids=[kind.name for kind in RELOADABLE])
async def test_sighup_applies_every_dialects_include_and_exclude(make_rig: MakeRig, kind: DialectKind) -> None:
    device = DEVICES.get(kind.name)
    assert device is not None, f"give DEVICES a device of {kind.name}, whose include/exclude a reload applies"
    assert set(kind.live_keys) == {f"{kind.name}.include", f"{kind.name}.exclude"}
    rig = await make_rig(hub_overrides={kind.name: {"enabled": True}, "log": {"level": "info"}})
    hub = rig.hub
    for topic, payload in device.messages:
        send(rig, topic, payload, retain=True)
    await wait_devices(rig, device.endpoint)
    await rig.bind()
    await announced(rig, device.endpoint)

    said = await reload(hub, {**hub.config, kind.name: {"enabled": True, "include": ["no such device"]}})
    assert f"applied {kind.name}.include" in said, said
    await rig.wait_events(1, "DeleteReport", endpoint=device.endpoint)  # no longer included
    said = await reload(hub, {**hub.config, kind.name: {"enabled": True}})
    assert f"applied {kind.name}.include" in said, said
    await rig.wait_events(2, "AddOrUpdateReport", endpoint=device.endpoint)  # included again
    said = await reload(hub, {**hub.config, kind.name: {"enabled": True, "exclude": [device.glob]}})
    assert f"applied {kind.name}.exclude" in said and "takes a restart" not in said, said
    await rig.wait_events(2, "DeleteReport", endpoint=device.endpoint)  # newly excluded
    _, body, _ = await request(hub, "GET", "/api/devices")
    assert device.endpoint not in {d["endpointId"] for d in body["devices"]}
    assert await hub.metric("hubd_mqtt_connects_total") == 1  # the MQTT session was never dropped


async def zigbee2mqtt_home(make_rig: MakeRig) -> Rig:
    rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}, "log": {"level": "info"}})
    send(rig, "zigbee2mqtt/bridge/state", {"state": "online"}, retain=True)
    send(rig, "zigbee2mqtt/bridge/devices", entries("aqara_MCCGQ11LM_contact", "ikea_LED1545G12_bulb",
                                                    "aqara_WXKG11LM_button"), retain=True)
    await wait_devices(rig, CONTACT, BULB)
    await rig.bind()
    await announced(rig, CONTACT, BULB)
    return rig


async def test_sighup_applies_exclude_and_doorbells_without_reconnecting(make_rig: MakeRig) -> None:
    rig = await zigbee2mqtt_home(make_rig)
    hub = rig.hub
    assert await hub.metric("hubd_mqtt_connects_total") == 1

    config = {**hub.config, "zigbee2mqtt": {"enabled": True, "exclude": ["bulb"]},
              "doorbells": [{"device": "button", "event": "single"}]}
    said = await reload(hub, config)
    assert "applied doorbells, zigbee2mqtt.exclude" in said, said
    await rig.wait_events(1, "DeleteReport", endpoint=BULB)  # newly excluded
    await announced(rig, BUTTON)  # newly a doorbell
    send(rig, "zigbee2mqtt/button", {"action": "single", "battery": 100, "linkquality": 10})
    await rig.wait_events(1, "DoorbellPress", endpoint=BUTTON)
    _, body, _ = await request(hub, "GET", "/api/devices")
    assert BULB not in {d["endpointId"] for d in body["devices"]}
    assert any(u["endpointId"] == BULB and "include/exclude" in u["entities"][0] for u in body["unexported"])

    # Back as it was: the bulb comes back, the button is no doorbell any more.
    config = {**hub.config, "zigbee2mqtt": {"enabled": True}}
    await reload(hub, config)
    await rig.wait_events(2, "AddOrUpdateReport", endpoint=BULB)
    await rig.wait_events(1, "DeleteReport", endpoint=BUTTON)
    await settle(rig)
    assert await hub.metric("hubd_mqtt_connects_total") == 1  # the MQTT session was never dropped
    assert hub.proc is not None and hub.proc.poll() is None
    assert not rig.sim.rejections


async def test_a_file_that_does_not_check_changes_nothing_and_restart_keys_are_named(make_rig: MakeRig) -> None:
    rig = await zigbee2mqtt_home(make_rig)
    hub = rig.hub

    said = await reload(hub, "mqtt: {port: seventy}\nzigbee2mqtt: {enabled: true, exclude: [bulb]}\n")
    assert "reload: mqtt.port:" in said and "hubd keeps running with the config it has" in said
    said = await reload(hub, {**hub.config, "zigbee2mqtt": {"enabled": True, "exclude": ["bulb"]},
                              "driver": {"accounts": [{"username": "demo", "password": "demo"},
                                                      {"username": "demo", "password": "other"}]}})
    assert "hubd keeps running with the config it has" in said  # check-config's rules: a duplicate account
    await settle(rig)
    assert rig.events("DeleteReport") == []  # nothing of either file was applied

    said = await reload(hub, {**hub.config, "log": {"level": "warning"},
                              "mqtt": {**hub.config["mqtt"], "keepalive_s": 30},
                              "platform": {**hub.config["platform"], "client_secret": "new-s3cret-value"},
                              "webhook": {"per_minute": 5}})
    assert "mqtt.keepalive_s, platform.client_secret, webhook.per_minute changed, which takes a restart" in said, said
    assert "log level now warning" in said
    before = hub.log().count(" INFO ")
    rig.publish("lamp-9", "config", {"displayName": "Lamp", "displayType": "light", "capabilities": []})
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="lamp-9")
    assert hub.log().count(" INFO ") == before  # info lines are no longer written
    assert await hub.metric("hubd_mqtt_connects_total") == 1
    assert "new-s3cret-value" not in hub.log()  # keys are named, never their values


async def test_a_doorbell_entry_that_cannot_ring_is_named_at_start_and_again_on_sighup(make_rig: MakeRig) -> None:
    wrong = {"device": "button", "event": "button_short_release"}  # the button's action says single, double...
    rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}, "doorbells": [wrong]})
    hub = rig.hub
    send(rig, "zigbee2mqtt/bridge/devices", entries("aqara_WXKG11LM_button"), retain=True)
    problem = ("doorbells entry {device: 'button', event: 'button_short_release'}: zigbee2mqtt device 'button' never "
               "announces 'button_short_release', so it never rings; it announces 'single', 'double', 'triple', "
               "'quadruple', 'hold', 'release'")

    async def listed(text: str) -> list[dict[str, Any]] | None:
        _, body, _ = await request(hub, "GET", "/api/status")
        found = [p for p in body["problems"]["other"] if p["subject"] == "doorbells" and p["problem"] == text]
        return found or None

    await hub.wait_for(lambda: listed(problem), what="the doorbell entry named under problems")
    assert hub.log().count(problem) == 1  # a warning, once

    # SIGHUP: named again, and an entry naming no device is said at once (the devices are known by then).
    nobody = {"device": "Front gate", "event": "single"}
    await reload(hub, {**hub.config, "doorbells": [wrong, nobody]})
    async def named_again() -> bool:
        return hub.log().count(problem) >= 2
    await hub.wait_for(named_again, what="the entry named again")
    await hub.wait_for(lambda: listed("doorbells entry {device: 'Front gate', event: 'single'} names no device hubd "
                                      "knows (by name, identifier or endpointId), so it never rings"),
                       what="the entry naming no device under problems")
