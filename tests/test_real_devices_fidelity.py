"""Issue 24, one test per defect: what real producers announce (zigbee2mqtt, ESPHome, Tasmota, OpenMQTTGateway,
rtl_433, a Shelly script; tests/fixtures/homeassistant and tests/fixtures/zigbee2mqtt, each with its source) must
reach the platform as its owner would say it. Pure: decoded inputs in, inputs and publishes out; no broker."""

from __future__ import annotations

import json
import re
from typing import Any

import homeassistant_helpers as ha
import pytest
import zigbee2mqtt_helpers as z2m

from hubd.devices.conformance import conform_config
from hubd.devices.model import StateValue
from hubd.dialects.base import (
    AvailabilityReceived,
    CommandRefused,
    ConfigReceived,
    DeviceInput,
    InputRejected,
    Outgoing,
)
from hubd.dialects.homeassistant.dialect import HomeAssistantDialect

PLUG = "zigbee2mqtt_0x0017880104e45524"  # zigbee2mqtt's ZNCZ02LM plug, through discovery
GATEWAY = "240AC4EC20DC"  # an OpenMQTTGateway
SIREN = "zigbee2mqtt_0x0017880104e45549"
RM230Z = "zigbee2mqtt_0x18fc2600000d7ae3"  # Bosch room thermostat, through discovery
CENTRALITE = "0x000d6f000a5b3c21"  # a heat/cool thermostat: natively, and through discovery with this prefix
SHELLY = "cc7b5c8aea2c"
ESP = "20500de464ec"
TASMOTA_BUTTON_BOARD = "FB6A07"


def _sent(outgoing: list[Outgoing]) -> list[tuple[str, str]]:
    return [(o.topic, o.payload.decode()) for o in outgoing]


def _configs_in_order(name: str, *, reverse: bool = False) -> list[tuple[str, bytes]]:
    found = [(c["topic"], ha.raw(c["payload"])) for c in ha.fixture(name)["configs"]]
    return found[::-1] if reverse else found


def _feed(dialect: HomeAssistantDialect, messages: list[tuple[str, bytes]]) -> list[DeviceInput]:
    return [i for topic, payload in messages for i in dialect.decode(topic, payload, ha.NOW, True)]


def _adapted(name: str, index: int, **changes: Any) -> tuple[str, bytes]:
    """A fixture's config with some keys changed (for input no producer we found sends, but the issue reports)."""
    config = ha.fixture(name)["configs"][index]
    payload = config["payload"]
    data = json.loads(payload) if isinstance(payload, str) else dict(payload)
    data.update(changes)
    return config["topic"], ha.raw(data)


# A config or diagnostic entity never takes a device: the device's own endpoint carries its primary function.


@pytest.mark.parametrize("reverse", [False, True], ids=["config switch first", "relay first"])
def test_a_zigbee2mqtt_plugs_config_switch_never_becomes_the_plug(reverse: bool) -> None:
    dialect = ha.make()
    inputs = _feed(dialect, _configs_in_order("z2m_plug_ZNCZ02LM", reverse=reverse))

    found = ha.configs(inputs)
    assert list(found) == [PLUG]  # power_outage_memory (entity_category config) is no endpoint of its own either
    plug = found[PLUG]
    assert (plug.config.displayType, ha.operations(plug)) == ("switch", {"Switch": ("On", "Off")})
    assert _sent(dialect.encode_control(PLUG, plug.route, ha.request("Switch", "Off", "Off"))) == \
        [("zigbee2mqtt/power_plug/set", "OFF")]  # the relay's topic, not .../set/power_outage_memory
    notes = {n.name: n for n in plug.origin.entities}
    assert not notes["switch.switch_power_outage_memory"].exported
    assert "entity_category config" in notes["switch.switch_power_outage_memory"].reason
    assert ha.states(ha.replay_states(dialect, "z2m_plug_ZNCZ02LM")) == {PLUG: {"Switch": "Off"}}


