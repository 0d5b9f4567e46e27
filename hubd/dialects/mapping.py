"""The one table from real device kinds to the platform's displayType and capabilities, and the value conversions.

docs/devices.md (its mapping table), shared by every dialect that imports real devices (Home Assistant
MQTT discovery, zigbee2mqtt). A dialect says what each part of a device is, in Home Assistant's vocabulary of
device classes, which zigbee2mqtt's own discovery uses too (`light(dimmable=True)`, `binary("door")`,
`cover(...)`): each gives a `Part`, a display type and capabilities, or None with `unmapped_reason()`.
`plan()` puts a device's parts on endpoints, the device's own and a split-off `<device>-<key>` one for each
part whose interface is already taken, stable whatever order the parts arrived in. The conversions turn device
values into platform values and back: brightness scales, mireds and kelvin, RGB/HS/XY colours, °F and K,
ranged speeds and positions, climate modes.

Imports only the device model (hubd.devices.model); no MQTT, no dialect.
"""

from __future__ import annotations

import colorsys
import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hubd.devices.model import Capability, StateValue

_SET_MAX_MIN_ADJUST = ("Set", "SetMax", "SetMin", "Adjust")
FAN_SPEED_OPERATIONS = (*_SET_MAX_MIN_ADJUST, "SetHigh", "SetMedium", "SetLow")
# When parts of one device have different display types, the device shows as the first of these it has.
DISPLAY_PRECEDENCE = ("light", "ac", "thermostat", "curtain", "fan", "socket", "switch", "door", "scene", "alarm",
                      "unknown")
MAX_ENDPOINT_ID_CHARS = 256
_UNSAFE_ID_RE = re.compile(r"[^A-Za-z0-9._-]")

# Home Assistant binary_sensor device classes (zigbee2mqtt maps its properties onto the same ones).
CONTACT_CLASSES = frozenset({"door", "window", "opening", "garage_door"})
MOTION_CLASSES = frozenset({"motion", "occupancy", "presence"})
ALARM_CLASSES = frozenset({"moisture", "smoke", "gas", "carbon_monoxide", "safety", "tamper"})

# Device climate modes (Home Assistant's hvac modes; zigbee2mqtt's system_mode values) → the platform's Mode.
PLATFORM_MODES: Mapping[str, str] = {
    "auto": "Auto", "heat_cool": "Auto", "heat": "Heat", "cool": "Cool", "dry": "Dry", "fan_only": "Fan",
    "fan": "Fan", "sleep": "Sleep",
}
OFF_MODE = "off"

_FAHRENHEIT = frozenset({"°F", "F", "℉", "°f", "f", "fahrenheit"})
_CELSIUS = frozenset({"°C", "C", "℃", "°c", "c", "celsius", ""})
_KELVIN = frozenset({"K", "k", "kelvin"})


