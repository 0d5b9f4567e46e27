"""Platform events on their way to the outbox (frozen, slotted values), their messageIds and the barrier lane.

A `PendingEvent` is what a stage hands the outbox writer: the outbox's decision (`hubd.outbox.decide`), a control
directive's late confirmation, a new grant's discovery.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any


def new_message_id() -> str:
    """A fresh messageId (each outbox row gets its own; a resend keeps it)."""
    return str(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """A platform message to queue: its name, the endpoints whose order it joins, its body builder input."""

    name: str
    lanes: tuple[str, ...]
    body: dict[str, Any]  # built with a placeholder messageId; each user's row gets its own


# An outbox row whose first lane starts with this goes before every other pending row of its user: a new
# grant's AddOrUpdateReport, so the platform knows the endpoints before the events kept for the user. Such
# rows go in the order of their place: "#" is the row's own (insertion order), "#<id>" that of row <id>
# (the pieces of a split batch keep the batch's place, ahead of a later grant's report). Never an
# endpointId: MQTT topics cannot carry '#' there.
BARRIER_LANE = "#"
