"""The platform's interfaces, and control directives' pure part: ranges, operation to target value.

Owns the interface table and how `<Interface>.<Op>` plus its payload becomes the value a device must end
up with (the `set` message, docs/mqtt.md) and how hubd recognises that the device got there.
No I/O and no state.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from hubd.devices.model import StateValue
from hubd.errors import DirectiveError

PERCENT = (0.0, 100.0)
COLOR_MAX = 0xFFFFFF
PERCENT_STEP = 10.0  # the platform's default Adjust step of a percentage
TEMPERATURE_STEP_C = 1.0
AC_TEMPERATURE_C = (16.0, 30.0)  # the platform's range for an AC without limits in its additionalInfo
UNBOUNDED = (-math.inf, math.inf)
NUMBER_TOLERANCE = 1e-6

NOT_SUPPORTED = "E_NOT_SUPPORTED_DIRECTIVE"
OUT_OF_RANGE = "E_VALUE_OUT_OF_RANGE"
MALFORMED = "E_INTERNAL_ERROR"


class Kind(enum.Enum):
    """How an interface's value behaves."""

    ENUM = "enum"  # each value is its own operation; the state is the operation name
    NUMBER = "number"  # Set/Adjust/SetMax/SetMin/... over a range
    DESCRIPTOR = "descriptor"  # an object (TV channel, song) that the device interprets


@dataclass(frozen=True, slots=True)
class Interface:
    """One capability interface of the platform."""

    name: str
    kind: Kind
    operations: frozenset[str]
    value_range: tuple[float, float] | None = None  # None: the device's own limits (Temperature)
    integer: bool = True  # a fraction is rounded (half up) to a whole number
    whole_only: bool = False  # a fraction is refused instead (RGB is a decimal integer)
    step: float = PERCENT_STEP
    presets: tuple[tuple[str, int], ...] = ()  # FanSpeed SetHigh -> 100, as the device simulators do
    payload_key: str | None = None  # a descriptor's Set payload key, e.g. "tvChannel"
    descriptor_keys: frozenset[str] = frozenset()


def _enum(name: str, *values: str) -> Interface:
    return Interface(name, Kind.ENUM, frozenset(values))


def _percent(name: str, *operations: str, presets: tuple[tuple[str, int], ...] = ()) -> Interface:
    return Interface(name, Kind.NUMBER, frozenset(operations), PERCENT, presets=presets)


_SET_MAX_MIN_ADJUST = ("Set", "SetMax", "SetMin", "Adjust")

INTERFACES: Mapping[str, Interface] = MappingProxyType({i.name: i for i in (
    _enum("Switch", "On", "Off"),
    _enum("MotionSwitch", "On", "Off"),
    _enum("Mute", "On", "Off"),
    _enum("Mode", "Auto", "Manual", "Cool", "Heat", "Dry", "Fan", "Silent", "Energy", "Sleep"),
    _enum("SwingMode", "Auto", "On", "Off", "Horizon", "HorizonOff", "Vertical", "VerticalOff"),
    _enum("PlaybackControl", "Play", "Pause"),
    _enum("PlaybackMode", "RepeatAll", "RepeatOne", "Shuffle", "Order"),
    _percent("Position", "Set", "Adjust"),
    _percent("ColorTemperature", *_SET_MAX_MIN_ADJUST),
    _percent("Brightness", *_SET_MAX_MIN_ADJUST),
    _percent("Humidity", *_SET_MAX_MIN_ADJUST),
    _percent("Volume", *_SET_MAX_MIN_ADJUST),
    _percent("FanSpeed", *_SET_MAX_MIN_ADJUST, "SetHigh", "SetMedium", "SetLow",
             presets=(("SetHigh", 100), ("SetMedium", 60), ("SetLow", 30))),
    Interface("Color", Kind.NUMBER, frozenset({"Set", "SetRandom"}), (0.0, float(COLOR_MAX)), whole_only=True),
    Interface("Temperature", Kind.NUMBER, frozenset(_SET_MAX_MIN_ADJUST), None, integer=False,
              step=TEMPERATURE_STEP_C),
    Interface("Media.TVChannel", Kind.DESCRIPTOR, frozenset({"Set", "Next", "Previous"}),
              payload_key="tvChannel", descriptor_keys=frozenset({"name", "code"})),
    Interface("Media.Music", Kind.DESCRIPTOR, frozenset({"Set", "Next", "Previous", "Stop"}),
              payload_key="music", descriptor_keys=frozenset({"name", "artist", "album", "genre", "source"})),
)})


