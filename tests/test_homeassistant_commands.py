"""Controls back to devices discovered with Home Assistant MQTT discovery: each entity's own conventions,
from the Route address alone (as after a restart). Pure: no broker."""

from __future__ import annotations

import json

import pytest
from homeassistant_helpers import NOW, announce, configs, fixture, make, publish, raw, request, states

from hubd.devices.model import Route
from hubd.dialects.base import CommandRefused, ConfigReceived, InputRejected, Outgoing
from hubd.dialects.homeassistant.dialect import HomeAssistantDialect

LIGHT = "zigbee2mqtt_0x000b57fffec6a5b2"


def _device(name: str, device_id: str) -> tuple[HomeAssistantDialect, ConfigReceived]:
    dialect = make()
    return dialect, configs(announce(dialect, name))[device_id]


def _sent(outgoing: list[Outgoing]) -> list[tuple[str, str]]:
    return [(o.topic, o.payload.decode()) for o in outgoing]


def test_a_switch_turns_on_and_off_with_its_payloads_qos_and_retain() -> None:
    dialect = make()
    config = {"name": "Plug", "uniq_id": "plug1", "cmd_t": "cmnd/plug/POWER", "stat_t": "stat/plug/POWER",
              "pl_on": "1", "pl_off": "0", "qos": 1, "ret": True}
    route = configs(dialect.decode("homeassistant/switch/plug1/config", raw(config), NOW, True))["plug1"].route

    assert dialect.encode_control("plug1", route, request("Switch", "On", "On")) == \
        [Outgoing("cmnd/plug/POWER", b"1", 1, True)]
    assert _sent(dialect.encode_control("plug1", route, request("Switch", "Off", "Off"))) == [("cmnd/plug/POWER", "0")]


def test_a_zigbee2mqtt_gang_switches_on_its_own_topic() -> None:
    dialect = make()
    found = configs(announce(dialect, "z2m_switch_QBKG03LM"))
    split = found["zigbee2mqtt_0x0017880104e45542-switch_right"]

    assert _sent(dialect.encode_control(split.device_id, split.route, request("Switch", "On", "On"))) == \
        [("zigbee2mqtt/wall_switch_double/right/set", "ON")]
    assert dialect.encode_control(split.device_id, split.route, request("Switch", "On", "On"))[0].qos == 0


def test_a_json_light_gets_brightness_on_its_scale_and_colour_temperature_in_mireds() -> None:
    dialect, light = _device("z2m_light_LED1545G12", LIGHT)

    assert _sent(dialect.encode_control(LIGHT, light.route, request("Brightness", "Set", 50))) == \
        [("zigbee2mqtt/bulb/set", '{"state":"ON","brightness":127}')]
    assert _sent(dialect.encode_control(LIGHT, light.route, request("ColorTemperature", "Set", 0))) == \
        [("zigbee2mqtt/bulb/set", '{"state":"ON","color_temp":454}')]
    assert _sent(dialect.encode_control(LIGHT, light.route, request("ColorTemperature", "SetMax", 100))) == \
        [("zigbee2mqtt/bulb/set", '{"state":"ON","color_temp":250}')]
    assert _sent(dialect.encode_control(LIGHT, light.route, request("Switch", "Off", "Off"))) == \
        [("zigbee2mqtt/bulb/set", '{"state":"OFF"}')]
    assert _sent(dialect.encode_control(LIGHT, light.route, request("Brightness", "Set", 0))) == \
        [("zigbee2mqtt/bulb/set", '{"state":"OFF"}')]


def test_a_json_light_gets_its_colour_in_the_colour_mode_it_supports() -> None:
    dialect, rgb = _device("esphome_rgb_light", "a4cf12b3c4d5")
    group = make()
    xy = configs(group.decode("homeassistant/light/g/light/config", raw(XY_GROUP), NOW, True))

    assert _sent(dialect.encode_control("a4cf12b3c4d5", rgb.route, request("Color", "Set", 0xFF8800))) == \
        [("desklamp/light/desk_lamp/command", '{"state":"ON","color":{"r":255,"g":136,"b":0}}')]
    sent = json.loads(group.encode_control("g", next(iter(xy.values())).route,
                                           request("Color", "Set", 0xFF0000))[0].payload)
    assert sent == {"state": "ON", "color": {"x": pytest.approx(0.64, abs=1e-3), "y": pytest.approx(0.33, abs=1e-3)}}


