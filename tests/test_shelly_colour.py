"""Shelly colour lights on real payloads: a Plus RGBW PM's `rgb:0` and `rgbw:0` (tests/fixtures/shelly, Shelly's
docs: https://shelly-api-docs.shelly.cloud/gen2/ComponentsAndServices/RGB and .../RGBW) and a Gen1 RGBW2 or Bulb on
`shellies/<id>/color/<n>` (https://shelly-api-docs.shelly.cloud/gen1/#shelly-rgbw2-color-mqtt). Each is a light with
Switch, Brightness and Color (the platform's RGB integer); Gen2+ commands are `RGB.Set` / `RGBW.Set` on the device's
own `<prefix>/rpc`, Gen1's `color/<n>/command` and `color/<n>/set` (brightness as `gain` in colour mode, `brightness` in
white mode)."""

from __future__ import annotations

from typing import Any

import pytest
from shelly_helpers import configs, control, discover, fixture, make, messages, publish, rejected, states

from hubd.dialects.base import CommandRefused, ConfigReceived, topic_matches

RGB = fixture("plusrgbwpm_rgb")
RGBW = fixture("plusrgbwpm_rgbw")
PLUS = "shellyplusrgbwpm-a0a3b35c7024"
GEN1 = "shellyrgbw2-11ABD9"
NAVY = 0x000080  # the captured rgb [0, 0, 128]


def interfaces(announced: ConfigReceived) -> dict[str, tuple[str, ...]]:
    return {c.interface: tuple(c.supportedOperations) for c in announced.config.capabilities}


@pytest.mark.parametrize("device", [RGB, RGBW], ids=["rgb", "rgbw"])
def test_a_plus_rgbw_pm_in_a_colour_profile_is_a_light_with_switch_brightness_and_color(device: dict[str, Any]) -> None:
    found = discover(make(), device)
    announced = configs(found)[PLUS]
    assert announced.config.displayType == "light"
    assert set(interfaces(announced)) == {"Switch", "Brightness", "Color"}
    assert set(interfaces(announced)["Color"]) == {"Set", "SetRandom"}
    assert states(found)[PLUS] == {"Switch": "Off", "Brightness": 50, "Color": NAVY}
    assert not rejected(found)


def test_a_colour_change_notified_is_a_color_state_and_a_bad_rgb_is_refused_by_name() -> None:
    dialect = make()
    discover(dialect, RGBW)
    notify = {"src": PLUS, "dst": f"{PLUS}/events", "method": "NotifyStatus",
              "params": {"ts": 1722607400.0, "rgbw:0": {"id": 0, "output": True, "rgb": [255, 128, 0], "white": 0}}}
    assert states(publish(dialect, f"{PLUS}/events/rpc", notify)) == {PLUS: {"Switch": "On", "Color": 0xFF8000}}
    notify["params"]["rgbw:0"] = {"id": 0, "rgb": [255, 128]}
    found = publish(dialect, f"{PLUS}/events/rpc", notify)
    assert states(found) == {} and any("rgbw:0.rgb is [255, 128]" in r for r in rejected(found))


def test_gen2_colour_commands_are_rgb_set_and_rgbw_set_on_the_devices_own_rpc() -> None:
    for device, method in ((RGB, "RGB.Set"), (RGBW, "RGBW.Set")):
        dialect = make()
        announced = configs(discover(dialect, device))[PLUS]
        [(topic, frame)] = control(dialect, announced, "Color", "Set", 0xFF0010)
        assert topic == f"{PLUS}/rpc"
        assert (frame["method"], frame["params"]) == (method, {"id": 0, "on": True, "rgb": [255, 0, 16]})
        [(_, frame)] = control(dialect, announced, "Brightness", "Set", 40)
        assert (frame["method"], frame["params"]) == (method, {"id": 0, "on": True, "brightness": 40})
        [(_, frame)] = control(dialect, announced, "Switch", "Off", "Off")
        assert (frame["method"], frame["params"]) == (method, {"id": 0, "on": False})


