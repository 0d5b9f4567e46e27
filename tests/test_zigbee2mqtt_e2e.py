"""zigbee2mqtt devices imported natively (`zigbee2mqtt: {enabled: true}`), end to end: a real mosquitto, the
platform simulator and a real hubd process, fed zigbee2mqtt's own retained `bridge/devices` from
tests/fixtures/zigbee2mqtt, its state topics, and a simulated bulb (simulators/discovery_zigbee2mqtt.py) that obeys
`<base>/<friendly_name>/set` as zigbee2mqtt does. The rig and the waiting helpers are tests/rig.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from mosquitto import Mosquitto
from rig import Rig, announced, changes, send, settle, states_of, wait_change, wait_devices
from zigbee2mqtt_helpers import entries

from hubd.mqtt.client import MqttClient
from hubd.mqtt.inbox import Message
from simulators.discovery_zigbee2mqtt import Zigbee2MqttLight
from simulators.platform_directives import DirectiveClient
from simulators.zigbee2mqtt_bridge import Zigbee2MqttBridge, ZigbeeDevice, ZigbeeGroup
from simulators.zigbee2mqtt_models import HUE_GO_7146060PH, LED1545G12

MakeRig = Callable[..., Awaitable[Rig]]

CONTACT = "0x00158d00091e7bd6"  # aqara_MCCGQ11LM_contact: "Contact sensor"
BULB = "0x000b57fffec6a5b2"  # ikea_LED1545G12_bulb: "bulb"
BUTTON = "0x0017880104e45520"  # aqara_WXKG11LM_button: "button"
HUE_GO = "0x000b57fffec6a5b4"  # philips_7146060PH_hue_go
GROUP = "zigbee2mqtt-group-1"  # a group of bridge/groups: <base>-group-<id>
WAIT_S = 10.0


@contextlib.asynccontextmanager
async def watching(broker: Mosquitto, topic: str) -> AsyncIterator[MqttClient]:
    """A plain MQTT client subscribed to `topic` (QoS 1), to see what hubd publishes there."""
    client = MqttClient(host=broker.host, port=broker.port, client_id=f"watch-{uuid.uuid4().hex[:8]}",
                        clean_session=True)
    await client.connect()
    try:
        await client.subscribe([(topic, 1)])
        yield client
    finally:
        await client.disconnect()


async def next_message(client: MqttClient) -> Message:
    """The next message the watcher got."""
    async with asyncio.timeout(WAIT_S):  # a bound on a failure, not a measure
        batch = await client.next_batch(max_messages=1)
    client.ack(batch)
    return batch[0]


def contact_state(*, closed: bool, battery: int = 100, linkquality: int = 120) -> dict[str, Any]:
    """The whole state zigbee2mqtt publishes for an MCCGQ11LM each time (contact true = closed)."""
    return {"battery": battery, "contact": closed, "device_temperature": 24, "linkquality": linkquality,
            "power_outage_count": 3, "trigger_count": 0, "voltage": 3005}


async def test_zigbee2mqtt_devices_appear_by_ieee_and_only_exported_changes_report(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}, "doorbells": [{"device": "button",
                                                                                  "event": "single"}]})
    send(rig, "zigbee2mqtt/bridge/state", {"state": "online"}, retain=True)
    send(rig, "zigbee2mqtt/bridge/devices", entries("aqara_MCCGQ11LM_contact", "ikea_LED1545G12_bulb",
                                                    "aqara_WXKG11LM_button"), retain=True)
    send(rig, "zigbee2mqtt/Contact sensor", contact_state(closed=True))
    found = await wait_devices(rig, CONTACT, BULB, BUTTON, check=lambda d: d["online"] is True)
    assert {d["source"] for d in found.values()} == {"zigbee2mqtt"}
    await rig.bind()

    endpoints = await announced(rig, CONTACT, BULB, BUTTON)
    contact = endpoints[CONTACT]
    assert contact["displayName"] == "Contact sensor" and states_of(contact) == {"Switch": "Off"}  # closed
    assert [(c["interface"], c["supportedOperations"], c["proactivelyReported"]) for c in contact["capabilities"]] \
        == [("Switch", [], True)]
    assert (endpoints[BULB]["displayName"], endpoints[BULB]["displayType"]) == ("bulb", "light")
    assert endpoints[BUTTON]["capabilities"] == []

    # zigbee2mqtt publishes the whole state each time: only the exported contact is news.
    send(rig, "zigbee2mqtt/Contact sensor", contact_state(closed=True, battery=97, linkquality=60))
    send(rig, "zigbee2mqtt/Contact sensor", contact_state(closed=False, battery=97, linkquality=60))  # opened
    await wait_change(rig, CONTACT, "Switch", "On")

    # zigbee2mqtt's legacy action sensor: each press is the action, then an empty one.
    for _ in range(2):
        send(rig, "zigbee2mqtt/button", {"action": "single", "battery": 100, "linkquality": 10})
        send(rig, "zigbee2mqtt/button", {"action": "", "battery": 100, "linkquality": 10})
    await rig.wait_events(2, "DoorbellPress", endpoint=BUTTON)
    await settle(rig)

    assert changes(rig, CONTACT) == [{"Switch": "On"}]
    assert len(rig.events("DoorbellPress", endpoint=BUTTON)) == 2
    assert not rig.sim.rejections


async def test_a_zigbee2mqtt_control_publishes_to_set_and_an_offline_bridge_makes_devices_unreachable(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}})
    send(rig, "zigbee2mqtt/bridge/devices", entries("ikea_LED1545G12_bulb"), retain=True)
    bulb = Zigbee2MqttLight(rig.broker.host, rig.broker.port, name="bulb", ieee=BULB, on=False)
    try:
        await bulb.start()  # says the bridge is online, then its state
        await wait_devices(rig, BULB, check=lambda d: d["online"] is True and states_of(d).get("Switch") == "Off")
        bound = await rig.bind()
        await announced(rig, BULB)

        async with watching(rig.broker, "zigbee2mqtt/bulb/set") as watcher, \
                DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            on = await client.control(BULB, "Switch.On")
            assert json.loads((await next_message(watcher)).payload) == {"state": "ON"}
            assert on.states["Switch"] == "On" and bulb.state["state"] == "ON"
            dim = await client.control(BULB, "Brightness.Set", {"value": 40})
            assert json.loads((await next_message(watcher)).payload) == {"brightness": 102}  # of 254
            assert dim.states["Brightness"] == 40 and bulb.state["brightness"] == 102

            send(rig, "zigbee2mqtt/bridge/state", {"state": "offline"}, retain=True)
            await wait_devices(rig, BULB, check=lambda d: d["online"] is False)
            refused = await client.control(BULB, "Switch.Off")
            assert refused.error == "E_ENDPOINT_UNREACHABLE"
            assert bulb.state["state"] == "ON"
    finally:
        await bulb.stop()


async def test_a_renamed_zigbee2mqtt_device_keeps_its_endpoint_and_follows_its_new_topic(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}})
    listed = entries("aqara_MCCGQ11LM_contact")
    send(rig, "zigbee2mqtt/bridge/devices", listed, retain=True)
    send(rig, "zigbee2mqtt/Contact sensor", contact_state(closed=True))
    await wait_devices(rig, CONTACT, check=lambda d: states_of(d) == {"Switch": "Off"})
    await rig.bind()
    await announced(rig, CONTACT)

    send(rig, "zigbee2mqtt/bridge/devices", [{**listed[0], "friendly_name": "Back door"}], retain=True)
    await wait_devices(rig, CONTACT, check=lambda d: d["displayName"] == "Back door")
    send(rig, "zigbee2mqtt/Back door", contact_state(closed=False))
    await wait_change(rig, CONTACT, "Switch", "On")
    send(rig, "zigbee2mqtt/Contact sensor", contact_state(closed=True))  # the old name: no device of it now
    await settle(rig)

    assert changes(rig, CONTACT) == [{"Switch": "On"}]
    renamed = rig.events("AddOrUpdateReport", endpoint=CONTACT)[-1].message["payload"]["endpoints"]
    assert [(e["endpointId"], e["displayName"]) for e in renamed] == [(CONTACT, "Back door")]
    assert not rig.events("DeleteReport")


async def test_turn_on_the_living_room_lights_is_one_command_to_the_zigbee2mqtt_group_and_its_state_reports(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}})
    bulbs = [ZigbeeDevice(LED1545G12, "Living Room Bulb", BULB, state={"state": "OFF", "brightness": 120}),
             ZigbeeDevice(HUE_GO_7146060PH, "Sofa Lamp", HUE_GO, state={"state": "OFF", "brightness": 80})]
    bridge = Zigbee2MqttBridge(rig.broker.host, rig.broker.port, bulbs,
                               groups=[ZigbeeGroup(1, "Living room", ["Living Room Bulb", "Sofa Lamp"])])
    try:
        await bridge.start()
        found = await wait_devices(rig, GROUP, BULB, HUE_GO)
        assert (found[GROUP]["displayName"], found[GROUP]["displayType"]) == ("Living room", "light")
        bound = await rig.bind()
        endpoints = await announced(rig, GROUP, BULB, HUE_GO)
        assert {c["interface"] for c in endpoints[GROUP]["capabilities"]} == \
            {"Switch", "Brightness", "ColorTemperature"}

        async with watching(rig.broker, "zigbee2mqtt/Living room/set") as watcher, \
                DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            await client.control(GROUP, "Switch.On")
            assert json.loads((await next_message(watcher)).payload) == {"state": "ON"}
        await wait_change(rig, GROUP, "Switch", "On")  # the group's own state topic
        await wait_change(rig, BULB, "Switch", "On")  # each member, its own endpoint
        await wait_change(rig, HUE_GO, "Switch", "On")
        assert bridge.device("Sofa Lamp").state["state"] == "ON"

        await bridge.set_group(ZigbeeGroup(1, "Living room", ["Sofa Lamp"]))  # a member removed
        await wait_devices(rig, GROUP, check=lambda d: "Color" in {c["interface"] for c in d["capabilities"]})
        await bridge.remove_group("Living room")
        await rig.wait_events(1, "DeleteReport", endpoint=GROUP)
    finally:
        await bridge.stop()
    assert not rig.sim.rejections
