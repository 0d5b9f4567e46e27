"""The zigbee2mqtt dialect's commands: control requests become `<base>/<friendly_name>/set` in zigbee2mqtt's own
form, from the device's Route alone; plus its config section and the shared mapping's ranked plan. Pure."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from zigbee2mqtt_helpers import announce, configs, control, entries, make, request

from hubd.config.model import Zigbee2MqttConfig, parse_config
from hubd.devices.model import Route
from hubd.dialects import mapping
from hubd.dialects.base import CommandRefused, ConfigReceived

BULB = "0x000b57fffec6a5b2"
HUE_GO = "0x000b57fffec6a5b4"
ZIGFRED = "0xf4ce368a38be56a1"
DOUBLE = "0xcc86ecfffe4e9d25"
SHUTTER = "0x70ac08fffee6dd5e"
BOSCH = "0x18fc2600000d7ae2"
IMMAX = "0x00158d0007703a01"
LOCK = "0x000b57fffe0d4c01"
CONTACT = "0x00158d00091e7bd6"


def device(*fixtures: str, endpoint: str) -> ConfigReceived:
    return configs(announce(make(), entries(*fixtures)))[endpoint]


def test_light_controls_publish_zigbee2mqtt_set_payloads() -> None:
    dialect = make()
    go = configs(announce(dialect, entries("philips_7146060PH_hue_go")))[HUE_GO]
    topic = "zigbee2mqtt/bulb_color_2/set"

    assert control(dialect, go, "Switch", "On", "On") == [(topic, {"state": "ON"})]
    assert control(dialect, go, "Switch", "Off", "Off") == [(topic, {"state": "OFF"})]
    assert control(dialect, go, "Brightness", "Set", 50) == [(topic, {"brightness": 127})]
    assert control(dialect, go, "Brightness", "Set", 0) == [(topic, {"state": "OFF"})]
    # A colour or colour temperature turns an off light on, as Home Assistant's turn_on does.
    assert control(dialect, go, "ColorTemperature", "Set", 0) == [(topic, {"state": "ON", "color_temp": 500})]
    assert control(dialect, go, "ColorTemperature", "Set", 62) == [(topic, {"state": "ON", "color_temp": 283})]
    assert control(dialect, go, "Color", "Set", 0xFF8800) == [(topic, {"state": "ON", "color": {"hex": "#ff8800"}})]


def test_an_ikea_bulb_takes_colour_temperature_on_its_own_mired_scale() -> None:
    dialect = make()
    bulb = configs(announce(dialect, entries("ikea_LED1545G12_bulb")))[BULB]

    assert control(dialect, bulb, "ColorTemperature", "Set", 41) == \
        [("zigbee2mqtt/bulb/set", {"state": "ON", "color_temp": 370})]
    with pytest.raises(CommandRefused, match="Color"):
        control(dialect, bulb, "Color", "Set", 0xFF0000)


def test_a_split_endpoint_commands_its_own_suffixed_property() -> None:
    dialect = make()
    found = configs(announce(dialect, entries("moes_MS-104BZ_dual_switch", "z2m_2.12.1_testsuite")))

    assert control(dialect, found[f"{DOUBLE}-state_l2"], "Switch", "Off", "Off") == \
        [("zigbee2mqtt/Moes switch double/set", {"state_l2": "OFF"})]
    assert control(dialect, found[DOUBLE], "Switch", "On", "On") == \
        [("zigbee2mqtt/Moes switch double/set", {"state_l1": "ON"})]
    assert control(dialect, found[f"{ZIGFRED}-state_l3"], "Brightness", "Set", 100) == \
        [("zigbee2mqtt/zigfred_plus/set", {"brightness_l3": 254})]


def test_cover_controls_open_close_stop_and_position() -> None:
    dialect = make()
    shutter = configs(announce(dialect, entries("moes_MS-108ZR_cover")))[SHUTTER]
    topic = "zigbee2mqtt/Window shutter/set"

    assert control(dialect, shutter, "Position", "Set", 50) == [(topic, {"position": 50})]
    assert control(dialect, shutter, "Switch", "On", "On") == [(topic, {"state": "OPEN"})]
    assert control(dialect, shutter, "Switch", "Off", "Off") == [(topic, {"state": "CLOSE"})]
    assert control(dialect, shutter, "MotionSwitch", "Off", "Off") == [(topic, {"state": "STOP"})]
    with pytest.raises(CommandRefused, match="stopped"):
        control(dialect, shutter, "MotionSwitch", "On", "On")


def test_thermostat_controls_set_the_setpoint_and_the_system_mode() -> None:
    dialect = make()
    trv = configs(announce(dialect, entries("bosch_BTH-RA_trv")))[BOSCH]
    immax = configs(announce(dialect, entries("immax_07703L_trv")))[IMMAX]

    assert control(dialect, trv, "Temperature", "Set", 21) == \
        [("zigbee2mqtt/bosch_radiator/set", {"occupied_heating_setpoint": 21})]
    assert control(dialect, trv, "Temperature", "Set", 21.3) == \
        [("zigbee2mqtt/bosch_radiator/set", {"occupied_heating_setpoint": 21.5})]  # its 0.5 °C step
    assert control(dialect, trv, "Mode", "Heat", "Heat") == \
        [("zigbee2mqtt/bosch_radiator/set", {"system_mode": "heat"})]
    with pytest.raises(CommandRefused, match=r"5\.\.30"):
        control(dialect, trv, "Temperature", "Set", 35)
    assert control(dialect, immax, "Switch", "Off", "Off") == [("zigbee2mqtt/Bedroom radiator/set",
                                                                 {"system_mode": "off"})]
    on = dialect.encode_control(IMMAX, immax.route, request("Switch", "On", "On", states={"Mode": "Auto"}))
    assert on[0].payload == b'{"system_mode":"auto"}'  # back in the mode it was in
    assert control(dialect, immax, "Temperature", "Set", 19) == [("zigbee2mqtt/Bedroom radiator/set",
                                                                   {"current_heating_setpoint": 19})]


def test_controls_go_to_the_current_friendly_name_after_a_rename_and_to_the_kept_one_after_a_restart() -> None:
    dialect = make()
    devices = entries("aqara_LLKZMK12LM_dual_relay")
    relay = configs(announce(dialect, devices))["0x54ef4410009716a8"]
    devices[0]["friendly_name"] = "garage/relay"
    announce(dialect, devices)

    assert control(dialect, relay, "Switch", "On", "On") == [("zigbee2mqtt/garage/relay/set", {"state_l1": "ON"})]
    restarted = make()  # before bridge/devices arrives: the name in the route it kept
    assert control(restarted, relay, "Switch", "On", "On") == \
        [("zigbee2mqtt/Aqara Dual relay module T2/set", {"state_l1": "ON"})]


def test_a_lock_a_sensor_and_a_foreign_route_refuse_controls() -> None:
    dialect = make()
    lock = configs(announce(dialect, entries("danalock_V3-BTZB_lock")))[LOCK]
    contact = configs(announce(dialect, entries("aqara_MCCGQ11LM_contact", "danalock_V3-BTZB_lock")))[CONTACT]

    with pytest.raises(CommandRefused, match="never unlocks"):
        control(dialect, lock, "Switch", "Off", "Off")
    assert control(dialect, lock, "Switch", "On", "On") == [("zigbee2mqtt/Front door lock/set", {"state": "LOCK"})]
    with pytest.raises(CommandRefused, match="binary"):
        control(dialect, contact, "Switch", "On", "On")
    with pytest.raises(CommandRefused, match="not a zigbee2mqtt address"):
        dialect.encode_control("x", Route("homeassistant", "{}"), request("Switch", "On", "On"))
    with pytest.raises(CommandRefused, match="not a zigbee2mqtt address"):
        dialect.encode_control("x", Route("zigbee2mqtt", "not json"), request("Switch", "On", "On"))


def test_an_adjust_of_an_unknown_value_and_a_speaker_command_are_refused() -> None:
    dialect = make()
    bulb = configs(announce(dialect, entries("ikea_LED1545G12_bulb")))[BULB]

    with pytest.raises(CommandRefused, match=r"use Brightness\.Set"):
        dialect.encode_control(BULB, bulb.route, request("Brightness", "Adjust", None))
    with pytest.raises(CommandRefused, match="not a speaker"):
        dialect.encode_speaker(BULB, bulb.route, {"id": "1", "type": "tts", "text": "hi"})


def test_the_zigbee2mqtt_section_has_the_contract_defaults_and_checks_its_base_topic() -> None:
    section = Zigbee2MqttConfig()
    assert (section.enabled, section.base_topic, section.include, section.exclude) == \
        (False, "zigbee2mqtt", ["*"], [])
    assert parse_config("zigbee2mqtt:\n  enabled: true\n  exclude: ['0x00158d*']\n", {}).zigbee2mqtt.exclude == \
        ["0x00158d*"]
    for bad in ({"base_topic": "zigbee2mqtt/#"}, {"base_topic": "/z2m"}, {"include": [" "]}, {"extra": 1}):
        with pytest.raises(ValidationError):
            Zigbee2MqttConfig(**bad)


def test_plan_ranked_lets_actuators_keep_their_interfaces_before_sensors() -> None:
    thermostat = mapping.climate(modes=["heat"], settable_mode=True, target=True, settable_target=True, power=False)
    room = mapping.sensor("temperature", "°C")
    assert room is not None
    parts = {"occupied_heating_setpoint": thermostat, "local_temperature": room}

    ranked = mapping.plan_ranked("trv", parts, {"occupied_heating_setpoint": 0, "local_temperature": 2})
    alphabetical = mapping.plan_ranked("trv", parts, {})

    assert [(e.endpoint_id, e.keys, e.display_type) for e in ranked] == \
        [("trv", ("occupied_heating_setpoint",), "thermostat"), ("trv-local_temperature", ("local_temperature",),
                                                                  "unknown")]
    assert alphabetical[0].keys == ("local_temperature",)  # one rank: key order alone