def test_a_gen1_rgbw2_in_colour_mode_is_a_light_whose_brightness_is_its_gain() -> None:
    dialect = make()
    found = [i for topic, payload in messages("gen1_color_messages")[:3] for i in publish(dialect, topic, payload)]
    announced = configs(found)[GEN1]
    assert announced.config.displayType == "light"
    assert set(interfaces(announced)) == {"Switch", "Brightness", "Color"}
    status = publish(dialect, *messages("gen1_color_messages")[1])
    assert states(status) == {GEN1: {"Switch": "On", "Brightness": 5, "Color": 0x222222}}
    assert states(publish(dialect, *messages("gen1_color_messages")[2])) == {GEN1: {"Switch": "Off"}}
    assert not rejected(found)


def test_a_gen1_bulb_reports_its_colour_in_colour_mode_and_only_its_brightness_in_white_mode() -> None:
    dialect = make()
    bulb = "shellybulb-D8A2F1"
    publish(dialect, "shellies/announce", {"id": bulb, "model": "SHBLB-1", "mac": "C45BBED8A2F1", "ip": "192.0.2.7",
                                           "new_fw": False, "fw_ver": "20230913-112003/v1.14.0-gcb84623"})
    _, colour, white = messages("gen1_color_messages")[2:5]
    assert states(publish(dialect, *colour)) == {bulb: {"Switch": "Off", "Brightness": 100, "Color": 0x0000FF}}
    assert states(publish(dialect, *white)) == {bulb: {"Switch": "On", "Brightness": 40}}


def test_gen1_colour_commands_go_to_the_devices_own_color_topics() -> None:
    dialect = make()
    found = [i for topic, payload in messages("gen1_color_messages")[:3] for i in publish(dialect, topic, payload)]
    announced = configs(found)[GEN1]
    base = f"shellies/{GEN1}/color/0"
    assert control(dialect, announced, "Switch", "On", "On") == [(f"{base}/command", "on")]
    assert control(dialect, announced, "Brightness", "Set", 30) == \
        [(f"{base}/set", {"turn": "on", "gain": 30, "brightness": 30})]  # colour mode reads gain, white mode brightness
    assert control(dialect, announced, "Brightness", "Set", 0) == [(f"{base}/set", {"turn": "off"})]
    assert control(dialect, announced, "Color", "Set", 0x00FF7F) == \
        [(f"{base}/set", {"turn": "on", "red": 0, "green": 255, "blue": 127})]
    with pytest.raises(CommandRefused):
        control(dialect, announced, "ColorTemperature", "Set", 50)


def test_hubd_never_hears_its_own_gen1_colour_commands() -> None:
    dialect = make()
    for topic in (f"shellies/{GEN1}/color/0/set", f"shellies/{GEN1}/color/0/command"):
        assert not any(topic_matches(f, topic) for f, _ in dialect.subscriptions())


@pytest.mark.parametrize("payload", ["[" * 3_000, '{"ison": true, "gain": ' + "[" * 3_000 + "]" * 3_000 + "}"])
def test_a_gen1_status_nested_too_deep_or_not_json_is_refused_by_name_never_a_failure_of_the_dialect(
        payload: str) -> None:
    # Read by json.loads alone, 3,000 brackets were a RecursionError out of the dialect (a "bug" to the bridge).
    dialect = make()
    for topic, message in messages("gen1_color_messages")[:3]:
        publish(dialect, topic, message)
    for topic in (f"shellies/{GEN1}/color/0/status", "shellies/shellydimmer2-AB12CD/light/0/status"):
        found = publish(dialect, topic, payload)
        assert not states(found)
    assert rejected(publish(dialect, f"shellies/{GEN1}/color/0/status", payload)) == \
        [f"shellies/{GEN1}/color/0/status: not a JSON object with ison and brightness"]
