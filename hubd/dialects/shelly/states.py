"""What a Shelly status says of one component (pure): interface values and the problems of unusable ones.

Gen2+: a component's status object (GetStatus, NotifyFullStatus, `<prefix>/status/<component>:<n>`) or the changed
part of it (NotifyStatus): a switch's or light's `output` (bool), a light's `brightness` (0..100), a colour light's
(`rgb:<n>`, `rgbw:<n>`) `rgb` ([r, g, b], 0..255 each: the platform's Color; `rgbw`'s `white` is not a colour and is
not read), a cover's `current_pos` (0..100, with `pos_control`) and `state` (`open`, `closed`, `opening`, `closing`,
`stopped`), a temperature sensor's `tC`, a humidity sensor's `rh`. Gen1: the text of `relay/<n>`, `light/<n>` and
`color/<n>` (`on`/`off`), `roller/<n>` (`open`, `close`, `stop`) and `roller/<n>/pos`, `light/<n>/status` (`{"ison",
"brightness"}`), `color/<n>/status` (`{"ison", "mode", "red", "green", "blue", "white", "gain", "brightness"}`: in
colour mode, or without a mode as an RGBW2 says it, Brightness is `gain` and Color is red, green and blue; in white
mode, a Bulb's, Brightness is `brightness` and there is no colour), `sensor/temperature` and `sensor/humidity`
(numbers).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hubd.devices.model import StateValue
from hubd.dialects import convert
from hubd.dialects.payload import json_object
from hubd.dialects.shelly.parts import Component
from hubd.errors import DeviceMessageInvalid

MAX_TEXT_BYTES = 4_096


def gen2(component: Component, status: Mapping[str, Any]) -> tuple[dict[str, StateValue], list[str]]:
    """The interface values a (partial) Gen2+ status object gives this component, and the problems."""
    values: dict[str, StateValue] = {}
    problems: list[str] = []
    where = component.status_key
    if component.kind in ("switch", "light"):
        output = status.get("output")
        if isinstance(output, bool):
            values["Switch"] = convert.on_off(output)
        elif output is not None:
            problems.append(f"{where}.output is {_show(output)}, not true or false")
    if component.kind == "light":
        if (level := _number(status, "brightness", where, problems)) is not None:
            values["Brightness"] = convert.percent_of(level, 0, 100)
        if component.opts.get("color") and "rgb" in status:
            color = _rgb(status.get("rgb"))
            if color is None:
                problems.append(f"{where}.rgb is {_show(status.get('rgb'))}, not [red, green, blue] of 0..255")
            else:
                values["Color"] = color
    elif component.kind == "cover":
        position = _number(status, "current_pos", where, problems) if component.opts.get("position") else None
        if position is not None:
            values["Position"] = convert.percent_of(position, 0, 100)
            values["Switch"] = convert.on_off(position > 0)
        elif status.get("state") in ("open", "closed"):
            values["Switch"] = convert.on_off(status["state"] == "open")
    elif component.kind == "temperature" and (celsius := _number(status, "tC", where, problems)) is not None:
        values["Temperature"] = round(celsius, 1)
    elif component.kind == "humidity" and (humidity := _number(status, "rh", where, problems)) is not None:
        values["Humidity"] = convert.humidity_percent(humidity)
    return values, problems


def gen1(component: Component, sub: str, payload: bytes) -> tuple[dict[str, StateValue], list[str]]:
    """The interface values a Gen1 topic (after `<type>/<n>`: "" or `pos`, `status`) gives this component."""
    text = payload[:MAX_TEXT_BYTES].decode("utf-8", errors="replace").strip()
    kind = component.kind
    if kind in ("switch", "light") and sub == "":
        if text in ("on", "off"):
            return {"Switch": convert.on_off(text == "on")}, []
        return {}, [f"{text[:40]!r} is neither 'on' nor 'off'"]
    if kind == "light" and sub == "status":
        try:
            data: Any = json_object(payload)  # the bounded reader: nesting too deep is refused, not a RecursionError
        except DeviceMessageInvalid:
            data = None
        if not isinstance(data, dict):
            return {}, ["not a JSON object with ison and brightness"]
        values: dict[str, StateValue] = {}
        problems: list[str] = []
        if isinstance(data.get("ison"), bool):
            values["Switch"] = convert.on_off(data["ison"])
        coloured = bool(component.opts.get("color")) and data.get("mode") != "white"
        if (level := _number(data, "gain" if coloured else "brightness", "status", problems)) is not None:
            values["Brightness"] = convert.percent_of(level, 0, 100)
        if coloured and any(key in data for key in ("red", "green", "blue")):
            color = _rgb([data.get("red"), data.get("green"), data.get("blue")])
            if color is None:
                problems.append("status.red, green and blue are not three numbers of 0..255")
            else:
                values["Color"] = color
        return values, problems
    if kind == "cover" and sub == "pos":
        number = _parse_number(text)
        if number is None:
            return {}, [f"{text[:40]!r} is not a position"]
        if number < 0:
            return {}, []  # -1: the roller is not calibrated, its position unknown
        percent = convert.percent_of(number, 0, 100)
        return {"Position": percent, "Switch": convert.on_off(percent > 0)}, []
    if kind in ("temperature", "humidity") and sub == "":
        number = _parse_number(text)
        if number is None:
            return {}, [f"{text[:40]!r} is not a number"]
        if kind == "temperature":
            return {"Temperature": round(number, 1)}, []
        return {"Humidity": convert.humidity_percent(number)}, []
    return {}, []


def _number(data: Mapping[str, Any], key: str, where: str, problems: list[str]) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        problems.append(f"{where}.{key} is {_show(value)}, not a number")
        return None
    return float(value)


def _rgb(value: Any) -> int | None:
    """[red, green, blue] (0..255 each) as the platform's Color; None if it is not that."""
    if not isinstance(value, list) or len(value) != 3:
        return None
    if any(isinstance(c, bool) or not isinstance(c, int | float) or not 0 <= c <= 255 for c in value):
        return None
    return convert.rgb_value(*value)


def _parse_number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _show(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
