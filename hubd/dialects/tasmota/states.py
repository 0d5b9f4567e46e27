"""What a Tasmota state message says of one entity (pure): interface values, presses, problems.

Tasmota reports power and light state in `stat/<topic>/RESULT` (after a command or a change) and
`tele/<topic>/STATE` (every TelePeriod): `POWER` or `POWER<n>` in its state texts, `Dimmer` (0..100, `Dimmer1`/
`Dimmer2` for a split light, `Channel<n>` with SetOption68), `CT` (mireds), `HSBColor` ("hue,saturation,brightness")
and `Color` (hex or "r,g,b"); a shutter's `Shutter<n>` object (`Position` 0..100, `Direction`) in RESULT and in
`tele/<topic>/SENSOR`; sensor readings in `tele/<topic>/SENSOR` in the shape of the discovery's `sn` (with
`TempUnit`); and a button's or switch's action in RESULT as `{"Button1":{"Action":"SINGLE"}}` (SetOption73) or
`{"Switch1":{"Action":"ON"}}` (SetOption114), which for a switch input in a sensor mode is its state (also in
SENSOR and STATUS10 as `"Switch1":"ON"`, under its SwitchText when it has one: `{"Motion":{"Action":"ON"}}`).
`read` turns one message into an entity's values; `pressed` says whether it is the declared doorbell action;
`released` whether a push-on input (a PIR in SwitchMode 13 or 14, which sends ON only) is to be reported Off
again at once, as Home Assistant turns its binary sensor off after a second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hubd.devices.model import StateValue
from hubd.dialects import convert
from hubd.dialects.tasmota.entities import Entity

_CELSIUS_UNITS = {"C": "°C", "F": "°F"}


def read(entity: Entity, texts: tuple[str, str], data: Mapping[str, Any]) -> tuple[dict[str, StateValue], list[str]]:
    """The interface values a state object gives this entity, and the problems of its unusable values."""
    values: dict[str, StateValue] = {}
    problems: list[str] = []
    if entity.kind in ("relay", "light"):
        _power(entity.index, texts, data, values, problems)
    if entity.kind == "light":
        _light(entity.opts, data, values, problems)
    elif entity.kind == "shutter":
        _shutter(entity, data, values, problems)
    elif entity.kind == "sensor":
        _sensor(entity.opts, data, values, problems)
    elif entity.kind == "input":
        _input(entity.opts, texts, data, values)
    return values, problems


def released(entity: Entity, values: Mapping[str, StateValue]) -> bool:
    """Whether these values of a push-on switch input (SwitchMode 13, 14: it says ON, never OFF) are a moment's
    motion, to be followed by Off."""
    return entity.kind == "input" and bool(entity.opts.get("push_on")) and values.get("Switch") == "On"


def pressed(entity: Entity, data: Mapping[str, Any]) -> bool:
    """Whether the message is this doorbell's declared action (`{"Button1":{"Action":"SINGLE"}}`), no other."""
    if entity.kind != "doorbell":
        return False
    report = data.get(entity.opts["source"])
    action = report.get("Action") if isinstance(report, dict) else None
    return isinstance(action, str) and action.casefold() == str(entity.opts["event"]).casefold()


def _input(opts: Mapping[str, Any], texts: tuple[str, str], data: Mapping[str, Any],
           values: dict[str, StateValue]) -> None:
    """A switch input's state: its action in RESULT, its plain state in SENSOR and STATUS10 (not a push-on input's:
    its pin's level there says nothing of motion, as Home Assistant ignores it too). TOGGLE, HOLD and the other
    actions are presses, not states."""
    report = data.get(str(opts.get("source")))
    if isinstance(report, dict):
        value = report.get("Action")
    elif opts.get("push_on"):
        return
    else:
        value = report
    if value == texts[1]:
        values["Switch"] = "On"
    elif value == texts[0]:
        values["Switch"] = "Off"


