"""The Home Assistant MQTT discovery dialect: every device that announces itself that way.

ESPHome, zigbee2mqtt (`homeassistant: true`), Tasmota, OpenMQTTGateway and others publish retained configs
on `<prefix>/<component>/[<node_id>/]<object_id>/config` (or one device-based config with `cmps`). The
dialect reads them into records (discovery.py reads them, entities.py and friends make
entities); its book (book.py) groups entities that share identifiers or connections into devices
(devices.py), announces each device's whole config when it changes, and reads the entities'
state, availability and event messages. It learns its entities' state and availability topics from
their configs: the bridge subscribes to `<prefix>/#` once and then to whatever `pending_subscriptions()`
returns after each decode. After a restart, `restore` rebuilds the entities from the configs their devices'
Route addresses keep, so that the states queued for hubd's session (delivered before the retained configs)
are read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hubd.config.model import DoorbellConfig, HomeAssistantConfig
from hubd.devices.model import Route
from hubd.dialects import mapping
from hubd.dialects.base import (
    MAINTENANCE_RULE,
    Announced,
    CommandRefused,
    ControlRequest,
    DeviceGone,
    DeviceInput,
    Dialect,
    InputRejected,
    Outgoing,
    PublishRules,
    Selection,
    Unexported,
)
from hubd.dialects.globs import DoorbellReport, Selected
from hubd.dialects.homeassistant.address import read_address
from hubd.dialects.homeassistant.book import EntityBook
from hubd.dialects.homeassistant.climate import Climate, as_sent, room_readings
from hubd.dialects.homeassistant.cover import Cover
from hubd.dialects.homeassistant.devices import (
    DIALECT,
    Record,
    device_id_of,
    kept_back_note,
    names_of,
    split_off_id,
)
from hubd.dialects.homeassistant.discovery import (
    COMPONENTS,
    DEVICE_COMPONENT,
    Availability,
    Conf,
    ConfigProblem,
    DeviceInfo,
    DiscoveryTopic,
    EntityConfig,
    parse_topic,
    read_configs,
)
from hubd.dialects.homeassistant.entities import Entity
from hubd.dialects.homeassistant.fan import Fan
from hubd.dialects.homeassistant.humidifier import Humidifier
from hubd.dialects.homeassistant.lights import Light
from hubd.dialects.homeassistant.scene import Scene
from hubd.dialects.homeassistant.sensors import BinarySensor, Event, Lock, Sensor, Trigger
from hubd.dialects.homeassistant.switch import Siren, Switch
from hubd.dialects.homeassistant.templates import Payload, TemplateError, Templates
from hubd.dialects.homeassistant.vacuum import Vacuum
from hubd.dialects.homeassistant.valve import Valve
from hubd.dialects.homeassistant.water_heater import WaterHeater
from hubd.dialects.payload import MAX_PAYLOAD_BYTES, json_object
from hubd.dialects.topics import CommandTopics
from hubd.dialects.wildcards import MAX_FILTERS, is_wildcard
from hubd.errors import DeviceMessageInvalid

log = logging.getLogger(__name__)

MAX_ENTITIES = 20_000
MAX_REFUSED = 1_000  # refused configs listed on the devices and status pages, the newest
# Config keys hubd never reads (presentation, Home Assistant's own registry, options of features hubd does not
# map): neither kept in memory nor written into the Route address. A key an entity starts to read must leave
# these (the restore tests compare every fixture's routes and states before and after a restart).
_UNUSED = frozenset({"icon", "entity_picture", "options", "enabled_by_default",
                     "default_entity_id", "object_id", "group", "state_class", "suggested_display_precision",
                     "force_update", "expire_after", "encoding", "optimistic", "platform"})
_UNUSED_PREFIXES = ("json_attributes_", "effect", "preset_mode", "fan_mode", "swing_mode", "swing_horizontal_mode",
                    "action_", "current_temperature_", "current_humidity_", "aux_", "white_",
                    "rgbw_", "rgbww_", "flash", "transition", "tilt_", "oscillation_", "direction_", "last_reset_")
# Keys the record reads when it is made (device_endpoints writes them back into the address from the record).
_RECORD_KEYS = frozenset({"device", "origin", "name", "unique_id", "availability", "availability_topic",
                          "availability_template", "availability_mode", "payload_available",
                          "payload_not_available"})
_NOT_KEPT = _UNUSED | _RECORD_KEYS  # what an entity's conf leaves out once built (with _UNUSED_PREFIXES)
_CLASSES: dict[str, type[Entity]] = {
    "sensor": Sensor, "binary_sensor": BinarySensor, "lock": Lock, "event": Event, "device_automation": Trigger,
    "switch": Switch, "scene": Scene, "cover": Cover, "climate": Climate, "fan": Fan, "light": Light, "siren": Siren,
    "valve": Valve, "humidifier": Humidifier, "water_heater": WaterHeater, "vacuum": Vacuum,
}


class HomeAssistantDialect(Dialect):
    """Devices announced with Home Assistant MQTT discovery.

    Subscribe to `subscriptions()` on every connection, and after each `decode` to `pending_subscriptions()`
    (the state and availability topics of entities just discovered, wildcard filters as given, never under the
    prefix). Every config it refuses, for whatever reason, is listed by `unexported_devices` with the reason and the
    discovery topic it came on, until a config it takes (or an empty one) comes on that topic.
    """

    name = DIALECT

    def __init__(self, config: HomeAssistantConfig, doorbells: Sequence[DoorbellConfig], *,
                 natives: Sequence[Dialect] = (), topics: CommandTopics | None = None,
                 max_entities: int = MAX_ENTITIES) -> None:
        self.templates = Templates()
        self._prefix = config.discovery_prefix
        self._selected = Selected(config.include, config.exclude, ((d.device, d.event) for d in doorbells))
        self._natives = tuple(natives)  # the other enabled dialects: a device one of them imports is left to it
        self._generation: tuple[int, ...] = ()  # theirs, when the records were last checked against them
        self._gone: list[DeviceInput] = []  # devices of kept routes now left to a native import
        # Where its entities may publish (hubd.dialects.topics); bound to every enabled dialect by `enabled.py`.
        self._command_topics = topics if topics is not None else CommandTopics(
            PublishRules(reserved=(f"{config.discovery_prefix}/",)), [*natives, self])
        self._max_entities = max_entities
        self._device_configs: dict[str, set[tuple[str, str]]] = {}  # device-based config topic → its entities
        # Configs refused (never kept as records), for the devices and status pages: (discovery topic, entity's
        # discovery id, "" for the whole message) → what it lists; the newest MAX_REFUSED.
        self._refused: dict[tuple[str, str], Unexported] = {}
        self._refused_on: dict[str, set[str]] = {}  # discovery topic → the entities refused on it (keys of _refused)
        self._book = EntityBook(self._prefix, self.templates, self._selected.doorbells)
        self._book.seen = self._selected.record

    def subscriptions(self) -> list[tuple[str, int]]:
        """`<prefix>/#` and every state/availability topic known so far, at QoS 1."""
        return [(f"{self._prefix}/#", 1), *((t, 1) for t in self._book.subscribed())]

    def announcements(self) -> list[Outgoing]:
        """Home Assistant's birth message (`<prefix>/status` `online`, not retained): on it ESPHome, Tasmota and
        zigbee2mqtt announce their devices and send their states again, so a state sent before hubd had
        subscribed to its topic (a device just discovered) is not missed for long. hubd sends no `offline`:
        a Home Assistant on the same broker would be taken for gone."""
        return [Outgoing(f"{self._prefix}/status", b"online", qos=1, retain=False)]

    def pending_subscriptions(self) -> list[tuple[str, int]]:
        """The topics needed since the last call (or `subscriptions()`); subscribe to them after a decode."""
        return [(t, 1) for t in self._book.take_pending()]

    def pending_inputs(self) -> list[DeviceInput]:
        """Devices a native import took over since the last call: gone here (their discovery entities forgotten),
        so that the native import's config for the device finds it free."""
        out, self._gone = self._gone, []
        generation = tuple(native.native_generation() for native in self._natives)
        if generation == self._generation:
            return out
        self._generation = generation
        changes: dict[tuple[str, str], Record | None] = {
            key: None for key, record in self._book.records.items()
            if self._left_to_native(dict(record.entity.conf.data), record.origin, record.device)}
        return out + (self._book.apply(changes) if changes else [])

    def pending_unsubscriptions(self) -> list[str]:
        """The state and availability topics no entity reads any more, since the last call."""
        return self._book.take_freed()

    def guards(self, topic: str) -> str | None:
        """The discovery prefix, and every topic an entity's state or availability is read from (wildcard filters
        matched)."""
        if topic.startswith(self._prefix + "/"):
            return f"under the discovery prefix {self._prefix}/"
        reader = self._book.reader(topic)
        if reader is None:
            return None
        return f"where {reader.label} of {reader.endpoint or 'a discovered device'} is read from"

    def claims(self, topic: str) -> bool:
        """Discovery topics, and the topics of known entities."""
        return topic.startswith(self._prefix + "/") or self._book.reads(topic)

    def decode(self, topic: str, payload: bytes, received_at: float, retained: bool) -> list[DeviceInput]:
        """The inputs a message means; a bad one is an InputRejected naming the entity and the fix."""
        if topic.startswith(self._prefix + "/"):
            return self._discovery(topic, payload)
        if len(payload) > MAX_PAYLOAD_BYTES:
            return [InputRejected("state", f"{topic}: {len(payload)} bytes; at most {MAX_PAYLOAD_BYTES}")]
        return self._book.read(topic, Payload(payload.decode("utf-8", errors="replace")), received_at, retained)

    def encode_control(self, device_id: str, route: Route, request: ControlRequest) -> list[Outgoing]:
        """The publishes to the owning entity's command topics, from the Route address alone (version 1 or 2)."""
        try:
            if route.dialect != DIALECT:
                raise ValueError(route.dialect)
            address = read_address(route.address)
        except ValueError:
            raise CommandRefused(f"{device_id}: its route is not a Home Assistant discovery address; wait for its "
                                 "discovery config to arrive again") from None
        for spec in address.entities:
            if request.interface in spec.interfaces:
                try:
                    entity = self._entity(spec.component, (spec.discovery_id or "").split(" ")[-1],
                                          Conf(spec.config))
                except ConfigProblem as err:
                    raise CommandRefused(f"{spec.label}: {err}") from None
                return entity.command(request)
        raise CommandRefused(f"{device_id} has no entity that takes {request.interface}")

    def restore(self, routes: Sequence[tuple[str, Route]]) -> None:
        """Prime the dialect from its devices' routes (device_id, route), before the first message.

        Each entity of a version-2 address becomes a record as if its discovery config had come, so that the
        states and availability queued for hubd's session, which arrive before the retained configs, are read
        (and their topics are in `subscriptions()`). Nothing is reported: the registry has these devices. When
        the configs come again unchanged, the devices come out the same and nothing new is reported; an
        endpoint the restore cannot reproduce as the route says is announced again then. A restored entity
        whose config never comes again stays until an empty config removes it, as in Home Assistant. A route
        of another dialect, of version 1 or damaged is passed over (logged): its device waits for discovery.
        """
        self.templates.prepare()  # the render process, started now: ready before the first message
        changes: dict[tuple[str, str], Record] = {}
        kept: dict[str, Route] = {}
        left: set[str] = set()
        for device_id, route in routes:
            if route.dialect != DIALECT:
                continue
            try:
                address = read_address(route.address)
            except ValueError as err:
                log.warning("%s: its Home Assistant route cannot be restored (%s); it waits for discovery",
                            device_id, err)
                continue
            if address.version == 1:
                continue  # written before hubd kept configs in it: commands work, states wait for discovery
            kept[device_id] = route
            for spec in address.entities:
                if spec.discovery_id is None:
                    continue
                node_id, _, object_id = spec.discovery_id.rpartition(" ")
                key = (spec.component, spec.discovery_id)
                if key in self._book.records or key in changes:
                    continue
                if len(self._book.records) + len(changes) >= self._max_entities:
                    log.warning("%s: more than %d entities; %s is not restored", device_id, self._max_entities,
                                spec.label)
                    continue
                try:
                    record = self._record(EntityConfig(DiscoveryTopic(spec.component, node_id or None, object_id),
                                                       dict(spec.config)), spec.via)
                except (ConfigProblem, TypeError, ValueError, AttributeError) as err:
                    log.warning("%s: %s cannot be restored (%s); it waits for its discovery config", device_id,
                                spec.label, err)
                    continue
                if record is None:  # left to a native import now: the device is that import's
                    if device_id not in left:
                        left.add(device_id)
                        self._gone.append(DeviceGone(device_id))
                    continue
                record.pinned, record.restored = address.device_id or device_id, device_id
                changes[key] = record
                if spec.via is not None:
                    self._device_configs.setdefault(f"{self._prefix}/{DEVICE_COMPONENT}/{spec.via}/config",
                                                    set()).add(key)
        known = set(self._book.endpoints)
        self._book.apply(changes)
        for endpoint_id in set(self._book.endpoints) - known:
            endpoint, stored = self._book.endpoints[endpoint_id], kept.get(endpoint_id)
            if stored != endpoint.route:  # not as the registry has it: announced again when its configs come
                self._book.endpoints[endpoint_id] = replace(endpoint, route=stored or Route(DIALECT, ""))

    def close(self) -> None:
        """Stop the render process."""
        self.templates.close()

    def unexported_devices(self) -> list[Unexported]:
        """Devices none of whose entities is exported, with each entity's reason (for the status page), by name; of a
        device that is exported, each entity kept back by rule (a diagnostic or config entity the owner may expose, a
        maintenance action) as the split-off endpoint it would become."""
        groups: dict[str, list[Record]] = {}
        for record in self._book.records.values():
            device = record.device
            groups.setdefault((device.identifiers or device.connections[0])[0] if device else record.label,
                              []).append(record)
        out: list[Unexported] = []
        for records in groups.values():
            if all(r.endpoint is None for r in records):
                first = records[0]
                name = (first.device.name if first.device else None) or first.unique_id or first.label
                exposable = any(r.exposable for r in records)
                maintenance = not exposable and any(r.entity.setting and r.included for r in records) and all(
                    r.maintenance for r in records if r.entity.setting and r.included)
                out.append(Unexported(device_id_of(records), name, tuple(
                    f"{r.label}: {kept_back_note(r)}" for r in records),
                    _press_events(records), exposable, MAINTENANCE_RULE if maintenance else None,
                    self._config_topic(first)))
            else:
                out += self._kept_back_entities(records)
        # A refused config joins its device's entry (two refused entities of one device: one entry, both reasons); one
        # of a device that is exported is listed as the endpoint it would split off as, `<device id>-<object_id>`.
        entries = {u.endpoint_id: u for u in out}
        for (_, entity), item in self._refused.items():
            if item.endpoint_id in self._book.endpoints:
                item = replace(item, endpoint_id=f"{item.endpoint_id}-{entity.split(' ')[-1] or 'config'}")
                if item.endpoint_id in self._book.endpoints:
                    continue
            known = entries.get(item.endpoint_id)
            entries[item.endpoint_id] = item if known is None else replace(
                known, reasons=known.reasons + item.reasons,
                topic=known.topic if item.topic in known.topic.split(", ") else f"{known.topic}, {item.topic}")
        return sorted(entries.values(), key=lambda u: (u.name, u.endpoint_id))

    def _kept_back_entities(self, records: list[Record]) -> list[Unexported]:
        """The entities of an exported device that hubd keeps back by rule, each as the split-off endpoint it would
        become (`<device id>-<object_id>`): one the owner may expose (a diagnostic or config entity with a platform
        interface), or a maintenance action, with the rule no owner lifts."""
        out: list[Unexported] = []
        first = records[0]
        device = (first.device.name if first.device else None) or device_id_of(records)
        for record in sorted(records, key=lambda r: r.key):
            if record.endpoint is not None or not record.included or not (record.exposable or record.maintenance):
                continue
            out.append(Unexported(split_off_id(records, record), f"{device} {record.name or record.object_id}",
                                  (f"{record.label}: {kept_back_note(record)}",), (), record.exposable,
                                  None if record.exposable else MAINTENANCE_RULE, self._config_topic(record)))
        return out

    def _config_topic(self, record: Record) -> str:
        """The discovery topic the record's config came on."""
        if record.via is not None:
            return f"{self._prefix}/{DEVICE_COMPONENT}/{record.via}/config"
        node_id, _, object_id = record.key[1].rpartition(" ")
        return f"{self._prefix}/{record.key[0]}/{node_id + '/' if node_id else ''}{object_id}/config"

    def _refuse(self, topic: str, entity: str, reason: str, *, record: Record | None = None,
                data: Any = None) -> None:
        """List a refused config as not exported (the newest MAX_REFUSED): `entity` the discovery id of the entity
        refused ("" for the whole message), with what is known of its device (the record, else the raw config)."""
        self._forget_refused(topic, entity)
        if len(self._refused) >= MAX_REFUSED:
            self._forget_refused(*next(iter(self._refused)))
        self._refused_on.setdefault(topic, set()).add(entity)
        if record is not None:
            name = (record.device.name if record.device else None) or record.unique_id or record.label
            self._refused[(topic, entity)] = Unexported(device_id_of([record]), name, (f"{record.label}: {reason}",),
                                                        topic=topic)
            return
        endpoint_id, name = _refused_device(topic, self._prefix, data)
        self._refused[(topic, entity)] = Unexported(endpoint_id, name, (reason,), topic=topic)

    def _accepted(self, topic: str, entity: str | None = None) -> None:
        """A config came on `topic` that hubd takes: its refusals are no longer listed (`entity` None: every one of
        the topic's, as for an empty config; else that entity's and the whole message's)."""
        for refused in list(self._refused_on.get(topic, ())):
            if entity is None or refused in ("", entity):
                self._forget_refused(topic, refused)

    def _forget_refused(self, topic: str, entity: str) -> None:
        self._refused.pop((topic, entity), None)
        entities = self._refused_on.get(topic)
        if entities is not None:
            entities.discard(entity)
            if not entities:
                del self._refused_on[topic]

    def reconfigure(self, selection: Selection) -> list[DeviceInput]:
        """New include/exclude and doorbells: every entity selected again, its device announced again or gone
        where that changes it."""
        self._selected = Selected(selection.include, selection.exclude, selection.doorbells)
        self._book.declare(self._selected.doorbells)
        self._book.exposed = selection.exposed
        self._book.seen = self._selected.record
        changed: dict[tuple[str, str], Record | None] = {}
        for key, record in self._book.records.items():
            included = self._selected.included(names_of(record))
            # Worked out again: the devices of entities selected differently, of those a press could ring, and of
            # those kept back by a rule the owner may lift (exposed or kept back again).
            if included != record.included or record.entity.press_events() is not None or record.exposable:
                record.included = included
                changed[key] = record
        return self._book.apply(changed)

    def doorbell_report(self) -> DoorbellReport:
        """The declarations, and each device one matched with the events its entities announce."""
        return self._selected.report()

    def doorbell_events(self, device_id: str) -> tuple[str, ...]:
        """The events the device's entities announce (event types, triggers' subtypes and payloads)."""
        endpoint = self._book.endpoints.get(device_id)
        if endpoint is None or not endpoint.keys:
            return ()
        return _press_events([self._book.records[k] for k in self._book.device_of(endpoint.keys[0])])

    # Discovery configs.

    def _discovery(self, topic: str, payload: bytes) -> list[DeviceInput]:
        """A discovery message's inputs. Every refusal, whatever its reason, is an InputRejected (the status page's
        problems) and an entry of `unexported_devices` with its topic (`_refuse`): none is only logged."""
        where = parse_topic(self._prefix, topic)
        if where is None:
            if topic.endswith("/config"):
                return self._refused_message(topic, payload, "not <prefix>/<component>/[<node_id>/]<object_id>/config "
                                                             "with ids of A-Za-z0-9_-; fix the device's discovery "
                                                             "topic")
            return []  # Home Assistant's own status topic and the like
        if where.component not in COMPONENTS and where.component != DEVICE_COMPONENT:
            return self._refused_message(topic, payload, f"unknown component {where.component!r}; Home Assistant's "
                                                         f"are {', '.join(sorted(COMPONENTS))}")
        try:
            configs = [c for entity in read_configs(where, payload) for c in (entity, *room_readings(entity))]
        except ConfigProblem as err:
            known = self._device_configs.get(topic) if where.component == DEVICE_COMPONENT else \
                where.key in self._book.records
            if known:
                return [InputRejected("config", f"{topic}: {err}")]  # its entities stay as they were
            return self._refused_message(topic, payload, str(err))
        if not payload.strip():
            self._accepted(topic)
        announced = self._device_configs.setdefault(topic, set()) if where.component == DEVICE_COMPONENT else None
        via = f"{where.node_id}/{where.object_id}" if where.node_id else where.object_id
        if announced is not None and not payload.strip():
            configs = [EntityConfig(DiscoveryTopic(k[0], None, k[1]), None) for k in sorted(announced)]
        changes: dict[tuple[str, str], Record | None] = {}
        out: list[DeviceInput] = []
        for entity_config in configs:
            key = entity_config.topic.key
            record: Record | None = None
            label = f"{key[0]}.{entity_config.topic.object_id}"
            try:
                record = None if entity_config.config is None else \
                    self._record(entity_config, via if announced is not None else None)
                if record is not None:
                    self._check_command_topics(record, changes)
                    self._check_filters(record, changes)
            except ConfigProblem as err:  # the entity stays as it was: a bad update changes nothing
                reason = as_sent(str(err), entity_config.sent_as)
                out.append(InputRejected("config", f"{topic} ({label}): {reason}"))
                if key not in self._book.records:
                    self._refuse(topic, key[1], reason if record is not None else f"{label}: {reason}",
                                 record=record, data=entity_config.config)
                continue
            self._accepted(topic, key[1])
            if record is None and key not in self._book.records:
                continue
            if record is not None and key not in self._book.records and len(self._book.records) + len(changes) >= \
                    self._max_entities:
                reason = f"more than {self._max_entities} entities; leave some out with homeassistant.exclude"
                out.append(InputRejected("config", f"{topic}: {reason}"))
                self._refuse(topic, key[1], reason, record=record)
                continue
            changes[key] = record
            if announced is not None:
                (announced.add if record is not None else announced.discard)(key)
        if announced is not None and not announced:
            del self._device_configs[topic]
        return out + self._book.apply(changes)

    def _refused_message(self, topic: str, payload: bytes, reason: str) -> list[DeviceInput]:
        """A whole discovery message refused (its topic, its JSON, its device-based form): listed, and a problem."""
        self._accepted(topic)
        if payload.strip():
            self._refuse(topic, "", reason, data=_json_or_none(payload))
        return [InputRejected("config", f"{topic}: {reason}")]

    def _check_filters(self, record: Record, changes: Mapping[tuple[str, str], Record | None]) -> None:
        """ConfigProblem when the entity's wildcard read filters would take the dialect past MAX_FILTERS distinct
        ones (a filter another entity reads already costs nothing: one subscription, one index entry)."""
        new = {t for t in _read_topics(record) if is_wildcard(t) and not self._book.has_filter(t)}
        if not new:
            return
        pending = {t for other in changes.values() if other is not None for t in _read_topics(other)
                   if is_wildcard(t) and not self._book.has_filter(t)}
        if self._book.filters() + len(new | pending) > MAX_FILTERS:
            raise ConfigProblem(f"{', '.join(sorted(new))}: more than {MAX_FILTERS} wildcard topic filters in all; "
                                "give the device's exact state topic")

    def _record(self, entity_config: EntityConfig, via: str | None = None) -> Record | None:
        """The record of one entity config; None for one left to the native zigbee2mqtt import.

        `via`: the `[node_id/]object_id` of the device-based config it came in, if it did.
        """
        data, where = entity_config.config or {}, entity_config.topic
        conf = Conf(data)
        device = DeviceInfo.read(data.get("device"))
        origin = data.get("origin")
        origin_name = origin.get("name") if isinstance(origin, dict) else None
        origin_name = origin_name if isinstance(origin_name, str) else ""
        if self._natives and self._left_to_native(data, origin_name, device):
            return None
        entity = self._entity(where.component, where.object_id, conf)
        entity.topics()  # checks them now: a topic hubd cannot subscribe to is the config's problem
        entity.conf = Conf({k: v for k, v in data.items()
                            if k not in _NOT_KEPT and not k.startswith(_UNUSED_PREFIXES)})
        availability = Availability.read(conf)
        record = Record(where.key, where.object_id.split(" ")[-1], conf.text("unique_id"), conf.text("name"), device,
                        origin_name, entity, availability, included=False, via=via)
        for source in availability.sources if availability else ():
            if source.template is not None:
                try:
                    record.availability_templates[source.topic] = self.templates.compile(source.template)
                except TemplateError as err:
                    raise ConfigProblem(f"availability value_template: {err}; fix the template") from None
        record.included = self._selected.included(names_of(record))
        return record

    def _check_command_topics(self, record: Record, changes: dict[tuple[str, str], Record | None]) -> None:
        """ConfigProblem when one of the entity's command topics is not its device's to publish to: where hubd never
        publishes (hubd.dialects.topics: its own topics, a discovery prefix, a zigbee2mqtt bridge's requests, `$`,
        a topic any device is read from, a Tasmota group topic, a topic of a device another dialect imports
        natively), or another discovered device's command topic (a light whose command topic is a lock's)."""
        for key, value in record.command_topics().items():
            why = self._command_topics.refusal(value, dialect=self.name)
            if why is None:
                other = self._book.command_owner(value, record, changes)
                if other is not None:
                    why = f"{value!r} is the command topic of {other.label} of another device"
            if why is not None:
                raise ConfigProblem(f"{key}: {why}; hubd publishes only to a device's own command topics")

    def _left_to_native(self, data: dict[str, Any], origin: str, device: DeviceInfo | None) -> bool:
        """Whether another enabled dialect imports this entity's device natively (one device, one import)."""
        announced = Announced(origin, device.identifiers if device else (), device.connections if device else (),
                              tuple(v for k, v in data.items() if k.endswith("topic") and isinstance(v, str)))
        return any(native.imports_natively(announced) for native in self._natives)

    def _entity(self, component: str, object_id: str, conf: Conf) -> Entity:
        """The entity of a config (ConfigProblem for one it cannot be)."""
        cls = _CLASSES.get(component, Entity)
        entity = Sensor(conf, self.templates, object_id) if cls is Sensor else cls(conf, self.templates)
        if cls is Entity:
            entity.reason = f"no platform interface for {component} (not in the mapping table)"
        return entity