def test_a_config_switch_alone_announces_no_device() -> None:
    dialect = ha.make()
    config_switch = _configs_in_order("z2m_plug_ZNCZ02LM")[0]
    assert "power_outage_memory" in config_switch[0]

    assert ha.configs(_feed(dialect, [config_switch])) == {}


def test_openmqttgateway_erase_and_restart_switches_never_become_the_gateway() -> None:
    """OpenMQTTGateway announces 'SYS: Erase credentials' and 'SYS: Restart gateway' as switches of the gateway
    (without an entity_category): a voice's "turn on" must never erase or restart it."""
    dialect = ha.make()
    found = ha.configs(ha.announce(dialect, "openmqttgateway_pilight_temperature", "openmqttgateway_gateway_system"))

    assert "Temperature" in ha.operations(found[GATEWAY])  # what the gateway measures stays on its own endpoint
    commands = []
    for item in found.values():
        for operation in ha.operations(item).get("Switch", ()):
            commands += _sent(dialect.encode_control(item.device_id, item.route,
                                                     ha.request("Switch", operation, operation)))
    assert not [c for c in commands if "erase" in c[1] or "restart" in c[1]], commands
    notes = {n.name: n for item in found.values() for n in item.origin.entities}
    assert not notes[f"switch.{GATEWAY}-erase"].exported and not notes[f"switch.{GATEWAY}-restart"].exported


# Names: the source's name, else the model; an identifier is never spelled out; stable while entities arrive.


_SPELLED_DIGITS = re.compile(r"\b(Zero|One|Two|Three|Four|Five|Six|Seven|Eight|Nine|Ten|Eleven|Twelve|Hundred|"
                             r"Thousand|Million|Billion)\b")


def _platform_name(item: ConfigReceived) -> str:
    """The displayName the platform gets (hubd's conformance of every config: numbers spelled as words)."""
    return conform_config(item.config)[0].displayName


def test_an_unrenamed_zigbee2mqtt_bulb_is_named_after_its_model_not_its_ieee_address() -> None:
    unrenamed = z2m.configs(z2m.announce(z2m.make(), z2m.entries("z2m_2.12.1_testsuite")))["0x000b57fffec6a5c2"]

    name = _platform_name(unrenamed)
    assert "0x" not in unrenamed.config.displayName and not _SPELLED_DIGITS.search(name), name
    assert name.startswith("IKEA TRADFRI"), name  # vendor IKEA, description "TRADFRI bulb E26/E27, ..."


def test_an_rtl_433_sensor_is_not_named_after_its_id() -> None:
    sensor = ha.configs(ha.announce(ha.make(), "rtl_433_acurite_986"))["Acurite-986-1R-51778"]

    name = _platform_name(sensor)
    assert "51778" not in sensor.config.displayName and "Thousand" not in name, name
    assert name.startswith("Acurite"), name


def test_a_shelly_named_after_its_mac_is_not_named_after_it() -> None:
    device = ha.configs(ha.announce(ha.make(), "shelly_plusi4_CC7B5C8AEA2C"))[SHELLY]

    name = _platform_name(device)
    assert SHELLY not in device.config.displayName.casefold(), device.config.displayName
    assert not re.search(r"\b(Seven|Five|Eight|Two)\b", name), name  # the digits of cc7b5c8aea2c, spelled


@pytest.mark.parametrize(("name", "expected"), [("tasmota_bme280_DC4492", {"DC4492": "Thermometer"}),
                                              ("tasmota_six_gang_860695", {"860695": "Switch 1",
                                                                           "860695-860695_RL_2": "Switch 2"})],
                         ids=["sensors", "relays"])
