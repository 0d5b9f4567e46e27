"""Which device has which displayName, so that a name hubd chose for a device gets a word where two would share it.

An unrenamed device is named after its model (hubd.dialects.naming): two IKEA bulbs would both be "IKEA TRADFRI LED
bulb", and a voice could not tell them apart. The registry keeps this index of every device's name and asks it for a
distinct one when a device whose name hubd chose is described: its room before the name, else an ordinal ("Second
IKEA TRADFRI LED bulb"); a device keeps the word it got (stable across restarts). Pure.
"""

from __future__ import annotations

from functools import cache

from hubd.devices.device import Device
from hubd.devices.model import DeviceConfig
from hubd.spoken import spoken

# Ordinals up to the hundredth: past that a voice tells no device apart anyway (the name is kept as it is, and the
# owner renames them on the devices page). Bounded, so that 40,000 sensors all named "Sensor" cost a few dict
# lookups each, not a thousand spelled-out ordinals.
MAX_ORDINAL = 100


class NameIndex:
    """The devices by displayName (case-folded), to tell whether a name is taken."""

    def __init__(self) -> None:
        self._ids: dict[str, set[str]] = {}

    def add(self, device_id: str, name: str) -> None:
        """Note that the device has this name."""
        self._ids.setdefault(name.casefold(), set()).add(device_id)

    def remove(self, device_id: str, name: str) -> None:
        """Forget that the device has this name."""
        ids = self._ids.get(name.casefold())
        if ids is not None:
            ids.discard(device_id)
            if not ids:
                del self._ids[name.casefold()]

    def taken(self, name: str, device_id: str) -> bool:
        """Whether another device has this name."""
        ids = self._ids.get(name.casefold())
        return ids is not None and (len(ids) > 1 or device_id not in ids)  # O(1): 40,000 "Sensor"s are one set

    def distinct(self, device_id: str, config: DeviceConfig, existing: Device | None) -> str:
        """The device's name, with a word where another device has it: its room ("Kitchen IKEA TRADFRI LED bulb"),
        else an ordinal ("Second ..."); the name it already had when that still fits (stable across restarts)."""
        name = config.displayName
        if existing is not None and existing.origin.naming and existing.described.displayName.endswith(name) \
                and not self.taken(existing.described.displayName, device_id):
            return existing.described.displayName
        if not self.taken(name, device_id):
            return name
        room = config.recommendRoomName
        if room and not self.taken(f"{room} {name}", device_id):
            return f"{room} {name}"
        for n in range(2, MAX_ORDINAL + 1):
            candidate = f"{spoken_ordinal(n)} {name}"
            if not self.taken(candidate, device_id):
                return candidate
        return name


def ordinal(n: int) -> str:
    """2 → "2nd", 3 → "3rd", 11 → "11th" (spoken() says it as a word)."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@cache
def spoken_ordinal(n: int) -> str:
    """The ordinal as the platform takes it ("Second", "Third"), spelled once per n."""
    return spoken(ordinal(n))
