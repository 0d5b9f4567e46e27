"""What the platform accepts from a device, the pure part: bring a config or a
state into that shape, or say why it cannot be.

The platform refuses a whole batched AddOrUpdateReport for one bad endpoint, and then every ChangeReport
of the endpoints it never learnt: so nothing it would refuse may reach the outbox. Names lose digits
(spelt as words: Chinese ones in a name with Chinese, Japanese or Korean letters, else English) and
punctuation (`hubd.spoken`); interfaces and operations must be the platform's (the table of
`hubd.devices.interfaces`); state values must fit their interface (enum values matched without regard to
case, numbers in range). No I/O, no state.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from hubd.devices.interfaces import COLOR_MAX, INTERFACES, Interface, Kind
from hubd.devices.model import Capability, DeviceConfig, StateValue
from hubd.errors import DeviceMessageInvalid
from hubd.spoken import spoken

_BY_LOWER = {name.lower(): name for name in INTERFACES}


@dataclass(frozen=True, slots=True)
class Renamed:
    """A name changed so the platform accepts it (logged once per config)."""

    field: str
    old: str
    new: str | None  # None: nothing speakable was left, the optional field is left out


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def conform_config(config: DeviceConfig) -> tuple[DeviceConfig, list[Renamed]]:
    """The config with spoken names and canonical interface names, and what was renamed.

    Raises DeviceMessageInvalid for an interface or operation the platform does not know (the whole config
    is refused: a device must not half-appear) and for a displayName with nothing speakable in it.
    """
    renamed: list[Renamed] = []
    display = spoken(config.displayName)
    if not display:
        raise DeviceMessageInvalid(f"displayName: {config.displayName!r} has nothing the platform can speak "
                                   "(it refuses digits and punctuation); use words, e.g. \"Desk Lamp\"")
    if display != config.displayName:
        renamed.append(Renamed("displayName", config.displayName, display))
    room = config.recommendRoomName
    if config.recommendRoomName is not None:
        room = spoken(config.recommendRoomName) or None
        if room != config.recommendRoomName:
            renamed.append(Renamed("recommendRoomName", config.recommendRoomName, room))
    capabilities = tuple(_capability(c) for c in config.capabilities)
    info = config.additionalInfo
    if any(_CONTROL.search(v) for v in info.values()):
        # zigbee2mqtt's software_build_id "1.31\x00", say: the platform takes text, not control characters.
        info = {k: _CONTROL.sub("", v) for k, v in info.items()}
    names = [c.interface for c in capabilities]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DeviceMessageInvalid(f"capabilities list an interface twice: {twice}")
    if not renamed and capabilities == config.capabilities and info is config.additionalInfo:
        return config, []
    return replace(config, displayName=display, recommendRoomName=room, capabilities=capabilities,
                   additionalInfo=info), renamed


def interface_name(name: str, namespace: str = "Service") -> str:
    """The platform's spelling of an interface name ("switch" -> "Switch", "Service.Switch" -> "Switch", as in
    configs); unknown names unchanged."""
    if name in INTERFACES:
        return name
    known = _BY_LOWER.get(name.lower())
    if known is not None:
        return known
    bare = name
    for prefix in (f"{namespace}.", "Service."):
        bare = bare.removeprefix(prefix)
    return _BY_LOWER.get(bare.lower(), name)


def conform_value(interface_name: str, value: StateValue) -> StateValue:
    """A state value as the platform takes it for this interface; DeviceMessageInvalid says why not.

    Enum values are matched without regard to case and sent in the platform's spelling ("on" -> "On");
    numbers must be in the interface's range (Color a whole number); descriptors are objects of strings.
    """
    interface = INTERFACES.get(interface_name)
    if interface is None:
        raise DeviceMessageInvalid(f"{interface_name}: not an interface the platform knows; use one of "
                                   f"{', '.join(sorted(INTERFACES))}")
    if interface.kind is Kind.ENUM:
        return _enum_value(interface, value)
    if interface.kind is Kind.NUMBER:
        return _number_value(interface, value)
    return _descriptor_value(interface, value)


def _capability(cap: Capability) -> Capability:
    name = interface_name(cap.interface)
    interface = INTERFACES.get(name)
    if interface is None:
        raise DeviceMessageInvalid(f"capabilities: interface {cap.interface!r} is not one the platform knows; "
                                   f"use one of {', '.join(sorted(INTERFACES))}")
    operations = tuple(_operation(interface, op) for op in cap.supportedOperations)
    if name == cap.interface and operations == cap.supportedOperations:
        return cap
    return Capability.of(name, tuple(dict.fromkeys(operations)), cap.proactivelyReported, cap.retrievable)


def _operation(interface: Interface, operation: str) -> str:
    if operation in interface.operations:
        return operation
    for known in interface.operations:
        if known.lower() == operation.lower():
            return known
    raise DeviceMessageInvalid(f"capabilities: {interface.name} has no operation {operation!r}; it has "
                               f"{', '.join(sorted(interface.operations))} (or [] for a read-only sensor)")


def _enum_value(interface: Interface, value: StateValue) -> str:
    if isinstance(value, str):
        if value in interface.operations:
            return value  # the usual case, on every state message: already the platform's spelling
        wanted = value.strip().lower()
        for known in interface.operations:
            if known.lower() == wanted:
                return known
    raise DeviceMessageInvalid(f"{interface.name}: {_show(value)} is not a {interface.name} value; "
                               f"use one of {', '.join(sorted(interface.operations))}")


def _number_value(interface: Interface, value: StateValue) -> int | float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise DeviceMessageInvalid(f"{interface.name}: must be a number (e.g. {_example(interface)}), "
                                   f"got {_show(value)}")
    low, high = interface.value_range or (-math.inf, math.inf)
    if not low <= value <= high:
        raise DeviceMessageInvalid(f"{interface.name}: {value!r} is outside its range {low:g} to {high:g}")
    if interface.whole_only:  # RGB is a decimal integer; 21.5 °C and 40.5 % are fine
        if not float(value).is_integer():
            raise DeviceMessageInvalid(f"{interface.name}: must be a whole number (RGB 0 to {COLOR_MAX}), "
                                       f"got {value!r}")
        return int(value)
    return value


def _descriptor_value(interface: Interface, value: StateValue) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DeviceMessageInvalid(f"{interface.name}: must be an object with {_keys(interface)}, got {_show(value)}")
    unknown = sorted(set(value) - interface.descriptor_keys)
    if unknown:
        raise DeviceMessageInvalid(f"{interface.name}: unknown keys {unknown}; it takes {_keys(interface)}")
    bad = sorted(k for k, v in value.items() if not isinstance(v, str))
    if bad:
        raise DeviceMessageInvalid(f"{interface.name}: {bad} must be strings")
    return value


def _keys(interface: Interface) -> str:
    return ", ".join(sorted(interface.descriptor_keys))


def _example(interface: Interface) -> str:
    return "21.5" if interface.value_range is None else f"{interface.value_range[1] / 2:g}"


def _show(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    return repr(value)[:60]
