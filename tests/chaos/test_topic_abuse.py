"""Discovery configs that try to make hubd publish where it must not, or take another device's endpointId.

hubd publishes only to a device's own command topics: never under its own base topic (its will, other devices'
configs), a zigbee2mqtt bridge's requests, a discovery prefix or a `$` topic, nor on another device's command topic;
such a config is refused with its reason and listed. Nor on a topic any device is read from (another device's state
topic, a Tasmota's stat/ and tele/), a Tasmota group topic (either FullTopic order), or under another import's tree
(a Tasmota command prefix of zigbee2mqtt): refused when the config comes, and again at the publish when the topic
became a read topic after the device was accepted (reads win). One endpointId has one owner, one command topic too:
a discovery device claiming a native device's id is refused, and so is a second Tasmota on a topic another holds;
identifiers that differ only in letters outside A-Za-z0-9._- stay two devices. All through a real broker and hubd;
what hubd publishes is watched with a plain client (tests/mqtt_observer.py), behind a barrier: a command hubd does
send, published after the one it must not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from mosquitto import publish
from mqtt_observer import Observer, Seen
from rig import LAMP, Rig, announced, devices, wait_devices
from tasmota_helpers import basic_config

from hubd.devices.model import Route
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing, PublishRules
from hubd.dialects.commands import DeviceCommands
from hubd.dialects.mapping import endpoint_id
from hubd.dialects.native.dialect import NativeDialect
from simulators.platform_binding import BindResult
from simulators.platform_directives import DirectiveClient, DirectiveReply

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


# Spoofing: commands on topics devices are read from, on group topics, under another import's tree.

PLUG, TWIN = "A4CF12000001", "A4CF12000002"
BOTH = {"homeassistant": {"enabled": True}, "tasmota": {"enabled": True}}


def _light(rig: Rig, object_id: str, command_topic: str, **extra: Any) -> None:
    _discovery(rig, "light", object_id, {"name": object_id, "uniq_id": object_id, "cmd_t": command_topic,
                                         "dev": {"ids": [object_id]}, **extra})


def _tasmota(rig: Rig, mac: str, topic: str, **changes: Any) -> None:
    """A one-relay Tasmota's retained discovery config (FullTopic %prefix%/%topic%/ unless changed), and its LWT."""
    config = basic_config(**{"mac": mac, "t": topic, "ft": "%prefix%/%topic%/", "dn": f"Plug {topic}",
                             "hn": f"host-{topic}", "rl": [1, 0, 0, 0, 0, 0, 0, 0], **changes})
    publish(rig.broker.port, f"tasmota/discovery/{mac}/config", json.dumps(config), retain=True)
    tele = config["ft"].replace("%prefix%", "tele").replace("%topic%", topic)
    publish(rig.broker.port, f"{tele}LWT", "Online", retain=True)


async def _refused(rig: Rig, config_topic: str, why: str) -> str:
    """Wait until the config on `config_topic` is listed under problems with `why` in its reason; the reason."""
    async def listed() -> str | None:
        return next((p["reason"] for p in await _problems(rig) if p["topic"] == config_topic and why in p["reason"]),
                    None)

    return str(await rig.hub.wait_for(listed, what=f"{config_topic} refused: {why}"))


async def _not_exported(rig: Rig, endpoint: str, why: str) -> None:
    """Wait until GET /api/devices lists `endpoint` as not exported with `why` among its reasons."""
    async def listed() -> bool:
        _, body = await rig.hub.get("/api/devices")
        return any(u["endpointId"] == endpoint and why in " ".join(map(str, u["entities"])) for u in body["unexported"])

    await rig.hub.wait_for(listed, what=f"{endpoint} not exported: {why}")


async def _watching(rig: Rig) -> Observer:
    observer = Observer(rig.broker.host, rig.broker.port)
    await observer.start()
    return observer


def _barrier_after(client: DirectiveClient, endpoint: str) -> asyncio.Task[DirectiveReply]:
    """Switch.On for a device hubd may command, as a task: its command, once observed, arrived after whatever hubd
    published before it (one session, in order); its reply waits for a state no simulated device sends."""
    return asyncio.create_task(client.control(endpoint, "Switch.On"))


def _on(seen: list[Seen], *topics: str) -> list[Seen]:
    return [m for m in seen if m.topic in topics]


async def _bound(rig: Rig, *endpoints: str) -> BindResult:
    bound = await rig.bind()
    await announced(rig, *endpoints)
    return bound


