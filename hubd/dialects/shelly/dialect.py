"""The Shelly dialect: Shelly devices natively, from their own MQTT (docs/devices.md, "Shelly").

Gen2+ (Plus, Pro, Gen3, Gen4): a device says `true` on `<prefix>/online` (its prefix is its id by default,
`shellyplus1pm-a8032ab12345`) and notifies on `<prefix>/events/rpc` with its id in `src`. hubd subscribes to
`+/online` and `+/events/rpc` (MQTT cannot match the start of a level, so the claim checks that the prefix is a
Shelly id, or that the notification's `src` is one: a custom prefix of one level is found by its notifications),
and `<prefix>/online` and `<prefix>/events/rpc` of each prefix the owner lists in `shelly.prefixes` (several levels,
`home/shelly/porch`: claimed and read as any prefix, the device's id still its GetDeviceInfo `id`), then asks
the device who it is over RPC (`requests`, sent as soon as the batch that found it is subscribed):
`Shelly.GetDeviceInfo`, `Shelly.GetConfig` and `Shelly.GetStatus` on `<prefix>/rpc`, answered on hubd's own
`hubd-<client id>/rpc`, the only reply topic it subscribes to. The
answers make its endpoints (parts.py); its states come from NotifyStatus, NotifyFullStatus and
`<prefix>/status/<component>:<n>` (states.py), an input's NotifyEvent is a doorbell press when declared, and
commands are RPC on `<prefix>/rpc` (commands.py). Gen1: `shellies/announce` says who a device is (hubd asks with
`announce` and `update` on `shellies/command` once per connection; a device also says it on
`shellies/<id>/announce`), its components are learned from the topics it
publishes under `shellies/<id>/`, commands go to that device's own `.../command` and `.../set` topics. A device
seen both natively and through Home Assistant discovery (a script publishing discovery configs with its id or MAC)
is left to this import (`imports_natively`). After a restart `restore` rebuilds the devices from their Route
addresses.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hubd.config.model import DoorbellConfig, ShellyConfig
from hubd.devices.model import EntityNote, Origin, Route, StateSample, StateValue, format_time
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
    PublishRules,
    Selection,
    StateReceived,
    Unexported,
    topic_matches,
)
from hubd.dialects.globs import Selected
from hubd.dialects.payload import json_object
from hubd.dialects.shelly import states
from hubd.dialects.shelly.commands import command, rpc
from hubd.dialects.shelly.parts import (
    GEN1_EVENTS,
    GEN2_EVENTS,
    Address,
    Component,
    build,
    component_number,
    gen1_component,
    gen1_input,
    gen2_components,
    parse_address,
    part,
)
from hubd.dialects.shelly.records import (
    DIALECT,
    GEN2_ID_RE,
    ConfigProblem,
    DeviceInfo,
    Frame,
    read_announce,
    read_device_info,
    read_frame,
)
from hubd.dialects.topics import CommandTopics
from hubd.errors import DeviceMessageInvalid

log = logging.getLogger(__name__)

MAX_DEVICES = 2_000
MAX_REQUESTS = 3 * MAX_DEVICES  # unanswered RPC requests kept; the oldest are forgotten
GEN1 = "shellies"
ASK = ("Shelly.GetDeviceInfo", "Shelly.GetConfig", "Shelly.GetStatus")
# Gen1 topics hubd reads (after `shellies/<id>/`); their command topics are longer, so hubd never hears its own.
# `events/rpc`: a Gen2+ device whose topic prefix was put under shellies/ (`shellies/plus1pm`) is found by it.
_GEN1_FILTERS = ("announce", "online", "relay/+", "roller/+", "roller/+/pos", "light/+", "light/+/status",
                 "color/+", "color/+/status", "input_event/+", "sensor/+", "events/rpc")
# Where a Gen2+ device is found: any one-level prefix's `online` and `events/rpc`, and a declared prefix's (below it).
_FOUND_ON = ("online", "events/rpc")


@dataclass
class Record:
    """What the dialect learned of one device, by its topic prefix (Gen1: `shellies/<id>`)."""

    gen: int
    info: DeviceInfo | None = None
    config: dict[str, Any] | None = None  # Gen2+: GetConfig's result
    status: dict[str, Any] | None = None  # Gen2+: GetStatus's result
    seen: dict[str, Component] = field(default_factory=dict)  # Gen1: components learned from its topics
    inputs: set[int] = field(default_factory=set)  # Gen1: inputs that reported an event
    online: bool | None = None  # Gen1: what its `online` said before the device was imported


@dataclass(frozen=True, slots=True)
class Known:
    """A device the dialect imports: its id, prefix and endpoints with their addresses."""

    id: str
    gen: int
    prefix: str
    endpoints: tuple[tuple[str, Address], ...]

def read_filters(declared: Sequence[str]) -> list[str]:
    """The topics the dialect reads Gen2+ devices from whatever devices are on the bus: `+/online`, `+/events/rpc`,
    Gen1's `shellies/...`, and each declared prefix's `online`, `events/rpc` and `status/+` (its device's)."""
    return [*(f"+/{rest}" for rest in _FOUND_ON), f"{GEN1}/#",
            *(f"{prefix}/{rest}" for prefix in declared for rest in (*_FOUND_ON, "status/+"))]


def prefix_problems(config: ShellyConfig, rules: PublishRules) -> list[str]:
    """Each declared prefix (`shelly.prefixes`) whose `<prefix>/rpc` the fixed rules forbid commands on (under hubd's
    own topics or reply topic, another import's tree or prefix, a group topic) or the dialect itself reads devices
    from (`x/events`: its `x/events/rpc` is every one-level prefix's notifications; `a/b/status` beside `a/b`: the
    status topics of a/b's device; `<Shelly id>/status`), with the fix: at run time no question would ever go there."""
    found: list[str] = []
    filters = read_filters(config.prefixes)
    for i, prefix in enumerate(config.prefixes):
        topic = f"{prefix}/rpc"
        why = rules.refusal(topic, None, DIALECT)
        parent, _, last = prefix.rpartition("/")
        read = next((f for f in filters if topic_matches(f, topic)), None) or \
            (f"{parent}/status/+" if last == "status" and GEN2_ID_RE.match(parent) else None)
        if why is None and read is not None:
            why = f"{topic!r} is where Shelly devices are read from ({read})"
        if why is not None:
            found.append(f"shelly.prefixes[{i}]: {prefix[:60]!r}: hubd would send its RPC there, but {why}; set the "
                         "device's topic prefix elsewhere (its MQTT settings) and list that")
    return found


class ShellyDialect(Dialect):
    """Shelly devices, Gen2+ over RPC and Gen1 by their `shellies/` topics."""

    name = DIALECT

    def __init__(self, config: ShellyConfig, doorbells: Sequence[DoorbellConfig], *, client_id: str = "hubd",
                 topics: CommandTopics | None = None, max_devices: int = MAX_DEVICES) -> None:
        self._src = f"hubd-{client_id}"
        self._replies = f"{self._src}/rpc"
        # Where its devices may take commands (hubd.dialects.topics); bound to every enabled dialect by `enabled.py`.
        self._command_topics = topics if topics is not None else CommandTopics(
            PublishRules(reserved=(f"{self._src}/",)), [self])
        self._selected = Selected(config.include, config.exclude, ((d.device, d.event) for d in doorbells))
        # Gen2+ prefixes the owner set by hand (shelly.prefixes, checked at load): found by their own `online`.
        self._declared: dict[str, None] = dict.fromkeys(config.prefixes)
        self._max_devices = max_devices
        self._records: dict[str, Record] = {}  # prefix → what is known of the device there
        self._devices: dict[str, Known] = {}  # prefix → the device imported
        self._ids: dict[str, str] = {}  # device id → prefix
        self._macs: dict[str, str] = {}  # MAC → prefix
        self._announced: dict[str, tuple[str, Route, Origin] | None] = {}
        self._left_out: dict[str, tuple[str, str, list[str], tuple[str, ...]]] = {}  # prefix → (id, name, why, events)
        self._generation = 0
        self._ids_of_requests = itertools.count(1)
        self._requests: dict[int, tuple[str, str]] = {}  # RPC id → (prefix, method), asked on this connection
        self._unanswered: dict[str, int] = {}  # prefix → its questions in `_requests`
        self._to_ask: dict[str, None] = {}  # Gen2+ prefixes to ask who they are once subscribed
        self._asked: set[str] = set()  # prefixes asked on this connection
        self._subscribe: list[str] = []
        self._ask_gen1 = True
        self._told_cap = False  # the cap of devices logged on this connection
        self._told_refused: set[str] = set()  # prefixes whose `<prefix>/rpc` the rule refuses, logged on it
        self._presses: dict[tuple[str, int], int] = {}  # Gen1 (prefix, input) → its last event_cnt
        self._excluded: set[str] = set()  # Gen1 prefixes left out by include/exclude: their topics are not claimed

    # The seam.

    def subscriptions(self) -> list[tuple[str, int]]:
        """Gen2+ `+/online`, `+/events/rpc`, the declared prefixes' `online` and `events/rpc` and hubd's own reply
        topic, the known devices' status topics, and Gen1's topics under `shellies/`. Called once per connection,
        which asks every device again."""
        self._ask_gen1 = True
        self._told_cap = False
        self._told_refused.clear()
        self._asked.clear()
        self._requests.clear()  # what the last connection did not send is dropped: asked again
        self._unanswered.clear()
        self._to_ask.update((p, None) for p, k in self._devices.items() if k.gen >= 2)
        return self._filters()

    def guards(self, topic: str) -> str | None:
        """The topics its devices are read from (the filters it subscribes to, and the status topics of the devices
        being asked): no command may go there."""
        for pattern in (*(f for f, _ in self._filters()), *(f"{p}/status/+" for p in self._asked)):
            if topic_matches(pattern, topic):
                return f"where Shelly devices are read from ({pattern})"
        return None

    def _filters(self) -> list[tuple[str, int]]:
        gen2 = [f"{prefix}/status/+" for prefix, known in self._devices.items() if known.gen >= 2]
        declared = [f"{prefix}/{rest}" for prefix in self._declared for rest in _FOUND_ON]
        return [*((f"+/{rest}", 1) for rest in _FOUND_ON), (self._replies, 1), (f"{GEN1}/announce", 1),
                *((f"{GEN1}/+/{t}", 1) for t in _GEN1_FILTERS), *((t, 1) for t in gen2), *((t, 1) for t in declared)]

    def pending_subscriptions(self) -> list[tuple[str, int]]:
        """A new Gen2+ device's `<prefix>/status/+` (whole-component status, when its `status_ntf` is on)."""
        added, self._subscribe = self._subscribe, []
        return [(t, 1) for t in added]

    def announcements(self) -> list[Outgoing]:
        """Once per connection `announce` and `update` on `shellies/command` (every Gen1 device says who it is and
        its states)."""
        if not self._ask_gen1:
            return []
        self._ask_gen1 = False
        return [Outgoing(f"{GEN1}/command", b"announce"), Outgoing(f"{GEN1}/command", b"update")]

    def requests(self) -> list[Outgoing]:
        """Each Gen2+ device found since the last call (and every known one on a new connection): GetDeviceInfo,
        GetConfig and GetStatus on its `<prefix>/rpc`, answered on hubd's reply topic."""
        out: list[Outgoing] = []
        for prefix in list(self._to_ask):
            for method in ASK:
                request_id = next(self._ids_of_requests)
                self._requests[request_id] = (prefix, method)
                self._unanswered[prefix] = self._unanswered.get(prefix, 0) + 1
                out.append(rpc(prefix, request_id, self._src, method))
        self._to_ask.clear()
        while len(self._requests) > MAX_REQUESTS:
            self._answered(self._requests.pop(next(iter(self._requests)))[0])
        return out

    def restore(self, routes: Sequence[tuple[str, Route]]) -> None:
        """Know the devices of the kept routes, so the states queued for hubd are read before they are asked."""
        grouped: dict[str, list[tuple[str, Address]]] = {}
        for device_id, route in routes:
            where = parse_address(route.address) if route.dialect == DIALECT else None
            if where is None:
                log.warning("%s: its kept Shelly route is unreadable; it is updated when the device answers again",
                            device_id)
                continue
            grouped.setdefault(where.prefix, []).append((device_id, where))
        for prefix, endpoints in grouped.items():
            if prefix in self._devices:
                continue
            first = endpoints[0][1]
            own = mapping.endpoint_id(first.id)
            record = self._records.setdefault(prefix, Record(first.gen))
            for _, where in endpoints:
                record.seen.update((c.key, c) for c in where.components if c.kind != "doorbell")
            self._use(prefix, Known(first.id, first.gen, prefix,
                                    tuple(sorted(endpoints, key=lambda e: (e[0] != own, e[0])))))
            self._announced.update({device_id: None for device_id, _ in endpoints})

    def claims(self, topic: str) -> bool:
        """hubd's reply topic, `shellies/...` (but a device's that include/exclude leave out), `<Shelly id or known
        prefix>/online`, `<prefix>/events/rpc`, and the status topics of known devices; of a prefix of several
        levels (shelly.prefixes, or a known device's), its `online`, `events/rpc` and `status/<component>`."""
        if topic.startswith(GEN1 + "/"):  # but a device left out by include/exclude: Home Assistant may import it
            return not self._excluded or topic.count("/") < 2 or \
                f"{GEN1}/{topic.split('/', 2)[1]}" not in self._excluded or topic.endswith("/announce")
        if topic == self._replies:
            return True
        if self._long_prefix(topic) is not None:
            return True
        levels = topic.split("/")
        if len(levels) == 2:
            return levels[1] == "online" and (levels[0] in self._devices or levels[0] in self._declared
                                              or GEN2_ID_RE.match(levels[0]) is not None)
        if len(levels) == 3:
            return (levels[1] == "events" and levels[2] == "rpc") or \
                (levels[1] == "status" and levels[0] in self._devices)
        return False

    def decode(self, topic: str, payload: bytes, received_at: float, retained: bool) -> list[DeviceInput]:
        """The inputs a message means; a bad one is an InputRejected naming the topic and the fix."""
        if topic.startswith(GEN1 + "/"):
            return self._gen1(topic, payload, received_at, retained)
        if topic == self._replies:
            return self._reply(topic, payload, received_at)
        prefix, _, rest = topic.partition("/")
        found = self._long_prefix(topic)
        if found is not None:
            prefix, rest = found
        return self._gen2(prefix, rest, topic, payload, received_at, retained)

    def encode_control(self, device_id: str, route: Route, request: ControlRequest) -> list[Outgoing]:
        """RPC on the device's `<prefix>/rpc` (Gen2+) or its Gen1 command topic, from the Route address."""
        where = parse_address(route.address) if route.dialect == DIALECT else None
        if where is None:
            raise CommandRefused(f"{device_id}: its route is not a Shelly address; wait for the device to answer "
                                 "hubd again")
        prefix = self._ids.get(where.id)
        if prefix is not None and prefix != where.prefix:  # the device's prefix now, its endpoint as it was
            where = Address(where.id, where.gen, prefix, where.components)
        for component in where.components:
            if request.interface in part(component).interfaces:
                return command(where, component, request, next(self._ids_of_requests), self._src)
        raise CommandRefused(f"{device_id} has no Shelly switch, light or cover that takes {request.interface}")

    def owns_command_topic(self, topic: str) -> bool:
        """A Gen2+ device's `<prefix>/rpc`, anything under a Gen1 device's `shellies/<id>/`."""
        if topic.endswith("/rpc") and topic[:-4] in self._devices:
            return True
        if topic.startswith(GEN1 + "/"):
            levels = topic.split("/", 2)
            return len(levels) == 3 and f"{GEN1}/{levels[1]}" in self._devices
        return False

    def native_generation(self) -> int:
        """Changes whenever a device comes or goes."""
        return self._generation

    def imports_natively(self, announced: Announced) -> bool:
        """A device announced through Home Assistant discovery that this dialect imports: its identifiers or
        connections carry its Shelly id or MAC, or its topics are under the device's prefix."""
        ids = {device_id.casefold() for device_id in self._ids}
        for value in (*announced.identifiers, *(value for _, value in announced.connections)):
            folded = value.strip().casefold()
            if folded in ids or folded.replace(":", "").replace("-", "").upper() in self._macs:
                return True
            if any(folded.startswith(device_id + sep) for device_id in ids for sep in ("-", "_")):
                return True
        return any(t.startswith(prefix + "/") for t in announced.topics for prefix in self._devices)

    def unexported_devices(self) -> list[Unexported]:
        """Devices not imported, with why, by name."""
        out = [Unexported(mapping.endpoint_id(device_id), name, tuple(reasons), events)
               for device_id, name, reasons, events in self._left_out.values()]
        return sorted(out, key=lambda u: (u.name, u.endpoint_id))

    def reconfigure(self, selection: Selection) -> list[DeviceInput]:
        """New include/exclude and doorbells: every device announced again where that changes it, or gone."""
        self._selected = Selected(selection.include, selection.exclude, selection.doorbells)
        return [item for prefix in list(self._records) for item in self._rebuild(prefix)]

    def doorbell_events(self, device_id: str) -> tuple[str, ...]:
        """What its button inputs report (Gen2+ `single_push`..., Gen1 `S`, `L`...), for its own endpoint."""
        prefix = self._ids.get(device_id)
        record = self._records.get(prefix) if prefix is not None else None
        return _events(record) if record is not None else ()

    # Gen2+.

    def _long_prefix(self, topic: str) -> tuple[str, str] | None:
        """(prefix, rest) of a Gen2+ topic under a prefix of several levels: a declared one's `online` and
        `events/rpc`, a declared or known one's `status/<component>`; None for any other topic."""
        head, _, last = topic.rpartition("/")
        if last == "online" and head.count("/") > 0 and head in self._declared:
            return head, "online"
        head, _, middle = head.rpartition("/")
        if head.count("/") > 0 and ((middle == "events" and last == "rpc" and head in self._declared)
                                    or (middle == "status" and head in self._devices)):
            return head, f"{middle}/{last}"
        return None

    def _gen2(self, prefix: str, rest: str, topic: str, payload: bytes, received_at: float,
              retained: bool) -> list[DeviceInput]:
        """A Gen2+ device's `online`, `events/rpc` or `status/<component>:<n>` under its prefix."""
        if rest == "online":
            return self._online(prefix, topic, payload)
        if rest == "events/rpc":
            return self._notification(prefix, topic, payload, received_at, retained)
        known = self._devices.get(prefix)
        if known is None or rest.partition("/")[0] != "status":
            return []
        try:
            data = json_object(payload)
        except DeviceMessageInvalid as err:
            return [InputRejected("state", f"{topic}: {err}; a Shelly status is a JSON object")]
        return self._gen2_states(known, {rest.partition("/")[2]: data}, topic, received_at)

    def _online(self, prefix: str, topic: str, payload: bytes) -> list[DeviceInput]:
        text = payload[:16].decode("utf-8", errors="replace").strip()
        if text not in ("true", "false"):
            return [InputRejected("availability", f"{topic}: {text[:40]!r} is neither 'true' nor 'false'")]
        known = self._devices.get(prefix)
        if known is None:
            if text == "true":
                self._probe(prefix)
            return []
        return [AvailabilityReceived(endpoint_id, text == "true") for endpoint_id, _ in known.endpoints]

    def _probe(self, prefix: str) -> None:
        """Ask a device found on the bus who it is, once per connection (GetDeviceInfo, GetConfig, GetStatus)."""
        if prefix in self._asked or prefix in self._to_ask:
            return
        if prefix not in self._records and max(len(self._records), len(self._asked)) >= self._max_devices:
            if not self._told_cap:  # once a connection: every fake id past the cap would be a line of the log
                self._told_cap = True
                log.warning("%s and any other new prefix: not asked: more than %d Shelly devices on the bus "
                            "(said once a connection)", prefix, self._max_devices)
            return  # a bus that names ever new Shelly ids gets neither questions nor subscriptions without end
        why = self._command_topics.refusal(f"{prefix}/rpc", dialect=DIALECT)
        if why is not None:  # asked again at its next message (the rule may say otherwise then), said once a connection
            if prefix not in self._told_refused and len(self._told_refused) < self._max_devices:
                self._told_refused.add(prefix)
                log.warning("%s: not asked who it is: %s (said once a connection)", prefix, why)
            return
        self._asked.add(prefix)
        self._to_ask[prefix] = None
        self._subscribe.append(f"{prefix}/status/+")  # subscribed before the answers come: the asking follows

    def _answered(self, prefix: str) -> None:
        left = self._unanswered.pop(prefix, 1) - 1
        if left > 0:
            self._unanswered[prefix] = left

    def _reply(self, topic: str, payload: bytes, received_at: float) -> list[DeviceInput]:
        try:
            frame = read_frame(payload)
        except ConfigProblem as err:
            return [InputRejected("config", f"{topic}: {err}")]
        asked = self._requests.pop(frame.id, None) if frame.id is not None else None
        if asked is None:
            return []  # an answer to a command (its state comes as a notification), or to a request forgotten
        prefix, method = asked
        self._answered(prefix)
        record = self._records.get(prefix)
        if record is None or record.gen < 2:  # `online` under shellies/ said nothing of its generation
            record = Record(2, online=record.online if record is not None else None)
        if frame.error is not None:
            self._leave_out(prefix, (frame.src, frame.src, [f"{method} answered an error: {frame.error}"], ()))
            return [InputRejected("config", f"{topic}: {prefix} answered {method} with an error: {frame.error}; "
                                            "check the device's MQTT settings (RPC over MQTT on, no password)")]
        try:
            if method == "Shelly.GetDeviceInfo":
                info = read_device_info(frame.result)
                if info.id != frame.src:
                    raise ConfigProblem(f"id {info.id!r} is not the src {frame.src!r} of the answer")
                record.info = info
            elif not isinstance(frame.result, dict):
                raise ConfigProblem(f"result of {method} is not an object")
            elif method == "Shelly.GetConfig":
                record.config = frame.result
            else:
                record.status = frame.result
        except ConfigProblem as err:
            self._leave_out(prefix, (frame.src, frame.src, [f"its answer to {method} cannot be used: {err}"], ()))
            return [InputRejected("config", f"{topic}: {prefix}'s answer to {method}: {err}")]
        self._records[prefix] = record
        out = self._rebuild(prefix)
        known = self._devices.get(prefix)
        if known is not None and record.status is not None and (out or method == "Shelly.GetStatus"):
            out += self._gen2_states(known, record.status, topic, received_at)  # the device answered: it is online
            out += [AvailabilityReceived(endpoint_id, True) for endpoint_id, _ in known.endpoints]
        return out

    def _notification(self, prefix: str, topic: str, payload: bytes, received_at: float,
                      retained: bool) -> list[DeviceInput]:
        try:
            frame = read_frame(payload)
        except ConfigProblem as err:
            return [InputRejected("state", f"{topic}: {err}")]
        known = self._devices.get(prefix)
        if known is None:
            if GEN2_ID_RE.match(frame.src) or prefix in self._declared:
                self._probe(prefix)
            return []
        if frame.method in ("NotifyStatus", "NotifyFullStatus"):
            return self._gen2_states(known, frame.params, topic, received_at)
        if frame.method == "NotifyEvent" and not retained:
            return self._events(known, prefix, frame, topic, received_at)
        return []

    def _events(self, known: Known, prefix: str, frame: Frame, topic: str, received_at: float) -> list[DeviceInput]:
        events = frame.params.get("events")
        if not isinstance(events, list):
            return [InputRejected("event", f"{topic}: params.events is not a list; NotifyEvent carries one")]
        out: list[DeviceInput] = []
        when = format_time(received_at)
        for event in events[:64]:
            if not isinstance(event, dict):
                continue
            source, name = event.get("component"), event.get("event")
            # Renamed or reconfigured: asked again after this batch, unless questions to it wait for their answers
            # (which come after the change): however many times it says so, it has at most three questions out.
            if source == "sys" and name == "config_changed" and prefix not in self._to_ask \
                    and prefix not in self._unanswered:
                self._asked.discard(prefix)
                self._probe(prefix)
                continue
            for endpoint_id, where in known.endpoints:
                for component in where.components:
                    if component.kind == "doorbell" and component.status_key == source and isinstance(name, str) \
                            and name.casefold() == str(component.opts["event"]).casefold():
                        out.append(PressReceived(endpoint_id, when))
        return out

    def _gen2_states(self, known: Known, status: dict[str, Any], topic: str, received_at: float) -> list[DeviceInput]:
        out: list[DeviceInput] = []
        when = format_time(received_at)
        for endpoint_id, where in known.endpoints:
            values: dict[str, StateValue] = {}
            for component in where.components:
                data = status.get(component.status_key)
                if not isinstance(data, dict) or component.kind == "doorbell":
                    continue
                found, problems = states.gen2(component, data)
                values.update(found)
                out += [InputRejected("state", f"{topic}: {problem}") for problem in problems]
            if values:
                out.append(StateReceived(endpoint_id, tuple(StateSample(i, v, when) for i, v in values.items())))
        return out

    # Gen1.

    def _gen1(self, topic: str, payload: bytes, received_at: float, retained: bool) -> list[DeviceInput]:
        levels = topic.split("/")
        if len(levels) == 2:
            return self._announce(topic, payload) if levels[1] == "announce" else []
        prefix = f"{GEN1}/{levels[1]}"
        kind = levels[2]
        known = self._devices.get(prefix)
        if kind == "events" or (known is not None and known.gen >= 2):  # a Gen2+ device whose prefix is shellies/<x>
            return self._gen2(prefix, "/".join(levels[2:]), topic, payload, received_at, retained)
        if kind == "announce" and len(levels) == 3:  # its own copy of shellies/announce, retained where it retains
            return self._announce(topic, payload)
        if kind == "online":
            if prefix in self._devices:
                return self._online(prefix, topic, payload)
            record = self._records.get(prefix)
            if record is None and len(self._records) < self._max_devices:
                record = self._records[prefix] = Record(1)
            if record is not None:
                record.online = payload.strip() == b"true"  # said again once the device is imported
            return []
        if len(levels) < 4:
            return []
        if kind == "sensor":
            if levels[3] not in ("temperature", "humidity") or len(levels) != 4:
                return []
            kind, number, sub = levels[3], "0", ""
        else:
            number, sub = levels[3], "/".join(levels[4:])
        n = component_number(number, 2)
        if n is None:
            return []  # not a component's topic: relay/power, relay/energy of a Shelly 2, ...
        record = self._records.get(prefix)
        if record is None:
            if len(self._records) >= self._max_devices:
                return []
            record = self._records[prefix] = Record(1)
        out: list[DeviceInput] = []
        if kind == "input_event":
            if n not in record.inputs and len(record.inputs) < 16:
                record.inputs.add(n)
                out += self._rebuild(prefix) if self._selected.doorbell(self._names(record)) else []
            return out + self._gen1_press(prefix, n, topic, payload, received_at, retained)
        component = gen1_component(kind, n, record.info.outlet() if record.info else False)
        if component is None:
            return []
        if component.key not in record.seen and len(record.seen) < 64:
            record.seen[component.key] = component
            out += self._rebuild(prefix)
        known = self._devices.get(prefix)
        if known is None:
            return out
        when = format_time(received_at)
        for endpoint_id, where in known.endpoints:
            for member in where.components:
                if member.key == component.key:
                    values, problems = states.gen1(member, sub, payload)
                    out += [InputRejected("state", f"{topic}: {problem}") for problem in problems]
                    if values:
                        out.append(StateReceived(endpoint_id, tuple(StateSample(i, v, when)
                                                                    for i, v in values.items())))
        return out

    def _announce(self, topic: str, payload: bytes) -> list[DeviceInput]:
        try:
            info = read_announce(payload)
        except ConfigProblem as err:
            return [InputRejected("config", f"{topic}: {err}; a Gen1 announcement has id, model and mac")]
        prefix = f"{GEN1}/{info.id}"
        record = self._records.get(prefix)
        if record is None:
            if len(self._records) >= self._max_devices:
                return [InputRejected("config", f"{topic}: more than {self._max_devices} Shelly devices; leave some "
                                                "out with shelly.exclude")]
            record = self._records[prefix] = Record(1)
        if record.info == info:
            return []
        record.info = info
        return self._rebuild(prefix)

    def _gen1_press(self, prefix: str, n: int, topic: str, payload: bytes, received_at: float,
                    retained: bool) -> list[DeviceInput]:
        try:
            data = json_object(payload)
        except DeviceMessageInvalid as err:
            return [InputRejected("event", f"{topic}: {err}; input_event is {{\"event\": ..., \"event_cnt\": ...}}")]
        count, event = data.get("event_cnt"), data.get("event")
        last = self._presses.get((prefix, n))
        if isinstance(count, int) and not isinstance(count, bool):
            self._presses[(prefix, n)] = count
        if retained or not isinstance(event, str) or not event or count == last:
            return []  # the same press published again with the device's periodic update
        known = self._devices.get(prefix)
        if known is None:
            return []
        when = format_time(received_at)
        return [PressReceived(endpoint_id, when) for endpoint_id, where in known.endpoints
                for component in where.components
                if component.kind == "doorbell" and component.n == n and event == component.opts["event"]]

    # Devices.

    def _names(self, record: Record) -> list[str]:
        return [*record.info.identities(), mapping.endpoint_id(record.info.id)] if record.info else []

    def _rebuild(self, prefix: str) -> list[DeviceInput]:
        """Announce what changed of a device after what it said of itself."""
        record = self._records[prefix]
        info = record.info
        if info is None or (record.gen >= 2 and (record.config is None or record.status is None)):
            return []
        names = self._names(record)
        if not self._selected.included(names):
            self._leave_out(prefix, (info.id, info.name()[0], ["left out by shelly.include/exclude"], _events(record)))
            self._excluded.add(prefix)
            return self._drop(prefix)
        self._excluded.discard(prefix)
        event = self._selected.doorbell(names)
        notes: list[EntityNote] = []
        if record.gen >= 2:
            assert record.config is not None and record.status is not None
            components, notes = gen2_components(record.config, record.status, info.outlet(), event)
        else:
            components = sorted(record.seen.values(), key=lambda c: (c.type, c.n))
            for n in sorted(record.inputs):
                components += gen1_input(n, event, notes)
        built = build(info, prefix, components, notes)
        if not built.configs:
            self._leave_out(prefix, (info.id, info.name()[0], [built.reason], _events(record)))
            return self._drop(prefix)
        out: list[DeviceInput] = []
        other = self._ids.get(info.id)
        if other is not None and other != prefix:  # the same device under a new prefix: one endpointId, one owner
            out += self._drop(other)
        self._left_out.pop(prefix, None)
        before = self._devices.get(prefix)
        known = Known(info.id, info.gen, prefix, built.addresses)
        kept = {n for n, _ in known.endpoints}
        if before is not None:
            for endpoint_id, _ in before.endpoints:
                if endpoint_id not in kept:
                    self._announced.pop(endpoint_id, None)
                    out.append(DeviceGone(endpoint_id))
        else:
            self._generation += 1
        self._use(prefix, known)
        self._macs[info.mac] = prefix
        for item in built.configs:
            seen = (item.config.canonical(), item.route, item.origin)
            if self._announced.get(item.device_id) != seen:
                self._announced[item.device_id] = seen
                out.append(item)
        if before is None and record.online is not None:
            out += [AvailabilityReceived(endpoint_id, record.online) for endpoint_id, _ in known.endpoints]
        return out

    def _leave_out(self, prefix: str, entry: tuple[str, str, list[str], tuple[str, ...]]) -> None:
        """List a device left out, and why; at most max devices listed (the oldest go first): every connection asks
        anew, and fake ids answering errors would otherwise add as many again each time."""
        self._left_out.pop(prefix, None)
        self._left_out[prefix] = entry
        while len(self._left_out) > self._max_devices:
            del self._left_out[next(iter(self._left_out))]

    def _use(self, prefix: str, known: Known) -> None:
        before = self._devices.get(prefix)
        if before is not None and before.id != known.id:
            self._ids.pop(before.id, None)
        self._devices[prefix] = known
        self._ids[known.id] = prefix

    def _drop(self, prefix: str) -> list[DeviceInput]:
        known = self._devices.pop(prefix, None)
        if known is None:
            return []
        self._generation += 1
        self._ids.pop(known.id, None)
        for mac in [m for m, p in self._macs.items() if p == prefix]:
            del self._macs[mac]
        for endpoint_id, _ in known.endpoints:
            self._announced.pop(endpoint_id, None)
        return [DeviceGone(endpoint_id) for endpoint_id, _ in known.endpoints]


def _events(record: Record) -> tuple[str, ...]:
    """The presses a device's button inputs report, to declare one a doorbell; () when it has none."""
    if record.gen == 1:
        return GEN1_EVENTS if record.inputs else ()
    config = record.config or {}
    buttons = any(key.startswith("input:") and isinstance(value, dict) and value.get("type") == "button"
                  for key, value in config.items())
    return GEN2_EVENTS if buttons else ()
