"""The simulated zigbee2mqtt bridge (simulators.zigbee2mqtt_bridge) against a real mosquitto, observed with plain
paho: its bridge topics and device list are zigbee2mqtt 2.x's (each definition is its fixture's, exactly), `/set`
changes and republishes the whole state, a click is an action then an empty action, renames and removals move
topics as zigbee2mqtt's bridge requests do, and the last will marks the bridge offline. The last test feeds what it
published to hubd's zigbee2mqtt dialect.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from mosquitto import Mosquitto
from mqtt_observer import WAIT_S, Observer, Seen, retained
from zigbee2mqtt_helpers import availability, configs, control, gone, make, presses, states

from hubd.dialects.base import DeviceInput
from simulators.zigbee2mqtt_bridge import Zigbee2MqttBridge, ZigbeeDevice, ZigbeeGroup, check_name
from simulators.zigbee2mqtt_converters import obey, parse_set
from simulators.zigbee2mqtt_models import (
    BTH_RA,
    HUE_GO_7146060PH,
    LED1545G12,
    MCCGQ11LM,
    MODELS,
    MS_104BZ,
    MS_108ZR,
    WSDCGQ11LM,
    WXKG11LM,
)

FIXTURES = Path(__file__).parent / "fixtures" / "zigbee2mqtt"
BASE = "zigbee2mqtt"
ONLINE, OFFLINE = b'{"state":"online"}', b'{"state":"offline"}'
# The fixture entry each model's definition is copied from.
DEFINITION_SOURCES = {
    "MCCGQ11LM": ("aqara_MCCGQ11LM_contact", "Contact sensor"),
    "WSDCGQ11LM": ("z2m_2.12.1_testsuite", "weather_sensor"),
    "LED1545G12": ("z2m_2.12.1_testsuite", "bulb"),
    "7146060PH": ("z2m_2.12.1_testsuite", "bulb_color_2"),
    "MS-104BZ": ("moes_MS-104BZ_dual_switch", "Moes switch double"),
    "WXKG11LM": ("z2m_2.12.1_testsuite", "button"),
    "MS-108ZR": ("moes_MS-108ZR_cover", "Window shutter"),
    "BTH-RA": ("bosch_BTH-RA_trv", "bosch_radiator"),
}
CONTACT, WEATHER, BULB, COLOUR, SWITCH, BUTTON, COVER, TRV = (
    "Back Door", "Garden/Weather", "Hall Bulb", "Hue Go", "Kitchen Switch", "Gate Button", "Blind", "Radiator")
IEEE = {CONTACT: "0x00158d00091e7bd6", WEATHER: "0x0017880104e45522", BULB: "0x000b57fffec6a5b2",
        COLOUR: "0x000b57fffec6a5b4", SWITCH: "0xcc86ecfffe4e9d25", BUTTON: "0x0017880104e45520",
        COVER: "0x70ac08fffee6dd5e", TRV: "0x18fc2600000d7ae2"}
# publish.ts publishDevices: the fields of an entry (those undefined left out).
ENTRY_FIELDS = {"ieee_address", "type", "network_address", "supported", "friendly_name", "disabled", "description",
                "definition", "power_source", "software_build_id", "date_code", "model_id", "interviewing",
                "interview_completed", "interview_state", "manufacturer", "endpoints"}


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


def fixture_entry(name: str, friendly_name: str) -> dict[str, Any]:
    return next(e for e in fixture(name)["devices"] if e["friendly_name"] == friendly_name)


def home(**options: dict[str, Any]) -> list[ZigbeeDevice]:
    """One device of each model (options by name); the weather sensor's name has a slash, as zigbee2mqtt allows."""
    models = {CONTACT: MCCGQ11LM, WEATHER: WSDCGQ11LM, BULB: LED1545G12, COLOUR: HUE_GO_7146060PH, SWITCH: MS_104BZ,
              BUTTON: WXKG11LM, COVER: MS_108ZR, TRV: BTH_RA}
    return [ZigbeeDevice(model, name, IEEE[name], **options.get(name, {})) for name, model in models.items()]


def topic(name: str, rest: str = "", base: str = BASE) -> str:
    return f"{base}/{name}" + (f"/{rest}" if rest else "")