def _power(index: int, texts: tuple[str, str], data: Mapping[str, Any], values: dict[str, StateValue],
           problems: list[str]) -> None:
    key = f"POWER{index + 1}"
    if key not in data and index == 0:
        key = "POWER"  # one relay: POWER (unless SetOption26)
    value = data.get(key)
    if value is None:
        return
    if value == texts[1]:
        values["Switch"] = "On"
    elif value == texts[0]:
        values["Switch"] = "Off"
    else:
        problems.append(f"{key} is {_show(value)}, neither {texts[1]!r} nor {texts[0]!r} (the device's state texts)")


def _light(opts: Mapping[str, Any], data: Mapping[str, Any], values: dict[str, StateValue],
           problems: list[str]) -> None:
    if opts.get("dimmer") is not None and (dimmer := _number(data, str(opts["state"]), problems)) is not None:
        values["Brightness"] = convert.percent_of(dimmer, 0, 100)
    if opts.get("ct") and (mireds := _number(data, "CT", problems)) is not None:
        low, high = opts.get("mireds") or (153, 500)
        values["ColorTemperature"] = convert.color_temperature_percent_from_mireds(mireds, low, high)
    if opts.get("color"):
        color = _color(data)
        if isinstance(color, str):
            problems.append(color)
        elif color is not None:
            values["Color"] = color


def _color(data: Mapping[str, Any]) -> int | str | None:
    """The colour at full brightness: from HSBColor, else from Color (hex or "r,g,b"), scaled up; a problem text."""
    hsb = data.get("HSBColor")
    if isinstance(hsb, str):
        parts = hsb.split(",")
        try:
            hue, saturation = float(parts[0]), float(parts[1])
        except (ValueError, IndexError):
            return f"HSBColor is {_show(hsb)}, not \"hue,saturation,brightness\""
        return convert.rgb_from_hs(hue, saturation)
    color = data.get("Color")
    if not isinstance(color, str):
        return None if color is None else f"Color is {_show(color)}, not a colour"
    try:
        channels = [int(c) for c in color.split(",")] if "," in color else \
            [int(color[i:i + 2], 16) for i in range(0, len(color) - 1, 2)]
    except ValueError:
        return f"Color is {_show(color)}, neither hex nor \"r,g,b\""
    if len(channels) < 3:
        return None  # a cold/warm light's two channels: no colour
    red, green, blue = channels[:3]
    peak = max(red, green, blue)
    if peak == 0:
        return None  # the light is off or white: its colour is not in these channels
    return convert.rgb_value(red * 255 / peak, green * 255 / peak, blue * 255 / peak)


def _shutter(entity: Entity, data: Mapping[str, Any], values: dict[str, StateValue], problems: list[str]) -> None:
    key = f"Shutter{entity.index + 1}"
    report = data.get(key)
    if report is None:
        return
    if not isinstance(report, dict):
        problems.append(f"{key} is {_show(report)}, not an object with a Position")
        return
    position = _number(report, "Position", problems, where=key)
    if position is None:
        return
    percent = convert.percent_of(position, 0, 100)
    if entity.opts.get("invert"):
        percent = 100 - percent
    values["Position"] = percent
    values["Switch"] = convert.on_off(percent > 0)


def _sensor(opts: Mapping[str, Any], data: Mapping[str, Any], values: dict[str, StateValue],
            problems: list[str]) -> None:
    sensor, quantity = opts["path"]
    readings = data.get(sensor)
    if not isinstance(readings, dict) or quantity not in readings:
        return
    value = _number(readings, quantity, problems, where=sensor)
    if value is None:
        return
    if quantity == "Humidity":
        values["Humidity"] = convert.humidity_percent(value)
        return
    given = data.get("TempUnit")
    unit = given if isinstance(given, str) else str(opts.get("unit") or "C")
    celsius = convert.celsius(value, _CELSIUS_UNITS.get(unit.strip().upper(), "?"))
    if celsius is None:
        problems.append(f"TempUnit is {_show(unit)}; Tasmota's temperatures are in C or F")
    else:
        values["Temperature"] = celsius


def _number(data: Mapping[str, Any], key: str, problems: list[str], *, where: str = "") -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        problems.append(f"{where + '.' if where else ''}{key} is {_show(value)}, not a number")
        return None
    return float(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
