"""Discovery configs that try to make hubd publish where it must not, or take another device's endpointId.

hubd publishes only to a device's own command topics: never under its own base topic (its will, other devices'
configs), a zigbee2mqtt bridge's requests, a discovery prefix or a `$` topic, nor on another device's command topic;
such a config is refused with its reason and listed. One endpointId has one owner: a discovery device claiming a
native device's id is refused, and identifiers that differ only in letters outside A-Za-z0-9._- stay two devices.
All through a real broker and hubd.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from mosquitto import publish
from rig import LAMP, Rig, devices, wait_devices

from hubd.devices.model import Route
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing, PublishRules
from hubd.dialects.commands import DeviceCommands
from hubd.dialects.mapping import endpoint_id
from hubd.dialects.native.dialect import NativeDialect

EVIL = {
    "status": ("light", "hubd/status"),
    "lamp_config": ("light", "hubd/device/lamp-1/config"),
    "bridge_request": ("switch", "zigbee2mqtt/bridge/request/device/remove"),
    "discovery": ("switch", "homeassistant/switch/x/config"),
    "sys": ("switch", "$SYS/broker/x"),
    "z2m_lock": ("light", "zigbee2mqtt/front_door/set"),
}


def _discovery(rig: Rig, component: str, object_id: str, config: dict[str, Any]) -> None:
    publish(rig.broker.port, f"homeassistant/{component}/{object_id}/config", json.dumps(config), retain=True)


async def _problems(rig: Rig) -> list[dict[str, Any]]:
    _, status = await rig.hub.get("/api/status")
    return list(status["problems"]["rejected"])


async def test_configs_that_would_publish_where_hubd_must_not_are_refused_and_listed(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}, "zigbee2mqtt": {"enabled": True}})
    rig.publish("lamp-1", "config", LAMP, retain=True)
    for name, (component, topic) in EVIL.items():
        _discovery(rig, component, f"evil_{name}", {"name": f"Evil {name}", "uniq_id": f"evil_{name}",
                                                    "cmd_t": topic, "dev": {"ids": [f"evil-{name}"]}})
    # A lock, then a light of another device on the lock's command topic (its "on" would be the lock's UNLOCK).
    _discovery(rig, "lock", "door", {"name": "Door", "uniq_id": "door_lock", "cmd_t": "locks/door/set",
                                     "stat_t": "locks/door/state", "dev": {"ids": ["door-lock"]}})
    _discovery(rig, "light", "evil_unlock", {"name": "Evil", "uniq_id": "evil_unlock", "cmd_t": "locks/door/set",
                                             "pl_on": "UNLOCK", "dev": {"ids": ["evil-unlock"]}})
    await rig.bind()

    async def all_refused() -> bool:
        refused = {p["topic"] for p in await _problems(rig)}
        return {f"homeassistant/{c}/evil_{n}/config" for n, (c, _) in EVIL.items()} | \
            {"homeassistant/light/evil_unlock/config"} <= refused

    await rig.hub.wait_for(all_refused, what="every hostile config refused")
    reasons = {p["topic"]: p["reason"] for p in await _problems(rig)}
    assert "under hubd's own topics" in reasons["homeassistant/light/evil_status/config"]
    assert "under hubd's own topics" in reasons["homeassistant/light/evil_lamp_config/config"]
    assert "under zigbee2mqtt/bridge/" in reasons["homeassistant/switch/evil_bridge_request/config"]
    assert "under homeassistant/" in reasons["homeassistant/switch/evil_discovery/config"]
    assert "a broker topic" in reasons["homeassistant/switch/evil_sys/config"]
    assert "devices hubd imports natively" in reasons["homeassistant/light/evil_z2m_lock/config"]
    assert "command topic of lock.door of another device" in reasons["homeassistant/light/evil_unlock/config"]
    known = await devices(rig)
    assert not [d for d in known if d.startswith("evil")], known
    assert known["lamp-1"]["displayName"] == LAMP["displayName"]


def test_the_command_port_refuses_a_publish_outside_a_devices_own_topics() -> None:
    class Sent:
        connected = True

        async def publish(self, message: Outgoing, *, timeout_s: float | None = None) -> None:
            raise AssertionError("nothing is sent in this test")

    class Hostile(NativeDialect):
        def encode_control(self, device_id: str, route: Route, request: ControlRequest) -> list[Outgoing]:
            return [Outgoing("hubd/status", b"offline", retain=True)]

    request = ControlRequest("c1", "Switch", "On", "On", None, {})
    commands = DeviceCommands([Hostile("hubd")], Sent(), PublishRules("hubd", ("homeassistant/",)))
    with pytest.raises(CommandRefused, match="under hubd's own topics"):
        commands.encode_control("lamp-1", Route("native", "lamp-1"), request)
    own = DeviceCommands([NativeDialect("hubd")], Sent(), PublishRules("hubd"))
    [message] = own.encode_control("lamp-1", Route("native", "lamp-1"), request)
    assert message.topic == "hubd/device/lamp-1/set"  # a native device's own set topic is its own


async def test_one_endpoint_id_has_one_owner_and_unsafe_identifiers_stay_apart(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    rig.publish("rt-n-1-0", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="rt-n-1-0")
    _discovery(rig, "sensor", "imposter", {"name": "Imposter", "uniq_id": "imposter", "stat_t": "imposter/state",
                                           "dev_cla": "temperature", "unit_of_meas": "°C",
                                           "dev": {"ids": ["rt-n-1-0"], "name": "Imposter"}})
    for room, object_id in (("кухня", "kitchen"), ("спальня", "bedroom")):
        _discovery(rig, "sensor", object_id, {"name": "Temperature", "uniq_id": f"t_{object_id}",
                                              "stat_t": f"rooms/{object_id}/t", "dev_cla": "temperature",
                                              "unit_of_meas": "°C",
                                              "dev": {"ids": [room], "name": f"{object_id} room"}})

    async def imposter_refused() -> bool:
        return any(p["topic"] == "homeassistant/sensor/imposter/config" and "one endpointId, one owner" in p["reason"]
                   for p in await _problems(rig))

    await rig.hub.wait_for(imposter_refused, what="the imposter refused")
    kitchen, bedroom = endpoint_id("кухня"), endpoint_id("спальня")
    await wait_devices(rig, kitchen, bedroom)
    for topic, value in (("rooms/kitchen/t", "21.5"), ("rooms/bedroom/t", "18")):
        publish(rig.broker.port, topic, value)
    await rig.wait_events(1, "ChangeReport", endpoint=kitchen)
    await rig.wait_events(1, "ChangeReport", endpoint=bedroom)
    temperatures = {e.endpoint_ids[0]: e.message["payload"]["change"]["states"][0]["value"]
                    for e in rig.events("ChangeReport") if e.endpoint_ids[0] in (kitchen, bedroom)}
    assert sorted(temperatures.values()) == [18, 21.5]

    rig.publish("rt-n-1-0", "state", {"Switch": "On"})  # the native device is still its own
    await rig.wait_events(1, "ChangeReport", endpoint="rt-n-1-0")
    assert (await devices(rig))["rt-n-1-0"]["displayName"] == LAMP["displayName"]