def test_a_nameless_tasmota_devices_names_do_not_depend_on_the_order_its_entities_arrive_in(
        name: str, expected: dict[str, str]) -> None:
    """Tasmota's legacy discovery gives its entities no device name (only its status sensor, last, has one): each
    endpoint is named after the entities it carries, the same in either order, and never keeps the name of a relay
    it no longer switches (the second relay announced first is the device until the first arrives)."""
    for reverse in (False, True):
        dialect = ha.make()
        entities = [m for m in _configs_in_order(name, reverse=reverse) if not m[0].endswith("_status/config")]
        last: dict[str, str] = {}
        for item in _feed(dialect, entities):
            if isinstance(item, ConfigReceived):
                last[item.device_id] = item.config.displayName
                for entity in json.loads(item.route.address)["entities"]:  # a relay's endpoint bears its name
                    if entity["config"].get("command_topic", "").endswith(("POWER1", "POWER2")):
                        assert item.config.displayName == entity["config"]["name"], (reverse, item)
        assert last == expected, reverse


def test_a_split_off_tasmota_relay_is_named_after_itself_not_glued_to_the_device_name() -> None:
    found = ha.configs(ha.announce(ha.make(), "tasmota_six_gang_860695"))
    [split] = [item for device_id, item in found.items() if device_id != "860695"]

    assert split.config.displayName.endswith("Switch 2"), split.config.displayName
    assert "Switch 1" not in split.config.displayName, split.config.displayName


# A blank unit is no unit.


def test_a_tasmota_reading_with_a_blank_unit_is_never_a_temperature() -> None:
    dialect = ha.make()
    inputs = ha.announce(dialect, "tasmota_opentherm_BB050B", "tasmota_bme280_DC4492")
    inputs += ha.replay_states(dialect, "tasmota_opentherm_BB050B") + ha.replay_states(dialect, "tasmota_bme280_DC4492")

    assert "BB050B" not in ha.configs(inputs)  # OT10 812 is no 812 °C
    assert ha.operations(ha.configs(inputs)["DC4492"]) == {"Humidity": (), "Temperature": ()}
    assert ha.states(inputs)["DC4492"]["Temperature"] == 21.2  # the status sensor's RSSI "100" is no 100 °C
    left_out = dialect.unexported_devices()
    assert any("OT10" in line for device in left_out for line in device.reasons), left_out


# A Tasmota light's on/off state is read.


def test_a_tasmota_lights_on_off_state_is_read_from_its_val_tpl() -> None:
    dialect = ha.make()
    light = ha.configs(ha.announce(dialect, "tasmota_mculed_AC54C1"))["AC54C1"]
    assert set(ha.operations(light)) == {"Switch", "Brightness", "Color"}
    on_state, off_state = (s for s in ha.fixture("tasmota_mculed_AC54C1")["states"] if s["topic"].endswith("STATE"))

    assert ha.states(ha.publish(dialect, on_state["topic"], on_state["payload"])) == \
        {"AC54C1": {"Switch": "On", "Brightness": 60, "Color": 0x990033}}
    assert ha.states(ha.publish(dialect, off_state["topic"], off_state["payload"]))["AC54C1"]["Switch"] == "Off"


# Thermostats: the setpoint of the current mode; the room temperature (and humidity) split off, by both imports.


def test_a_native_zigbee2mqtt_thermostat_in_cool_mode_reports_and_sets_its_cooling_setpoint() -> None:
    dialect = z2m.make()
    thermostat = z2m.configs(z2m.announce(dialect, z2m.entries("centralite_3157100_thermostat")))[CENTRALITE]
    assert thermostat.config.displayType == "ac"  # it has a cool mode
    cooling, heating = (z2m.states(z2m.publish(dialect, s["device"], s["payload"]))
                        for s in z2m.fixture("centralite_3157100_thermostat")["states"])

    assert cooling[CENTRALITE]["Temperature"] == 24 and cooling[CENTRALITE]["Mode"] == "Cool"
    assert cooling[f"{CENTRALITE}-local_temperature"] == {"Temperature": 27.5}
    assert heating[CENTRALITE]["Temperature"] == 20

    def set_to(value: float, mode: StateValue) -> list[tuple[str, Any]]:
        sent = dialect.encode_control(CENTRALITE, thermostat.route,
                                      z2m.request("Temperature", "Set", value, states={"Mode": mode}))
        return [(o.topic, json.loads(o.payload)) for o in sent]

    assert set_to(23, "Cool") == [("zigbee2mqtt/Hall thermostat/set", {"occupied_cooling_setpoint": 23})]
    assert set_to(21, "Heat") == [("zigbee2mqtt/Hall thermostat/set", {"occupied_heating_setpoint": 21})]