# zigbee2mqtt's group light (homeassistant.test.ts line 291), trimmed to what a colour command needs.
XY_GROUP = {"availability": [{"topic": "zigbee2mqtt/bridge/state", "value_template": "{{ value_json.state }}"}],
            "brightness": True, "brightness_scale": 254, "command_topic": "zigbee2mqtt/ha_discovery_group/set",
            "device": {"identifiers": ["zigbee2mqtt_group_9"], "name": "HA Discovery Group"}, "schema": "json",
            "state_topic": "zigbee2mqtt/ha_discovery_group", "supported_color_modes": ["xy", "color_temp"],
            "max_mireds": 454, "min_mireds": 250, "unique_id": "9_light_zigbee2mqtt", "name": None}


TASMOTA_LAMP = {"name": "Lamp", "uniq_id": "lamp1", "cmd_t": "cmnd/lamp/POWER", "stat_t": "tele/lamp/STATE",
                "stat_val_tpl": "{{ value_json.POWER }}", "bri_cmd_t": "cmnd/lamp/Dimmer",
                "bri_stat_t": "tele/lamp/STATE", "bri_scl": 100, "on_cmd_type": "brightness",
                "bri_val_tpl": "{{ value_json.Dimmer }}", "hs_cmd_t": "cmnd/lamp/HSBColor",
                "hs_stat_t": "tele/lamp/STATE", "clr_temp_cmd_t": "cmnd/lamp/CT",
                "clr_temp_stat_t": "tele/lamp/STATE", "clr_temp_val_tpl": "{{ value_json.CT }}"}


def test_a_basic_light_sends_each_attribute_on_its_own_topic() -> None:
    dialect = make()
    route = configs(dialect.decode("homeassistant/light/lamp1/config", raw(TASMOTA_LAMP), NOW, True))["lamp1"].route

    assert _sent(dialect.encode_control("lamp1", route, request("Brightness", "Set", 40))) == \
        [("cmnd/lamp/Dimmer", "40")]
    assert _sent(dialect.encode_control("lamp1", route, request("Color", "Set", 0x00FF00))) == \
        [("cmnd/lamp/HSBColor", "120.0,100.0")]
    assert _sent(dialect.encode_control("lamp1", route, request("ColorTemperature", "Set", 100))) == \
        [("cmnd/lamp/CT", "153")]
    assert _sent(dialect.encode_control("lamp1", route, request("Switch", "On", "On"))) == [("cmnd/lamp/POWER", "ON")]


def test_a_basic_light_sends_on_after_the_attribute_unless_it_says_otherwise() -> None:
    dialect = make()
    config = dict(TASMOTA_LAMP, on_cmd_type="last", bri_cmd_tpl="{{ value }}%")
    route = configs(dialect.decode("homeassistant/light/lamp1/config", raw(config), NOW, True))["lamp1"].route

    assert _sent(dialect.encode_control("lamp1", route, request("Brightness", "Set", 40))) == \
        [("cmnd/lamp/Dimmer", "40%"), ("cmnd/lamp/POWER", "ON")]


def test_a_template_light_renders_its_on_and_off_templates() -> None:
    dialect = make()
    config = {"schema": "template", "uniq_id": "tl", "command_topic": "tl/set", "state_topic": "tl/state",
              "command_on_template": "on{% if brightness is defined %},{{ brightness }}{% endif %}",
              "command_off_template": "off", "state_template": "{{ value.split(',')[0] }}",
              "brightness_template": "{{ value.split(',')[1] }}"}
    route = configs(dialect.decode("homeassistant/light/tl/config", raw(config), NOW, True))["tl"].route

    assert _sent(dialect.encode_control("tl", route, request("Brightness", "Set", 100))) == [("tl/set", "on,255")]
    assert _sent(dialect.encode_control("tl", route, request("Switch", "Off", "Off"))) == [("tl/set", "off")]
    assert states(publish(dialect, "tl/state", "on,51")) == {"tl": {"Switch": "On", "Brightness": 20}}


