"""zigbee2mqtt's bridge/devices entries as platform devices (pure).

`read_entry` decides whether one entry is imported (interviewed, supported, not disabled, not the Coordinator,
kept by include/exclude) and, if so, builds its `Z2mDevice`: the endpoints of mapping.plan_ranked (the device's
own endpoint, the ieee_address, and a `<ieee>-<property>` one per feature whose interface is already taken; a
thermostat's room temperature and humidity together on `<ieee>-local_temperature`; each scene of its endpoints on
`<ieee>-scene_<id>`, scenes.py), each with its whole DeviceConfig, its Route (JSON: the ieee, the friendly name,
the features' specs) and the Origin notes of every expose feature, exported or not and why. `device_from_routes`
rebuilds what reading states needs from the kept routes after a restart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hubd.devices.model import ADDITIONAL_INFO_MAX_CHARS, DeviceConfig, EntityNote, Origin, Route
from hubd.dialects import convert, mapping, naming
from hubd.dialects.base import ConfigReceived
from hubd.dialects.globs import Selected
from hubd.dialects.zigbee2mqtt.exposes import ACTION, PUBLISHED, RANK_SENSOR, Exposes, Feature, read_exposes
from hubd.dialects.zigbee2mqtt.features import part
from hubd.dialects.zigbee2mqtt.scenes import device_scenes, scene_configs
from hubd.spoken import spoken

DIALECT = "zigbee2mqtt"
ADDRESS_VERSION = 1
MAX_NAME_CHARS = 128
MAX_ID_CHARS = 64
_OUTLET_WORDS = ("plug", "socket", "outlet")
ROOM_TEMPERATURE = "local_temperature"  # a thermostat's room temperature: its room readings' endpoint `<ieee>-<it>`




@dataclass(frozen=True, slots=True)
class Slot:
    """One endpoint of a device: the features whose values go there, and its interfaces."""

    endpoint_id: str
    features: tuple[Feature, ...]
    interfaces: frozenset[str]


@dataclass(slots=True)
class Z2mDevice:
    """An imported zigbee2mqtt device: its name, endpoints and what they read."""

    ieee: str
    name: str
    slots: tuple[Slot, ...]
    doorbell: tuple[str, str] | None = None  # (endpoint id, the action value that presses it)
    configs: tuple[ConfigReceived, ...] = ()  # empty for one rebuilt from its routes
    reads: frozenset[str] = field(default_factory=frozenset)  # the state properties its features read
    actions: tuple[str, ...] = ()  # the values its `action` announces (a press to declare a doorbell with)


@dataclass(frozen=True, slots=True)
class Entry:
    """What one bridge/devices entry gave: the device, or why it is not imported; and its problems."""

    ieee: str | None
    name: str | None
    device: Z2mDevice | None
    reason: str = ""
    problems: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()  # the values its `action` announces


@dataclass(frozen=True, slots=True)
class Address:
    """A Route address read back: the device, its friendly name then, the features of that endpoint."""

    ieee: str
    name: str
    features: tuple[Feature, ...]
    doorbell: str | None


def read_entry(entry: Any, index: int, selected: Selected) -> Entry:
    """One bridge/devices entry: its device if imported, else why not; a malformed one is a problem."""
    if not isinstance(entry, dict):
        return Entry(None, None, None, problems=(f"entry {index} is a {type(entry).__name__}, not an object",))
    ieee, name = entry.get("ieee_address"), entry.get("friendly_name")
    if not isinstance(ieee, str) or not _plain(ieee, MAX_ID_CHARS):
        return Entry(None, None, None, problems=(f"entry {index}: ieee_address {_short(ieee)} is not an address "
                                                 "such as 0x00158d0001a2b3c4",))
    if not isinstance(name, str) or not _plain(name, 1_000):
        return Entry(ieee, None, None, problems=(f"entry {index} ({ieee}): friendly_name {_short(name)} is not a "
                                                 "name zigbee2mqtt allows (no '+' or '#'); rename the device",))
    definition = entry.get("definition")
    reason = ""
    if entry.get("type") == "Coordinator":
        reason = "the Coordinator (the Zigbee adapter itself)"
    elif entry.get("disabled") is True:
        reason = "disabled in zigbee2mqtt"
    elif entry.get("interview_completed") is not True and entry.get("interview_state") != "SUCCESSFUL":
        reason = f"not interviewed yet (interview_state {_short(entry.get('interview_state'))})"
    elif entry.get("supported") is False or not isinstance(definition, dict):
        reason = "not supported by zigbee2mqtt (it has no definition)"
    elif not selected.included((name, ieee)):
        reason = "left out by zigbee2mqtt.include/exclude"
    if reason or not isinstance(definition, dict):
        return Entry(ieee, name, None, reason)
    exposes = read_exposes(definition.get("exposes"), outlet=_is_outlet(definition))
    # A doorbell is declared by name or identifier (the config), or by endpointId (the owner's devices page).
    event = selected.doorbell((name, ieee, mapping.endpoint_id(ieee)), device=name, announces=exposes.actions,
                              key=ieee)
    device = build(ieee, name, entry, exposes, event)
    device.actions = exposes.actions or ()
    problems = tuple(f"{name} ({ieee}): {p}" for p in exposes.problems)
    if not device.slots:
        return Entry(ieee, name, None, _why_not(exposes, event), problems, device.actions)
    return Entry(ieee, name, device, problems=problems, actions=device.actions)


def build(ieee: str, name: str, entry: dict[str, Any], exposes: Exposes, event: str | None) -> Z2mDevice:
    """The device's endpoints (mapping.plan_ranked), configs, routes and notes."""
    left_out = list(exposes.left_out)
    features = list(exposes.features)
    if event is not None:
        doorbell = _doorbell(exposes, event)
        if isinstance(doorbell, Feature):
            features.append(doorbell)
            left_out = [n for n in left_out if n.name != f"enum.{ACTION}"]
        else:
            left_out.append(EntityNote("doorbell", False, doorbell))
    parts: dict[str, mapping.Part] = {}
    by_key: dict[str, Feature] = {}
    # One thing, one endpoint: a thermostat's own `state` switch is its on/off, which its Switch already is.
    powered = any(f.kind == "climate" and (p := part(f)) is not None and "Switch" in p.interfaces for f in features)
    for feature in features:
        if powered and feature.kind == "switch" and feature.key == "state":
            left_out += [EntityNote(n, False, "the thermostat's own on/off: its Switch is the thermostat's (one "
                                              "thing, one endpoint)") for n in feature.notes]
            continue
        found = part(feature)
        if found is None or feature.key in parts or (not found.capabilities and feature.kind != "doorbell"):
            why = "its property is exported by another feature" if feature.key in parts else \
                "nothing of it reaches the platform (its access allows neither reading nor setting)"
            left_out += [EntityNote(n, False, why) for n in feature.notes]
            continue
        parts[feature.key], by_key[feature.key] = found, feature
    given = entry.get("definition")
    definition: dict[str, Any] = given if isinstance(given, dict) else {}
    # An unrenamed device's friendly_name is its ieee address: named after its model instead (never spelled out).
    kind = next((p.display_type for p in parts.values() if p.display_type != "unknown"), "device")
    vendor, description = definition.get("vendor"), definition.get("description")
    spoken_name, why = naming.device_name(name, (ieee,), vendor if isinstance(vendor, str) else None,
                                          description if isinstance(description, str) else None, kind)
    slots: list[Slot] = []
    configs: list[ConfigReceived] = []
    bell: tuple[str, str] | None = None
    rooms = _room_groups(by_key)
    for planned in mapping.plan_ranked(mapping.endpoint_id(ieee), parts,
                                         {k: mapping.ranked(f.rank, f.key, f.label) for k, f in by_key.items()},
                                         rooms):
        members = tuple(by_key[k] for k in planned.keys)
        if len(members) > 1 and members[0].key in rooms:  # a room sensor: named by its temperature
            members = tuple(sorted(members, key=lambda f: f.key != rooms[f.key]))
        shown = [EntityNote(n, True, _exported_reason(f)) for f in members for n in f.notes]
        if not planned.split:
            shown += left_out
        display = naming.part_name(spoken_name, _spoken_label(members[0].label)) if planned.split else spoken_name
        config = DeviceConfig(displayName=display[:MAX_NAME_CHARS], displayType=planned.display_type,
                              capabilities=planned.capabilities, additionalInfo=_info(entry, definition, members))
        route = Route(DIALECT, address(ieee, name, members))
        configs.append(ConfigReceived(planned.endpoint_id, config, route,
                                      Origin(DIALECT, tuple(sorted(shown, key=lambda n: n.name)), why)))
        slots.append(Slot(planned.endpoint_id, members, frozenset(c.interface for c in planned.capabilities)))
        bell = bell or next(((planned.endpoint_id, str(f.opts["event"])) for f in members if f.kind == "doorbell"),
                            None)
    for received, scene in scene_configs(ieee, name, spoken_name, device_scenes(entry), _info(entry, definition, ()),
                                         lambda f: Route(DIALECT, address(ieee, name, [f]))):
        configs.append(received)
        slots.append(Slot(received.device_id, (scene,), frozenset(c.interface for c in received.config.capabilities)))
    return Z2mDevice(ieee, name, tuple(slots), bell, tuple(configs), _reads(by_key.values()))