async def test_a_spoofing_lights_switch_on_never_publishes_on_another_devices_state_topic(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    observer = await _watching(rig)
    try:
        _light(rig, "good", "lights/good/set")
        _light(rig, "early", "locks/door/state", pl_on="LOCKED")  # accepted: nothing reads that topic yet
        await wait_devices(rig, "good", "early")
        _discovery(rig, "lock", "door", {"name": "Door", "uniq_id": "door", "cmd_t": "locks/door/set",
                                         "stat_t": "locks/door/state", "dev": {"ids": ["door"]}})
        await wait_devices(rig, "door")
        _light(rig, "late", "locks/door/state", pl_on="LOCKED")  # the lock's state topic already: refused
        reason = await _refused(rig, "homeassistant/light/late/config", "'locks/door/state' is where lock.door")
        assert "hubd publishes only to a device's own command topics" in reason
        await _not_exported(rig, "late", "is where lock.door")

        bound = await _bound(rig, "good", "early", "door")
        mark = observer.mark()
        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            reply = await client.control("early", "Switch.On")  # reads win: refused at the publish
            await client.control("good", "Switch.On")
            await observer.next("lights/good/set", after=mark)
        assert reply.error is not None
        assert _on(observer.since(mark), "locks/door/state") == []
        assert "refused a command on locks/door/state" in rig.hub.log()
    finally:
        await observer.stop()


async def test_tasmota_stat_and_tele_topics_never_get_a_command(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides=BOTH)
    observer = await _watching(rig)
    try:
        _light(rig, "early", "stat/attic/POWER", pl_on="ON")  # accepted: no Tasmota reports there yet
        _tasmota(rig, PLUG, "plug")
        await wait_devices(rig, "early", PLUG)
        _tasmota(rig, TWIN, "attic")
        await wait_devices(rig, TWIN)
        _light(rig, "stat", "stat/plug/POWER")
        _light(rig, "tele", "tele/plug/STATE")
        for name in ("stat", "tele"):
            await _refused(rig, f"homeassistant/light/{name}/config", f"is where Tasmota device Plug plug ({PLUG})")

        bound = await _bound(rig, "early", PLUG, TWIN)
        mark = observer.mark()
        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            reply = await client.control("early", "Switch.On")
            barrier = _barrier_after(client, PLUG)
            await observer.next("cmnd/plug/POWER1", after=mark)
            barrier.cancel()
        assert reply.error is not None
        assert _on(observer.since(mark), "stat/attic/POWER", "stat/plug/POWER", "tele/plug/STATE") == []
        assert "is where Tasmota device Plug attic" in rig.hub.log()
    finally:
        await observer.stop()


async def test_the_tasmota_group_topic_never_gets_a_command_in_either_full_topic_order(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides=BOTH)
    observer = await _watching(rig)
    try:
        _tasmota(rig, PLUG, "attic", ft="%topic%/%prefix%/", gt="upstairs")
        await wait_devices(rig, PLUG)
        _tasmota(rig, TWIN, "tasmotas")  # a device whose own topic is the group topic
        groups = {"prefix_first": "cmnd/tasmotas/POWER", "topic_first": "tasmotas/cmnd/POWER",
                  "own_group": "upstairs/cmnd/POWER"}
        for name, topic in groups.items():
            _light(rig, name, topic)
        for name in ("prefix_first", "topic_first"):
            await _refused(rig, f"homeassistant/light/{name}/config", "the group topic 'tasmotas'")
        await _refused(rig, "homeassistant/light/own_group/config", "the group topic of Tasmota device Plug attic")
        await _refused(rig, f"tasmota/discovery/{TWIN}/config", "the group topic 'tasmotas'")
        await _not_exported(rig, TWIN, "the group topic 'tasmotas'")

        bound = await _bound(rig, PLUG)
        mark = observer.mark()
        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            for endpoint in groups:
                assert (await client.control(endpoint, "Switch.On")).error is not None  # never exported
            barrier = _barrier_after(client, PLUG)
            await observer.next("attic/cmnd/POWER1", after=mark)
            barrier.cancel()
        assert [m.topic for m in observer.since(mark) if "tasmotas" in m.topic or m.topic.startswith("upstairs/")] \
            == []
    finally:
        await observer.stop()


async def test_a_second_tasmota_with_the_same_topic_is_refused_like_a_second_owner(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"tasmota": {"enabled": True}})
    observer = await _watching(rig)
    try:
        _tasmota(rig, PLUG, "plug")
        await wait_devices(rig, PLUG)
        _tasmota(rig, TWIN, "plug", dn="Twin")
        reason = await _refused(rig, f"tasmota/discovery/{TWIN}/config", "one command topic, one owner")
        assert f"already Tasmota device Plug plug ({PLUG})'s" in reason
        await _not_exported(rig, TWIN, "one command topic, one owner")

        bound = await _bound(rig, PLUG)
        mark = observer.mark()
        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            assert (await client.control(TWIN, "Switch.On")).error is not None
            barrier = _barrier_after(client, PLUG)
            await observer.next("cmnd/plug/POWER1", after=mark)
            barrier.cancel()
        assert [m.topic for m in observer.since(mark) if m.topic.startswith("cmnd/plug/")] == ["cmnd/plug/POWER1"]
        assert TWIN not in await devices(rig)
    finally:
        await observer.stop()


async def test_a_tasmota_command_prefix_of_zigbee2mqtt_is_refused(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"tasmota": {"enabled": True}, "zigbee2mqtt": {"enabled": True}})
    observer = await _watching(rig)
    try:
        mark = observer.mark()
        _tasmota(rig, TWIN, "evil", tp=["zigbee2mqtt", "stat", "tele"])
        reason = await _refused(rig, f"tasmota/discovery/{TWIN}/config", "'zigbee2mqtt/evil/")
        assert "zigbee2mqtt" in reason and "hubd publishes only to a device's own command topics" in reason
        await _not_exported(rig, TWIN, "zigbee2mqtt/evil/")
        _tasmota(rig, PLUG, "plug")  # hubd asks a new device for its state: the barrier
        await observer.next("cmnd/plug/STATE", after=mark)
        assert [m.topic for m in observer.since(mark) if m.topic.startswith("zigbee2mqtt/")] == []
        assert TWIN not in await devices(rig)
    finally:
        await observer.stop()