def _read_topics(record: Record) -> list[str]:
    """The topics an entity reads its state and availability from."""
    return [t for t, _ in record.entity.topics()] + [s.topic for s in
                                                     (record.availability.sources if record.availability else ())]


def _json_or_none(payload: bytes) -> Any:
    """The JSON object a refused message holds, checked as every device message is; None when it holds none."""
    try:
        return json_object(payload)
    except DeviceMessageInvalid:
        return None


def _refused_device(topic: str, prefix: str, data: Any) -> tuple[str, str]:
    """The endpointId and name a refused config's device would have, as far as its raw config says (its device's
    first identifier or connection, else its unique_id), else the discovery topic's own ids."""
    data = data if isinstance(data, dict) else {}
    device = data.get("device", data.get("dev"))
    device = device if isinstance(device, dict) else {}
    ids = device.get("identifiers", device.get("ids"))
    ids = [ids] if isinstance(ids, str | int) else ids if isinstance(ids, list) else []
    connections = device.get("connections", device.get("cns"))
    unique_id = data.get("unique_id", data.get("uniq_id"))
    raw = next((str(i) for i in ids if isinstance(i, str | int)), None)
    if raw is None and isinstance(connections, list) and connections and isinstance(connections[0], list):
        raw = "_".join(str(c) for c in connections[0])
    if raw is None and isinstance(unique_id, str | int):
        raw = str(unique_id)
    inner = topic.removeprefix(prefix + "/").removesuffix("/config")
    name = device.get("name") if isinstance(device.get("name"), str) else None
    return mapping.endpoint_id(raw if raw is not None else inner.replace("/", "_")), name or raw or inner


def _press_events(records: Sequence[Record]) -> tuple[str, ...]:
    """The events the records announce, each once, in key order."""
    found: dict[str, None] = {}
    for record in sorted(records, key=lambda r: r.key):
        for event in record.entity.press_events() or ():
            found.setdefault(event, None)
    return tuple(found)