def address(ieee: str, name: str, features: Sequence[Feature]) -> str:
    """The Route address of one endpoint (JSON): enough to read its states and command it after a restart."""
    data: dict[str, Any] = {"v": ADDRESS_VERSION, "ieee": ieee, "name": name,
                            "features": [f.spec() for f in features if f.kind != "doorbell"]}
    bell = next((f for f in features if f.kind == "doorbell"), None)
    if bell is not None:
        data["doorbell"] = bell.opts["event"]
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_address(text: str) -> Address | None:
    """A Route address read back; None for one that is not this version's."""
    try:
        data: Any = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != ADDRESS_VERSION:
            return None
        ieee, name, features, bell = data["ieee"], data["name"], data["features"], data.get("doorbell")
        if not isinstance(ieee, str) or not isinstance(name, str) or not isinstance(features, list) \
                or not isinstance(bell, str | None):
            return None
        return Address(ieee, name, tuple(Feature.from_spec(f) for f in features), bell)
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def device_from_routes(ieee: str, endpoints: Sequence[tuple[str, Address]]) -> Z2mDevice:
    """What reading a device's states needs, from its kept routes (before bridge/devices comes again)."""
    slots: list[Slot] = []
    bell: tuple[str, str] | None = None
    for endpoint_id, where in endpoints:
        interfaces = frozenset(i for f in where.features if (p := part(f)) is not None for i in p.interfaces)
        slots.append(Slot(endpoint_id, where.features, interfaces))
        if where.doorbell is not None and bell is None:
            bell = (endpoint_id, where.doorbell)
    name = endpoints[0][1].name if endpoints else ieee
    return Z2mDevice(ieee, name, tuple(slots), bell, (), _reads(f for _, a in endpoints for f in a.features))