def test_a_discovery_thermostat_with_only_a_low_high_pair_has_the_setpoint_of_its_mode() -> None:
    dialect = ha.make()
    device_id = f"zigbee2mqtt_{CENTRALITE}"
    thermostat = ha.configs(ha.announce(dialect, "z2m_thermostat_centralite_3157100"))[device_id]
    assert ha.operations(thermostat)["Temperature"] == ("Set", "Adjust")
    _, cooling, heating = ha.fixture("z2m_thermostat_centralite_3157100")["states"]

    assert ha.states(ha.publish(dialect, cooling["topic"], cooling["payload"]))[device_id]["Temperature"] == 24
    assert ha.states(ha.publish(dialect, heating["topic"], heating["payload"]))[device_id]["Temperature"] == 20
    set_to = {mode: _sent(dialect.encode_control(device_id, thermostat.route,
                                                 ha.request("Temperature", "Set", 22, states={"Mode": mode})))
              for mode in ("Cool", "Heat")}
    assert set_to == {"Cool": [("zigbee2mqtt/Hall thermostat/set/occupied_cooling_setpoint", "22")],
                      "Heat": [("zigbee2mqtt/Hall thermostat/set/occupied_heating_setpoint", "22")]}


def _room_temperature(reported: dict[str, dict[str, StateValue]]) -> list[str]:
    """The endpoints other than the thermostat's that report the BTH-RM230Z's room temperature (19.6 °C)."""
    return [device_id for device_id, values in reported.items()
            if device_id != RM230Z and values.get("Temperature") == 19.6]


def test_a_discovery_thermostats_room_temperature_and_humidity_split_off_as_a_sensor() -> None:
    dialect = ha.make()
    climate = _configs_in_order("z2m_thermostat_BTH-RM230Z")[:1]
    found = ha.configs(_feed(dialect, climate))

    reported = ha.states(ha.replay_states(dialect, "z2m_thermostat_BTH-RM230Z"))
    assert reported[RM230Z]["Temperature"] == 20.5  # its setpoint in heat mode, the low one of its pair
    [room] = _room_temperature(reported)
    assert room.startswith(f"{RM230Z}-") and ha.operations(found[room])["Temperature"] == ()
    assert reported[room] == {"Temperature": 19.6, "Humidity": 48}  # "and Humidity if reported"


def test_a_zigbee2mqtt_thermostats_room_temperature_is_one_endpoint_though_announced_twice() -> None:
    """zigbee2mqtt 2.x announces a thermostat's local_temperature both in its climate config and as a sensor."""
    dialect = ha.make()
    ha.announce(dialect, "z2m_thermostat_BTH-RM230Z")

    rooms = _room_temperature(ha.states(ha.replay_states(dialect, "z2m_thermostat_BTH-RM230Z")))
    assert len(rooms) == 1, rooms


# What was missing: on/off sensors without a device class, sirens, locking by voice, a Tasmota doorbell.


def test_shelly_inputs_without_a_device_class_are_on_off_sensors() -> None:
    dialect = ha.make()
    inputs = ha.announce(dialect, "shelly_plusi4_CC7B5C8AEA2C")

    assert not [i for i in inputs if isinstance(i, InputRejected)], inputs
    found = ha.configs(inputs)
    assert len(found) == 4  # four inputs, each its own endpoint; the RSSI sensor is diagnostic
    assert {ha.operations(item)["Switch"] for item in found.values()} == {()}
    readings = [ha.states(ha.publish(dialect, s["topic"], s["payload"]))
                for s in ha.fixture("shelly_plusi4_CC7B5C8AEA2C")["states"] if "input:0" in s["topic"]]
    assert readings == [{SHELLY: {"Switch": "Off"}}, {SHELLY: {"Switch": "On"}}]
    assert AvailabilityReceived(SHELLY, True) in ha.publish(dialect, "shellyplusi4-cc7b5c8aea2c/online", "true")


