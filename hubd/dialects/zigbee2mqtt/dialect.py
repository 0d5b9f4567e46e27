"""The zigbee2mqtt dialect: a zigbee2mqtt installation's devices, natively (docs/devices.md).

zigbee2mqtt publishes, under its base topic, the retained device list (`bridge/devices`), its own state
(`bridge/state`: `online`/`offline` or `{"state": ...}`), each device's whole state as one JSON object on
`<base>/<friendly_name>` (a name may hold `/`: topics are matched to the longest known name) and its
availability on `<base>/<friendly_name>/availability`; it takes commands on `<base>/<friendly_name>/set` and
reads on `/get`. The dialect keeps the device list (devices.py builds each device's endpoints, the
ieee_address is the endpointId, so renames keep it), announces what changed, reports the exported values of each
state (zigbee2mqtt republishes everything, linkquality and battery included, on every report: which of them
changed is the registry's to tell, as for every dialect), presses a declared doorbell on each publish of its
action, and marks every device unreachable while the bridge is offline.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from hubd.config.model import DoorbellConfig, Zigbee2MqttConfig
from hubd.devices.model import Origin, Route, StateSample, StateValue, format_time
from hubd.dialects import mapping
from hubd.dialects.base import (
    Announced,
    AvailabilityReceived,
    CommandRefused,
    ControlRequest,
    DeviceGone,
    DeviceInput,
    Dialect,
    InputRejected,
    Outgoing,
    PressReceived,
    Selection,
    StateReceived,
    Unexported,
)
from hubd.dialects.globs import DoorbellReport, Selected
from hubd.dialects.zigbee2mqtt.devices import (
    DIALECT,
    Address,
    Entry,
    Z2mDevice,
    device_from_routes,
    parse_address,
    read_entry,
)
from hubd.dialects.zigbee2mqtt.exposes import Feature
from hubd.dialects.zigbee2mqtt.features import command, lock_fault, part, read
from hubd.dialects.zigbee2mqtt.groups import MAX_GROUPS, GroupEntry, build_group, group_key, read_groups
from hubd.dialects.zigbee2mqtt.payloads import command_json, online_value, state_object
from hubd.untrusted.arrays import NotAnArray, array_items
from hubd.untrusted.numbers import ascii_int

log = logging.getLogger(__name__)

MAX_DEVICES = 2_000
# What arrives for devices before the first bridge/devices (retained availability, say) is kept and read then.
MAX_EARLY_MESSAGES = 1_000
MAX_EARLY_BYTES = 4_096
_AVAILABILITY = "availability"


class Zigbee2MqttDialect(Dialect):
    """Devices of one zigbee2mqtt installation, from its bridge/devices list and their state topics."""

    name = DIALECT

    def __init__(self, config: Zigbee2MqttConfig, doorbells: Sequence[DoorbellConfig], *,
                 max_devices: int = MAX_DEVICES) -> None:
        self._base = config.base_topic
        self._prefix = config.base_topic + "/"
        self._selected = Selected(config.include, config.exclude, ((d.device, d.event) for d in doorbells))
        self._max_devices = max_devices
        self._max_list_bytes = config.max_devices_bytes
        self._large = (f"{self._base}/bridge/devices", f"{self._base}/bridge/groups")
        self._devices: dict[str, Z2mDevice] = {}  # by ieee_address
        self._by_name: dict[str, str] = {}  # friendly_name → ieee_address
        self._announced: dict[str, tuple[str, Route, Origin] | None] = {}  # endpoint id → what it was (None: restored)
        # ieee → the last value of each property its features read: a feature may read several properties (a
        # colour and its color_mode), and a state need not carry them all (a report without occupancy, say)
        self._raw: dict[str, dict[str, Any]] = {}
        self._bridge_online: bool | None = None
        self._device_online: dict[str, bool] = {}  # ieee → what its availability topic said
        self._online_sent: dict[str, bool] = {}  # endpoint id → the availability last reported
        self._faulted: set[str] = set()  # endpoint ids of locks whose state says neither locked nor unlocked
        self._left_out: dict[str, tuple[str, str, tuple[str, ...]]] = {}  # friendly_name → ieee, why not, actions
        # The last device list read (zlib: a 16 MiB list is ~1 MiB, not held whole), read again by `reconfigure`.
        self._list: bytes | None = None
        self._listed = False  # a bridge/devices list was read
        self._entries: dict[str, tuple[bytes, Entry]] = {}  # ieee → its last entry's digest and reading
        self._early: dict[str, tuple[bytes, float]] = {}  # topic after the base → (payload, received at)
        # bridge/groups (groups.py): the last list read (None: none yet, the kept groups stay), the keys of the
        # groups among _devices, and the groups not exported (friendly_name → key, why not, no actions)
        self._group_list: list[GroupEntry] | None = None
        self._group_keys: set[str] = set()
        self._groups_left_out: dict[str, tuple[str, str, tuple[str, ...]]] = {}

    def subscriptions(self) -> list[tuple[str, int]]:
        """Everything under the base topic, at QoS 1."""
        return [(f"{self._base}/#", 1)]

    def large_topics(self) -> tuple[str, ...]:
        """bridge/devices and bridge/groups: every device's definition in one message, up to max_devices_bytes."""
        return self._large

    def restore(self, routes: Sequence[tuple[str, Route]]) -> None:
        """Know the devices of the kept routes (names, features), so states queued for hubd read before
        bridge/devices arrives; the first bridge/devices then decides which still exist."""
        grouped: dict[str, list[tuple[str, Address]]] = {}
        for device_id, route in routes:
            where = parse_address(route.address) if route.dialect == DIALECT else None
            if where is None:
                log.warning("%s: its kept zigbee2mqtt route is unreadable; it is updated when bridge/devices comes",
                            device_id)
                continue
            grouped.setdefault(where.ieee, []).append((device_id, where))
        for ieee, endpoints in grouped.items():
            if self._is_group_key(ieee):
                self._group_keys.add(ieee)
            if ieee not in self._devices:
                device = device_from_routes(ieee, sorted(endpoints, key=lambda e: e[0]))
                self._devices[ieee] = device
                self._by_name[device.name] = ieee
                self._announced.update({s.endpoint_id: None for s in device.slots})

    def claims(self, topic: str) -> bool:
        """Topics under the base topic."""
        return topic.startswith(self._prefix)

    def decode(self, topic: str, payload: bytes, received_at: float, retained: bool) -> list[DeviceInput]:
        """The inputs a message means; a bad one is an InputRejected naming the topic and the fix."""
        rest = topic[len(self._prefix):]
        if rest == "bridge/devices":
            return self._device_list(topic, payload)
        if rest == "bridge/groups":
            return self._groups(topic, payload)
        if rest == "bridge/state":
            online = online_value(topic, payload)
            if isinstance(online, InputRejected):
                return [online]
            if online is not None:
                self._bridge_online = online
            return self._availability_changes(self._devices)
        found = self._match(rest)
        if found is None:
            if not self._listed and not rest.startswith("bridge/") and len(payload) <= MAX_EARLY_BYTES \
                    and (rest in self._early or len(self._early) < MAX_EARLY_MESSAGES):
                self._early[rest] = (payload, received_at)  # perhaps a device of the list still to come
            return []  # other bridge topics, devices and groups not imported
        ieee, sub = found
        if sub == "":
            return self._state(self._devices[ieee], topic, payload, received_at, retained)
        if sub == _AVAILABILITY:
            online = online_value(topic, payload)
            if isinstance(online, InputRejected):
                return [online]
            if online is not None:
                self._device_online[ieee] = online
            return self._availability_changes([ieee])
        return []  # our own /set and /get, the legacy /action topic, attribute output: not states

    def encode_control(self, device_id: str, route: Route, request: ControlRequest) -> list[Outgoing]:
        """One publish to `<base>/<current friendly_name>/set` in zigbee2mqtt's form."""
        where, feature = self._feature(device_id, route, request.interface)
        body = command(feature, request)
        return [Outgoing(f"{self._prefix}{self._name_of(where)}/set", command_json(body))]

    def owns_command_topic(self, topic: str) -> bool:
        """Every topic under the base topic: its devices' `/set`, and the bridge's requests."""
        return topic.startswith(self._prefix)

    def guards(self, topic: str) -> str | None:
        """The bridge's topics, and the topics its devices report on: `<base>/<friendly_name>` (state) and its
        `/availability` (its own `/set` and `/get` are commands)."""
        if not topic.startswith(self._prefix):
            return None
        rest = topic[len(self._prefix):]
        if rest.startswith("bridge/"):
            return f"zigbee2mqtt's bridge topic ({self._prefix}bridge/)"
        found = self._match(rest)
        if found is not None and found[1] in ("", _AVAILABILITY):
            return f"where zigbee2mqtt device {self._devices[found[0]].name!r} reports"
        return None

    def imports_natively(self, announced: Announced) -> bool:
        """A device this installation announced through its own Home Assistant discovery (its origin or an
        identifier names zigbee2mqtt) and whose topics are under its base topic: imported here, not there (a
        second installation, on another base topic, is still imported through discovery)."""
        made_here = announced.origin.casefold() == "zigbee2mqtt" or \
            any(i.startswith("zigbee2mqtt_") for i in announced.identifiers)
        return made_here and any(topic.startswith(self._prefix) for topic in announced.topics)

    def unexported_devices(self) -> list[Unexported]:
        """Devices of the list that are not imported, with why (for the status page), by friendly name."""
        return [Unexported(mapping.endpoint_id(ieee), name, (reason,), actions)
                for name, (ieee, reason, actions) in sorted({**self._groups_left_out, **self._left_out}.items())]

    def reconfigure(self, selection: Selection) -> list[DeviceInput]:
        """New include/exclude and doorbells: the last device list read again with them (what it changes)."""
        self._selected = Selected(selection.include, selection.exclude, selection.doorbells)
        if self._list is None:
            return []  # nothing listed yet: the list is read with them when it comes
        self._entries = {}  # each entry's reading depends on the selection
        found = self._device_list(f"{self._prefix}bridge/devices", zlib.decompress(self._list))
        return [item for item in found if not isinstance(item, InputRejected)]  # said when the list came

    def doorbell_report(self) -> DoorbellReport:
        """The declarations, and each device one matched with the values its `action` announces."""
        return self._selected.report()

    def doorbell_events(self, device_id: str) -> tuple[str, ...]:
        """The values the device's `action` announces, for its own endpoint (its ieee_address: a doorbell is never
        a split-off part's)."""
        device = self._devices.get(device_id)
        return device.actions if device is not None and device.slots and device.slots[0].endpoint_id == device_id \
            else ()

    # bridge/devices.

    def _device_list(self, topic: str, payload: bytes) -> list[DeviceInput]:
        if len(payload) > self._max_list_bytes:
            return [InputRejected("config", f"{topic}: {len(payload)} bytes; hubd reads at most {self._max_list_bytes} "
                                            "(zigbee2mqtt.max_devices_bytes), so nothing changed")]
        if not payload.strip():
            return []  # the retained list cleared by hand: zigbee2mqtt publishes it again when it starts
        out: list[DeviceInput] = []
        devices: dict[str, Z2mDevice] = {}
        names: dict[str, str] = {}  # friendly_name → the ieee_address that has it
        left_out: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        entries: dict[str, tuple[bytes, Entry]] = {}
        count = objects = 0
        try:
            # Element by element: the cap is checked before more than cap + 1 entries are built, and each entry's
            # JSON is dropped once read. No check_nesting: scanning megabytes costs more than parsing them; the C
            # parser's RecursionError stops a deep one, and nothing after it descends further than an expose's few
            # levels.
            for raw in array_items(payload):
                count += 1
                if count > self._max_devices:
                    return [InputRejected("config", f"{topic}: more than {self._max_devices} devices; hubd takes at "
                                                    f"most {self._max_devices}, so nothing changed")]
                objects += isinstance(raw, dict)
                self._read_entry(topic, raw, count - 1, entries, (devices, names, left_out), out)
        except NotAnArray as err:
            return [InputRejected("config", f"{topic}: a {err.kind}, not the list of devices zigbee2mqtt publishes; "
                                            "nothing changed")]
        except (ValueError, RecursionError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return [InputRejected("config", f"{topic}: not the JSON device list zigbee2mqtt publishes "
                                            f"({str(err)[:120]}); nothing changed")]
        if count and not objects:
            return [InputRejected("config", f"{topic}: a list of no device objects, not the list of devices "
                                            "zigbee2mqtt publishes; nothing changed")]
        self._list = zlib.compress(payload, 1)
        self._entries = entries
        self._left_out = left_out
        self._listed = True
        out += self._apply(devices)
        early, self._early = self._early, {}
        for rest, (message, at) in early.items():
            if not rest.endswith("/" + _AVAILABILITY) and self._match(rest) is not None:
                out += self.decode(self._prefix + rest, message, at, True)  # as retained: it presses nothing
        return out

    def _read_entry(self, topic: str, raw: Any, index: int, entries: dict[str, tuple[bytes, Entry]],
                    into: tuple[dict[str, Z2mDevice], dict[str, str], dict[str, tuple[str, str, tuple[str, ...]]]],
                    out: list[DeviceInput]) -> None:
        """Read one entry of the list into (devices, names, left out), its problems into `out`."""
        devices, names, left_out = into
        entry = self._entry(raw, index, entries)
        out += [InputRejected("config", f"{topic}: {p}; fix it in zigbee2mqtt") for p in entry.problems]
        named = names.get(entry.device.name) if entry.device is not None else None
        if entry.ieee is not None and entry.ieee in devices:
            out.append(InputRejected("config", f"{topic}: entry {index}: ieee_address {entry.ieee} is listed twice; "
                                               "hubd keeps the first"))
        elif named is not None and entry.device is not None:
            out.append(InputRejected("config", f"{topic}: entry {index}: friendly_name {entry.device.name!r} of "
                                               f"{entry.ieee} is also {named}'s, so their states share one topic; "
                                               f"hubd keeps {named}: rename one of them in zigbee2mqtt"))
        elif entry.device is not None:
            devices[entry.ieee or ""] = entry.device
            names[entry.device.name] = entry.ieee or ""
        elif entry.name is None and entry.ieee in self._devices:  # malformed now: keep what it was
            devices[entry.ieee or ""] = self._devices[entry.ieee or ""]
        elif entry.name is not None:
            left_out[entry.name] = (entry.ieee or "", entry.reason, entry.actions)

    def _entry(self, raw: Any, index: int, entries: dict[str, tuple[bytes, Entry]]) -> Entry:
        """One entry read, or the same reading as last time when the entry is unchanged (a digest, not a copy)."""
        ieee = raw.get("ieee_address") if isinstance(raw, dict) else None
        digest = hashlib.blake2b(json.dumps(raw, separators=(",", ":")).encode(), digest_size=16).digest() \
            if isinstance(ieee, str) else b""
        cached = self._entries.get(ieee) if isinstance(ieee, str) else None
        if cached is not None and cached[0] == digest and cached[1].problems == ():
            entry = cached[1]
        else:
            entry = read_entry(raw, index, self._selected)
        if isinstance(ieee, str):
            entries[ieee] = (digest, entry)
        return entry

    def _apply(self, devices: dict[str, Z2mDevice]) -> list[DeviceInput]:
        devices = self._with_groups(devices)
        out: list[DeviceInput] = []
        self._devices = devices
        self._by_name = {d.name: ieee for ieee, d in devices.items()}
        for rest, (message, _) in self._early.items():
            found = self._match(rest)
            online = online_value(rest, message) if found is not None and found[1] == _AVAILABILITY else None
            if isinstance(online, bool) and found is not None:
                self._device_online[found[0]] = online
        present: set[str] = set()
        for ieee in sorted(devices):
            device = devices[ieee]
            present.update(s.endpoint_id for s in device.slots)
            for item in device.configs:
                seen = (item.config.canonical(), item.route, item.origin)
                if self._announced.get(item.device_id) != seen:
                    self._announced[item.device_id] = seen
                    out.append(item)
        for gone in sorted(set(self._announced) - present):
            del self._announced[gone]
            self._online_sent.pop(gone, None)
            self._faulted.discard(gone)
            out.append(DeviceGone(gone))
        for table in (self._raw, self._device_online):
            for ieee in [i for i in table if i not in devices]:
                del table[ieee]
        return out + self._availability_changes(devices)

    # bridge/groups (groups.py builds each group's endpoint from its members).

    def _groups(self, topic: str, payload: bytes) -> list[DeviceInput]:
        if len(payload) > self._max_list_bytes:
            return [InputRejected("config", f"{topic}: {len(payload)} bytes; hubd reads at most {self._max_list_bytes} "
                                            "(zigbee2mqtt.max_devices_bytes), so nothing changed")]
        if not payload.strip():
            return []  # the retained list cleared by hand: zigbee2mqtt publishes it again when it starts
        try:  # element by element, as the device list: no more than MAX_GROUPS + 1 groups are ever built
            data: Any = list(itertools.islice(array_items(payload), MAX_GROUPS + 1))
        except NotAnArray as err:
            return [InputRejected("config", f"{topic}: a {err.kind}, not the list of groups zigbee2mqtt publishes; "
                                            "nothing changed")]
        except (ValueError, RecursionError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return [InputRejected("config", f"{topic}: not the JSON group list zigbee2mqtt publishes "
                                            f"({str(err)[:120]}); nothing changed")]
        entries, problems = read_groups(data)
        out: list[DeviceInput] = [InputRejected("config", f"{topic}: {p}") for p in problems]
        self._group_list = entries
        if self._listed:  # else the groups are built when the device list comes
            out += self._apply({k: d for k, d in self._devices.items() if k not in self._group_keys})
        return out

    def _with_groups(self, devices: dict[str, Z2mDevice]) -> dict[str, Z2mDevice]:
        """The devices, each group of the last bridge/groups added (built from these members); before any
        bridge/groups, the groups kept from the last run stay as they were."""
        devices = {k: d for k, d in devices.items() if k not in self._group_keys}
        if self._group_list is None:
            return {**devices, **{k: self._devices[k] for k in self._group_keys if k in self._devices}}
        keys: set[str] = set()
        left_out: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        out = dict(devices)
        names = {d.name for d in devices.values()}
        for entry in self._group_list:
            key = group_key(self._base, entry.id)
            if key in keys or entry.name in names:
                continue  # zigbee2mqtt keeps group ids and names unique, devices' names included
            built = build_group(key, entry, devices, self._selected)
            if isinstance(built, str):
                left_out[entry.name] = (key, built, ())
                continue
            keys.add(key)
            out[key] = built
        self._group_keys, self._groups_left_out = keys, left_out
        return out

    def _is_group_key(self, key: str) -> bool:
        number = ascii_int(key.rpartition("-group-")[2].split("-")[0])
        return number is not None and group_key(self._base, number) == key

    # States, availability, presses.

    def _state(self, device: Z2mDevice, topic: str, payload: bytes, received_at: float,
               retained: bool) -> list[DeviceInput]:
        data = state_object(topic, payload)
        if not isinstance(data, dict):
            return [] if data is None else [data]
        raw = self._raw.setdefault(device.ieee, {})
        for prop in device.reads:  # a few properties, of the ten or more zigbee2mqtt publishes each time
            if prop in data:
                raw[prop] = data[prop]
        when = format_time(received_at)
        out: list[DeviceInput] = []
        problems: dict[str, str] = {}
        faults_changed = False
        for slot in device.slots:
            values: dict[str, StateValue] = {}
            faults = []
            for feature in slot.features:
                found, bad = read(feature, raw)
                values.update((i, v) for i, v in found.items() if i in slot.interfaces)
                problems.update(bad)
                if (fault := lock_fault(feature, raw)) is not None:
                    faults.append(fault)
            if faults:  # never reported locked; unreachable until it says locked or unlocked again
                values["Switch"] = "Off"
                out.append(InputRejected("state", f"{topic}: {device.name} ({slot.endpoint_id}): "
                                                  f"{'; '.join(faults)}: never reported locked, and unreachable "
                                                  "until it reports locked or unlocked"))
            if bool(faults) != (slot.endpoint_id in self._faulted):
                (self._faulted.add if faults else self._faulted.discard)(slot.endpoint_id)
                faults_changed = True
            if values:
                out.append(StateReceived(slot.endpoint_id, tuple(StateSample(i, v, when) for i, v in values.items())))
        for prop, why in problems.items():
            raw.pop(prop, None)  # reported once, not again with every later state
            out.append(InputRejected("state", f"{topic}: {why}; hubd left it out"))
        if faults_changed:
            out += self._availability_changes([device.ieee])
        action = data.get("action")
        if device.doorbell is not None and not retained and isinstance(action, str) and action \
                and action.casefold() == device.doorbell[1].casefold():
            out.append(PressReceived(device.doorbell[0], when))
        return out

    def _availability_changes(self, ieees: Iterable[str]) -> list[DeviceInput]:
        out: list[DeviceInput] = []
        for ieee in sorted(ieees):
            device = self._devices.get(ieee)
            online = self._online(ieee)
            if device is None:
                continue
            for slot in device.slots:
                # A lock's fault (not fully locked, jammed) makes it unreachable as its availability would; gone,
                # the lock is online again unless its availability says otherwise.
                now = False if slot.endpoint_id in self._faulted else online
                if now is None and self._online_sent.get(slot.endpoint_id) is False:
                    now = True
                if now is not None and self._online_sent.get(slot.endpoint_id) is not now:
                    self._online_sent[slot.endpoint_id] = now
                    out.append(AvailabilityReceived(slot.endpoint_id, now))
        return out

    def _online(self, ieee: str) -> bool | None:
        """Offline while the bridge is; else what its availability said, or online with the bridge."""
        if self._bridge_online is False:
            return False
        return self._device_online.get(ieee, self._bridge_online)

    # Helpers.

    def _match(self, rest: str) -> tuple[str, str] | None:
        """(ieee, subtopic) of the longest friendly name the topic starts with."""
        candidate = rest
        while candidate:
            ieee = self._by_name.get(candidate)
            if ieee is not None:
                return ieee, rest[len(candidate) + 1:]
            cut = candidate.rfind("/")
            if cut < 0:
                return None
            candidate = candidate[:cut]
        return None

    def _address(self, device_id: str, route: Route) -> Address:
        where = parse_address(route.address) if route.dialect == DIALECT else None
        if where is None:
            raise CommandRefused(f"{device_id}: its route is not a zigbee2mqtt address; wait for zigbee2mqtt's "
                                 "bridge/devices to arrive again")
        return where

    def _feature(self, device_id: str, route: Route, interface: str) -> tuple[Address, Feature]:
        where = self._address(device_id, route)
        for feature in where.features:
            found = part(feature)
            if found is not None and interface in found.interfaces:
                return where, feature
        raise CommandRefused(f"{device_id} has no zigbee2mqtt feature that takes {interface}")

    def _name_of(self, where: Address) -> str:
        """The device's friendly name now (it follows renames), else the one in its route."""
        device = self._devices.get(where.ieee)
        name = device.name if device is not None else where.name
        if not name or "+" in name or "#" in name:
            raise CommandRefused(f"{where.ieee}: friendly name {name!r} is no topic hubd can publish to")
        return name
