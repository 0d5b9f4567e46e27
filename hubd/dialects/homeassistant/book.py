"""The Home Assistant dialect's book of entities: which device each discovered entity belongs to, and which
entity reads which topic (pure state, no I/O).

It keeps the records (one per discovered entity, by discovery key), groups them into devices through shared
identifiers and connections (`devices.py` makes each group's endpoints), indexes the state and
availability topics each exported entity reads, and reads a state, availability or event message off that
index into typed inputs. `apply` takes added, changed and removed records and says which devices are
announced again or gone; the topics it learns wait in `take_pending()` for the bridge to subscribe to.
An endpoint is unreachable while one of its entities reports a fault (a jammed lock: `Reading.fault`), as while
its availability says offline. The dialect (`dialect.py`) reads configs into records and answers the seam.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hubd.devices.model import StateSample, format_time
from hubd.dialects.base import (
    AvailabilityReceived,
    ConfigReceived,
    DeviceGone,
    DeviceInput,
    InputRejected,
    PressReceived,
    StateReceived,
)
from hubd.dialects.globs import Globs
from hubd.dialects.homeassistant.devices import (
    DeviceEndpoint,
    Record,
    assign_doorbells,
    assign_revealed,
    device_endpoints,
)
from hubd.dialects.homeassistant.entities import ECHO, StateProblem, TemplateFailed
from hubd.dialects.homeassistant.templates import Payload, TemplateError, Templates
from hubd.dialects.wildcards import FilterIndex, is_wildcard

ROLE_AVAILABILITY = "availability"


class EntityBook:
    """The discovered entities, their devices and the topics they read."""

    def __init__(self, prefix: str, templates: Templates, doorbells: Sequence[tuple[Globs, str]]) -> None:
        self._prefix = prefix
        self._templates = templates
        self._doorbells = doorbells
        self.exposed: frozenset[str] = frozenset()  # endpointIds whose kept-back entities the owner exposed
        # told of each doorbell declaration that names a device, and what that device announces (Selected.record)
        self.seen: Callable[[int, str, tuple[str, ...] | None, str], None] | None = None
        self.records: dict[tuple[str, str], Record] = {}
        self._by_token: dict[tuple[str, ...], set[tuple[str, str]]] = {}
        # topic → the (record key, role) pairs that read it: a dict as an ordered set, so that removing one of
        # the thousands of entities sharing zigbee2mqtt's bridge/state availability topic is O(1).
        self._topics: dict[str, dict[tuple[tuple[str, str], str], None]] = {}
        self.endpoints: dict[str, DeviceEndpoint] = {}
        self._online: dict[str, bool] = {}
        self._faulted: set[str] = set()  # endpoints offline for a fault of one of their entities (a jammed lock)
        self._subscribed: set[str] = set()
        # The topics read that are wildcard filters (Theengs Gateway's, OpenMQTTGateway's `+/+/BTtoMQTT/<MAC>`), as a
        # trie: a message's topic finds its filters in one walk of its levels, never a scan of them all.
        self._wild = FilterIndex()
        self._commands: dict[str, set[tuple[str, str]]] = {}  # command topic → the records publishing there
        self._freed: set[str] = set()
        self._pending: list[str] = []
        self._dropped: list[str] = []  # topics subscribed to that no entity reads any more
        # The last payload of each availability topic read: an entity discovered after hubd subscribed to a shared
        # one (zigbee2mqtt's retained bridge/state) gets no retained copy of it again, so it is told this one.
        self._last_availability: dict[str, Payload] = {}

    def command_owner(self, topic: str, record: Record,
                      pending: Mapping[tuple[str, str], Record | None]) -> Record | None:
        """Another device's entity (known, or among `pending` changes) that commands `topic`, if one does."""
        mine = set(record.tokens())
        for key, other in [*((k, self.records[k]) for k in self._commands.get(topic, ())), *pending.items()]:
            if other is None or key == record.key or pending.get(key, other) is None:
                continue
            if topic in other.command_topics().values() and not mine & set(other.tokens()):
                return other
        return None

    def declare(self, doorbells: Sequence[tuple[Globs, str]]) -> None:
        """New doorbell declarations: taken when devices are next worked out (`apply`)."""
        self._doorbells = doorbells

    def device_of(self, key: tuple[str, str]) -> set[tuple[str, str]]:
        """The keys of every record of the device this record belongs to."""
        return self._component(key) if key in self.records else set()

    def reads(self, topic: str) -> bool:
        """Whether an entity reads this topic (a wildcard filter that matches it too)."""
        return topic in self._topics or bool(self._wild.matches(topic))

    def sources(self, topic: str) -> list[str]:
        """The topics entities read that a message on `topic` is for: itself, and the wildcard filters it matches."""
        return [topic, *self._wild.matches(topic)]

    def filters(self) -> int:
        """How many distinct wildcard filters entities read."""
        return len(self._wild)

    def has_filter(self, pattern: str) -> bool:
        """Whether an entity reads this wildcard filter already (it costs no new subscription)."""
        return pattern in self._wild

    def reader(self, topic: str) -> Record | None:
        """An entity that reads its state or availability from `topic` (a wildcard filter that matches it too), if one
        does; an optimistic entity's echo of its own command topic is no reading of the device's."""
        keys = [k for source in self.sources(topic) for k in self._topics.get(source, ())]
        for key, role in keys:
            record = self.records.get(key)
            if record is not None and not role.startswith(ECHO):
                return record
        return None

    def subscribed(self) -> list[str]:
        """Every state/availability topic known so far, sorted; what was pending is now asked for with them."""
        self._pending.clear()
        return sorted(self._subscribed)

    def take_freed(self) -> list[str]:
        """The topics no entity reads any more since the last call."""
        out, self._dropped = self._dropped, []
        return out

    def take_pending(self) -> list[str]:
        """The topics learned since the last call (or `subscribed()`)."""
        out, self._pending = self._pending, []
        return out

    def apply(self, changes: Mapping[tuple[str, str], Record | None]) -> list[DeviceInput]:
        """Apply added, changed and removed records; the devices they touch are announced again or gone."""
        affected: set[tuple[str, str]] = set()
        for key in changes:
            if key in self.records:
                affected |= self._component(key)
        before: set[str] = set()
        for key in affected:
            current = self.records[key]
            before |= {e for e in (current.endpoint, current.restored) if e is not None}
            current.restored = None  # the endpoint it was restored for counts once: it is gone if not made again
        for key, record in changes.items():
            old = self.records.pop(key, None)
            if old is not None:
                self._unindex(old)
                for command in old.command_topics().values():
                    owners = self._commands.get(command, set())
                    owners.discard(key)
                    if not owners:
                        self._commands.pop(command, None)
                if record is not None and old.pinned is not None and set(old.tokens()) & set(record.tokens()):
                    record.pinned = old.pinned  # the same device: it keeps its id until its records agree
            if record is not None:
                self.records[key] = record
                for token in record.tokens():
                    self._by_token.setdefault(token, set()).add(key)
                for command in record.command_topics().values():
                    self._commands.setdefault(command, set()).add(key)
                affected.add(key)
        out: list[DeviceInput] = []
        after: set[str] = set()
        seen: set[tuple[str, str]] = set()
        touched: set[str] = set()
        for key in sorted(affected):
            if key in seen or key not in self.records:
                continue
            group = self._component(key)
            seen |= group
            records = [self.records[k] for k in sorted(group)]
            for record in records:
                self._unindex_topics(record)
            assign_revealed(records, self.exposed)
            assign_doorbells(records, self._doorbells, self.seen)
            for endpoint in device_endpoints(records):
                after.add(endpoint.endpoint_id)
                previous = self.endpoints.get(endpoint.endpoint_id)
                self.endpoints[endpoint.endpoint_id] = endpoint
                if previous is None or (previous.config.canonical(), previous.route, previous.origin) != \
                        (endpoint.config.canonical(), endpoint.route, endpoint.origin):
                    out.append(ConfigReceived(endpoint.endpoint_id, endpoint.config, endpoint.route, endpoint.origin))
            for record in records:
                self._index_topics(record)
                if self._replay_availability(record):
                    touched.add(record.endpoint or "")
        for gone in sorted(before - after):
            self.endpoints.pop(gone, None)
            self._online.pop(gone, None)
            self._faulted.discard(gone)
            out.append(DeviceGone(gone))
        out += self._availability_changes(e for e in sorted(touched) if e in self.endpoints)
        # A topic no entity reads any more is forgotten and unsubscribed (asked for again if it comes back): memory
        # stays bounded, here and on the broker.
        freed = {t for t in self._freed if t not in self._topics and t in self._subscribed}
        self._subscribed -= freed
        for topic in freed:
            self._last_availability.pop(topic, None)
        self._dropped += sorted(freed)
        self._pending = [t for t in self._pending if t not in freed]
        self._freed.clear()
        return out

    def read(self, topic: str, payload: Payload, received_at: float, retained: bool) -> list[DeviceInput]:
        """The inputs a message on an entity's topic means: states, presses, availability changes."""
        values: dict[str, dict[str, Any]] = {}
        presses: list[DeviceInput] = []
        out: list[DeviceInput] = []
        touched: set[str] = set()
        when = format_time(received_at)
        # The topic itself, then each wildcard filter it matches: an entity reads its filter's every match.
        for source, key, role in [(s, k, r) for s in self.sources(topic) for k, r in list(self._topics.get(s, ()))]:
            record = self.records.get(key)
            if record is None or record.endpoint is None:
                continue
            if role == ROLE_AVAILABILITY:
                self._last_availability[source] = payload
                try:
                    if self._availability(record, source, payload):
                        touched.add(record.endpoint)
                except TemplateError as err:
                    out.append(InputRejected("state", f"{topic}: the availability template of {record.label} of "
                                                      f"{record.endpoint} failed: {err}; fix the template in the "
                                                      "device's discovery config"))
                continue
            try:
                reading = record.entity.read(role, payload)
            except TemplateFailed as err:
                out.append(InputRejected("state", f"{topic}: {record.label} of {record.endpoint}: {err}; fix the "
                                                  "template in the device's discovery config"))
                continue
            except StateProblem as err:
                out.append(InputRejected("state", f"{topic}: {record.label} of {record.endpoint}: {err}"))
                continue
            if reading.values:
                values.setdefault(record.endpoint, {}).update(reading.values)
            if reading.fault != record.fault or (record.entity.faults and record.endpoint not in self._online):
                record.fault = reading.fault
                touched.add(record.endpoint)
            if reading.fault is not None:
                named = self.endpoints[record.endpoint].config.displayName if record.endpoint in self.endpoints \
                    else ""
                out.append(InputRejected("state", f"{topic}: {record.label} of {named} ({record.endpoint}): "
                                                  f"{reading.fault} "
                                                  f"({payload.text.strip()[:40]!r}): never reported locked, and "
                                                  "unreachable until it reports a state hubd knows"))
            if record.doorbell is not None and not retained and reading.events and (
                    record.doorbell == "*" or record.doorbell.casefold() in {e.casefold() for e in reading.events}):
                presses.append(PressReceived(record.endpoint, when))
        for endpoint, found in values.items():
            out.append(StateReceived(endpoint, tuple(StateSample(i, v, when) for i, v in found.items())))
        out += presses
        return out + self._availability_changes(sorted(touched))

    def _availability_changes(self, endpoints: Iterable[str]) -> list[DeviceInput]:
        out: list[DeviceInput] = []
        for endpoint in endpoints:
            online = self._endpoint_online(endpoint)
            if online is not None and self._online.get(endpoint) is not online:
                self._online[endpoint] = online
                out.append(AvailabilityReceived(endpoint, online))
        return out

    def _replay_availability(self, record: Record) -> bool:
        """Tell a record just indexed the last payload of its availability topics; whether one said something."""
        said = False
        for source in record.availability.sources if record.availability and record.endpoint else ():
            last = self._last_availability.get(source.topic)
            if last is not None and source.topic not in record.seen:
                try:
                    said = self._availability(record, source.topic, last) or said
                except TemplateError:
                    continue  # listed under problems when that payload came
        return said

    def _component(self, key: tuple[str, str]) -> set[tuple[str, str]]:
        """The keys of every record tied to this one through shared identifiers or connections."""
        found, todo = {key}, [key]
        while todo:
            record = self.records[todo.pop()]
            for token in record.tokens():
                for other in self._by_token.get(token, ()):
                    if other not in found:
                        found.add(other)
                        todo.append(other)
        return found

    def _unindex(self, record: Record) -> None:
        for token in record.tokens():
            keys = self._by_token.get(token)
            if keys is not None:
                keys.discard(record.key)
                if not keys:
                    del self._by_token[token]
        self._unindex_topics(record)

    def _index_topics(self, record: Record) -> None:
        if record.endpoint is None:
            return
        pairs = list(record.entity.topics())
        if record.availability is not None:
            pairs += [(s.topic, ROLE_AVAILABILITY) for s in record.availability.sources]
        for topic, role in pairs:
            self._topics.setdefault(topic, {})[(record.key, role)] = None
            record.indexed.append((topic, role))
            if is_wildcard(topic):
                self._wild.add(topic)
            if topic not in self._subscribed and not topic.startswith(self._prefix + "/"):
                self._subscribed.add(topic)
                self._pending.append(topic)

    def _unindex_topics(self, record: Record) -> None:
        for topic, role in record.indexed:
            readers = self._topics.get(topic)
            if readers is not None:
                readers.pop((record.key, role), None)
                if not readers:
                    del self._topics[topic]
                    self._wild.discard(topic)
                    self._freed.add(topic)
        record.indexed.clear()

    def _availability(self, record: Record, topic: str, payload: Payload) -> bool:
        """Note an availability message for the record; whether it said available or not (TemplateError when its
        availability template fails)."""
        for source in record.availability.sources if record.availability else ():
            if source.topic != topic:
                continue
            text = payload.text.strip()
            template = record.availability_templates.get(topic)
            if template is not None:
                text = self._templates.render_value(template, payload)  # a TemplateError: listed, as for a state
            if text in (source.available, source.not_available):
                record.seen[topic] = record.latest = text == source.available
                return True
        return False

    def _endpoint_online(self, endpoint: str) -> bool | None:
        """Online when one of its entities is available, offline when all are known not to be, or while one of them
        reports a fault (a jammed lock); online again when that fault is gone and nothing else is known."""
        records = [self.records[k] for k in self.endpoints[endpoint].keys if k in self.records]
        if any(r.fault is not None for r in records):
            self._faulted.add(endpoint)
            return False
        faulted = endpoint in self._faulted
        self._faulted.discard(endpoint)
        known = [r.available() for r in records if r.availability is not None]
        if True in known:
            return True
        if known and None not in known:
            return False
        # Nothing else known: reachable once its fault is gone, or (a lock without availability, whose last fault
        # may predate a restart) once it reported a state hubd knows.
        return True if faulted or (not known and any(r.entity.faults for r in records)) else None