def _stable(payload: Any) -> bytes:
    """zigbee2mqtt's json-stable-stringify."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def decode(dialect: Any, seen: list[Seen]) -> list[DeviceInput]:
    """What hubd's dialect makes of these messages, as the bridge component would hand them over."""
    return [i for m in seen if dialect.claims(m.topic)
            for i in dialect.decode(m.topic, m.payload, 1_700_000_000.0 + m.seq, m.retain)]


Run = Callable[[Zigbee2MqttBridge], Any]


@pytest.fixture
async def run(mosquitto: Mosquitto) -> AsyncIterator[Run]:
    """run(bridge): an observer subscribed to everything, then the bridge started; the observer sees it all live.
    Returns the observer once the bridge has announced itself."""
    bridges: list[Zigbee2MqttBridge] = []
    observers: list[Observer] = []

    async def start(bridge: Zigbee2MqttBridge) -> Observer:
        observer = Observer(mosquitto.host, mosquitto.port)
        observers.append(observer)
        await observer.start()
        bridges.append(bridge)
        await bridge.start()
        last = list(bridge.devices)[-1]
        await observer.next(topic(last, base=bridge.base_topic))
        return observer

    yield start
    for bridge in bridges:
        await bridge.stop()
    for observer in observers:
        await observer.stop()


def test_every_model_is_its_fixture_definition_exactly() -> None:
    assert sorted(MODELS) == sorted(DEFINITION_SOURCES)
    for model, (name, friendly_name) in DEFINITION_SOURCES.items():
        entry = fixture_entry(name, friendly_name)
        assert MODELS[model].definition == entry["definition"], model
        fields = {k: v for k, v in MODELS[model].zigbee.items() if k != "endpoints"}
        assert fields == {k: entry[k] for k in fields}, model
        listed = ZigbeeDevice(MODELS[model], friendly_name, entry["ieee_address"]).entry()
        assert set(listed) <= ENTRY_FIELDS and set(entry) <= ENTRY_FIELDS | {"description"}, model
        assert {k: listed[k] for k in ("definition", "friendly_name", "ieee_address", "supported", "disabled",
                                       "interview_completed", "interviewing")} == \
            {k: entry[k] for k in ("definition", "friendly_name", "ieee_address", "supported", "disabled",
                                   "interview_completed", "interviewing")}, model


async def test_the_bridge_announces_itself_and_retains_what_zigbee2mqtt_retains(
        run: Run, mosquitto: Mosquitto) -> None:
    bridge = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, home(**{COVER: {"retain": True}}))
    obs = await run(bridge)

    # zigbee2mqtt's order: bridge/state, bridge/devices, bridge/groups, then each device's availability and state.
    assert [(m.topic, m.qos) for m in obs.seen.items] == [
        (f"{BASE}/bridge/state", 1), (f"{BASE}/bridge/devices", 0), (f"{BASE}/bridge/groups", 0),
        *((t, q) for name in IEEE for t, q in ((topic(name, "availability"), 1), (topic(name), 0)))]
    assert obs.seen.items[0].payload == ONLINE
    listed = obs.seen.items[1]
    devices = listed.json()
    assert listed.payload == _stable(devices)
    coordinator = next(e for e in fixture("z2m_2.12.1_testsuite")["devices"] if e["type"] == "Coordinator")
    assert devices[0] == coordinator
    assert [(e["friendly_name"], e["ieee_address"]) for e in devices[1:]] == list(IEEE.items())
    for entry, device in zip(devices[1:], bridge.devices.values(), strict=True):
        assert entry["definition"] == device.model.definition
        assert (entry["interview_completed"], entry["interview_state"], entry["interviewing"], entry["supported"],
                entry["disabled"]) == (True, "SUCCESSFUL", False, True, False)
    # Each state is the whole cached state with linkquality, as the real ones (WSDCGQ11LM's is a real one's).
    weather = next(m for m in obs.seen.items if m.topic == topic(WEATHER))
    assert weather.json() == {"battery": 100, "humidity": 44.43, "linkquality": 87, "power_outage_count": 1616,
                              "pressure": 957.4, "temperature": 20.74, "voltage": 3025}
    assert next(m for m in obs.seen.items if m.topic == topic(CONTACT)).json()["contact"] is True  # closed

    kept = {m.topic: m.payload for m in await retained(mosquitto)}
    assert kept == {f"{BASE}/bridge/state": ONLINE, f"{BASE}/bridge/devices": listed.payload,
                    f"{BASE}/bridge/groups": b"[]", **{topic(name, "availability"): ONLINE for name in IEEE},
                    topic(COVER): next(m.payload for m in obs.seen.items if m.topic == topic(COVER))}  # retain: true


