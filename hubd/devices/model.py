"""The device model everything after the dialect seam uses (pure): configs, capabilities, state values and samples,
command results, a device's route and origin, the platform's displayTypes and limits, the endpointId rule and the
sample time format.

A dialect builds these from what a device published; the registry keeps them (a config's `canonical()` text is
what the `devices` table stores, `load_config` reads it back; a `Route` is where the device's commands go, read
only by the dialect it names), and the conformance rules, the outbox, the directives and the webhook read them.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# The platform's displayType values.
DISPLAY_TYPES = frozenset({
    "light", "switch", "socket", "irController", "curtain", "panel", "tv", "fan", "remoteController", "ac",
    "airPurifier", "scene", "cleanBot", "projector", "dehumidifier", "thermostat", "humidifier", "door",
    "speaker", "unknown", "box", "tvBox", "service", "wineCabinet", "heatingFurnace", "gasStove",
    "washingMachine", "lampblackMachine", "waterHeater", "refrigerator", "floorHeater", "bridge", "stb",
    "ventilation", "windowPusher", "feeder", "waterDetector", "alarm", "airer", "heater", "atomizedGlass",
})

StateValue = str | int | float | dict[str, Any]

# The platform's own validator's additionalInfo limits.
ADDITIONAL_INFO_MAX_KEYS = 100
ADDITIONAL_INFO_MAX_CHARS = 999

# The platform's endpointIds are short identifiers; a longer one is refused before it reaches the platform.
MAX_DEVICE_ID_CHARS = 256


def valid_device_id(device_id: str) -> bool:
    """An endpointId usable in a topic: no '/', '+', '#', not empty, at most MAX_DEVICE_ID_CHARS characters."""
    return 0 < len(device_id) <= MAX_DEVICE_ID_CHARS and not any(c in device_id for c in "/+#\x00")


# The registry holds one DeviceConfig per device for the life of the process, so configs are plain slotted
# records (a pydantic instance costs a __dict__ and a fields-set each: ~1 KiB a device) and identical
# capabilities are one shared object: a home has many devices of few kinds (BENCHMARKS.md, memory).
_CAPABILITIES: dict[tuple[str, tuple[str, ...], bool, bool], Capability] = {}
_MAX_SHARED_CAPABILITIES = 10_000


@dataclass(frozen=True, slots=True)
class Capability:
    """One capability interface of a device; immutable and shared between devices."""

    interface: str
    supportedOperations: tuple[str, ...]
    proactivelyReported: bool
    retrievable: bool

    @staticmethod
    def of(interface: str, operations: Sequence[str], proactive: bool, retrievable: bool) -> Capability:
        """The shared instance for these values."""
        key = (interface, tuple(operations), proactive, retrievable)
        found = _CAPABILITIES.get(key)
        if found is None:
            found = Capability(sys.intern(interface), tuple(sys.intern(op) for op in operations), proactive,
                               retrievable)
            if len(_CAPABILITIES) < _MAX_SHARED_CAPABILITIES:
                _CAPABILITIES[key] = found
        return found


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """A device's description as published on `B/device/ID/config` (the Endpoint without states)."""

    displayName: str
    displayType: str
    capabilities: tuple[Capability, ...] = ()
    endpointId: str | None = None
    recommendRoomName: str | None = None
    recommendHomeName: str | None = None
    additionalInfo: dict[str, str] = field(default_factory=dict)  # never mutated: callers copy it
    sn: str | None = None
    tags: tuple[str, ...] = ()

    @staticmethod
    def from_dict(data: dict[str, Any]) -> DeviceConfig:
        """From a validated config's fields (a `canonical()` text parsed back, or a checked model's dump)."""
        def name(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else sys.intern(value)

        caps = tuple(Capability.of(c["interface"], c.get("supportedOperations", ()),
                                   bool(c.get("proactivelyReported", False)), bool(c.get("retrievable", False)))
                     for c in data.get("capabilities", ()))
        return DeviceConfig(displayName=data["displayName"], displayType=sys.intern(data["displayType"]),
                            capabilities=caps, endpointId=data.get("endpointId"),
                            recommendRoomName=name("recommendRoomName"), recommendHomeName=name("recommendHomeName"),
                            additionalInfo=dict(data.get("additionalInfo") or {}), sn=data.get("sn"),
                            tags=tuple(sys.intern(t) for t in data.get("tags", ())))

    def capability(self, interface: str) -> Capability | None:
        """The capability for an interface, if the device has it."""
        for cap in self.capabilities:
            if cap.interface == interface:
                return cap
        return None

    def endpoint(self, device_id: str) -> dict[str, Any]:
        """The platform Endpoint's fields without states (hubd-only fields left out)."""
        out: dict[str, Any] = {"endpointId": device_id, "displayName": self.displayName,
                               "displayType": self.displayType}
        if self.recommendRoomName is not None:
            out["recommendRoomName"] = self.recommendRoomName
        if self.recommendHomeName is not None:
            out["recommendHomeName"] = self.recommendHomeName
        out["additionalInfo"] = dict(self.additionalInfo)
        out["capabilities"] = [
            {"interface": c.interface, "supportedOperations": list(c.supportedOperations),
             "proactivelyReported": c.proactivelyReported, "retrievable": c.retrievable}
            for c in self.capabilities
        ]
        return out

    def canonical(self) -> str:
        """A stable JSON text: equal configs give equal text (what the `devices` table stores)."""
        data = {
            "endpointId": self.endpointId, "displayName": self.displayName, "displayType": self.displayType,
            "recommendRoomName": self.recommendRoomName, "recommendHomeName": self.recommendHomeName,
            "additionalInfo": self.additionalInfo,
            "capabilities": [{"interface": c.interface, "supportedOperations": list(c.supportedOperations),
                              "proactivelyReported": c.proactivelyReported, "retrievable": c.retrievable}
                             for c in self.capabilities],
            "sn": self.sn, "tags": list(self.tags),
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class StateSample:
    """One interface value with its sample time (ISO 8601 UTC, milliseconds)."""

    interface: str
    value: StateValue
    time_of_sample: str


@dataclass(frozen=True, slots=True)
class CommandResult:
    """A speaker's answer on `B/device/ID/command/result`."""

    command_id: str
    status: str
    message: str | None


@dataclass(frozen=True, slots=True)
class Route:
    """Where a device listens: the dialect's name and an address only that dialect reads (JSON text)."""

    dialect: str
    address: str


@dataclass(frozen=True, slots=True)
class EntityNote:
    """One entity (or exposed feature) of an imported device, and whether the platform gets it."""

    name: str  # e.g. "sensor.battery", "binary_sensor.contact", "light.light_l1"
    exported: bool
    reason: str = ""  # why not, for one that is not: "no platform interface for device_class battery"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a device came from, for the status page and `GET /api/devices`."""

    source: str  # the name of the dialect that imported it ("native", "zigbee2mqtt", ...: hubd.dialects.enabled)
    entities: tuple[EntityNote, ...] = ()
    # Why hubd chose the displayName when it is not the source's own ("" when it is): e.g. "its name
    # '0x000b57fffec6a5c2' is an identifier, so it is named after its model". Such a name may get a word where two
    # devices would share it.
    naming: str = ""


def load_config(canonical: str) -> DeviceConfig:
    """A config stored by the registry (`DeviceConfig.canonical()`), checked when it was first received."""
    return DeviceConfig.from_dict(json.loads(canonical))


@functools.lru_cache(maxsize=1)
def format_time(epoch_s: float) -> str:
    """ISO 8601 UTC with milliseconds and Z, as the platform wants it.

    The last answer is remembered: the MQTT bridge gives every message of a batch the same receive time, so a
    burst of states is formatted once, not once a message."""
    # isoformat, not strftime: glibc's %Y writes the year 999 as "999", which is not ISO 8601.
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"