def test_a_single_availability_object_is_read_as_a_list_of_one() -> None:
    """Found with the Shelly script: it gives `avty` as one object, which Home Assistant's schema takes
    (cv.ensure_list); refusing it refuses every entity of the device."""
    dialect = ha.make()
    inputs = ha.announce(dialect, "shelly_plusi4_CC7B5C8AEA2C")

    assert not [i.reason for i in inputs if isinstance(i, InputRejected)]
    assert ha.publish(dialect, "shellyplusi4-cc7b5c8aea2c/online", "false")[0] == AvailabilityReceived(SHELLY, False)


def test_a_zigbee2mqtt_siren_is_a_switch_that_sounds_and_stops() -> None:
    dialect = ha.make()
    siren = ha.configs(ha.announce(dialect, "z2m_siren_HS2WD-E"))[SIREN]

    assert (siren.config.displayType, ha.operations(siren)) == ("switch", {"Switch": ("On", "Off")})
    [(topic, on)] = _sent(dialect.encode_control(SIREN, siren.route, ha.request("Switch", "On", "On")))
    assert topic == "zigbee2mqtt/siren/set"
    assert json.loads(on) == {"warning": {"mode": "emergency", "level": "medium", "duration": 10}}
    assert _sent(dialect.encode_control(SIREN, siren.route, ha.request("Switch", "Off", "Off"))) == \
        [("zigbee2mqtt/siren/set", '{"warning": {"mode": "stop"}}')]


def test_an_esphome_lock_is_locked_by_voice_and_never_unlocked() -> None:
    dialect = ha.make()
    lock = ha.configs(ha.announce(dialect, "esphome_garagedoor1_lock"))[ESP]

    assert (lock.config.displayType, ha.operations(lock)) == ("door", {"Switch": ("On",)})
    assert _sent(dialect.encode_control(ESP, lock.route, ha.request("Switch", "On", "On"))) == \
        [("garagedoor1/lock/garage_door_lock/command", "LOCK")]
    with pytest.raises(CommandRefused):
        dialect.encode_control(ESP, lock.route, ha.request("Switch", "Off", "Off"))
    assert ha.states(ha.replay_states(dialect, "esphome_garagedoor1_lock")) == {ESP: {"Switch": "On"}}


def test_a_tasmota_button_declared_as_the_doorbell_rings_on_its_single_press_only() -> None:
    dialect = ha.make(doorbells=[{"device": TASMOTA_BUTTON_BOARD, "event": "button_1"}])
    ha.announce(dialect, "tasmota_relay_FB6A07", "tasmota_button_FB6A07")
    single, double, hold = (s for s in ha.fixture("tasmota_button_FB6A07")["states"])

    assert ha.presses(ha.publish(dialect, single["topic"], single["payload"])) == [TASMOTA_BUTTON_BOARD]
    assert ha.presses(ha.publish(dialect, double["topic"], double["payload"])) == []
    assert ha.presses(ha.publish(dialect, hold["topic"], hold["payload"])) == []


def test_colour_and_colour_temperature_turn_an_off_light_on_in_both_imports() -> None:
    native = z2m.make()
    bulb = z2m.configs(z2m.announce(native, z2m.entries("ikea_LED1545G12_bulb")))["0x000b57fffec6a5b2"]
    go = z2m.configs(z2m.announce(native, z2m.entries("ikea_LED1545G12_bulb", "philips_7146060PH_hue_go")))[
        "0x000b57fffec6a5b4"]
    discovery, light = ha.make(), "zigbee2mqtt_0x000b57fffec6a5b2"
    discovered = ha.configs(ha.announce(discovery, "z2m_light_LED1545G12"))[light]
    off: dict[str, StateValue] = {"Switch": "Off"}

    sent = [*z2m.control(native, bulb, "ColorTemperature", "Set", 30),
            *z2m.control(native, go, "Color", "Set", 0xFF8800),
            *[(o.topic, json.loads(o.payload)) for o in discovery.encode_control(
                light, discovered.route, ha.request("ColorTemperature", "Set", 30, states=off))]]
    assert [body.get("state") for _, body in sent] == ["ON", "ON", "ON"], sent