async def test_a_set_changes_the_state_and_publishes_it_whole(run: Run, mosquitto: Mosquitto) -> None:
    bridge = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, home())
    obs = await run(bridge)

    async def command(name: str, payload: str, rest: str = "set") -> dict[str, Any]:
        mark, count = obs.mark(), len(bridge.received)
        await obs.publish(topic(name, rest), payload)
        await bridge.wait_until(lambda: len(bridge.received) > count, WAIT_S)
        answer: dict[str, Any] = (await obs.next(topic(name), after=mark)).json()
        assert answer == {**bridge.device(name).state, "linkquality": 87}
        return answer

    assert await command(BULB, '{"state":"ON","brightness":200}') == {
        "brightness": 200, "color_mode": "color_temp", "color_temp": 454, "linkquality": 87, "state": "ON"}
    assert (await command(BULB, "OFF"))["state"] == "OFF"  # not JSON: the state (publish.ts parseMessage)
    assert (await command(BULB, '{"state":"TOGGLE"}'))["state"] == "ON"
    off = await command(BULB, '{"brightness":0}')
    assert (off["state"], off["brightness"]) == ("OFF", 200)
    on = await command(BULB, "40", "set/brightness")
    assert (on["state"], on["brightness"]) == ("ON", 40)
    assert (await command(BULB, '{"color_temp":"warmest"}'))["color_temp"] == 454  # a preset of its definition
    assert (await command(BULB, '{"color_temp":100}'))["color_temp"] == 250  # clamped to value_min
    # Colours become CIE x/y (sRGB gamma, Wide RGB D65), colour temperature synced and clamped.
    orange = await command(COLOUR, '{"color":{"hex":"#ff8800"}}')
    assert orange["color_mode"] == "xy" and orange["color_temp"] == 500
    assert orange["color"] == pytest.approx({"x": 0.601, "y": 0.3837}, abs=0.001)
    green = await command(COLOUR, '{"color":{"x":0.1,"y":0.5}}')
    assert (green["color"], green["color_mode"], green["color_temp"]) == ({"x": 0.1, "y": 0.5}, "xy", 150)
    switch = await command(SWITCH, '{"state_l2":"ON"}')
    assert (switch["state_l1"], switch["state_l2"]) == ("OFF", "ON")
    assert (await command(COVER, '{"position":50}'))["position"] == 50
    closed = await command(COVER, '{"state":"CLOSE"}')
    assert (closed["state"], closed["position"]) == ("CLOSE", 0)
    assert (await command(TRV, '{"occupied_heating_setpoint":21.3}'))["occupied_heating_setpoint"] == 21.5
    # Nothing to publish for what no converter takes; /get republishes the state as it is.
    mark = obs.mark()
    before = dict(bridge.device(BULB).state)
    await obs.publish(topic(BULB, "set"), '{"frobnicate":1}')
    assert await command(BULB, '{"state":""}', "get") == {**before, "linkquality": 87}
    assert len([m for m in obs.since(mark) if m.topic == topic(BULB)]) == 1
    sets = [r for r in bridge.received if r.topic.endswith("/set") or "/set/" in r.topic]
    assert len(sets) == 14 and sets[-1].json() == {"frobnicate": 1}
    assert sets[0].topic == topic(BULB, "set") and sets[0].json() == {"state": "ON", "brightness": 200}


def test_converters_refuse_what_zigbee2mqtt_refuses() -> None:
    bulb = LED1545G12.fresh_state()
    assert obey(LED1545G12, bulb, {"effect": "blink"}) == ({}, [])  # access 2: set, never published
    update, problems = obey(LED1545G12, bulb, {"brightness": "bright", "state": "maybe", "linkquality": 3})
    assert update == {}
    assert problems == ["Publish 'set' 'brightness' failed: 'brightness takes a number, not 'bright''",
                        "Publish 'set' 'state' failed: 'state is 'ON' or 'OFF' or 'TOGGLE''",
                        "No converter available for 'linkquality' (3)"]
    assert obey(LED1545G12, bulb, {"state": "OFF", "brightness": 99}) == ({"state": "OFF"}, [])
    assert obey(MS_104BZ, MS_104BZ.fresh_state(), {"state_l3": "ON"})[1] == ["No converter available for 'state_l3' "
                                                                            "('ON')"]
    assert obey(MCCGQ11LM, MCCGQ11LM.fresh_state(), {"contact": False})[0] == {}  # read-only
    assert obey(MS_108ZR, MS_108ZR.fresh_state(), {"state": "stop"}) == ({"moving": "STOP"}, [])
    # publish.ts parseMessage: JSON objects; a bare state word; `/set/<attribute>` takes the value alone.
    assert (parse_set("OFF", ""), parse_set("dim", ""), parse_set("40", ""), parse_set("40", "brightness"),
            parse_set("warm", "color_temp")) == ({"state": "OFF"}, None, None, {"brightness": 40},
                                                 {"color_temp": "warm"})
    for bad in ("", "/Hall", "Hall/", "Hall/2", "Hall+", "Hall#"):
        with pytest.raises(ValueError, match=r"(?i)friendly"):
            check_name(bad)
    check_name("Garden/Weather")


