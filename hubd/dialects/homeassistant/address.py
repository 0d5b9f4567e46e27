"""A discovered endpoint's Route address, read back: the entities it carries and their configs.

The address (JSON, written by hubd.dialects.homeassistant.devices) keeps each entity's discovery config, so that
after a restart, or for a command, an entity rebuilt from it reads and commands exactly as the one built from
discovery. Version 1 (before configs were kept) is still read for commands; only version 2 restores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ADDRESS_VERSION = 2
ADDRESS_VERSIONS = (1, 2)  # read for commands; only version 2 restores


@dataclass(frozen=True, slots=True)
class AddressEntity:
    """One entity of a Route address."""

    component: str
    label: str  # `<component>.<object_id>` (version 1: the name it was given)
    interfaces: tuple[str, ...]
    config: dict[str, Any]  # version 2: its discovery config, with its device block; version 1: its command keys
    discovery_id: str | None = None  # version 2 only
    via: str | None = None


@dataclass(frozen=True, slots=True)
class Address:
    """A Route address, read."""

    version: int
    device_id: str | None  # the device's id when it is not the endpoint's (a split-off endpoint)
    entities: tuple[AddressEntity, ...]


def read_address(text: str) -> Address:
    """A Route address of either version; ValueError for one that is not (another version, or damaged)."""
    try:
        data: Any = json.loads(text)
    except RecursionError:
        raise ValueError("too deeply nested") from None
    version = data.get("v") if isinstance(data, dict) else None
    if version not in ADDRESS_VERSIONS or not isinstance(data.get("entities"), list):
        raise ValueError(f"not a Home Assistant discovery address of version {ADDRESS_VERSIONS}")
    device_id, shared = data.get("of"), data.get("device")
    if not isinstance(device_id, str | None) or not isinstance(shared, dict | None):
        raise ValueError("of/device: must be a string and an object")
    entities = []
    for spec in data["entities"]:
        if not isinstance(spec, dict):
            raise ValueError("entities: must be objects")
        interfaces, config = spec.get("interfaces", []), spec.get("config") or {}
        if not isinstance(interfaces, list) or not isinstance(config, dict):
            raise ValueError("entities[].interfaces/config: must be a list and an object")
        if version == 1:
            component, label, discovery_id, via = spec.get("component"), spec.get("name"), None, None
        else:
            key, via = spec.get("key"), spec.get("via")
            if not (isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) and k for k in key)):
                raise ValueError("entities[].key: must be [component, discovery id]")
            component, discovery_id = key
            label = f"{component}.{discovery_id.split(' ')[-1]}"
            if shared is not None and "device" not in config:
                config = {**config, "device": shared}
        if not isinstance(component, str) or not isinstance(via, str | None):
            raise ValueError("entities[].component/via: must be strings")
        entities.append(AddressEntity(component, str(label), tuple(str(i) for i in interfaces), config,
                                      discovery_id, via))
    return Address(version, device_id, tuple(entities))
