"""Internal events passed between stages: frozen, slotted dataclasses. Imports nothing from hubd."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MessageKind = Literal["config", "state", "event", "availability", "command_result"]


@dataclass(frozen=True, slots=True)
class DeviceMessage:
    """One MQTT message from a device, as the bridge received it."""

    kind: MessageKind
    device_id: str
    payload: bytes
    topic: str
    received_at: float  # epoch seconds, when hubd received it
    retained: bool = False
