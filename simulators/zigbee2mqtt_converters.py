"""How a simulated zigbee2mqtt device obeys `/set` (pure): the command zigbee2mqtt reads from the message
(lib/extension/publish.ts parseMessage), and what zigbee-herdsman-converters' toZigbee converters return as the
optimistic state zigbee2mqtt then publishes.

Driven by the model's exposes: a property with the set bit in its access takes a value of its type (binary:
value_on/value_off/value_toggle; numeric: a number or a preset name, clamped to value_min..value_max and rounded to
value_step; enum: one of its values; text; composite: an object), and only properties zigbee2mqtt publishes (the
state bit) appear in the new state. Lights, covers and their specifics follow zigbee-herdsman-converters
(light_onoff_brightness, light_colortemp, light_color with color sync, cover_state, cover_position_tilt).
Must not import hubd.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from simulators.zigbee2mqtt_models import ACCESS_SET, ACCESS_STATE, Expose, Model

# lib/state.ts CACHE_IGNORE_PROPERTIES: published with the message that carries them, never cached.
_UNCACHED = re.compile(r"action|action_.*|button|button_left|button_right|forgotten|keyerror|step_size|"
                       r"transition_time|group_list|group_capacity|no_occupancy_since|step_mode|duration|elapsed|"
                       r"from_side|to_side|illuminance_lux")
# publish.ts parseMessage: a payload that is not JSON is the state when it is one of these.
STATE_VALUES = ("on", "off", "toggle", "open", "close", "stop", "lock", "unlock")


class Refused(ValueError):
    """A value the device's converter refuses (zigbee2mqtt logs "Publish 'set' ... failed" and goes on)."""


def cached(prop: str) -> bool:
    """Whether zigbee2mqtt keeps this property in the device's cached state."""
    return _UNCACHED.fullmatch(prop) is None


def parse_set(text: str, attribute: str) -> dict[str, Any] | None:
    """The command of a /set message (publish.ts parseMessage); None for one zigbee2mqtt rejects."""
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = None if not attribute else text
        if not attribute and text.lower() in STATE_VALUES:
            return {"state": text}
    if attribute:
        return {attribute: value}
    return value if isinstance(value, dict) else None