def _doorbell(exposes: Exposes, event: str) -> Feature | str:
    if exposes.actions is None:
        return f"declared in doorbells (event {event!r}), but the device exposes no action"
    if exposes.actions and event.casefold() not in {a.casefold() for a in exposes.actions}:
        return f"declared in doorbells with event {event!r}, but its action is one of {list(exposes.actions)}"
    return Feature("doorbell", ACTION, {"action": ACTION}, {"action": PUBLISHED}, {"event": event}, "Doorbell",
                   RANK_SENSOR, (f"enum.{ACTION}",))


def _exported_reason(feature: Feature) -> str:
    if feature.kind == "doorbell":
        return f"a declared doorbell: action {feature.opts['event']!r} is a DoorbellPress"
    return ""


def _why_not(exposes: Exposes, event: str | None) -> str:
    """Why a device none of whose exposes is exported is not imported."""
    names = dict.fromkeys(n.name.rsplit(".", 1)[-1] for n in exposes.left_out)
    reason = f"nothing it exposes has a platform interface ({', '.join(names) or 'it exposes nothing'})"
    if event is not None and isinstance(problem := _doorbell(exposes, event), str):
        return f"{reason}; {problem}"
    if exposes.actions is not None:
        return f"{reason}; declare it in doorbells to make its action a DoorbellPress"
    return reason


def _info(entry: dict[str, Any], definition: dict[str, Any], members: Sequence[Feature]) -> dict[str, str]:
    info: dict[str, str] = {}
    for key, value in (("manufacturer", definition.get("vendor")), ("model", definition.get("model")),
                       ("swVersion", entry.get("software_build_id"))):
        if isinstance(value, str) and value.strip():
            info[key] = value[:ADDITIONAL_INFO_MAX_CHARS]
    for feature in members:
        low, high, unit = feature.opts.get("min"), feature.opts.get("max"), str(feature.opts.get("unit") or "")
        if feature.kind == "climate" and isinstance(low, int | float) and isinstance(high, int | float):
            info["minTemperature"] = _number_text(convert.celsius(low, unit) or low)
            info["maxTemperature"] = _number_text(convert.celsius(high, unit) or high)
    return info


def _reads(features: Iterable[Feature]) -> frozenset[str]:
    return frozenset(p for f in features for p in f.props.values())


def _is_outlet(definition: dict[str, Any]) -> bool:
    text = " ".join(v for v in (definition.get("description"), definition.get("model")) if isinstance(v, str))
    return any(word in text.casefold() for word in _OUTLET_WORDS)


def _plain(text: str, limit: int) -> bool:
    return 0 < len(text) <= limit and "+" not in text and "#" not in text and "\x00" not in text


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}".rstrip("0")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _room_groups(features: Mapping[str, Feature]) -> dict[str, str]:
    """A thermostat's room readings, which split off together (`<ieee>-local_temperature`, CONTRACT section 6):
    its `local_temperature` and, where it measures one, the room's `humidity` (Bosch's BTH-RM230Z); a humidity
    without a room temperature splits off alone (`<ieee>-humidity`), never the thermostat's own."""
    if not any(f.kind == "climate" for f in features.values()):
        return {}
    local = next((k for k, f in sorted(features.items()) if f.kind == "numeric"
                  and f.opts.get("sensor") == "temperature" and k.startswith(ROOM_TEMPERATURE)), None)
    humidity = next((k for k, f in sorted(features.items()) if f.kind == "numeric"
                     and f.opts.get("sensor") == "humidity"), None)
    rooms = {local: local} if local is not None else {}
    if humidity is not None:
        rooms[humidity] = local or humidity
    return rooms


def _spoken_label(label: str) -> str:
    """A split endpoint's suffix as the platform takes it in a name: zigbee2mqtt's `l2` (endpoint 2) is "Two"."""
    match = re.fullmatch(r"[lL](\d+)", label)
    return spoken(match.group(1) if match else label)
