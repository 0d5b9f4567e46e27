"""Devices that announce themselves with Home Assistant MQTT discovery, end to end: a real mosquitto, the
platform simulator and a real hubd process (`homeassistant: {enabled: true}`), driven by the discovery
simulators (simulators/discovery_*.py) and by the real payloads of tests/fixtures/homeassistant.

The rig, publishing and waiting on what hubd reported are tests/rig.py's. Every wait is on a condition;
"nothing more was sent" is checked after a barrier (`settle`) that hubd handles after everything published before
it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from homeassistant_helpers import fixture
from rig import (
    Rig,
    announced,
    changes,
    devices,
    invalid_total,
    send,
    send_until_seen,
    settle,
    states_of,
    wait_change,
    wait_devices,
)
from zigbee2mqtt_helpers import entries

from simulators.discovery_esphome import EspHomeClimateSensor
from simulators.discovery_zigbee2mqtt import Zigbee2MqttButton, Zigbee2MqttLight
from simulators.platform_directives import DirectiveClient

MakeRig = Callable[..., Awaitable[Rig]]

PORCH = "a4cf12f3c2d1"  # EspHomeClimateSensor's MAC, its device identifier
GARAGE = "20500de464ec"  # the ESPHome board of tests/fixtures/homeassistant/esphome_garagedoor1_sht3x.json
HALL_BULB = "zigbee2mqtt_0x000b57fffec6a5b2"  # zigbee2mqtt's identifier of the bulb, as discovery announces it
BUTTON = "zigbee2mqtt_0x0017880104e45520"
DOORBELL = {"device": "Front Door Button", "event": "single"}
BATTERY_REASON = ("a device's diagnostic entity (entity_category diagnostic): never exported, as Home Assistant never "
                  "exposes one to a voice assistant")


def send_fixture(rig: Rig, name: str, *, states: bool = True) -> None:
    """A Home Assistant fixture's discovery configs (retained, as their producers publish them), then its states
    (retained too: hubd may learn a state topic from a config after the state was published)."""
    data = fixture(name)
    for item in data["configs"] + (data["states"] if states else []):
        send(rig, item["topic"], item["payload"], retain=True)


async def test_discovery_devices_reach_the_platform_report_changes_and_obey_directives(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}, "doorbells": [DOORBELL]})
    host, port = rig.broker.host, rig.broker.port
    sensor = EspHomeClimateSensor(host, port, area="Porch")
    bulb = Zigbee2MqttLight(host, port, name="Hallway Bulb")
    button = Zigbee2MqttButton(host, port, name="Front Door Button")
    # An ESPHome thermometer that reports in °F (the captured board, its unit changed).
    thermometer = fixture("esphome_garagedoor1_sht3x")["configs"][0]
    send(rig, thermometer["topic"], {**json.loads(thermometer["payload"]), "unit_of_meas": "°F"}, retain=True)
    try:
        for device in (sensor, bulb, button):
            await device.start()
        await wait_devices(rig, HALL_BULB, BUTTON, GARAGE)
        await wait_devices(rig, PORCH, check=lambda d: states_of(d) == {"Temperature": 21.5, "Humidity": 48})
        bound = await rig.bind()

        endpoints = await announced(rig, PORCH, HALL_BULB, BUTTON, GARAGE)
        assert (endpoints[PORCH]["displayName"], endpoints[PORCH]["displayType"]) == ("Porch Climate", "unknown")
        assert endpoints[PORCH]["recommendRoomName"] == "Porch"
        assert states_of(endpoints[PORCH]) == {"Temperature": 21.5, "Humidity": 48}
        assert (endpoints[HALL_BULB]["displayName"], endpoints[HALL_BULB]["displayType"]) == ("Hallway Bulb", "light")
        assert {c["interface"] for c in endpoints[HALL_BULB]["capabilities"]} == \
            {"Switch", "Brightness", "ColorTemperature"}
        assert (endpoints[BUTTON]["displayName"], endpoints[BUTTON]["capabilities"]) == ("Front Door Button", [])

        await sensor.set_temperature(23.5)
        await wait_change(rig, PORCH, "Temperature", 23.5)
        send(rig, "garagedoor1/sensor/garage_temperature/state", "71.60", retain=True)  # ESPHome retains
        await wait_change(rig, GARAGE, "Temperature", 22)

        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            off = await client.control(HALL_BULB, "Switch.Off")
            assert off.states["Switch"] == "Off" and bulb.state["state"] == "OFF"
            dim = await client.control(HALL_BULB, "Brightness.Set", {"value": 40})
            assert dim.states["Brightness"] == 40 and dim.states["Switch"] == "On"
            assert bulb.state["brightness"] == 102 and bulb.state["state"] == "ON"  # 40 % of zigbee2mqtt's 254

        await button.press("single")
        await rig.wait_events(1, "DoorbellPress", endpoint=BUTTON)
        await button.press("double")  # not the declared event
        await button.press("single")  # the same again: its trigger is known now, a press all the same
        await rig.wait_events(2, "DoorbellPress", endpoint=BUTTON)
        await settle(rig)
        assert len(rig.events("DoorbellPress", endpoint=BUTTON)) == 2
        assert not rig.sim.rejections
    finally:
        for device in (sensor, bulb, button):
            await device.stop()


async def test_api_devices_and_the_status_page_show_the_source_and_why_an_entity_is_not_exported(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}, "doorbells": [DOORBELL]})
    button = Zigbee2MqttButton(rig.broker.host, rig.broker.port, name="Front Door Button")
    # A plant sensor that only has a battery: none of its entities is exported, so it is no device of hubd's.
    send(rig, "homeassistant/sensor/plant1/battery/config",
         {"name": "Battery", "dev_cla": "battery", "unit_of_meas": "%", "stat_t": "plant1/battery",
          "uniq_id": "plant1_battery", "dev": {"ids": "plant1", "name": "Fern Sensor"}}, retain=True)
    rig.publish("lamp-1", "config", {"displayName": "Desk Lamp", "displayType": "light", "capabilities": [
        {"interface": "Switch", "supportedOperations": ["On", "Off"], "proactivelyReported": True,
         "retrievable": True}]}, retain=True)
    try:
        await button.start()
        found = await wait_devices(rig, BUTTON, "lamp-1", check=lambda d: d["source"] == "native" or {
            "sensor.battery", "event.action", "sensor.action"} <= {e["name"] for e in d["entities"]})

        assert found["lamp-1"]["source"] == "native" and found["lamp-1"]["entities"] == []
        item = found[BUTTON]
        assert item["source"] == "homeassistant" and item["displayName"] == "Front Door Button"
        entities = {e["name"]: e for e in item["entities"]}
        assert entities["sensor.battery"] == {"name": "sensor.battery", "exported": False, "reason": BATTERY_REASON}
        assert entities["event.action"] == {"name": "event.action", "exported": True,
                                            "reason": "a declared doorbell: 'single' is a DoorbellPress"}
        assert all(e["reason"] for e in item["entities"] if not e["exported"])

        async def plant_listed() -> list[dict[str, Any]]:
            _, body = await rig.hub.get("/api/devices")
            return [u for u in body["unexported"] if u["name"] == "Fern Sensor"]
        plant = await rig.hub.wait_for(plant_listed, what="the plant sensor under unexported")
        assert plant == [{"source": "homeassistant", "endpointId": "plant1", "name": "Fern Sensor",
                          "entities": ["sensor.battery: no platform interface for device_class battery"],
                          "doorbellEvents": [], "exposable": False, "keptBackRule": None,
                          "topic": "homeassistant/sensor/plant1/battery/config",
                          "overrides": {"name": None, "room": None, "exposed": True, "doorbell": None},
                          "report": None}]
        assert "plant1" not in await devices(rig)

        status, page = await rig.hub.get("/")
        assert status == 200
        # The page draws itself from the status it comes with (and then polls /api/status).
        shown = json.loads(page.split('<script type="application/json" id="status-data">')[1].split("</script>")[0])
        assert {d["source"] for d in shown["devices"]} >= {"homeassistant", "native"}
        assert plant[0] in shown["unexported"]
    finally:
        await button.stop()


async def test_after_a_kill_and_restart_what_came_meanwhile_is_reported_and_retained_replays_send_nothing(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}, "doorbells": [DOORBELL]})
    button = Zigbee2MqttButton(rig.broker.host, rig.broker.port, name="Front Door Button")
    bulb_topic = "zigbee2mqtt/bulb"  # the bulb of z2m_light_LED1545G12: zigbee2mqtt does not retain its states
    bulb_state = json.loads(fixture("z2m_light_LED1545G12")["states"][0]["payload"])
    send_fixture(rig, "esphome_garagedoor1_sht3x")
    send_fixture(rig, "z2m_light_LED1545G12", states=False)
    send(rig, "zigbee2mqtt/bridge/state", {"state": "online"}, retain=True)
    try:
        await button.start()
        await wait_devices(rig, GARAGE, HALL_BULB, BUTTON)
        await send_until_seen(rig, bulb_topic, bulb_state, HALL_BULB, lambda d: states_of(d).get("Switch") == "On")
        await rig.bind()
        await announced(rig, GARAGE, HALL_BULB, BUTTON)
        await button.press("single")  # publishes its device_automation trigger config, retained
        # A press on a state topic someone made retained (zigbee2mqtt's per-device `retain: true`).
        send(rig, button.state_topic, {"action": "single", "battery": 100, "linkquality": 87}, retain=True)
        await rig.wait_events(2, "DoorbellPress", endpoint=BUTTON)
        await settle(rig)
        before = {name: len(rig.events(name)) for name in ("AddOrUpdateReport", "DoorbellPress", "ChangeReport")}
        sent_before = {e.message_id for e in rig.sim.events}
        bulb_before, garage_before = len(changes(rig, HALL_BULB)), len(changes(rig, GARAGE))

        rig.hub.kill()
        send(rig, bulb_topic, {**bulb_state, "state": "OFF"})  # queued for hubd's session, not retained
        send(rig, "garagedoor1/sensor/garage_temperature/state", "23.00", retain=True)
        rig.hub.start()
        await rig.hub.wait_ready()

        await wait_change(rig, HALL_BULB, "Switch", "Off")
        await wait_change(rig, GARAGE, "Temperature", 23)
        # Barriers after the replayed retained configs and states: a press and a reading, both live.
        await button.press("single")
        send(rig, "garagedoor1/sensor/garage_temperature/state", "23.50", retain=True)
        await wait_change(rig, GARAGE, "Temperature", 23.5)
        await rig.wait_events(before["DoorbellPress"] + 1, "DoorbellPress", endpoint=BUTTON)
        await settle(rig)

        assert len(rig.events("AddOrUpdateReport")) - before["AddOrUpdateReport"] == 1  # the new marker only
        assert len(rig.events("DoorbellPress")) == before["DoorbellPress"] + 1
        assert changes(rig, HALL_BULB)[bulb_before:] == [{"Switch": "Off"}]
        assert changes(rig, GARAGE)[garage_before:] == [{"Temperature": 23}, {"Temperature": 23.5}]
        assert len(rig.events("ChangeReport")) == before["ChangeReport"] + 3
        # At least once: rows delivered just before the kill may go again, but only with their first messageId.
        assert {d.message_id for d in rig.sim.duplicates} <= sent_before
    finally:
        await button.stop()


async def test_an_empty_retained_config_removes_the_entity_and_the_last_exported_one_deletes_the_device(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    send_fixture(rig, "esphome_garagedoor1_sht3x")
    await wait_devices(rig, GARAGE, check=lambda d: len(d["capabilities"]) == 3)
    await rig.bind()
    first = (await announced(rig, GARAGE))[GARAGE]
    assert {c["interface"] for c in first["capabilities"]} == {"Temperature", "Humidity", "Switch"}

    send(rig, "homeassistant/sensor/garagedoor1/garage_humidity/config", "", retain=True)
    await rig.wait_events(2, "AddOrUpdateReport", endpoint=GARAGE)
    second = rig.events("AddOrUpdateReport", endpoint=GARAGE)[-1].message["payload"]["endpoints"][0]
    assert {c["interface"] for c in second["capabilities"]} == {"Temperature", "Switch"}

    # The door's binary sensor (no device_class: an on/off sensor) is the last exported entity: its removal deletes
    # the device.
    send(rig, "homeassistant/sensor/garagedoor1/garage_temperature/config", "", retain=True)
    send(rig, "homeassistant/light/garagedoor1/garage_esp_status_led/config", "", retain=True)
    send(rig, "homeassistant/binary_sensor/garagedoor1/garage_door_position/config", "", retain=True)
    await rig.wait_events(1, "DeleteReport", endpoint=GARAGE)
    assert GARAGE not in await devices(rig)
    _, body = await rig.hub.get("/api/devices")
    assert body["unexported"] == []
    await settle(rig)
    assert len(rig.events("DeleteReport", endpoint=GARAGE)) == 1


async def test_with_both_imports_a_device_zigbee2mqtt_announces_twice_is_imported_once_natively(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}, "zigbee2mqtt": {"enabled": True}})
    ieee = "0x000b57fffec6a5b2"
    send(rig, "zigbee2mqtt/bridge/devices", entries("ikea_LED1545G12_bulb"), retain=True)
    send_fixture(rig, "z2m_light_LED1545G12")  # the same bulb through zigbee2mqtt's discovery
    sensor = EspHomeClimateSensor(rig.broker.host, rig.broker.port)
    try:
        await sensor.start()
        await wait_devices(rig, ieee, PORCH)
        await rig.bind()
        await announced(rig, ieee, PORCH)
        await settle(rig)

        found = await devices(rig)
        assert found[ieee]["source"] == "zigbee2mqtt" and found[PORCH]["source"] == "homeassistant"
        assert HALL_BULB not in found
        _, body = await rig.hub.get("/api/devices")
        assert body["unexported"] == []  # left to the native import, not left out
        assert not rig.events(endpoint=HALL_BULB)
    finally:
        await sensor.stop()


async def test_poison_messages_are_counted_and_hubd_goes_on(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}, "zigbee2mqtt": {"enabled": True}})
    send(rig, "zigbee2mqtt/bridge/devices", entries("aqara_MCCGQ11LM_contact"), retain=True)
    contact = "0x00158d00091e7bd6"
    await wait_devices(rig, contact)
    await rig.bind()
    await announced(rig, contact)

    send(rig, "homeassistant/sensor/deep/config", '{"a":' * 2000 + "1" + "}" * 2000)
    send(rig, "homeassistant/sensor/bad/t/config",
         {"name": "T", "stat_t": "bad/t", "uniq_id": "bad_t", "dev_cla": "temperature", "unit_of_meas": "°C",
          "val_tpl": "{{ value_json.t / 0 }}"}, retain=True)
    await wait_devices(rig, "bad_t")
    send(rig, "bad/t", {"t": 1}, retain=True)  # retained: the topic may be subscribed to only after this
    contact_expose = {"type": "binary", "name": "contact", "property": "contact", "access": 1, "value_on": False,
                      "value_off": True}
    many = [{"ieee_address": f"0x{i:016x}", "friendly_name": f"d{i}", "type": "EndDevice", "supported": True,
             "interview_completed": True, "definition": {"model": "MCCGQ11LM", "exposes": [contact_expose]}}
            for i in range(10_000)]
    send(rig, "zigbee2mqtt/bridge/devices", many, retain=True)
    await rig.hub.wait_for(lambda: invalid_total(rig.hub, 3), what="three invalid messages counted")

    status, health = await rig.hub.get("/healthz")
    assert status == 200 and health["status"] == "ok"
    send(rig, "zigbee2mqtt/Contact sensor", {"contact": False, "battery": 100})  # open: still imported
    await wait_change(rig, contact, "Switch", "On")
    await settle(rig)
    assert not rig.events("DeleteReport")
    _, text = await rig.hub.get("/metrics")
    kinds = {line.split("{")[1].split("}")[0]: float(line.split()[-1]) for line in str(text).splitlines()
             if line.startswith("hubd_device_messages_invalid_total{")}
    assert kinds.get('kind="config"', 0) >= 2 and kinds.get('kind="state"', 0) >= 1, kinds
