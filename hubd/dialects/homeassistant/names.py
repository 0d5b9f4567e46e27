"""The names a discovered device's endpoints take (pure): the device's own, its model's, or its entities'.

A device block's `name` is the device's name, and a split-off part adds its entity's name ("Kitchen plug USB").
Without a name, the device is named after its model ("IKEA TRADFRI bulb"). Tasmota's legacy discovery gives most
entities a device block with neither (only its status sensor, announced last, names the device): each endpoint is
then named after the entities it carries ("Switch 1", "Switch 2"), so that the same entities give the same names
whatever order they arrived in, and no endpoint keeps a name that belonged to another. An identifier is never a
name (hubd.dialects.naming).
"""

from __future__ import annotations

from collections.abc import Sequence

from hubd.dialects import naming
from hubd.dialects.homeassistant.discovery import DeviceInfo


def device_name(device: DeviceInfo, identifiers: Sequence[str], kind: str) -> tuple[str, str] | None:
    """The device's name and why hubd chose it ("" for the device's own): its `name`, or its model when it has no
    name; None when it has neither (its endpoints are named after their entities). `kind`: what the device is,
    for a name of last resort ("light", "sensor")."""
    if not device.name and naming.model_name(device.manufacturer, device.model) is None:
        return None
    return naming.device_name(device.name, identifiers, device.manufacturer, device.model, kind)


def entities_name(names: Sequence[str], identifiers: Sequence[str], kind: str) -> tuple[str, str]:
    """An endpoint's name when its device has neither name nor model, from the names of the entities it carries
    (by key): the one entity's name, else the words all their names begin with ("Sensor BME280 Temperature" and
    "Sensor BME280 Humidity": "Sensor BME280", its identifier left out), else the first one's."""
    given = names[0] if len(names) == 1 else common_words(names) or (names[0] if names else None)
    name, why = naming.device_name(given, identifiers, None, None, kind)
    if not why:
        what = "its entity" if len(names) == 1 else "the words its entities' names share"
        why = f"its device has no name or model, so it is named after {what}"
    return name, why


def common_words(names: Sequence[str]) -> str:
    """The words every name begins with, compared without case ("" when they share none)."""
    common: list[str] = []
    for words in zip(*(n.split() for n in names), strict=False):
        if any(w.casefold() != words[0].casefold() for w in words):
            break
        common.append(words[0])
    return " ".join(common)