# Availability: an entity discovered after its shared availability topic arrived knows it.


def test_a_device_discovered_after_zigbee2mqtts_bridge_state_arrived_is_available() -> None:
    dialect = ha.make()
    ha.announce(dialect, "z2m_plug_ZNCZ02LM")
    assert ha.publish(dialect, "zigbee2mqtt/bridge/state", '{"state":"online"}', retained=True) == \
        [AvailabilityReceived(PLUG, True)]

    later = ha.announce(dialect, "z2m_siren_HS2WD-E")  # the retained bridge/state is not sent again

    assert AvailabilityReceived(SIREN, True) in later, later
    assert ha.publish(dialect, "zigbee2mqtt/bridge/state", '{"state":"offline"}') == \
        [AvailabilityReceived(PLUG, False), AvailabilityReceived(SIREN, False)]


# zigbee2mqtt's software_build_id with a NUL.


def test_a_software_build_id_reaches_the_platform_without_its_nul() -> None:
    entry = z2m.entries("xiaomi_ZNLDP12LM_bulb")[0]
    assert entry["software_build_id"] == "1.31\x00"
    bulb = z2m.configs(z2m.announce(z2m.make(), [entry]))[entry["ieee_address"]]

    assert conform_config(bulb.config)[0].additionalInfo["swVersion"] == "1.31"


# An explicit empty payload is kept as given.


def test_an_explicit_empty_payload_on_is_kept_as_given() -> None:
    """No producer we found sends one; the issue reports one: ESPHome's garage door sensor with pl_on ""."""
    dialect = ha.make()
    topic, config = _adapted("esphome_garagedoor1_sht3x", 2, pl_on="")
    assert list(ha.configs(dialect.decode(topic, config, ha.NOW, True))) == [ESP]  # the board's only entity here
    state = "garagedoor1/binary_sensor/garage_door_position/state"

    assert ha.states(ha.publish(dialect, state, "")) == {ESP: {"Switch": "On"}}
    assert ha.states(ha.publish(dialect, state, "OFF")) == {ESP: {"Switch": "Off"}}
    assert [i for i in ha.publish(dialect, state, "ON") if isinstance(i, InputRejected)]  # "ON" is not its payload_on


# Bad input: a config hubd cannot use is listed with its reason.


def test_an_empty_val_tpl_is_refused_naming_the_key_and_the_fix() -> None:
    """No producer we found sends one; the issue reports one: Tasmota's relay and light with val_tpl ""."""
    for name in ("tasmota_relay_FB6A07", "tasmota_mculed_AC54C1"):
        topic, config = _adapted(name, 0, val_tpl="")
        out = ha.make().decode(topic, config, ha.NOW, True)

        assert len(out) == 1 and isinstance(out[0], InputRejected), out
        # The key the producer sent (val_tpl, value_template in full), not one hubd derived from it.
        assert topic in out[0].reason and re.search(r"(?<![\w])(val_tpl|value_template)\b", out[0].reason), out
        assert "empty" in out[0].reason, out


def test_a_climates_room_temperature_hubd_cannot_read_is_listed_with_why() -> None:
    """zigbee2mqtt's BTH-RM230Z with its current_temperature_template emptied: the thermostat stays, the room
    temperature it cannot read leaves a trace (no producer we found sends one empty)."""
    dialect = ha.make()
    topic, config = _adapted("z2m_thermostat_BTH-RM230Z", 0, current_temperature_template="")
    out = dialect.decode(topic, config, ha.NOW, True)

    assert RM230Z in ha.configs(out)
    rejected = [i.reason for i in out if isinstance(i, InputRejected)]
    notes = [f"{n.name}: {n.reason}" for n in ha.configs(out)[RM230Z].origin.entities if not n.exported]
    # Named by the key the producer sent, not one hubd derived from it.
    assert any("current_temperature_template" in line for line in [*rejected, *notes]), (rejected, notes)
