"""What the dialects' tests read from decoded inputs, shared by the Home Assistant and zigbee2mqtt helpers."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from types import FrameType

from hubd.devices.model import StateValue
from hubd.dialects.base import DeviceInput, PressReceived, StateReceived


def states(inputs: list[DeviceInput]) -> dict[str, dict[str, StateValue]]:
    """Interface values by endpoint (later ones win)."""
    out: dict[str, dict[str, StateValue]] = {}
    for item in inputs:
        if isinstance(item, StateReceived):
            out.setdefault(item.device_id, {}).update({s.interface: s.value for s in item.samples})
    return out


def presses(inputs: list[DeviceInput]) -> list[str]:
    """The endpoints pressed, in order."""
    return [i.device_id for i in inputs if isinstance(i, PressReceived)]


def calls_made(run: Callable[[], object]) -> int:
    """How many Python and C function calls `run()` makes: a measure of work that no other load disturbs."""
    count = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    enabled = gc.isenabled()
    gc.disable()  # a collection's callbacks would count too
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
    return count