def test_a_cover_opens_closes_stops_and_goes_to_a_position_through_its_template() -> None:
    dialect, vent = _device("z2m_cover_position_keenhome_SV01", "zigbee2mqtt_0x0017880104e45551")

    def sent(*args: object) -> list[tuple[str, str]]:
        return _sent(dialect.encode_control(vent.device_id, vent.route, request(*args)))  # type: ignore[arg-type]

    assert sent("Switch", "On", "On") == [("zigbee2mqtt/smart vent/set", "OPEN")]
    assert sent("Switch", "Off", "Off") == [("zigbee2mqtt/smart vent/set", "CLOSE")]
    assert sent("MotionSwitch", "Off", "Off") == [("zigbee2mqtt/smart vent/set", "STOP")]
    assert sent("Position", "Set", 50) == [("zigbee2mqtt/smart vent/set", '{ "position": 50 }')]
    with pytest.raises(CommandRefused, match="stopped"):
        sent("MotionSwitch", "On", "On")


def test_a_thermostat_takes_its_target_in_its_unit_its_modes_and_off() -> None:
    dialect, trv = _device("z2m_climate_tuya_TS0601_thermostat", "zigbee2mqtt_0x0017882104a44559")

    def sent(*args: object, **kw: object) -> list[tuple[str, str]]:
        return _sent(dialect.encode_control(trv.device_id, trv.route, request(*args, **kw)))  # type: ignore[arg-type]

    assert sent("Temperature", "Set", 21.5) == [("zigbee2mqtt/TS0601_thermostat/set/current_heating_setpoint", "21.5")]
    assert sent("Temperature", "Set", 21.3) == [("zigbee2mqtt/TS0601_thermostat/set/current_heating_setpoint", "21.5")]
    assert sent("Mode", "Auto", "Auto") == [("zigbee2mqtt/TS0601_thermostat/set/system_mode", "auto")]
    assert sent("Switch", "Off", "Off") == [("zigbee2mqtt/TS0601_thermostat/set/system_mode", "off")]
    assert sent("Switch", "On", "On", states={"Mode": "Auto"}) == \
        [("zigbee2mqtt/TS0601_thermostat/set/system_mode", "auto")]
    assert sent("Switch", "On", "On") == [("zigbee2mqtt/TS0601_thermostat/set/system_mode", "heat")]
    with pytest.raises(CommandRefused, match="no mode for Cool"):
        sent("Mode", "Cool", "Cool")


def test_a_fahrenheit_ac_gets_its_target_in_fahrenheit_and_reports_celsius() -> None:
    dialect = make()
    config = {"uniq_id": "ac1", "name": "AC", "temp_cmd_t": "ac/temp/set", "temp_stat_t": "ac/temp",
              "temperature_unit": "F", "mode_cmd_t": "ac/mode/set", "mode_stat_t": "ac/mode", "temp_step": 1,
              "modes": ["off", "cool", "heat_cool"], "min_temp": 61, "max_temp": 86, "pow_cmd_t": "ac/power"}
    ac = configs(dialect.decode("homeassistant/climate/ac1/config", raw(config), NOW, True))["ac1"]

    assert ac.config.displayType == "ac"
    assert (ac.config.additionalInfo["minTemperature"], ac.config.additionalInfo["maxTemperature"]) == ("16.11", "30")
    assert _sent(dialect.encode_control("ac1", ac.route, request("Temperature", "Set", 22))) == [("ac/temp/set", "72")]
    assert states(publish(dialect, "ac/temp", "71.6")) == {"ac1": {"Temperature": 22}}
    assert states(publish(dialect, "ac/mode", "heat_cool")) == {"ac1": {"Mode": "Auto", "Switch": "On"}}


def test_a_fan_speed_goes_through_its_speed_range_and_command_template() -> None:
    dialect, fan = _device("z2m_fan", "zigbee2mqtt_0x0017880104e45548")

    assert _sent(dialect.encode_control(fan.device_id, fan.route, request("FanSpeed", "Set", 60))) == \
        [("zigbee2mqtt/fan/set/fan_mode", "high")]
    assert _sent(dialect.encode_control(fan.device_id, fan.route, request("FanSpeed", "SetLow", 30))) == \
        [("zigbee2mqtt/fan/set/fan_mode", "medium")]
    assert _sent(dialect.encode_control(fan.device_id, fan.route, request("FanSpeed", "Set", 0))) == \
        [("zigbee2mqtt/fan/set/fan_state", "OFF")]
    assert _sent(dialect.encode_control(fan.device_id, fan.route, request("Switch", "On", "On"))) == \
        [("zigbee2mqtt/fan/set/fan_state", "ON")]


