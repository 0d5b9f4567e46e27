"""Internal events passed between stages (frozen, slotted dataclasses) and the outbox's barrier lane.

Imports nothing from hubd.
"""

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


# An outbox row whose first lane starts with this goes before every other pending row of its user: a new
# grant's AddOrUpdateReport, so the platform knows the endpoints before the events kept for the user. Such
# rows go in the order of their place: "#" is the row's own (insertion order), "#<id>" that of row <id>
# (the pieces of a split batch keep the batch's place, ahead of a later grant's report). Never an
# endpointId: MQTT topics cannot carry '#' there.
BARRIER_LANE = "#"