def obey(model: Model, state: dict[str, Any], command: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The state update a `/set` command gives (empty: nothing to publish), and zigbee2mqtt's error lines."""
    update: dict[str, Any] = {}
    problems: list[str] = []
    turning_off = str(command.get("state", "")).upper() == "OFF"
    for key, value in command.items():
        found = model.feature(key)
        if found is None or not found[0]["access"] & ACCESS_SET:
            problems.append(f"No converter available for '{key}' ({_short(value)})")
            continue
        feature, kind = found
        if kind == "light" and key == "brightness" and turning_off:
            continue  # light_onoff_brightness: one converter for both; off wins
        try:
            change = _set(model, feature, kind, value, {**state, **update})
        except Refused as err:
            problems.append(f"Publish 'set' '{key}' failed: '{err}'")
            continue
        if feature["access"] & ACCESS_STATE:  # e.g. a light's `effect` (access 2) changes nothing published
            update.update(change)
    return update, problems


def _set(model: Model, feature: Expose, kind: str | None, value: Any, state: dict[str, Any]) -> dict[str, Any]:
    prop = feature["property"]
    if kind == "light" and prop == "brightness":
        level = _clamped(feature, value)
        return {"state": "OFF"} if level <= 0 else {"brightness": level, "state": "ON"}
    if kind == "light" and prop == "color_temp":
        return {"color_mode": "color_temp", "color_temp": _clamped(feature, value)}
    if kind == "light" and prop == "color":
        return _color(model, value)
    if kind == "cover" and prop == "state":
        command = _one_of(feature, value)
        end = {"OPEN": 100, "CLOSE": 0}.get(command)
        return {"moving": "STOP"} if end is None else {"position": end, "state": command}
    if kind == "cover" and prop == "position":
        position = _clamped(feature, value)
        return {"position": position, "state": "OPEN" if position > 0 else "CLOSE"}
    if feature["type"] == "binary":
        return {prop: _binary(feature, value, state.get(prop))}
    if feature["type"] == "numeric":
        return {prop: _clamped(feature, value)}
    if feature["type"] == "enum":
        return {prop: _one_of(feature, value)}
    if feature["type"] == "composite":
        if not isinstance(value, dict):
            raise Refused(f"{prop} takes an object")
        old = state.get(prop)
        return {prop: {**(old if isinstance(old, dict) else {}), **value}}
    if not isinstance(value, str):
        raise Refused(f"{prop} takes text")
    return {prop: value}


def _binary(feature: Expose, value: Any, current: Any) -> Any:
    on, off, toggle = feature.get("value_on"), feature.get("value_off"), feature.get("value_toggle")
    for wanted in (on, off, toggle):
        if wanted is not None and _same(value, wanted):
            if wanted == toggle:
                return off if current == on else on
            return wanted
    raise Refused(f"{feature['property']} is {on!r} or {off!r}" + (f" or {toggle!r}" if toggle else ""))


def _clamped(feature: Expose, value: Any) -> int | float:
    presets = {p["name"]: p["value"] for p in feature.get("presets", [])}
    if isinstance(value, str) and value.lower() in presets:
        value = presets[value.lower()]
    elif isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise Refused(f"{feature['property']} takes a number, not {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Refused(f"{feature['property']} takes a number, not {_short(value)}")
    low, high = feature.get("value_min", -math.inf), feature.get("value_max", math.inf)
    step = feature.get("value_step")
    number = min(max(value, low), high)
    number = round(number / step) * step if step else round(number)
    return _js_number(number)


def _one_of(feature: Expose, value: Any) -> str:
    for allowed in feature.get("values", []):
        if _same(value, allowed):
            return str(allowed)
    raise Refused(f"{feature['property']} is one of {feature.get('values')}, not {_short(value)}")


def _color(model: Model, value: Any) -> dict[str, Any]:
    """light_color: hex and RGB become CIE x/y; x/y as given; hue/saturation as given; color_temp synced from x/y."""
    if isinstance(value, str) and value.startswith("#"):
        value = {"hex": value}
    if not isinstance(value, dict):
        raise Refused("Value does not contain valid color definition")
    if "x" in value and "y" in value:
        x, y = _number(value["x"]), _number(value["y"])
    elif "hex" in value or "rgb" in value or {"r", "g", "b"} <= set(value):
        x, y = _xy_of_rgb(*_rgb(value))
    elif "hue" in value or "saturation" in value or "h" in value:
        hs = {"hue": _number(value.get("hue", value.get("h", 0))),
              "saturation": _number(value.get("saturation", value.get("s", 100)))}
        return {"color": hs, "color_mode": "hs"}
    else:
        raise Refused("Value does not contain valid color definition")
    update: dict[str, Any] = {"color": {"x": round(x, 4), "y": round(y, 4)}, "color_mode": "xy"}
    found = model.feature("color_temp")
    if found is not None and (x, y) != (0, 0):
        # color.ts syncColorState: ColorXY.toMireds(), clamped to the bulb's range.
        n = (x - 0.332) / (0.1858 - y)
        kelvin = abs(437 * n ** 3 + 3601 * n ** 2 + 6861 * n + 5517)
        update["color_temp"] = _clamped(found[0], 1_000_000 / kelvin)
    return update


def _rgb(value: dict[str, Any]) -> tuple[float, float, float]:
    if "hex" in value:
        text = str(value["hex"]).lstrip("#")
        if not re.fullmatch(r"[0-9a-fA-F]{6}", text):
            raise Refused(f"{value['hex']!r} is not a #rrggbb colour")
        return int(text[0:2], 16), int(text[2:4], 16), int(text[4:6], 16)
    if "rgb" in value:
        parts = str(value["rgb"]).split(",")
        if len(parts) != 3:
            raise Refused(f"{value['rgb']!r} is not r,g,b")
        return _number(parts[0]), _number(parts[1]), _number(parts[2])
    return _number(value["r"]), _number(value["g"]), _number(value["b"])


def _xy_of_rgb(red: float, green: float, blue: float) -> tuple[float, float]:
    """ColorRGB.gammaCorrected().toXY() (Wide RGB D65), from 0..255 components."""
    def linear(v: float) -> float:
        v = min(max(v / 255, 0.0), 1.0)
        return ((v + 0.055) / 1.055) ** 2.4 if v > 0.04045 else v / 12.92

    r, g, b = linear(red), linear(green), linear(blue)
    big_x = r * 0.664511 + g * 0.154324 + b * 0.162028
    big_y = r * 0.283881 + g * 0.668433 + b * 0.047685
    big_z = r * 0.000088 + g * 0.07231 + b * 0.986039
    total = big_x + big_y + big_z
    return (big_x / total, big_y / total) if total else (0.0, 0.0)


def _same(value: Any, wanted: Any) -> bool:
    """Equal, strings case-insensitively (zigbee-herdsman-converters lowercases `ON`, `open`, ...)."""
    if isinstance(value, str) and isinstance(wanted, str):
        return value.upper() == wanted.upper()
    return bool(value == wanted) and type(value) is type(wanted)


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise Refused(f"{_short(value)} is not a number") from None
    if not math.isfinite(number):
        raise Refused(f"{_short(value)} is not a number")
    return number


def _js_number(number: float) -> int | float:
    """A number as JavaScript would print it (21, not 21.0)."""
    return int(number) if float(number).is_integer() else round(number, 6)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["STATE_VALUES", "Refused", "cached", "obey", "parse_set"]