@dataclass(frozen=True, slots=True)
class Part:
    """What one piece of a device (an entity, a feature) gives the platform."""

    display_type: str
    capabilities: tuple[Capability, ...]

    @property
    def interfaces(self) -> frozenset[str]:
        """The interface names this part takes on an endpoint."""
        return frozenset(cap.interface for cap in self.capabilities)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One platform endpoint of a device: the parts (by key) on it, its display type and capabilities."""

    endpoint_id: str
    keys: tuple[str, ...]
    display_type: str
    capabilities: tuple[Capability, ...]
    split: bool  # True for a `<device>-<key>` endpoint


def _cap(interface: str, operations: Sequence[str], reported: bool) -> Capability:
    return Capability.of(interface, operations, reported, reported)


def light(*, dimmable: bool, color_temperature: bool, color: bool, reported: bool = True) -> Part:
    """A light: Switch, Brightness if dimmable, ColorTemperature and Color if it has them."""
    caps = [_cap("Switch", ("On", "Off"), reported)]
    if dimmable:
        caps.append(_cap("Brightness", _SET_MAX_MIN_ADJUST, reported))
    if color_temperature:
        caps.append(_cap("ColorTemperature", _SET_MAX_MIN_ADJUST, reported))
    if color:
        caps.append(_cap("Color", ("Set", "SetRandom"), reported))
    return Part("light", tuple(caps))


def switch(*, outlet: bool = False, reported: bool = True) -> Part:
    """A switch, or a plug (`socket`) for an outlet."""
    return Part("socket" if outlet else "switch", (_cap("Switch", ("On", "Off"), reported),))


def binary(device_class: str | None) -> Part:
    """A binary sensor by its device class: alarm (alarm = On) for leak, smoke, gas, CO and tamper; any other (a
    contact, motion, or one without a class hubd knows: a garage door, a Shelly input) is an on/off sensor (open,
    detected, on = On), as Home Assistant shows it."""
    if device_class in ALARM_CLASSES:
        return Part("alarm", (_cap("Switch", (), True),))
    return Part("unknown", (_cap("Switch", (), True),))


def sensor(device_class: str | None, unit: str | None) -> Part | None:
    """A temperature (°C) or humidity (%) sensor; without a device class, a reading whose unit is a temperature
    unit (°C, °F, K) counts too: a blank or whitespace unit is no unit (Tasmota's analog input is not 812 °C)."""
    classless_temperature = device_class is None and unit is not None and unit.strip() != "" \
        and is_temperature_unit(unit)
    if device_class == "temperature" or classless_temperature:
        return Part("unknown", (_cap("Temperature", (), True),))
    if device_class == "humidity":
        return Part("unknown", (_cap("Humidity", (), True),))
    return None


def cover(*, position: bool, set_position: bool, open_close: bool, stop: bool, reported: bool = True) -> Part:
    """A curtain: Position, Switch (On = open, Off = close), MotionSwitch (Off = stop)."""
    caps = []
    if open_close:
        caps.append(_cap("Switch", ("On", "Off"), reported))
    if position or set_position:
        caps.append(_cap("Position", ("Set", "Adjust") if set_position else (), position or reported))
    if stop:
        caps.append(_cap("MotionSwitch", ("Off",), reported))
    return Part("curtain", tuple(caps))


def climate(*, modes: Iterable[str], settable_mode: bool, target: bool, settable_target: bool, power: bool,
            reported: bool = True) -> Part:
    """A thermostat (`ac` with a cool mode): Temperature (the target setpoint), Mode, Switch (power / off mode)."""
    device_modes = list(modes)
    platform = sorted({PLATFORM_MODES[m] for m in device_modes if m in PLATFORM_MODES})
    caps = []
    if target or settable_target:
        caps.append(_cap("Temperature", ("Set", "Adjust") if settable_target else (), reported or target))
    if platform:
        caps.append(_cap("Mode", platform if settable_mode else (), reported))
    if power or (settable_mode and OFF_MODE in device_modes):
        caps.append(_cap("Switch", ("On", "Off"), reported))
    elif OFF_MODE in device_modes:
        caps.append(_cap("Switch", (), reported))
    return Part("ac" if "cool" in device_modes else "thermostat", tuple(caps))


def fan(*, speed: bool, settable_speed: bool = True, reported: bool = True) -> Part:
    """A fan: Switch and FanSpeed."""
    caps = [_cap("Switch", ("On", "Off"), reported)]
    if speed:
        caps.append(_cap("FanSpeed", FAN_SPEED_OPERATIONS if settable_speed else (), reported))
    return Part("fan", tuple(caps))


def scene() -> Part:
    """A scene: Switch On activates it (it has no state to report)."""
    return Part("scene", (_cap("Switch", ("On",), False),))


def lock(*, can_lock: bool = False) -> Part:
    """A lock (locked = On): locking by voice where the lock takes commands (Switch.On), unlocking never (no
    Switch.Off: the platform answers that directive E_NOT_SUPPORTED_DIRECTIVE)."""
    return Part("door", (_cap("Switch", ("On",) if can_lock else (), True),))


def siren(*, reported: bool = True) -> Part:
    """A siren: a switch (On sounds it, Off stops it)."""
    return Part("switch", (_cap("Switch", ("On", "Off"), reported),))


# A device's primary function keeps its endpoint (and decides its display type) before its sensors: a plug is its
# relay, not its power meter; a thermostat keeps Temperature for its setpoint.
ACTUATOR_TYPES = frozenset({"light", "socket", "switch", "curtain", "thermostat", "ac", "fan", "door", "scene"})


def primary_rank(part: Part) -> int:
    """0 for a device's primary function (light, relay, cover, climate, fan, lock), 1 for sensors (for plan_ranked)."""
    return 0 if part.display_type in ACTUATOR_TYPES else 1


def doorbell() -> Part:
    """A doorbell: no capability; each press is a DoorbellPress."""
    return Part("unknown", ())


def unmapped_reason(component: str, device_class: str | None) -> str:
    """Why a part of this kind has no platform interface (for the device's entity notes)."""
    if device_class:
        return f"no platform interface for device_class {device_class}"
    return f"no platform interface for a {component} without a device_class hubd knows"


def plan(device_id: str, parts: Mapping[str, Part]) -> list[Endpoint]:
    """The device's endpoints: by key order, a part whose interface is taken goes to `<device id>-<key>`."""
    return plan_ranked(device_id, parts, {})


def plan_ranked(device_id: str, parts: Mapping[str, Part], rank: Mapping[str, int],
                groups: Mapping[str, str] | None = None) -> list[Endpoint]:
    """Like plan(), but a part of a lower rank takes its interfaces first (by key order within a rank).

    zigbee2mqtt ranks a device's actuators before its sensors, and its main sensors before secondary ones:
    a thermostat keeps Temperature for its target setpoint and its room temperature splits off, a leak sensor
    keeps its alarm and its tamper switch splits off. Stable whatever order the parts arrived in.
    `groups`: parts (by key) that always split off together, as one endpoint `<device>-<group>` (a thermostat's
    room temperature and humidity: one room sensor); a part whose interfaces its group already has splits alone.
    """
    groups = groups or {}
    taken: set[str] = set()
    main: list[str] = []
    out: list[Endpoint] = []
    grouped: dict[str, list[str]] = {}
    for key in sorted(parts, key=lambda k: (rank.get(k, 0), k)):
        part = parts[key]
        group = groups.get(key)
        if group is not None and not part.interfaces & {i for k in grouped.get(group, ()) for i in parts[k].interfaces}:
            grouped.setdefault(group, []).append(key)
            continue
        if part.interfaces & taken or group is not None:
            out.append(Endpoint(endpoint_id(f"{device_id}-{key}"), (key,), part.display_type,
                                tuple(sorted(part.capabilities, key=lambda c: c.interface)), True))
            continue
        taken |= part.interfaces
        main.append(key)
    for group, keys in sorted(grouped.items()):
        caps = sorted((c for key in keys for c in parts[key].capabilities), key=lambda c: c.interface)
        out.append(Endpoint(endpoint_id(f"{device_id}-{group}"), tuple(keys),
                            merged_display_type(parts[key].display_type for key in keys), tuple(caps), True))
    if main:
        caps = sorted((c for key in main for c in parts[key].capabilities), key=lambda c: c.interface)
        display = merged_display_type(parts[key].display_type for key in main)
        out.insert(0, Endpoint(endpoint_id(device_id), tuple(main), display, tuple(caps), False))
    return out


def merged_display_type(types: Iterable[str]) -> str:
    """The display type of a device made of parts of these types."""
    present = set(types)
    for candidate in DISPLAY_PRECEDENCE:
        if candidate in present:
            return candidate
    return "unknown"


def endpoint_id(raw: str) -> str:
    """A topic-safe endpointId: every character outside A-Za-z0-9._- becomes `_`, and an identifier that had such
    characters (or was too long) gets a short suffix of its own, so that `кухня` and `ванна`, or `a:b` and `a_b`,
    stay two endpoints. The same raw identifier always gives the same endpointId; a safe one is kept as it is."""
    safe = _UNSAFE_ID_RE.sub("_", raw)
    if safe == raw and 0 < len(raw) <= MAX_ENDPOINT_ID_CHARS:
        return raw
    suffix = hashlib.blake2s(raw.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{safe[:MAX_ENDPOINT_ID_CHARS - len(suffix) - 1] or '_'}-{suffix}"


def on_off(on: bool) -> str:
    """The platform's Switch value."""
    return "On" if on else "Off"


def percent_of(value: float, low: float, high: float) -> int:
    """`value` on the scale low..high as an integer percentage 0..100."""
    if high == low:
        return 100 if value >= high else 0
    return _clamp_percent(round((value - low) * 100 / (high - low)))


def value_of(percent: float, low: float, high: float) -> float:
    """The value on the scale low..high of a percentage."""
    return low + (high - low) * percent / 100


def brightness_percent(raw: float, scale: float) -> int:
    """A device brightness (0..scale) as 0..100; a light that is on at its lowest step is 1 %, not 0 %."""
    percent = percent_of(raw, 0, scale)
    return 1 if percent == 0 and raw > 0 else percent


def brightness_value(percent: float, scale: float) -> int:
    """A platform brightness as the device's 0..scale integer (at least 1 for any percentage above 0)."""
    raw = round(value_of(percent, 0, scale))
    return max(raw, 1) if percent > 0 else 0


def color_temperature_percent_from_mireds(mireds: float, min_mireds: float, max_mireds: float) -> int:
    """0 % is the warmest (max mireds), 100 % the coolest (min mireds)."""
    return percent_of(max_mireds - mireds, 0, max_mireds - min_mireds)


def mireds_from_percent(percent: float, min_mireds: float, max_mireds: float) -> int:
    """The mireds of a ColorTemperature percentage (0 % = max mireds)."""
    return round(max_mireds - (max_mireds - min_mireds) * percent / 100)


def color_temperature_percent_from_kelvin(kelvin: float, min_kelvin: float, max_kelvin: float) -> int:
    """0 % is the warmest (min kelvin), 100 % the coolest (max kelvin)."""
    return percent_of(kelvin, min_kelvin, max_kelvin)


def kelvin_from_percent(percent: float, min_kelvin: float, max_kelvin: float) -> int:
    """The kelvin of a ColorTemperature percentage (0 % = min kelvin)."""
    return round(value_of(percent, min_kelvin, max_kelvin))


def rgb_value(red: float, green: float, blue: float) -> int:
    """An RGB triple (0..255 each) as the platform's Color integer 0..0xFFFFFF."""
    r, g, b = (min(max(round(c), 0), 255) for c in (red, green, blue))
    return (r << 16) | (g << 8) | b


def rgb_parts(value: int) -> tuple[int, int, int]:
    """The platform's Color integer as (red, green, blue)."""
    return (value >> 16) & 0xFF, (value >> 8) & 0xFF, value & 0xFF


def rgb_from_hs(hue: float, saturation: float) -> int:
    """Hue (0..360) and saturation (0..100) at full brightness as a Color integer."""
    r, g, b = colorsys.hsv_to_rgb((hue % 360) / 360, min(max(saturation, 0), 100) / 100, 1.0)
    return rgb_value(r * 255, g * 255, b * 255)


def hs_from_rgb(value: int) -> tuple[float, float]:
    """A Color integer as (hue 0..360, saturation 0..100), rounded to 0.1."""
    r, g, b = rgb_parts(value)
    h, s, _ = colorsys.rgb_to_hsv(r / 255, g / 255, b / 255)
    return round(h * 360, 1), round(s * 100, 1)


def rgb_from_xy(x: float, y: float) -> int:
    """CIE 1931 x, y (sRGB, D65) at full brightness as a Color integer."""
    if y <= 0:
        return 0
    big_x, big_y, big_z = x / y, 1.0, (1 - x - y) / y
    linear = (3.2406 * big_x - 1.5372 * big_y - 0.4986 * big_z,
              -0.9689 * big_x + 1.8758 * big_y + 0.0415 * big_z,
              0.0557 * big_x - 0.2040 * big_y + 1.0570 * big_z)
    clipped = [max(c, 0.0) for c in linear]
    peak = max(clipped) or 1.0
    return rgb_value(*(_gamma(c / peak) * 255 for c in clipped))


def xy_from_rgb(value: int) -> tuple[float, float]:
    """A Color integer as CIE 1931 x, y (sRGB, D65), rounded to 4 decimals."""
    r, g, b = (_linear(c / 255) for c in rgb_parts(value))
    big_x = 0.4124 * r + 0.3576 * g + 0.1805 * b
    big_y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    big_z = 0.0193 * r + 0.1192 * g + 0.9505 * b
    total = big_x + big_y + big_z
    if total == 0:
        return 0.3127, 0.329  # black: the white point
    return round(big_x / total, 4), round(big_y / total, 4)


def is_temperature_unit(unit: str) -> bool:
    """Whether hubd can turn a value in this unit into °C."""
    return unit.strip() in _CELSIUS or unit.strip() in _FAHRENHEIT or unit.strip() in _KELVIN


def celsius(value: float, unit: str | None) -> float | None:
    """A temperature in °C (rounded to 0.01) from °C, °F or K; None for a unit that is not a temperature."""
    text = (unit or "").strip()
    if text in _CELSIUS:
        result = value
    elif text in _FAHRENHEIT:
        result = (value - 32) * 5 / 9
    elif text in _KELVIN:
        result = value - 273.15
    else:
        return None
    return _tidy(round(result, 2))


def from_celsius(value: float, unit: str | None) -> float:
    """A °C temperature in the device's unit (°C when unknown)."""
    text = (unit or "").strip()
    if text in _FAHRENHEIT:
        return value * 9 / 5 + 32
    if text in _KELVIN:
        return value + 273.15
    return value


def humidity_percent(value: float) -> int:
    """A relative humidity as an integer 0..100."""
    return _clamp_percent(round(value))


def ranged_percent(value: float, low: int, high: int) -> int:
    """A speed step `value` in low..high (1..4, say) as 0..100; 0 is off (Home Assistant's fan ranges)."""
    if value <= 0:
        return 0
    return _clamp_percent(math.floor((value - (low - 1)) * 100 / (high - low + 1)))


def ranged_value(percent: float, low: int, high: int) -> int:
    """The speed step in low..high for a percentage (rounded up: 1 % is the lowest step, 0 % is 0)."""
    if percent <= 0:
        return 0
    return min(math.ceil((high - low + 1) * percent / 100 + (low - 1)), high)


def platform_mode(device_mode: str) -> str | None:
    """The platform's Mode for a device mode (None for off and modes the platform has no name for)."""
    return PLATFORM_MODES.get(device_mode)


def device_mode(platform: str, available: Sequence[str]) -> str | None:
    """The first of the device's modes that is this platform Mode, or None."""
    for mode in available:
        if PLATFORM_MODES.get(mode) == platform:
            return mode
    return None


def state_value(value: float) -> StateValue:
    """A number as a state value: an int when whole."""
    return _tidy(value)


def _tidy(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _clamp_percent(value: int) -> int:
    return min(max(value, 0), 100)


def _gamma(c: float) -> float:
    return 12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055


def _linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