def test_a_scene_turns_on() -> None:
    dialect = make()
    config = {"name": "Movie", "uniq_id": "movie", "cmd_t": "scenes/movie", "pl_on": "ACTIVATE"}
    scene = configs(dialect.decode("homeassistant/scene/movie/config", raw(config), NOW, True))["movie"]

    assert scene.config.displayType == "scene"
    assert _sent(dialect.encode_control("movie", scene.route, request("Switch", "On", "On"))) == \
        [("scenes/movie", "ACTIVATE")]


def test_a_lock_is_locked_by_voice_and_never_unlocked() -> None:
    dialect = make()
    config = {"name": "Front", "uniq_id": "lock1", "cmd_t": "lock/set", "stat_t": "lock/state"}
    lock = configs(dialect.decode("homeassistant/lock/lock1/config", raw(config), NOW, True))["lock1"]

    assert lock.config.displayType == "door"
    assert [(c.interface, c.supportedOperations) for c in lock.config.capabilities] == [("Switch", ("On",))]
    assert states(publish(dialect, "lock/state", "LOCKED")) == {"lock1": {"Switch": "On"}}
    assert _sent(dialect.encode_control("lock1", lock.route, request("Switch", "On", "On"))) == [("lock/set", "LOCK")]
    with pytest.raises(CommandRefused, match="never unlocks"):
        dialect.encode_control("lock1", lock.route, request("Switch", "Off", "Off"))
    read_only = configs(dialect.decode("homeassistant/lock/lock2/config",
                                       raw({"name": "Back", "uniq_id": "lock2", "stat_t": "lock2/state"}), NOW, True))
    assert [(c.interface, c.supportedOperations) for c in read_only["lock2"].config.capabilities] == [("Switch", ())]


def test_a_siren_is_a_switch() -> None:
    dialect = make()
    config = {"name": "Alarm", "uniq_id": "siren1", "cmd_t": "siren/set", "stat_t": "siren/state",
              "dev": {"ids": ["siren-1"], "name": "Hall Siren"}}
    siren = configs(dialect.decode("homeassistant/siren/siren1/config", raw(config), NOW, True))["siren-1"]

    assert siren.config.displayType == "switch"
    assert [(c.interface, c.supportedOperations) for c in siren.config.capabilities] == [("Switch", ("On", "Off"))]
    assert states(publish(dialect, "siren/state", "ON")) == {"siren-1": {"Switch": "On"}}
    assert states(publish(dialect, "siren/state", '{"state": "OFF", "tone": "fire"}')) == {"siren-1": {"Switch": "Off"}}
    assert _sent(dialect.encode_control("siren-1", siren.route, request("Switch", "On", "On"))) == [("siren/set", "ON")]


def test_a_command_topic_with_wildcards_is_refused_with_the_config() -> None:
    dialect = make()
    config = {"name": "Odd", "uniq_id": "odd", "cmd_t": "odd/+/set", "stat_t": "odd/state"}
    inputs = dialect.decode("homeassistant/switch/odd/config", raw(config), NOW, True)

    assert configs(inputs) == {}
    assert [i.reason for i in inputs if isinstance(i, InputRejected)] == [
        "homeassistant/switch/odd/config (switch.odd): command_topic: 'odd/+/set' is not a topic hubd can publish to "
        "(empty, a wildcard or NUL); hubd publishes only to a device's own command topics"]


def test_a_control_works_from_the_route_address_alone_after_a_restart() -> None:
    _, light = _device("z2m_light_LED1545G12", LIGHT)
    restarted = make()  # no discovery config has arrived yet

    assert _sent(restarted.encode_control(LIGHT, light.route, request("Brightness", "Set", 100))) == \
        [("zigbee2mqtt/bulb/set", '{"state":"ON","brightness":254}')]


