"""What the dialects' tests read from decoded inputs, shared by the Home Assistant and zigbee2mqtt helpers."""

from __future__ import annotations

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
