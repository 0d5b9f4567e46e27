"""The shared device mapping (hubd/dialects/mapping.py), the discovery templates' sandbox, and the config
sections of CONTRACT.md 6 (`homeassistant:`, `doorbells:`). Pure."""

from __future__ import annotations

import json

import pytest

from hubd.config.model import parse_config
from hubd.dialects import convert, mapping
from hubd.dialects.homeassistant.templates import Payload, TemplateError, Templates
from hubd.errors import ConfigError


def test_parts_of_one_device_share_its_endpoint_until_an_interface_repeats() -> None:
    parts = {"temperature": mapping.sensor("temperature", "°C"), "humidity": mapping.sensor("humidity", "%"),
             "temperature_2": mapping.sensor("temperature", "°F"), "light": mapping.light(
                 dimmable=True, color_temperature=False, color=False)}

    device = mapping.endpoint_id("dev:1")
    planned = mapping.plan_ranked(device, parts, {})

    assert [(e.endpoint_id, e.keys, e.display_type, e.split) for e in planned] == [
        (device, ("humidity", "light", "temperature"), "light", False),
        (f"{device}-temperature_2", ("temperature_2",), "unknown", True)]
    assert [c.interface for c in planned[0].capabilities] == ["Brightness", "Humidity", "Switch", "Temperature"]


def test_the_split_is_the_same_whatever_order_the_parts_come_in() -> None:
    one = {"b": mapping.switch(), "a": mapping.switch(outlet=True)}
    two = {"a": mapping.switch(outlet=True), "b": mapping.switch()}

    assert mapping.plan_ranked("x", one, {}) == mapping.plan_ranked("x", two, {})
    assert mapping.plan_ranked("x", one, {})[0].display_type == "socket"


def test_the_mapping_table_of_the_contract() -> None:
    def ops(part: mapping.Part | None) -> dict[str, tuple[str, ...]]:
        assert part is not None
        return {c.interface: c.supportedOperations for c in part.capabilities}

    assert ops(mapping.binary("garage_door")) == {"Switch": ()}
    assert mapping.binary("smoke") is not None and mapping.binary("smoke").display_type == "alarm"  # type: ignore
    assert ops(mapping.binary("battery")) == {"Switch": ()} and ops(mapping.binary(None)) == {"Switch": ()}
    assert mapping.sensor("pressure", "hPa") is None
    assert mapping.sensor(None, " ") is None and mapping.sensor(None, "") is None  # a blank unit is no unit
    assert ops(mapping.sensor(None, "°F")) == {"Temperature": ()}  # type: ignore[arg-type]
    assert ops(mapping.cover(position=True, set_position=True, open_close=True, stop=True)) == {
        "Switch": ("On", "Off"), "Position": ("Set", "Adjust"), "MotionSwitch": ("Off",)}
    climate = mapping.climate(modes=["off", "heat", "cool", "auto"], settable_mode=True, target=True,
                              settable_target=True, power=False)
    assert climate.display_type == "ac"
    assert ops(climate) == {"Temperature": ("Set", "Adjust"), "Mode": ("Auto", "Cool", "Heat"), "Switch": ("On", "Off")}
    assert ops(mapping.fan(speed=True))["FanSpeed"][:4] == ("Set", "SetMax", "SetMin", "Adjust")
    assert ops(mapping.scene()) == {"Switch": ("On",)} and ops(mapping.lock()) == {"Switch": ()}
    assert ops(mapping.lock(can_lock=True)) == {"Switch": ("On",)} and ops(mapping.siren()) == {"Switch": ("On", "Off")}
    assert mapping.doorbell().capabilities == ()


def test_value_conversions() -> None:
    assert convert.brightness_percent(254, 254) == 100 and convert.brightness_percent(1, 254) == 1
    assert convert.brightness_value(50, 254) == 127 and convert.brightness_value(1, 254) == 3
    assert convert.color_temperature_percent_from_mireds(454, 250, 454) == 0
    assert convert.mireds_from_percent(100, 153, 500) == 153
    assert convert.kelvin_from_percent(0, 2000, 6500) == 2000
    assert convert.color_temperature_percent_from_kelvin(6500, 2000, 6500) == 100
    assert convert.rgb_value(255, 136, 0) == 0xFF8800 and convert.rgb_parts(0xFF8800) == (255, 136, 0)
    assert convert.rgb_from_hs(240, 100) == 0x0000FF and convert.hs_from_rgb(0x00FF00) == (120.0, 100.0)
    x, y = convert.xy_from_rgb(0xFF0000)
    assert convert.rgb_from_xy(x, y) == 0xFF0000
    assert convert.celsius(71.6, "°F") == 22 and convert.celsius(300, "K") == 26.85
    assert convert.celsius(20, "lx") is None and convert.from_celsius(22, "°F") == pytest.approx(71.6)
    assert convert.ranged_percent(2, 1, 4) == 50 and convert.ranged_value(60, 1, 4) == 3
    assert convert.ranged_value(0, 1, 4) == 0 and convert.ranged_percent(0, 1, 4) == 0
    assert convert.device_mode("Auto", ["off", "heat_cool"]) == "heat_cool"
    assert mapping.endpoint_id("zigbee2mqtt 0x00/1#") == "zigbee2mqtt_0x00_1_-f9963fef"  # stable: a hash of it


