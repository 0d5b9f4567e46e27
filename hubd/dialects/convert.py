"""The value conversions between devices and the platform (pure): Switch values, percentages of a scale,
brightness scales, mireds and kelvin, RGB/HS/XY colours, °F and K, humidity, ranged speeds and positions, and
climate modes. Shared by every dialect that imports real devices; the platform's side is docs/devices.md's table.
"""

from __future__ import annotations

import colorsys
import math
from collections.abc import Mapping, Sequence

from hubd.devices.model import StateValue

# Device climate modes (Home Assistant's hvac modes; zigbee2mqtt's system_mode values) → the platform's Mode.
PLATFORM_MODES: Mapping[str, str] = {
    "auto": "Auto", "heat_cool": "Auto", "heat": "Heat", "cool": "Cool", "dry": "Dry", "fan_only": "Fan",
    "fan": "Fan", "sleep": "Sleep",
}
OFF_MODE = "off"

_FAHRENHEIT = frozenset({"°F", "F", "℉", "°f", "f", "fahrenheit"})
_CELSIUS = frozenset({"°C", "C", "℃", "°c", "c", "celsius", ""})
_KELVIN = frozenset({"K", "k", "kelvin"})


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