@dataclass(frozen=True, slots=True)
class Target:
    """What a control directive asks of a device: the state to reach and how to recognise it was done."""

    interface: Interface
    operation: str
    value: StateValue | None  # the state the device must reach; None when only the device knows it
    delta: float | None = None

    def reached(self, before: StateValue | None, now: StateValue | None) -> bool:
        """Whether the state `now` confirms the directive, given the state when it was sent."""
        if now is None:
            return False
        if self.value is not None and same_value(now, self.value):
            return True
        # Only the device knows the outcome (Next, an Adjust of an unknown state, a channel it renames).
        return (self.value is None or self.interface.kind is Kind.DESCRIPTOR) and (
            before is None or not same_value(now, before))


def parse_name(name: str, namespace: str = "Service") -> tuple[Interface, str]:
    """`<Interface>.<Op>` split on the last dot, a namespace prefix stripped; else not supported."""
    interface_name, dot, operation = name.rpartition(".")
    for prefix in (f"{namespace}.", "Service."):
        interface_name = interface_name.removeprefix(prefix)
    interface = INTERFACES.get(interface_name)
    if not dot or interface is None:
        raise DirectiveError(NOT_SUPPORTED, f"{name!r} is not <Interface>.<Operation> with a known interface "
                                            f"({', '.join(sorted(INTERFACES))})")
    if operation not in interface.operations:
        raise DirectiveError(NOT_SUPPORTED, f"{interface.name} has no operation {operation!r}; it has "
                                            f"{', '.join(sorted(interface.operations))}")
    return interface, operation


def limits(interface: Interface, additional_info: Mapping[str, str],
           display_type: str) -> tuple[tuple[float, float], tuple[str, ...]]:
    """The value range, and what is wrong with the device's limits (each problem names the field and the fix).

    The interface's own range; else `min<Interface>`/`max<Interface>` from additionalInfo, a missing side
    taking its default (16 and 30 °C for an ac's Temperature, else unbounded). A limit that is not a finite
    number is ignored; limits that cross (min above max) are both ignored: the defaults apply.
    """
    if interface.value_range is not None:
        return interface.value_range, ()
    default = AC_TEMPERATURE_C if interface.name == "Temperature" and display_type == "ac" else UNBOUNDED
    problems: list[str] = []
    low = _limit(additional_info, f"min{interface.name}", problems)
    high = _limit(additional_info, f"max{interface.name}", problems)
    bounds = (default[0] if low is None else low, default[1] if high is None else high)
    if bounds[0] > bounds[1]:
        problems.append(f"additionalInfo min{interface.name} ({_text(bounds[0])}) is above max{interface.name} "
                        f"({_text(bounds[1])}); both ignored, {interface.name} takes {_range_text(default)}: "
                        f"fix the device's config")
        return default, tuple(problems)
    return bounds, tuple(problems)


