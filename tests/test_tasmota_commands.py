"""Controls as Tasmota commands on the device's own `cmnd/<topic>/...`, from the Route address the config gave: power,
dimmer, colour temperature and colour (which also turn an off light on), shutters, and what is refused. Pure."""

from __future__ import annotations

import pytest
from tasmota_helpers import ATOM, BASIC, announce, basic_config, configs, control, make, payload

from hubd.dialects.base import CommandRefused


def test_power_goes_to_the_relays_own_power_command_with_the_devices_state_texts() -> None:
    dialect = make()
    found = configs(announce(dialect, BASIC, basic_config(rl=[1, 1], state=["AUS", "EIN", "UM", "HALT"])))

    assert control(dialect, found[BASIC], "Switch", "On", "On") == [("tasmota_49A3BC/cmnd/POWER1", "EIN")]
    assert control(dialect, found[f"{BASIC}-relay2"], "Switch", "Off", "Off") == \
        [("tasmota_49A3BC/cmnd/POWER2", "AUS")]


def test_colour_or_colour_temperature_for_an_off_light_also_turns_it_on() -> None:
    dialect = make()
    light = configs(announce(dialect, BASIC, basic_config(rl=[2], lt_st=5)))[BASIC]

    assert control(dialect, light, "Color", "Set", 0xFF8000, {"Switch": "Off"}) == \
        [("tasmota_49A3BC/cmnd/POWER1", "ON"), ("tasmota_49A3BC/cmnd/Color2", "255,128,0")]
    assert control(dialect, light, "ColorTemperature", "Set", 100) == \
        [("tasmota_49A3BC/cmnd/POWER1", "ON"), ("tasmota_49A3BC/cmnd/CT", "153")]  # coolest
    assert control(dialect, light, "ColorTemperature", "Set", 0, {"Switch": "On"}) == \
        [("tasmota_49A3BC/cmnd/CT", "500")]  # warmest; already on


def test_brightness_is_the_dimmer_in_percent_and_zero_turns_the_light_off() -> None:
    dialect = make()
    light = configs(announce(dialect, ATOM, payload("atomlite2_rgb_light", "/config")))[ATOM]

    assert control(dialect, light, "Brightness", "Set", 40) == [("cmnd/atomlite2/Dimmer", "40")]
    assert control(dialect, light, "Brightness", "Set", 0) == [("cmnd/atomlite2/POWER1", "OFF")]
    unlinked = make()
    power_kept = basic_config(rl=[2], lt_st=1, so={**basic_config()["so"], "20": 1})
    dimmer = configs(announce(unlinked, BASIC, power_kept))[BASIC]
    assert control(unlinked, dimmer, "Brightness", "Set", 40, {"Switch": "Off"}) == \
        [("tasmota_49A3BC/cmnd/POWER1", "ON"), ("tasmota_49A3BC/cmnd/Dimmer", "40")]  # SetOption20


def test_a_shutter_moves_opens_closes_and_stops_with_its_own_number() -> None:
    dialect = make()
    found = configs(announce(dialect, BASIC, basic_config(rl=[3, 3, 3, 3], sho=[0, 1])))
    first, second = found[BASIC], found[f"{BASIC}-shutter2"]

    assert control(dialect, first, "Position", "Set", 30) == [("tasmota_49A3BC/cmnd/ShutterPosition1", "30")]
    assert control(dialect, second, "Position", "Set", 30) == [("tasmota_49A3BC/cmnd/ShutterPosition2", "70")]
    assert control(dialect, first, "Switch", "On", "On") == [("tasmota_49A3BC/cmnd/ShutterOpen1", "")]
    assert control(dialect, first, "Switch", "Off", "Off") == [("tasmota_49A3BC/cmnd/ShutterClose1", "")]
    assert control(dialect, first, "MotionSwitch", "Off", "Off") == [("tasmota_49A3BC/cmnd/ShutterStop1", "")]


def test_what_a_device_cannot_do_is_refused_with_the_reason() -> None:
    dialect = make()
    found = configs(announce(dialect, BASIC, basic_config(rl=[1], dn="Plug"),
                             sensors={"DS18B20": {"Temperature": 20.0}}))
    with pytest.raises(CommandRefused, match="no Tasmota relay, light or shutter that takes Brightness"):
        control(dialect, found[BASIC], "Brightness", "Set", 10)
    with pytest.raises(CommandRefused, match="a Tasmota sensor takes no Temperature"):
        control(dialect, found[BASIC], "Temperature", "Set", 10)
    light = configs(announce(make(), ATOM, payload("atomlite2_rgb_light", "/config")))[ATOM]
    with pytest.raises(CommandRefused, match="current value"):
        control(make(), light, "Brightness", "Adjust", None)


def test_a_command_follows_the_devices_new_topic() -> None:
    dialect = make()
    before = configs(announce(dialect, BASIC, basic_config(rl=[1])))[BASIC]
    announce(dialect, BASIC, basic_config(rl=[1], t="kitchen"))

    assert control(dialect, before, "Switch", "On", "On") == [("kitchen/cmnd/POWER1", "ON")]
