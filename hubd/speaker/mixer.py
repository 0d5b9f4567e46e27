"""Volume and Mute, the pure part: a `B/device/ID/set` message in, the level the speaker must reach out.

Owns the speaker's rules: Volume takes Set, Adjust, SetMax and SetMin (0..100, whole numbers, clamped);
Mute takes On and Off; a volume change unmutes, as most speakers do; muted, the mixer is at 0 and the
level is kept for Mute Off. No I/O.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from hubd.untrusted.depth import too_deep

ADJUST_STEP = 10  # an Adjust without a delta (hubd's default step of a percentage)
MAX_SET_BYTES = 4096
MAX_DEPTH = 8  # a set message nests 1 level; deeper ones are refused before json.loads recurses (RecursionError)
VOLUME_OPERATIONS = ("Set", "Adjust", "SetMax", "SetMin")
MUTE_OPERATIONS = ("On", "Off")


class SetInvalid(Exception):
    """A set message the speaker cannot carry out; the text says why."""


@dataclass(frozen=True, slots=True)
class SetRequest:
    """A control directive as hubd sends it: `{"id", "interface", "operation", "value"?, "delta"?}`."""

    id: str | None
    interface: str
    operation: str
    value: Any = None
    delta: Any = None


@dataclass(frozen=True, slots=True)
class Level:
    """What the speaker's mixer holds."""

    volume: int
    muted: bool = False

    @property
    def percent(self) -> int:
        """What the mixer is set to: 0 while muted."""
        return 0 if self.muted else self.volume

    def state(self) -> dict[str, object]:
        """The `B/device/ID/state` payload."""
        return {"Volume": self.volume, "Mute": "On" if self.muted else "Off"}


def parse_set(payload: bytes) -> SetRequest:
    """A set message; SetInvalid for one that is not a JSON object with interface and operation strings."""
    if len(payload) > MAX_SET_BYTES:
        raise SetInvalid(f"the message has {len(payload)} bytes; a set message has at most {MAX_SET_BYTES}")
    if too_deep(payload, MAX_DEPTH):
        raise SetInvalid(f"the message nests more than {MAX_DEPTH} levels deep; a set message is one JSON object")
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SetInvalid("the message is not JSON") from None
    if not isinstance(data, dict):
        raise SetInvalid("the message is not a JSON object")
    interface, operation, request_id = data.get("interface"), data.get("operation"), data.get("id")
    if not isinstance(interface, str) or not isinstance(operation, str):
        raise SetInvalid("interface and operation must be strings")
    return SetRequest(request_id if isinstance(request_id, str) else None, interface, operation,
                      data.get("value"), data.get("delta"))


def apply(level: Level, request: SetRequest) -> Level:
    """The level after the request; SetInvalid for an interface, operation or value the speaker does not take."""
    if request.interface == "Volume":
        if request.operation not in VOLUME_OPERATIONS:
            raise SetInvalid(f"Volume takes {', '.join(VOLUME_OPERATIONS)}, not {request.operation!r}")
        return replace(level, volume=_volume(level.volume, request), muted=False)
    if request.interface == "Mute":
        if request.operation not in MUTE_OPERATIONS:
            raise SetInvalid(f"Mute takes On and Off, not {request.operation!r}")
        return replace(level, muted=request.operation == "On")
    raise SetInvalid(f"this speaker has Volume and Mute, not {request.interface!r}")


def _volume(current: int, request: SetRequest) -> int:
    if request.operation == "SetMax":
        return 100
    if request.operation == "SetMin":
        return 0
    if request.value is not None:  # Set, and an Adjust whose result hubd worked out already
        return _percent(_number(request.value, "value"))
    if request.operation == "Set":
        raise SetInvalid("Volume.Set needs a value")
    delta = ADJUST_STEP if request.delta is None else _number(request.delta, "delta")
    return _percent(current + delta)


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SetInvalid(f"{name} must be a number, not {value!r}")
    return float(value)


def _percent(value: float) -> int:
    return int(min(max(math.floor(value + 0.5), 0), 100))