async def test_a_press_publishes_the_action_then_an_empty_action(run: Run, mosquitto: Mosquitto) -> None:
    bridge = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, home(**{BUTTON: {"linkquality": 10}}))
    obs = await run(bridge)

    mark = obs.mark()
    await bridge.press(BUTTON)
    await bridge.press(BUTTON, "double")
    double = await obs.next(topic(BUTTON), after=mark, pred=lambda m: m.json().get("action") == "double")
    await obs.next(topic(BUTTON), after=double.seq + 1, pred=lambda m: m.json().get("action") == "")
    clicks = [m for m in obs.since(mark) if m.topic == topic(BUTTON)]
    assert [(m.json()["action"], m.retain) for m in clicks] == [("single", False), ("", False), ("double", False),
                                                                ("", False)]
    assert clicks[0].json() == {"action": "single", "battery": 100, "device_temperature": 24, "linkquality": 10,
                                "power_outage_count": 3, "voltage": 3005}
    assert "action" not in bridge.device(BUTTON).state  # lib/state.ts never caches it
    with pytest.raises(ValueError, match="does not send action 'shake'"):
        await bridge.press(BUTTON, "shake")
    with pytest.raises(ValueError, match="LED1545G12 does not send"):
        await bridge.press(BULB)
    with pytest.raises(KeyError, match="Device 'Doorbell' does not exist"):
        await bridge.press("Doorbell")

    # zigbee2mqtt 2.x's default (no legacy action sensor): the action alone.
    plain = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, [ZigbeeDevice(WXKG11LM, "b", "0x01")],
                              base_topic="z2m-two", legacy_action_sensor=False)
    obs_two = await run(plain)
    mark = obs_two.mark()
    await plain.press("b")
    await obs_two.publish("z2m-two/b/get", "")
    reply = await obs_two.next("z2m-two/b", after=mark, pred=lambda m: "action" not in m.json())
    assert [m.json().get("action") for m in obs_two.since(mark) if m.topic == "z2m-two/b" and m.seq <= reply.seq] \
        == ["single", None]


async def test_rename_moves_the_state_topic_and_updates_bridge_devices(run: Run, mosquitto: Mosquitto) -> None:
    bridge = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, home(**{BULB: {"retain": True}}))
    obs = await run(bridge)

    mark = obs.mark()
    await bridge.rename(BULB, "Hall/Ceiling")
    moved = await obs.next(topic("Hall/Ceiling"), after=mark)
    listed = next(m for m in obs.since(mark) if m.topic == f"{BASE}/bridge/devices").json()
    # bridge.ts renameEntity's order: clear the old state, the availability moves, bridge/devices, the state.
    assert [(m.topic, m.payload) for m in obs.since(mark)] == [
        (topic(BULB), b""), (topic(BULB, "availability"), b""), (topic("Hall/Ceiling", "availability"), ONLINE),
        (f"{BASE}/bridge/devices", _stable(listed)),
        (topic("Hall/Ceiling"), moved.payload)]
    assert [(e["friendly_name"], e["ieee_address"]) for e in listed][3] == ("Hall/Ceiling", IEEE[BULB])
    kept = {m.topic for m in await retained(mosquitto)}
    assert {topic("Hall/Ceiling"), topic("Hall/Ceiling", "availability")} <= kept
    assert not {topic(BULB), topic(BULB, "availability")} & kept
    # It listens on the new name only.
    count = len(bridge.received)
    await obs.publish(topic(BULB, "set"), "OFF")
    await obs.publish(topic("Hall/Ceiling", "set"), '{"state":"OFF"}')
    await bridge.wait_until(lambda: len(bridge.received) > count, WAIT_S)
    assert [r.topic for r in bridge.received[count:]] == [topic("Hall/Ceiling", "set")]

    # The same through zigbee2mqtt's API, with its responses.
    mark = obs.mark()
    await obs.publish(f"{BASE}/bridge/request/device/rename",
                      json.dumps({"from": IEEE[BULB], "to": "Hall Bulb 2", "transaction": "t1"}))
    response = await obs.next(f"{BASE}/bridge/response/device/rename", after=mark)
    assert response.json() == {"data": {"from": "Hall/Ceiling", "homeassistant_rename": False, "to": "Hall Bulb 2"},
                               "status": "ok", "transaction": "t1"}
    await obs.publish(f"{BASE}/bridge/request/device/rename", json.dumps({"from": "Nope", "to": "X"}))
    refused = await obs.next(f"{BASE}/bridge/response/device/rename", after=response.seq + 1)
    assert refused.json() == {"data": {}, "error": "Device 'Nope' does not exist", "status": "error"}
    with pytest.raises(ValueError, match="already in use"):
        await bridge.rename(CONTACT, SWITCH)


