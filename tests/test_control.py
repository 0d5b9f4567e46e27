"""hubd.devices.interfaces, the pure rules of control directives: names, ranges, targets and confirmation."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from hubd.devices.interfaces import INTERFACES, Target, limits, parse_name, resolve, same_value
from hubd.devices.model import Route, StateValue
from hubd.dialects.base import ControlRequest
from hubd.dialects.native.dialect import NativeDialect
from hubd.errors import DirectiveError


def target(name: str, payload: dict[str, Any] | None = None, *, current: StateValue | None = None,
           info: dict[str, str] | None = None, display_type: str = "light", seed: int = 1) -> Target:
    interface, operation = parse_name(name)
    value_range, _problems = limits(interface, info or {}, display_type)
    return resolve(interface, operation, payload or {}, current=current, value_range=value_range,
                   rng=random.Random(seed))


def refused(name: str, payload: dict[str, Any] | None = None, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(DirectiveError) as caught:
        target(name, payload, **kwargs)
    return caught.value.name, caught.value.message


@pytest.mark.parametrize(("name", "interface", "operation"), [
    ("Switch.On", "Switch", "On"),
    ("Media.TVChannel.Set", "Media.TVChannel", "Set"),
    ("Media.Music.Stop", "Media.Music", "Stop"),
    ("Service.Brightness.Adjust", "Brightness", "Adjust"),  # DIFF-8
    ("FanSpeed.SetHigh", "FanSpeed", "SetHigh"),
])
def test_names_split_on_the_last_dot(name: str, interface: str, operation: str) -> None:
    parsed, op = parse_name(name)
    assert (parsed.name, op) == (interface, operation)


def test_brand_prefix_is_stripped() -> None:
    assert parse_name("Acme.Switch.Off", "Acme")[0].name == "Switch"


@pytest.mark.parametrize("name", ["Switch", "Switch.Toggle", "Toaster.On", "Brightness.SetHigh", "Color.Adjust",
                                  ".On", "Switch.", "Media.On", "Service.Control.Switch.On"])
def test_unknown_interfaces_and_operations_are_not_supported(name: str) -> None:
    with pytest.raises(DirectiveError) as caught:
        parse_name(name)
    assert caught.value.name == "E_NOT_SUPPORTED_DIRECTIVE"


def test_every_interface_of_protocol_section_6() -> None:
    assert set(INTERFACES) == {
        "Switch", "MotionSwitch", "Position", "Color", "ColorTemperature", "Brightness", "Humidity", "Temperature",
        "FanSpeed", "Volume", "Mute", "Mode", "SwingMode", "Media.TVChannel", "Media.Music", "PlaybackControl",
        "PlaybackMode"}


@pytest.mark.parametrize(("name", "value"), [
    ("Switch.On", "On"), ("Switch.Off", "Off"), ("Mode.Cool", "Cool"), ("SwingMode.HorizonOff", "HorizonOff"),
    ("PlaybackMode.RepeatOne", "RepeatOne"), ("Mute.On", "On"), ("MotionSwitch.Off", "Off"),
])
def test_enum_operations_target_the_operation_name(name: str, value: str) -> None:
    result = target(name, {"ignored": True})
    assert result.value == value
    assert set_message(result, "m1") == {"id": "m1", "interface": name.rsplit(".", 1)[0],
                                        "operation": name.rsplit(".", 1)[1], "value": value}


@pytest.mark.parametrize(("payload", "value"), [
    ({"value": 0}, 0), ({"value": 100}, 100), ({"value": 55}, 55), ({"value": 55.4}, 55), ({"value": "70"}, 70),
    ({"value": " 30 "}, 30), ({"value": 55.5}, 56), ({"value": 54.5}, 55), ({"value": 99.6}, 100),  # half up
])
def test_percentage_set(payload: dict[str, Any], value: int) -> None:
    result = target("Brightness.Set", payload)
    assert result.value == value and isinstance(result.value, int)


@pytest.mark.parametrize(("name", "payload"), [
    ("Brightness.Set", {"value": 101}), ("Brightness.Set", {"value": -1}), ("Position.Set", {"value": 100.5}),
    ("Color.Set", {"value": 0x1000000}), ("Color.Set", {"value": -1}), ("Volume.Set", {"value": "loud"}),
    ("Volume.Set", {"value": True}), ("Volume.Set", {"value": [5]}), ("Humidity.Set", {"value": "nan"}),
    ("FanSpeed.Adjust", {"delta": "x"}), ("Color.Set", {"value": 1.5}), ("Color.Set", {"value": "255.25"}),
])
def test_set_out_of_range_or_not_a_number(name: str, payload: dict[str, Any]) -> None:
    assert refused(name, payload)[0] == "E_VALUE_OUT_OF_RANGE"


def test_set_without_a_value_is_malformed() -> None:
    name, message = refused("Brightness.Set", {})
    assert name == "E_INTERNAL_ERROR" and "payload.value" in message


def test_range_error_names_the_range() -> None:
    assert "0 to 100" in refused("Brightness.Set", {"value": 150})[1]
    assert "16 to 30" in refused("Temperature.Set", {"value": 31}, display_type="ac")[1]


@pytest.mark.parametrize(("current", "payload", "value"), [
    (50, {"delta": 20}, 70), (50, {"delta": -20}, 30), (95, {"delta": 20}, 100), (5, {"delta": -20}, 0),
    (50, {}, 60), (50, None, 60), (100, {"delta": 1000}, 100), (50, {"delta": "-5"}, 45),
])
def test_percentage_adjust_clamps_with_default_step_ten(current: int, payload: dict[str, Any] | None,
                                                        value: int) -> None:
    result = target("Brightness.Adjust", payload, current=current)
    assert result.value == value
    assert result.delta == float((payload or {}).get("delta", 10))


def test_adjust_of_an_unknown_state_leaves_the_arithmetic_to_the_device() -> None:
    result = target("Volume.Adjust", {"delta": -5})
    assert result.value is None and result.delta == -5
    assert set_message(result, "m") == {"id": "m", "interface": "Volume", "operation": "Adjust", "delta": -5}
    assert not result.reached(None, None)
    assert result.reached(None, 45)


def test_set_max_min_random_and_presets_need_no_payload() -> None:
    assert target("ColorTemperature.SetMax", {"delta": -1}).value == 100  # VD's doc bug payload is ignored
    assert target("Brightness.SetMin").value == 0
    assert [target("FanSpeed." + op).value for op in ("SetHigh", "SetMedium", "SetLow")] == [100, 60, 30]
    colours = {target("Color.SetRandom", seed=seed).value for seed in range(20)}
    assert len(colours) > 10
    assert all(isinstance(c, int) and 0 <= c <= 0xFFFFFF for c in colours)


def test_color_range_is_rgb() -> None:
    assert target("Color.Set", {"value": 0xFFFFFF}).value == 16777215
    assert target("Color.Set", {"value": 0}).value == 0
    assert target("Color.Set", {"value": 255.0}).value == 255  # a whole number written as a float
    name, message = refused("Color.Set", {"value": 0.5})
    assert name == "E_VALUE_OUT_OF_RANGE" and "whole number (0 to 16777215)" in message
    assert "0 to 16777215, got 16777216" in refused("Color.Set", {"value": 0x1000000})[1]


def test_temperature_limits_come_from_additional_info_then_the_ac_default() -> None:
    info = {"minTemperature": "18", "maxTemperature": "26"}
    assert target("Temperature.SetMax", info=info).value == 26
    assert target("Temperature.SetMin", info=info).value == 18
    assert refused("Temperature.Set", {"value": 27}, info=info)[0] == "E_VALUE_OUT_OF_RANGE"
    assert target("Temperature.Adjust", {"delta": 5}, current=24, info=info).value == 26
    assert target("Temperature.SetMax", display_type="ac").value == 30
    assert target("Temperature.SetMin", display_type="ac").value == 16
    assert target("Temperature.Adjust", current=24, display_type="ac").value == 25  # default step 1 °C
    assert target("Temperature.Set", {"value": 22.25}, display_type="ac").value == 22.2
    assert target("Temperature.Set", {"value": 22.0}, display_type="ac").value == 22


def test_temperature_without_limits() -> None:
    assert target("Temperature.Set", {"value": 65}, display_type="waterHeater").value == 65
    assert target("Temperature.Adjust", {"delta": 40}, current=65, display_type="waterHeater").value == 105
    name, message = refused("Temperature.SetMax", display_type="waterHeater")
    assert name == "E_NOT_SUPPORTED_DIRECTIVE" and "maxTemperature" in message
    # Nonsense limits are ignored rather than trusted.
    assert target("Temperature.Set", {"value": 40}, info={"minTemperature": "30", "maxTemperature": "10"},
                  display_type="heater").value == 40
    assert target("Temperature.Set", {"value": 9}, info={"maxTemperature": "abc", "minTemperature": "5"},
                  display_type="heater").value == 9
    assert refused("Temperature.Set", {"value": 4}, info={"minTemperature": "5"}, display_type="heater")[0] \
        == "E_VALUE_OUT_OF_RANGE"


def test_one_sided_and_crossed_limits_keep_the_defaults_with_a_problem_named() -> None:
    temperature = INTERFACES["Temperature"]
    # An AC with only a maximum keeps the default minimum (16 °C), and the other way round.
    assert limits(temperature, {"maxTemperature": "28"}, "ac") == ((16.0, 28.0), ())
    assert limits(temperature, {"minTemperature": "18"}, "ac") == ((18.0, 30.0), ())
    assert refused("Temperature.Set", {"value": 15}, info={"maxTemperature": "28"}, display_type="ac")[0] \
        == "E_VALUE_OUT_OF_RANGE"
    # Crossed limits are refused as a whole: the defaults apply and the problem names both fields.
    crossed, problems = limits(temperature, {"minTemperature": "30", "maxTemperature": "20"}, "ac")
    assert crossed == (16.0, 30.0)
    [problem] = problems
    assert "minTemperature (30) is above maxTemperature (20)" in problem and "16 to 30" in problem
    # A one-sided limit that crosses the other default is refused too.
    assert limits(temperature, {"maxTemperature": "10"}, "ac")[0] == (16.0, 30.0)
    assert limits(temperature, {"minTemperature": "40"}, "ac")[1]
    # Not a number: ignored, named.
    bounds, problems = limits(temperature, {"minTemperature": "cold", "maxTemperature": "inf"}, "ac")
    assert bounds == (16.0, 30.0)
    assert [p.split(" ")[1] for p in problems] == ["minTemperature", "maxTemperature"]
    assert all("is not a number" in p for p in problems)
    # Interfaces with their own range have no per-device limits to be wrong about.
    assert limits(INTERFACES["Brightness"], {"minBrightness": "x"}, "light") == ((0.0, 100.0), ())


def test_descriptors() -> None:
    channel = target("Media.TVChannel.Set", {"tvChannel": {"name": "News", "code": "CCTV13", "extra": 1}})
    assert channel.value == {"name": "News", "code": "CCTV13"}
    assert refused("Media.TVChannel.Set", {"tvChannel": {}})[0] == "E_INTERNAL_ERROR"
    assert refused("Media.Music.Set", {})[0] == "E_INTERNAL_ERROR"
    assert target("Media.Music.Set", {"music": {"artist": "Faure"}}).value == {"artist": "Faure"}
    following = target("Media.TVChannel.Next")
    assert following.value is None
    before = {"code": "CCTV1"}
    assert not following.reached(before, {"code": "CCTV1"})
    assert following.reached(before, {"code": "CCTV2"})
    # A device that renames the channel it switched to still confirms.
    assert channel.reached(before, {"name": "News Channel", "code": "CCTV13"})


def test_confirmation_needs_the_target_value() -> None:
    brightness = target("Brightness.Set", {"value": 40})
    assert not brightness.reached(80, 80)
    assert not brightness.reached(80, 60)  # a curtain or dimmer on its way is not there yet
    assert brightness.reached(80, 40)
    assert brightness.reached(80, 40.0)
    on = target("Switch.On")
    assert on.reached("On", "On")  # already on: nothing to wait for
    assert not on.reached("Off", "Off")


def test_same_value() -> None:
    assert same_value(24, 24.0) and same_value("On", "On") and not same_value("On", "on")
    assert not same_value(1, "1") and same_value({"a": "b"}, {"a": "b"})


def set_message(result: Target, command_id: str) -> dict[str, Any]:
    """The `B/device/ID/set` body the native dialect makes of a resolved target."""
    request = ControlRequest(command_id, result.interface.name, result.operation, result.value, result.delta, {})
    [message] = NativeDialect("b").encode_control("d", Route("native", "d"), request)
    assert message.topic == "b/device/d/set"
    body: dict[str, Any] = json.loads(message.payload)
    return body