def test_identifiers_that_differ_only_outside_the_safe_characters_stay_different_endpoints() -> None:
    kitchen, bedroom = mapping.endpoint_id("кухня"), mapping.endpoint_id("спальня")
    assert kitchen != bedroom and kitchen.startswith("_____-") and bedroom.startswith("_______-")
    assert len({mapping.endpoint_id(raw) for raw in ("a:b", "a_b", "a b", "a/b")}) == 4
    assert mapping.endpoint_id("a_b") == "a_b" and mapping.endpoint_id("rt-n-1-0") == "rt-n-1-0"  # safe: as is
    long_one, other = mapping.endpoint_id("x" * 300), mapping.endpoint_id("x" * 299 + "y")
    assert len(long_one) == 256 and long_one != other
    assert mapping.endpoint_id("кухня") == kitchen  # the same raw identifier, the same endpointId


def test_templates_real_producers_publish_render() -> None:
    templates = Templates()

    def render(source: str, payload: object) -> str:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        return templates.render_value(templates.compile(source), Payload(text))

    thermostat = ("{% set values = {None:None,'idle':'idle','heat':'heating','cool':'cooling','fan_only':'fan'} %}"
                  "{{ values[value_json[\"running_state\"]] }}")
    assert render(thermostat, {"running_state": "heat"}) == "heating"
    assert render("{{ value_json.state }}", {"state": "online"}) == "online"
    assert render("{{ value_json.missing }}", {"state": "online"}) == ""
    assert render("{{value_json['ENERGY'].Total}}", {"ENERGY": {"Total": 1.5}}) == "1.5"
    assert render("{{ value | float(0) | round(1) }}", "21.56") == "21.6"
    assert render("{{ value | int(default=7) }}", "x") == "7"
    assert render("{{ iif(value == 'ON', 'on', 'off') }}", "ON") == "on"
    assert render("{{ (value | from_json).a | to_json }}", '{"a": [1]}') == "[1]"
    assert render("{{ value | regex_replace('[^0-9]', '') }}", "a1b2") == "12"
    assert render("{{ value_json.temperature | is_defined }}", {"temperature": 2}) == "2"
    assert render("{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}", "") == "02"


def test_a_template_fails_with_one_line_never_an_exception_of_its_own() -> None:
    templates = Templates()
    for source, payload in [("{{ value_json.a.b }}", "{}"), ("{{ value | float }}", "warm"),
                            ("{{ value_json.temperature | is_defined }}", "{}"), ("{{ 'x' * 10 ** 9 }}", ""),
                            ("{% for i in range(10 ** 6) %}{% endfor %}", ""), ("{{ [].append(1) }}", ""),
                            ("{{ 1 / 0 }}", ""), ("{{ ''.__class__.__mro__ }}", "")]:
        template = templates.compile(source)
        with pytest.raises(TemplateError):
            templates.render_value(template, Payload(payload))
    # The sandbox hides what a template must not reach: it is undefined, so renders as nothing.
    assert templates.render_value(templates.compile("{{ ''.__class__ }}"), Payload("")) == ""
    with pytest.raises(TemplateError, match="not a valid template"):
        templates.compile("{{ x ")


def test_the_same_template_source_is_compiled_once() -> None:
    templates = Templates()
    first = templates.compile("{{ value_json.state }}")

    assert templates.compile("{{ value_json.state }}") is first
    assert templates.compiles == 1


def test_the_homeassistant_and_doorbells_sections() -> None:
    config = parse_config("homeassistant:\n  enabled: true\n  exclude: ['*battery*']\n"
                          "doorbells:\n  - {device: 'Front*', event: single}\n", {})

    assert (config.homeassistant.enabled, config.homeassistant.discovery_prefix) == (True, "homeassistant")
    assert (config.homeassistant.include, config.homeassistant.exclude) == (["*"], ["*battery*"])
    assert [(d.device, d.event) for d in config.doorbells] == [("Front*", "single")]
    defaults = parse_config("{}", {})
    assert not defaults.homeassistant.enabled and defaults.doorbells == []


@pytest.mark.parametrize("text", [
    "homeassistant: {discovery_prefix: 'ha/#'}",
    "homeassistant: {include: ['']}",
    "homeassistant: {colour: red}",
    "doorbells: [{device: 'x'}]",
    "doorbells: [{device: 'x', event: ' '}]",
    "doorbells: [{device: 'x', event: 'single', room: 'hall'}]",
])
def test_bad_homeassistant_or_doorbell_settings_are_reported(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_config(text, {})


# What keeps a device running never holds its endpoint (CONTRACT section 6), one rule for every dialect.


@pytest.mark.parametrize("name", ["Garage ESP Status LED", "led_indicator", "wifi-rssi", "linkquality", "Uptime",
                                  "SYS: Restart gateway", "identify", "IP", "firmware version"])
def test_a_status_led_restart_signal_or_uptime_ranks_below_every_sensor(name: str) -> None:
    door = mapping.binary(None)
    led = mapping.light(dimmable=False, color_temperature=False, color=False)
    parts = {"a_housekeeping": led, "z_door": door}
    ranks = {"a_housekeeping": mapping.primary_rank(led, name), "z_door": mapping.primary_rank(door, "door")}

    own, split = mapping.plan_ranked("dev", parts, ranks)

    assert (own.keys, split.endpoint_id) == (("z_door",), "dev-a_housekeeping")
    assert mapping.ranked(0, name) > mapping.ranked(1_000, "Temperature")  # above Tasmota's and zigbee2mqtt's ranks


@pytest.mark.parametrize("name", ["LED strip", "Kitchen LED", "Window Blinds", "Temperature", "Zip code"])
def test_a_light_named_led_is_still_a_devices_function(name: str) -> None:
    assert not mapping.housekeeping(name)