async def test_remove_clears_the_state_and_lists_the_device_no_more(run: Run, mosquitto: Mosquitto) -> None:
    bridge = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, home(**{CONTACT: {"retain": True}}))
    obs = await run(bridge)

    mark = obs.mark()
    await obs.publish(f"{BASE}/bridge/request/device/remove", json.dumps({"id": CONTACT}))
    response = await obs.next(f"{BASE}/bridge/response/device/remove", after=mark)
    assert response.json() == {"data": {"block": False, "force": False, "id": CONTACT}, "status": "ok"}
    listed = next(m for m in obs.since(mark) if m.topic == f"{BASE}/bridge/devices").json()
    assert CONTACT not in [e["friendly_name"] for e in listed] and len(listed) == len(IEEE)
    kept = {m.topic: m.payload for m in await retained(mosquitto)}
    assert topic(CONTACT) not in kept
    assert kept[topic(CONTACT, "availability")] == ONLINE  # zigbee2mqtt 2.12.1 leaves it, and so does the simulator
    with pytest.raises(KeyError):
        bridge.device(CONTACT)

    # Pairing a new one lists it, with its availability and state.
    mark = obs.mark()
    await bridge.pair(ZigbeeDevice(MCCGQ11LM, "Front Door", "0x00158d0001a2b3c4"))
    state = await obs.next(topic("Front Door"), after=mark)
    assert state.json()["contact"] is True
    assert [m.topic for m in obs.since(mark)] == [f"{BASE}/bridge/devices", topic("Front Door", "availability"),
                                                  topic("Front Door")]


async def test_stopping_or_losing_the_bridge_marks_it_offline(run: Run, mosquitto: Mosquitto) -> None:
    first = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, [ZigbeeDevice(MCCGQ11LM, CONTACT, IEEE[CONTACT])])
    second = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, [ZigbeeDevice(WXKG11LM, BUTTON, IEEE[BUTTON])],
                               base_topic="z2m-two")
    obs = await run(first)
    await run(second)
    await obs.next(topic(BUTTON, base="z2m-two"))

    mark = obs.mark()
    await first.set_offline(CONTACT)
    assert (await obs.next(topic(CONTACT, "availability"), after=mark)).payload == OFFLINE
    await first.stop_bridge()
    assert (await obs.next(f"{BASE}/bridge/state", after=mark)).payload == OFFLINE
    await second.kill()
    assert (await obs.next("z2m-two/bridge/state", after=mark)).payload == OFFLINE  # its will
    kept = {m.topic: m.payload for m in await retained(mosquitto)}
    assert (kept[f"{BASE}/bridge/state"], kept["z2m-two/bridge/state"]) == (OFFLINE, OFFLINE)
    assert (kept[topic(CONTACT, "availability")], kept[topic(BUTTON, "availability", "z2m-two")]) == (OFFLINE, ONLINE)

    await second.start()  # a new session announces itself again
    await obs.next("z2m-two/bridge/state", after=mark, pred=lambda m: m.payload == ONLINE)
    assert second.announced == 2