def test_what_the_device_cannot_do_is_refused_with_the_reason() -> None:
    dialect, light = _device("z2m_light_LED1545G12", LIGHT)

    with pytest.raises(CommandRefused, match="no entity that takes Color"):
        dialect.encode_control(LIGHT, light.route, request("Color", "Set", 0xFF0000))
    with pytest.raises(CommandRefused, match="current value is unknown"):
        dialect.encode_control(LIGHT, light.route, request("Brightness", "Adjust", None, delta=10))
    with pytest.raises(CommandRefused, match="route"):
        dialect.encode_control(LIGHT, Route("native", "{}"), request("Switch", "On", "On"))
    with pytest.raises(CommandRefused, match="speaker"):
        dialect.encode_speaker(LIGHT, light.route, {"id": "1", "type": "tts", "text": "hi"})


def test_an_optimistic_switch_confirms_from_its_own_command() -> None:
    dialect = make()
    config = {"name": "Relay", "uniq_id": "relay", "cmd_t": "relay/set"}
    relay = configs(dialect.decode("homeassistant/switch/relay/config", raw(config), NOW, True))["relay"]

    assert ("relay/set", 1) in dialect.pending_subscriptions()
    for message in dialect.encode_control("relay", relay.route, request("Switch", "On", "On")):
        assert states(publish(dialect, message.topic, message.payload.decode())) == {"relay": {"Switch": "On"}}


def test_an_optimistic_basic_light_confirms_its_brightness_from_its_command() -> None:
    dialect = make()
    config = {"name": "Dimmer", "uniq_id": "dim", "cmd_t": "dim/power", "bri_cmd_t": "dim/level", "bri_scl": 100}
    dim = configs(dialect.decode("homeassistant/light/dim/config", raw(config), NOW, True))["dim"]

    out = []
    for message in dialect.encode_control("dim", dim.route, request("Brightness", "Set", 30)):
        out += publish(dialect, message.topic, message.payload.decode())
    assert states(out) == {"dim": {"Brightness": 30, "Switch": "On"}}


def test_the_route_address_is_json_naming_each_entitys_interfaces_and_config() -> None:
    _, light = _device("z2m_light_LED1545G12", LIGHT)
    address = json.loads(light.route.address)

    assert address["v"] == 2
    assert address["entities"][0]["key"] == ["light", "0x000b57fffec6a5b2 light"]
    assert address["entities"][0]["interfaces"] == ["Brightness", "ColorTemperature", "Switch"]
    assert address["entities"][0]["config"]["command_topic"] == "zigbee2mqtt/bulb/set"
    assert address["entities"][0]["config"]["state_topic"] == "zigbee2mqtt/bulb"
    assert address["device"]["identifiers"] == ["zigbee2mqtt_0x000b57fffec6a5b2"]
    assert fixture("z2m_light_LED1545G12")["configs"][0]["topic"].startswith("homeassistant/light/")


def test_a_version_1_route_address_still_commands() -> None:
    # As hubd wrote it before addresses kept whole configs: the command keys of each entity.
    v1 = {"v": 1, "entities": [{"component": "light", "name": "light.light", "interfaces": ["Brightness", "Switch"],
                                "config": {"command_topic": "zigbee2mqtt/bulb/set", "schema": "json",
                                           "brightness": True, "brightness_scale": 254}}]}
    route = Route("homeassistant", json.dumps(v1))

    assert _sent(make().encode_control(LIGHT, route, request("Brightness", "Set", 100))) == \
        [("zigbee2mqtt/bulb/set", '{"state":"ON","brightness":254}')]
    with pytest.raises(CommandRefused, match="route"):
        make().encode_control(LIGHT, Route("homeassistant", '{"v": 3, "entities": []}'), request("Switch", "On", "On"))


def test_a_restored_dialect_commands_a_split_gang_and_confirms_it() -> None:
    split = "zigbee2mqtt_0x0017880104e45542-switch_right"
    found = configs(announce(make(), "z2m_switch_QBKG03LM"))
    route = found[split].route
    dialect = make()
    dialect.restore([(d, c.route) for d, c in found.items()])

    assert _sent(dialect.encode_control(split, route, request("Switch", "On", "On"))) == \
        [("zigbee2mqtt/wall_switch_double/right/set", "ON")]
    assert states(publish(dialect, "zigbee2mqtt/wall_switch_double", {"state_right": "ON"})) == \
        {split: {"Switch": "On"}}
