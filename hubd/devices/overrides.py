"""The owner's overrides of one device (pure): the name and room the platform gets, whether it gets the device at
all, and the event that makes its button a doorbell; and the platform's name rule a name or room must pass.

The registry applies an `Override` when a device is described (its config comes, or the override changes), never
per state change; the dialects read the doorbell event (`hubd.dialects.base.Selection`). Overrides are kept in
SQLite by endpointId (`hubd.store.overrides`), whether or not the device is there: one for a device that is gone
applies when it comes back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hubd.devices.model import DeviceConfig
from hubd.spoken import spoken

NAME_MAX_CHARS = 128  # a name or room; the dialects cut the names they make at this length too
EVENT_MAX_CHARS = 64  # a doorbell event: an action value, an event_type, a trigger's subtype or payload


@dataclass(frozen=True, slots=True)
class Override:
    """What the owner set for one endpoint; None (and `hidden` False) where the device's own description holds."""

    name: str | None = None  # the displayName the platform gets
    room: str | None = None  # the recommendRoomName
    hidden: bool = False  # the platform does not get the device at all
    doorbell: str | None = None  # the event whose press of its button is a DoorbellPress
    # The owner exposed it: what hubd keeps back by rule (a diagnostic or config entity that is a real device
    # function) is exported too; the dialects read it (`hubd.dialects.base.Selection.exposed`).
    revealed: bool = False

    @property
    def empty(self) -> bool:
        """Whether nothing is overridden."""
        return self.name is None and self.room is None and not self.hidden and self.doorbell is None and \
            not self.revealed

    def apply(self, config: DeviceConfig) -> DeviceConfig:
        """The config the platform gets: the device's own with this name and room (the same object when neither
        is set)."""
        if self.name is None and self.room is None:
            return config
        return replace(config, displayName=config.displayName if self.name is None else self.name,
                       recommendRoomName=config.recommendRoomName if self.room is None else self.room)

    def as_json(self) -> dict[str, Any]:
        """As the API shows it: `{"name", "room", "exposed", "doorbell"}`."""
        return {"name": self.name, "room": self.room, "exposed": not self.hidden, "doorbell": self.doorbell}


NO_OVERRIDE = Override()


@dataclass(frozen=True, slots=True)
class Spelling:
    """A name or room as given (spaces tidied), and whether the platform takes it; if not, a spelling it takes."""

    text: str
    accepted: bool
    suggestion: str | None  # None when it is accepted, or when nothing of it can be spoken


def spelling(text: str) -> Spelling:
    """Check a name or room against the platform's rule (no digits, no punctuation or symbols): "Lamp 2" is refused
    and "Lamp Two" offered, "Hall (Upstairs)" is refused and "Hall Upstairs" offered. Runs of spaces are tidied
    first, so "  Desk  Lamp " is "Desk Lamp"."""
    tidy = " ".join(text.split())
    said = spoken(tidy)
    if said == tidy:
        return Spelling(tidy, True, None)
    return Spelling(tidy, False, said or None)