async def test_hubd_imports_what_the_bridge_publishes(run: Run, mosquitto: Mosquitto) -> None:
    """The messages on the wire, fed to hubd's zigbee2mqtt dialect: endpoints by ieee_address, exported values,
    one doorbell press per click, renames keep the endpoint, a control moves the bulb, the will makes all offline."""
    bridge = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, home())
    obs = await run(bridge)
    mark = obs.mark()
    await bridge.set_contact(CONTACT, closed=False)
    await bridge.set_temperature(WEATHER, 23.456)
    await bridge.press(BUTTON)
    await bridge.rename(SWITCH, "Kitchen/Switch")
    await obs.next(topic("Kitchen/Switch"), after=mark)

    dialect = make(doorbells=[{"device": BUTTON, "event": "single"}])
    inputs = decode(dialect, obs.seen.items)
    found = configs(inputs)
    assert sorted(found) == sorted([*IEEE.values(), f"{IEEE[SWITCH]}-state_l2", f"{IEEE[TRV]}-local_temperature"])
    assert {name: found[ieee].config.displayType for name, ieee in IEEE.items()} == {
        CONTACT: "unknown", WEATHER: "unknown", BULB: "light", COLOUR: "light", SWITCH: "switch", BUTTON: "unknown",
        COVER: "curtain", TRV: "thermostat"}
    assert found[IEEE[SWITCH]].config.displayName == "Kitchen/Switch"  # renamed, same endpoint
    got = states(inputs)
    assert got[IEEE[CONTACT]] == {"Switch": "On"}  # open
    assert got[IEEE[WEATHER]] == {"Temperature": 23.46, "Humidity": 44}
    assert presses(inputs) == [IEEE[BUTTON]]  # the empty action that follows presses nothing
    assert set(availability(inputs).values()) == {True}

    # A control as hubd sends it; the bulb obeys and its new state reads back.
    mark = obs.mark()
    ((command_topic, body),) = control(dialect, found[IEEE[BULB]], "Brightness", "Set", 40)
    assert command_topic == topic(BULB, "set")
    await obs.publish(command_topic, json.dumps(body))
    await obs.next(topic(BULB), after=mark)
    assert bridge.device(BULB).state["brightness"] == 102
    assert states(decode(dialect, obs.since(mark)))[IEEE[BULB]]["Brightness"] == 40

    mark = obs.mark()
    await bridge.remove(COVER)
    await obs.next(f"{BASE}/bridge/devices", after=mark)
    await bridge.kill()
    await obs.next(f"{BASE}/bridge/state", after=mark)
    later = decode(dialect, obs.since(mark))
    assert gone(later) == [IEEE[COVER]]
    assert set(availability(later).values()) == {False} and IEEE[BULB] in availability(later)


async def test_a_group_set_reaches_every_member_then_the_group_state_and_bridge_groups_follow_changes(
        run: Run, mosquitto: Mosquitto) -> None:
    lights = ZigbeeGroup(1, "Living room", [BULB, COLOUR], description="the two lamps")
    bridge = Zigbee2MqttBridge(mosquitto.host, mosquitto.port, home(), groups=[lights])
    obs = await run(bridge)
    listed = (await obs.next(f"{BASE}/bridge/groups")).json()
    assert listed == [{"description": "the two lamps", "friendly_name": "Living room", "id": 1,
                       "members": [{"endpoint": 1, "ieee_address": IEEE[BULB]},
                                   {"endpoint": 1, "ieee_address": IEEE[COLOUR]}], "scenes": []}]

    mark = obs.mark()
    await obs.publish(topic("Living room", "set"), '{"state":"ON","brightness":100}')
    group = (await obs.next(topic("Living room"), after=mark)).json()
    assert group == {"brightness": 100, "state": "ON"}
    for name in (BULB, COLOUR):
        assert (bridge.device(name).state["state"], bridge.device(name).state["brightness"]) == ("ON", 100)
    assert bridge.device(SWITCH).state["state_l1"] == "OFF"  # not a member

    mark = obs.mark()
    await bridge.set_group(ZigbeeGroup(1, "Lounge", [COLOUR]))
    renamed = (await obs.next(f"{BASE}/bridge/groups", after=mark)).json()
    assert [(g["friendly_name"], [m["ieee_address"] for m in g["members"]]) for g in renamed] == \
        [("Lounge", [IEEE[COLOUR]])]
    mark = obs.mark()
    await bridge.remove_group("Lounge")
    assert (await obs.next(f"{BASE}/bridge/groups", after=mark)).json() == []
