"""What the registry reports of a batch of device inputs (pure): the `Change` types, in the order they happened.

The registry makes them; the outbox's decision (`hubd.outbox.decide`) turns them into platform events and the
outbox writer stores speakers' command results from them. Frozen: a change is a fact, handed on as is (and
handed again, unchanged, when a commit the disk refused is repeated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hubd.devices.device import Device
from hubd.devices.model import CommandResult, StateSample


@dataclass(frozen=True, slots=True)
class DeviceAnnounced:
    """A device is new or its description changed."""

    device: Device
    endpoint: dict[str, Any]

    @property
    def device_id(self) -> str:
        """The announced device's endpointId."""
        return self.device.device_id


@dataclass(frozen=True, slots=True)
class DeviceRemoved:
    """A device's config was cleared."""

    device_id: str


@dataclass(frozen=True, slots=True)
class StatesChanged:
    """Some interface values changed."""

    device_id: str
    changed: tuple[StateSample, ...]
    snapshot: tuple[dict[str, Any], ...]
    additional_info: dict[str, str]
    proactive: frozenset[str]
    cause: str


@dataclass(frozen=True, slots=True)
class DoorbellPressed:
    """A doorbell was pressed."""

    device_id: str
    timestamp: str


@dataclass(frozen=True, slots=True)
class AvailabilityChanged:
    """A device went online or offline."""

    device_id: str
    online: bool


@dataclass(frozen=True, slots=True)
class CommandResultReceived:
    """A speaker answered a command."""

    device_id: str
    result: CommandResult
    received_at: float


Change = DeviceAnnounced | DeviceRemoved | StatesChanged | DoorbellPressed | AvailabilityChanged | CommandResultReceived


def describe(change: Change, name: str) -> str:
    """One change in a log line, the device named `name` ("Desk Lamp (lamp-1)")."""
    if isinstance(change, DeviceAnnounced):
        return f"{name} announced ({change.device.config.displayType}, " \
               f"{', '.join(c.interface for c in change.device.config.capabilities) or 'no capabilities'})"
    if isinstance(change, DeviceRemoved):
        return f"{name} removed"
    if isinstance(change, StatesChanged):
        return f"{name}: " + ", ".join(f"{s.interface}={s.value}" for s in change.changed)
    if isinstance(change, DoorbellPressed):
        return f"{name} pressed"
    if isinstance(change, AvailabilityChanged):
        return f"{name} {'online' if change.online else 'offline'}"
    return f"{name} answered command {change.result.command_id}: {change.result.status}"
