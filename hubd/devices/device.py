"""Device: what hubd knows of one device, in memory (pure).

The registry is its single writer; directives, the webhook and the status page read it, the outbox writer
turns it into a new grant's AddOrUpdateReport. Its `devices` table row is `hubd.store.devices`'s business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hubd.devices.model import DeviceConfig, Origin, Route, StateSample


@dataclass(slots=True)
class Device:
    """What hubd knows of one device."""

    device_id: str
    config: DeviceConfig
    states: dict[str, StateSample] = field(default_factory=dict)
    online: bool | None = None
    route: Route = field(default_factory=lambda: Route("native", ""))  # where its commands go
    origin: Origin = field(default_factory=lambda: Origin("native"))  # where it came from, for the status page
    # When hubd last got a message from it (epoch seconds), not a retained replay nor an `offline` (the broker's
    # will says that); in memory only, None: not since the start.
    last_seen: float | None = field(default=None, compare=False)
    # The owner's overrides (hubd.devices.overrides), applied by the registry: `config` is what the platform gets,
    # `source` the device's own description when an override changed its name or room (None: `config` is it), and
    # `hidden` keeps it from the platform altogether.
    source: DeviceConfig | None = field(default=None, compare=False)
    hidden: bool = field(default=False, compare=False)

    @property
    def described(self) -> DeviceConfig:
        """The device's own description, as its dialect gave it (what the `devices` table keeps)."""
        return self.config if self.source is None else self.source

    def state_list(self, *, with_time: bool = True, retrievable_only: bool = False) -> list[dict[str, Any]]:
        """States as the platform's State objects, in capability order."""
        out: list[dict[str, Any]] = []
        for cap in self.config.capabilities:
            sample = self.states.get(cap.interface)
            if sample is None or (retrievable_only and not cap.retrievable):
                continue
            item: dict[str, Any] = {"interface": sample.interface, "value": sample.value}
            if with_time:
                item["timeOfSample"] = sample.time_of_sample
            out.append(item)
        return out

    def endpoint(self) -> dict[str, Any]:
        """The platform's full Endpoint with current states (timeOfSample included)."""
        out = self.config.endpoint(self.device_id)
        out["states"] = self.state_list()
        return out
