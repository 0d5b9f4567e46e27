"""Discovered entities as platform devices: records, include/exclude, doorbells, one device's endpoints.

A `Record` is one discovered entity with what the dialect keeps of it: its Entity, device block,
availability and where its state goes. `device_endpoints` turns the records that share identifiers or
connections into the device's endpoints (mapping.plan_ranked: one per device, a split-off one per repeated
interface) with the whole DeviceConfig, the Route address and the Origin notes of every entity, exported or
not and why. Pure.

The Route address (version 2, JSON with sorted keys, kept with the device in SQLite) holds the discovery
config of each entity on the endpoint, expanded (full keys, `~` resolved) and without what hubd never reads,
so that after a restart the dialect can both command the device and read its states before the retained
configs come again (`HomeAssistantDialect.restore`):

    {"v": 2,
     "device": {"identifiers": [...], "name": ..., ...},   the device block its entities share, if any
     "of": "<device id>",                                   only on a split-off endpoint: the device's id
     "entities": [{"key": [component, discovery id],        (component, "[node_id ]object_id")
                   "via": "[node_id/]object_id",            only for a device-based config: where it came from
                   "interfaces": [...],                     what it takes on this endpoint (for commands)
                   "config": {...}}]}                       its config; its own "device" only when it differs

Version 1 (`{"v": 1, "entities": [{"component", "name", "interfaces", "config": <command keys>}]}`) is still
read for commands (`read_address`); it restores nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hubd.devices.model import ADDITIONAL_INFO_MAX_CHARS, Capability, DeviceConfig, EntityNote, Origin, Route
from hubd.dialects import mapping, naming
from hubd.dialects.globs import Globs
from hubd.dialects.homeassistant import names
from hubd.dialects.homeassistant.address import ADDRESS_VERSION
from hubd.dialects.homeassistant.climate import ROOM_GROUP, Climate, room_reading_of
from hubd.dialects.homeassistant.discovery import (
    DEFAULT_AVAILABILITY_MODE,
    DEFAULT_AVAILABLE,
    DEFAULT_NOT_AVAILABLE,
    Availability,
    DeviceInfo,
)
from hubd.dialects.homeassistant.entities import Entity
from hubd.dialects.homeassistant.templates import Compiled

DIALECT = "homeassistant"
ANY_EVENT = "*"
# Components richer than a switch: a switch announced beside one of them for the same thing is that thing's on/off.
_RICHER = frozenset({"light", "fan", "climate", "humidifier", "water_heater", "vacuum", "valve", "cover"})
# A switch's value_template that reads the device's plain state (whitespace removed), or none: the raw payload.
_PLAIN_STATE = frozenset({"", "{{value_json.state}}", "{{value_json['state']}}", '{{value_json["state"]}}'})
# Which entity of a device carries a declared doorbell when several could (one press must be one DoorbellPress).
_DOORBELL_SOURCES = ("event", "device_automation", "sensor", "binary_sensor")


@dataclass(slots=True, eq=False)
class Record:
    """One discovered entity and what the dialect keeps of it."""

    key: tuple[str, str]  # (component, discovery id)
    object_id: str
    unique_id: str | None
    name: str | None
    device: DeviceInfo | None
    origin: str
    entity: Entity
    availability: Availability | None
    included: bool
    endpoint: str | None = None  # the endpoint its values go to, when exported
    doorbell: str | None = None  # the event that presses it (ANY_EVENT: every event), when it is a doorbell
    seen: dict[str, bool] = field(default_factory=dict)  # availability by topic
    latest: bool | None = None
    indexed: list[tuple[str, str]] = field(default_factory=list)  # (topic, role) it is read on
    availability_templates: dict[str, Compiled] = field(default_factory=dict)  # by topic, compiled once
    via: str | None = None  # "[node_id/]object_id" of the device-based config that announced it, if one did
    # On a record restored from a Route address: the id its device had, held (and handed on to the config that
    # replaces it) until the device's records give that id themselves, so that a device never changes id while
    # its configs come back one by one; and the endpoint it was restored for, until its group is next worked
    # out (a device gone meanwhile, e.g. now excluded, is reported gone then).
    pinned: str | None = None
    restored: str | None = None
    fault: str | None = None  # what its last state said that makes its device unreachable (a jammed lock), if any
    revealed: bool = False  # kept back by rule, but the owner exposed it (`{"exposed": true}`)
    alone: bool = False  # revealed as its own split-off endpoint (`<device id>-<object_id>`), its device exported

    @property
    def component(self) -> str:
        """The Home Assistant component (sensor, light, ...)."""
        return self.key[0]

    @property
    def label(self) -> str:
        """How notes and log lines name it: `<component>.<object_id>`."""
        return f"{self.component}.{self.object_id}"

    @property
    def exported(self) -> bool:
        """Whether the platform gets it (a part, or a doorbell); a config or diagnostic entity only when the owner
        exposed its device (`revealed`), and a maintenance action never."""
        return self.included and (not self.entity.setting or self.revealed) and (self.entity.part is not None or
                                                                                 self.doorbell is not None)

    @property
    def exposable(self) -> bool:
        """Whether it is kept back by a rule the owner may lift: a config or diagnostic entity that maps to a platform
        interface (rtl_433's diagnostic door contact), never a maintenance action or a button."""
        return self.included and self.entity.setting and not self.maintenance and self.entity.part is not None

    @property
    def maintenance(self) -> bool:
        """Whether it maintains the device (any button; a switch whose name says restart, erase, reset, update...):
        kept back by a rule no owner lifts."""
        return self.component == "button" or self.entity.maintenance

    def command_topics(self) -> dict[str, str]:
        """The topics the entity publishes commands to, by key (`*command_topic`, a cover's `set_position_topic`)."""
        return {key: value for key, value in self.entity.conf.data.items()
                if (key.endswith("command_topic") or key == "set_position_topic") and isinstance(value, str)}

    def tokens(self) -> tuple[tuple[str, ...], ...]:
        """What ties it to other entities of its device (itself alone without a device block)."""
        return self.device.tokens() if self.device is not None else (("entity", *self.key),)

    def available(self) -> bool | None:
        """Its availability by `availability_mode` (None: not known yet, or it has none)."""
        if self.availability is None:
            return None
        if self.availability.mode == "latest":
            return self.latest
        known = [self.seen.get(s.topic) for s in self.availability.sources]
        if self.availability.mode == "all":
            return False if False in known else (True if None not in known else None)
        return True if True in known else (False if None not in known else None)




@dataclass(frozen=True, slots=True)
class DeviceEndpoint:
    """One endpoint of a discovered device, as the dialect announces it."""

    endpoint_id: str
    config: DeviceConfig
    route: Route
    origin: Origin
    keys: tuple[tuple[str, str], ...]  # the records whose values go here


def names_of(record: Record) -> list[str | None]:
    """What include/exclude and doorbell globs match: device name, identifiers, the entity's unique_id."""
    device = record.device
    names = [device.name if device else None, *(device.identifiers if device else ()), record.unique_id]
    return names if any(names) else [record.label]  # an entity with none of them: its discovery name


def assign_doorbells(records: Sequence[Record], declared: Sequence[tuple[Globs, str]],
                     seen: Callable[[int, str, tuple[str, ...] | None, str], None] | None = None) -> None:
    """Mark the device's doorbell entities: doorbell-class events, and per declaration its best candidate. A
    declaration names the device (its name, identifiers, an entity's unique_id) or its endpointId (the owner's).
    `seen(declaration index, device name, the events it announces, its endpointId)` is told of each declaration
    that names the device (Selected.record)."""
    for record in records:
        record.doorbell = ANY_EVENT if record.component == "event" and record.entity.part is not None else None
    ids = _endpoint_ids(records) if declared else []
    for index, (globs, event) in enumerate(declared):
        candidates = []
        named = [r for r in records if r.included and not r.entity.setting and globs.any([*names_of(r), *ids])]
        if named and seen is not None:
            device = device_id_of(records)
            seen(index, _device_label(named[0], device), _announced(named), device)
        for record in named:
            possible = record.entity.press_events()
            if possible is None:
                continue
            if possible and event.casefold() not in {p.casefold() for p in possible}:
                continue
            rank = _DOORBELL_SOURCES.index(record.component) if record.component in _DOORBELL_SOURCES else 9
            candidates.append((rank, record.entity.press_rank(), record.key, record))
        if candidates:
            best = min(candidates, key=lambda c: c[:3])[3]
            if best.doorbell is None:
                best.doorbell = event


def assign_revealed(records: Sequence[Record], exposed: frozenset[str]) -> None:
    """Mark the device's kept-back entities the owner exposed: every one when the device's endpointId is in `exposed`
    (a device kept back whole), else each whose split-off endpointId is (`split_off_id`: an entity of a device that
    is exported, exported `alone` on that endpoint so that it never takes over the device's own). Exported from now
    on, with the capabilities their component gives them."""
    whole = bool(exposed) and not exposed.isdisjoint(_endpoint_ids(records))
    for record in records:
        alone = bool(exposed) and not whole and record.exposable and split_off_id(records, record) in exposed
        record.revealed = record.exposable and (whole or alone)
        record.alone = alone


def split_off_id(records: Sequence[Record], record: Record) -> str:
    """The endpointId one entity of the device gets on its own (CONTRACT 6's split-off rule):
    `<device id>-<object_id>` (`<object_id>_<component>` when two of the device's entities share the object_id)."""
    return mapping.endpoint_id(f"{_held_id(records)}-{_own_key(records, record)}")


def _own_key(records: Sequence[Record], record: Record) -> str:
    shared = sum(1 for r in records if r.object_id == record.object_id) > 1
    return f"{record.object_id}_{record.component}" if shared else record.object_id


def _held_id(records: Sequence[Record]) -> str:
    """The device's endpointId, or the one it was restored with while its records do not give it yet."""
    pinned = next((r.pinned for r in sorted(records, key=lambda r: r.key) if r.pinned is not None), None)
    return pinned or device_id_of(records)


def _device_label(record: Record, device_id: str) -> str:
    return record.device.name if record.device is not None and record.device.name else device_id


def _announced(records: Sequence[Record]) -> tuple[str, ...] | None:
    """The events these entities announce: () when one takes any, None when none presses."""
    found: dict[str, None] = {}
    pressing = False
    for record in records:
        possible = record.entity.press_events()
        if possible is None:
            continue
        if not possible:
            return ()
        pressing = True
        found.update(dict.fromkeys(possible))
    return tuple(found) if pressing else None


def _endpoint_ids(records: Sequence[Record]) -> list[str]:
    """The endpointId of the device the records make (the one it was restored with too, while held)."""
    pinned = [r.pinned for r in records if r.pinned is not None]
    return [device_id_of(records), *pinned]


def device_id_of(records: Sequence[Record]) -> str:
    """The device's endpointId: its first identifier (else connection, else the entity's unique_id)."""
    ordered = sorted(records, key=lambda r: r.key)
    for record in ordered:
        if record.device is not None and record.device.identifiers:
            return mapping.endpoint_id(record.device.identifiers[0])
    for record in ordered:
        if record.device is not None and record.device.connections:
            return mapping.endpoint_id("_".join(record.device.connections[0]))
    first = ordered[0]
    return mapping.endpoint_id(first.unique_id or f"{first.component}_{first.key[1]}")


def device_endpoints(records: Sequence[Record]) -> list[DeviceEndpoint]:
    """The endpoints of one device's records (sets each record's `endpoint`); [] when nothing is exported.

    The same records give the same endpoints, whatever order they arrived in (and after a restart)."""
    for record in records:
        record.endpoint = None
    again = _announced_again(records)
    exported = [r for r in records if r.exported and r.key not in again]
    if not exported:
        return []
    device_id = device_id_of(records)
    pinned = next((r.pinned for r in sorted(records, key=lambda r: r.key) if r.pinned is not None), None)
    if pinned == device_id:
        for record in records:
            record.pinned = None  # its records give the id it was restored with: nothing to hold any more
    device_id = pinned or device_id
    by_part_key = _part_keys(exported)
    parts = {k: r.entity.part or mapping.doorbell() for k, r in by_part_key.items()}
    ordered = sorted(records, key=lambda r: r.key)
    device = next((r.device for r in ordered if r.device is not None), None)
    named = None
    if device is not None:
        kinds = [r.entity.part for r in ordered if r.entity.part is not None]
        named = names.device_name(device, _identifiers(device, ordered, device_id),
                                  _kind(kinds[0].display_type, kinds[0].capabilities) if kinds else "device")
    out = []
    ranks = {k: mapping.primary_rank(part, by_part_key[k].name, by_part_key[k].object_id)  # its function first
             for k, part in parts.items()}
    groups = {k: ROOM_GROUP for k, r in by_part_key.items() if room_reading_of(r.key) is not None}
    # A scene of a device is its own endpoint (`<device id>-<object_id>`), whether or not the device's other
    # entities came (a zigbee2mqtt scene announced before its bulb's light); one without a device block is one anyway.
    groups.update({k: k for k, r in by_part_key.items() if r.component == "scene" and r.device is not None})
    # An entity kept back by rule that the owner exposed on its own is its own endpoint, `<device id>-<object_id>`: it
    # never takes over the device's endpoint nor joins it (the listing offered it under that id).
    groups.update({k: _own_key(records, r) for k, r in by_part_key.items() if r.alone})
    for planned in mapping.plan_ranked(device_id, parts, ranks, groups):
        members = [by_part_key[k] for k in planned.keys]
        for record in members:
            record.endpoint = planned.endpoint_id
        if planned.split:
            shown: Iterable[Record] = members
        else:
            split_keys = {k for k in by_part_key if k not in planned.keys}
            shown = [r for r in records if r not in [by_part_key[k] for k in split_keys]]
        if named is None:
            entity_names = [r.name for r in sorted(members, key=lambda r: r.key) if r.name]
            name, why = names.entities_name(entity_names, _identifiers(None, exported, device_id),
                                            _kind(planned.display_type, planned.capabilities))
        else:
            name, why = named
        scene = members[0] if members[0].component == "scene" else None
        if scene is not None and scene.name and naming.sayable_part(scene.name):
            name = naming.sayable_part(scene.name)  # named by the scene ("Chill scene"), not by its device
        elif named is not None and planned.split:
            lead = next((m for m in members if m.object_id == ROOM_GROUP), members[0])  # "Room temperature"
            name = naming.part_name(name, lead.name or lead.object_id)
        config = DeviceConfig(displayName=name, displayType=planned.display_type, capabilities=planned.capabilities,
                              recommendRoomName=device.suggested_area if device else None,
                              additionalInfo=_additional_info(device, members))
        origin = Origin(DIALECT, tuple(note_of(r, again.get(r.key)) for r in sorted(shown, key=lambda r: r.key)), why)
        out.append(DeviceEndpoint(planned.endpoint_id, config, Route(DIALECT, _address(device_id, members, planned)),
                                  origin, tuple(r.key for r in members)))
    return out


def _announced_again(records: Sequence[Record]) -> dict[tuple[str, str], str]:
    """The entities that announce again what another entity of their device has, by key, with why: the platform gets
    each thing once (one thing, one endpoint).

    A sensor that reads what a climate's room reading reads (zigbee2mqtt 2.x announces a thermostat's
    local_temperature in its climate config and as a sensor of its own); a switch that reads the plain `state`
    (or the raw payload) of a topic a richer entity of the device reads and commands on one of its command topics:
    a zigbee2mqtt group announced as a light and as a switch, a thermostat's own `state` beside its Switch (the
    richer one keeps the Switch)."""
    def reading(record: Record) -> tuple[str | None, str, str | None]:
        conf = record.entity.conf
        return conf.text("state_topic"), "".join((conf.text("value_template") or "").split()), \
            record.entity.device_class
    rooms = {reading(r): r.label for r in records if room_reading_of(r.key) is not None and r.exported}
    out = {r.key: f"reads what {rooms[reading(r)]} (the climate's room reading) reads: the platform gets it once"
           for r in records if r.component == "sensor" and room_reading_of(r.key) is None and reading(r) in rooms}
    richer = [r for r in records if r.exported and r.component in _RICHER and r.entity.part is not None
              and "Switch" in r.entity.part.interfaces]
    for record in records:
        if record.component != "switch" or not record.exported or reading(record)[1] not in _PLAIN_STATE:
            continue
        state, command = record.entity.conf.text("state_topic"), record.entity.conf.text("command_topic")
        for other in richer:
            topics = {v for k, v in other.entity.conf.data.items() if k.endswith("topic") and isinstance(v, str)}
            if state in topics and command in set(other.command_topics().values()):
                out[record.key] = (f"the same thing as {other.label} (its state and command topics): one thing, "
                                   f"one endpoint, and the {other.component}'s Switch is its on/off")
                break
    return out


def _identifiers(device: DeviceInfo | None, records: Sequence[Record], device_id: str) -> list[str]:
    if device is not None:
        return [device_id, *device.identifiers, *(c[1] for c in device.connections)]
    return [device_id, *(r.unique_id for r in records if r.unique_id)]


def _kind(display_type: str, capabilities: Iterable[Capability]) -> str:
    """What an endpoint is, for a name of last resort: its display type, or "thermometer" or "sensor" when it only
    reports."""
    if display_type != "unknown":
        return display_type
    capabilities = tuple(capabilities)
    if any(c.supportedOperations for c in capabilities):
        return "device"
    return "thermometer" if any(c.interface == "Temperature" for c in capabilities) else "sensor"


def _part_keys(records: Sequence[Record]) -> dict[str, Record]:
    """Each exported record under its object_id (with its component when two share one)."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record.object_id] = counts.get(record.object_id, 0) + 1
    return {(r.object_id if counts[r.object_id] == 1 else f"{r.object_id}_{r.component}"): r for r in records}


def note_of(record: Record, again: str | None = None) -> EntityNote:
    """What the status page says of one entity: exported, or why not (`again`: why it repeats another entity)."""
    if again is not None:
        return EntityNote(record.label, False, again)
    if not record.included:
        return EntityNote(record.label, False, "left out by homeassistant.include/exclude")
    if record.entity.setting and record.entity.category == "maintenance":
        return EntityNote(record.label, False, "a switch or button that maintains the device (its name or unique_id "
                                               "says restart, erase, reset, update...): never exported, so that no "
                                               "voice command restarts or erases it, not even when exposed")
    if record.entity.setting and record.maintenance:
        return EntityNote(record.label, False, f"a {record.component} that maintains the device (entity_category "
                                               f"{record.entity.category}): never exported, so that no voice command "
                                               "restarts or erases it, not even when exposed")
    if record.entity.setting and record.revealed and record.exported:
        return EntityNote(record.label, True, f"{record.entity.category} entity (entity_category "
                                              f"{record.entity.category}): kept back by rule, exposed by the owner")
    if record.entity.setting:
        return EntityNote(record.label, False, f"a device's {record.entity.category} entity (entity_category "
                                               f"{record.entity.category}): never exported, as Home Assistant never "
                                               "exposes one to a voice assistant")
    if record.exported:
        if record.doorbell not in (None, ANY_EVENT):
            return EntityNote(record.label, True, f"a declared doorbell: {record.doorbell!r} is a DoorbellPress")
        return EntityNote(record.label, True)
    return EntityNote(record.label, False, record.entity.reason)


def kept_back_note(record: Record) -> str:
    """Why a kept-back entity is not exported (of a device kept back whole, or listed as its own split-off): for one
    the owner may expose, the rule and that exposing it brings it back."""
    if record.exposable:
        return (f"{record.entity.category} entity (entity_category {record.entity.category}): kept back by rule; "
                "expose it if it is a real device function")
    return note_of(record).reason


def _additional_info(device: DeviceInfo | None, members: Sequence[Record]) -> dict[str, str]:
    info: dict[str, str] = {}
    if device is not None:
        for key, value in (("manufacturer", device.manufacturer), ("model", device.model),
                           ("swVersion", device.sw_version), ("hwVersion", device.hw_version)):
            if value:
                info[key] = value[:ADDITIONAL_INFO_MAX_CHARS]
    for record in members:
        if isinstance(record.entity, Climate):
            low, high = record.entity.limits_c()
            info["minTemperature"], info["maxTemperature"] = _number_text(low), _number_text(high)
    return info


def _address(device_id: str, members: Sequence[Record], planned: mapping.Endpoint) -> str:
    ordered = sorted(members, key=lambda r: r.key)
    shared = next((r.device for r in ordered if r.device is not None), None)
    address: dict[str, Any] = {"v": ADDRESS_VERSION}
    if shared is not None:
        address["device"] = device_data(shared)
    if planned.endpoint_id != device_id:
        address["of"] = device_id
    entities: list[dict[str, Any]] = []
    for record in ordered:
        part = record.entity.part
        config = record_config(record)
        if record.device != shared:
            config["device"] = device_data(record.device) if record.device is not None else None
        entity: dict[str, Any] = {"key": list(record.key), "config": config, "interfaces": sorted(
            part.interfaces & {c.interface for c in planned.capabilities}) if part else []}
        if record.via is not None:
            entity["via"] = record.via
        entities.append(entity)
    address["entities"] = entities
    return json.dumps(address, sort_keys=True, separators=(",", ":"))


def record_config(record: Record) -> dict[str, Any]:
    """The record's discovery config as the address keeps it (the device block aside): what its entity kept,
    and what the record read of the rest (name, unique_id, origin, availability), written back in full keys."""
    config = dict(record.entity.conf.data)
    if record.name is not None:
        config["name"] = record.name
    if record.unique_id is not None:
        config["unique_id"] = record.unique_id
    if record.origin:
        config["origin"] = {"name": record.origin}
    if record.availability is not None:
        entries = []
        for source in record.availability.sources:
            entry = {"topic": source.topic}
            if source.available != DEFAULT_AVAILABLE:
                entry["payload_available"] = source.available
            if source.not_available != DEFAULT_NOT_AVAILABLE:
                entry["payload_not_available"] = source.not_available
            if source.template is not None:
                entry["value_template"] = source.template
            entries.append(entry)
        config["availability"] = entries
        if record.availability.mode != DEFAULT_AVAILABILITY_MODE:
            config["availability_mode"] = record.availability.mode
    return config


def device_data(device: DeviceInfo) -> dict[str, Any]:
    """A device block in full keys, with only what `DeviceInfo.read` reads (it reads it back the same)."""
    out: dict[str, Any] = {}
    if device.identifiers:
        out["identifiers"] = list(device.identifiers)
    if device.connections:
        out["connections"] = [list(c) for c in device.connections]
    for key, value in (("name", device.name), ("suggested_area", device.suggested_area),
                       ("manufacturer", device.manufacturer), ("model", device.model),
                       ("sw_version", device.sw_version), ("hw_version", device.hw_version)):
        if value is not None:
            out[key] = value
    return out


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}".rstrip("0")