def resolve(interface: Interface, operation: str, payload: Mapping[str, Any], *, current: StateValue | None,
            value_range: tuple[float, float], rng: random.Random) -> Target:
    """The target of a directive (operation already checked by parse_name); DirectiveError when refused.

    Set out of range is E_VALUE_OUT_OF_RANGE, and so is a fraction for Color (an RGB integer); a percentage
    with a fraction is rounded half up. Adjust clamps and without a known current value leaves the
    arithmetic to the device; SetMax/SetMin/SetRandom/presets/enum operations ignore any payload.
    """
    if interface.kind is Kind.ENUM:
        return Target(interface, operation, operation)
    if interface.kind is Kind.DESCRIPTOR:
        if operation != "Set":
            return Target(interface, operation, None)
        return Target(interface, operation, _descriptor(interface, payload))
    low, high = value_range
    presets = dict(interface.presets)
    if operation == "Set":
        number = _number(payload, "value", interface)
        if interface.whole_only and not number.is_integer():
            raise DirectiveError(OUT_OF_RANGE, f"{interface.name} takes a whole number ({_range_text(value_range)}), "
                                               f"got {number:g}")
        if not low <= number <= high:
            raise DirectiveError(OUT_OF_RANGE, f"{interface.name} takes {_range_text(value_range)}, "
                                               f"got {_text(number)}")
        return Target(interface, operation, _output(interface, number))
    if operation in ("SetMax", "SetMin"):
        end = high if operation == "SetMax" else low
        if math.isinf(end):
            raise DirectiveError(NOT_SUPPORTED, f"{interface.name}.{operation}: the device's limit is unknown; "
                                                f"give it min{interface.name} and max{interface.name} in "
                                                "additionalInfo")
        return Target(interface, operation, _output(interface, end))
    if operation == "SetRandom":
        return Target(interface, operation, rng.randint(math.ceil(low), math.floor(high)))
    if operation in presets:
        return Target(interface, operation, presets[operation])
    # Adjust
    delta = _number(payload, "delta", interface) if payload.get("delta") is not None else interface.step
    if not isinstance(current, int | float) or isinstance(current, bool):
        return Target(interface, operation, None, delta)
    return Target(interface, operation, _output(interface, min(max(current + delta, low), high)), delta)


def same_value(a: StateValue, b: StateValue) -> bool:
    """Equal state values; numbers compare numerically (24 == 24.0)."""
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, abs_tol=NUMBER_TOLERANCE)
    return a == b


def _number(payload: Mapping[str, Any], key: str, interface: Interface) -> float:
    """payload[key] as a finite number; numeric strings such as "50" are accepted."""
    raw = payload.get(key)
    if raw is None:
        raise DirectiveError(MALFORMED, f"payload.{key}: missing; {interface.name} needs a number")
    number: float | None = None
    try:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            number = float(raw)
        elif isinstance(raw, str):
            number = float(raw.strip())
    except (ValueError, OverflowError):  # not a number, or an integer too large for a float (10**400)
        number = None
    if number is None or not math.isfinite(number):
        raise DirectiveError(OUT_OF_RANGE, f"payload.{key}: {interface.name} takes a number, got {raw!r}")
    return number


def _output(interface: Interface, number: float) -> int | float:
    """An integer for integer interfaces (halves round up: 55.5 -> 56), else one decimal (an int when whole)."""
    if interface.integer:
        return math.floor(number + 0.5)
    rounded = round(number, 1)
    return int(rounded) if rounded.is_integer() else rounded


def _descriptor(interface: Interface, payload: Mapping[str, Any]) -> dict[str, Any]:
    key = interface.payload_key or ""
    raw = payload.get(key)
    described = {k: v for k, v in raw.items() if k in interface.descriptor_keys and isinstance(v, str) and v} \
        if isinstance(raw, dict) else {}
    if not described:
        keys = ", ".join(sorted(interface.descriptor_keys))
        raise DirectiveError(MALFORMED, f"payload.{key}: missing; {interface.name}.Set needs an object with {keys}")
    return described


def _limit(additional_info: Mapping[str, str], key: str, problems: list[str]) -> float | None:
    text = additional_info.get(key)
    if text is None:
        return None
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        problems.append(f"additionalInfo {key} {text!r} is not a number; ignored: give a number such as \"30\"")
        return None
    return number


def _range_text(value_range: tuple[float, float]) -> str:
    low, high = value_range
    if math.isinf(low) and math.isinf(high):
        return "any number"
    if math.isinf(low):
        return f"at most {_text(high)}"
    if math.isinf(high):
        return f"at least {_text(low)}"
    return f"{_text(low)} to {_text(high)}"


def _text(number: float) -> str:
    """A limit for a message: 16777215, not 1.67772e+07."""
    return str(int(number)) if number.is_integer() else f"{number:g}"
