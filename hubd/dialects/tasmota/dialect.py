"""The Tasmota dialect: Tasmota devices natively, from their own discovery (docs/devices.md).

A Tasmota device (SetOption19 0, the default since Tasmota 9) announces itself, retained, on
`<prefix>/<MAC>/config` and its sensors on `<prefix>/<MAC>/sensors` (discovery.py reads them); the dialect builds
its endpoints (entities.py: the MAC is the endpointId), subscribes to the topics its FullTopic makes
(`tele/<topic>/LWT`, `STATE`, `SENSOR`, `stat/<topic>/RESULT`, `STATUS10`), reads them (states.py), asks a new
device for its state once subscribed (`cmnd/<topic>/STATE`, `STATUS 10`), and sends commands to
`cmnd/<topic>/<Command>` (commands.py). An empty config (SetOption19 1) removes the device. A device seen both
natively and through Home Assistant discovery (Tasmota's legacy SetOption19 1 configs, whose identifier is the
last six digits of the MAC) is left to this import (`imports_natively`). After a restart `restore` rebuilds the
devices from their Route addresses, so the states queued for hubd are read before the retained configs come.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from hubd.config.model import DoorbellConfig, TasmotaConfig
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
    PublishRules,
    Selection,
    StateReceived,
    Unexported,
)
from hubd.dialects.globs import DoorbellReport, Selected
from hubd.dialects.tasmota.commands import command
from hubd.dialects.tasmota.discovery import (
    DIALECT,
    ConfigProblem,
    TasmotaInfo,
    normal_mac,
    parse_topic,
    read_config,
    read_sensors,
    state_object,
)
from hubd.dialects.tasmota.entities import Address, build, parse_address, part
from hubd.dialects.tasmota.states import pressed, read, released
from hubd.dialects.topics import CommandTopics

log = logging.getLogger(__name__)

MAX_DEVICES = 2_000
# The device topics hubd reads, after the FullTopic's tele or stat prefix.
_TELE_TOPICS = ("LWT", "STATE", "SENSOR")
_STAT_TOPICS = ("RESULT", "STATUS10")
_CHIP_ID_DIGITS = 6  # Tasmota's legacy Home Assistant discovery names a device by the MAC's last six digits


@dataclass(frozen=True, slots=True)
class Known:
    """A device the dialect imports: its endpoints with their addresses (from its config, or its kept routes)."""

    mac: str
    endpoints: tuple[tuple[str, Address], ...]
    groups: tuple[str, ...] = ()  # the command topic prefixes of its groups (from its config; none when restored)

    @property
    def first(self) -> Address:
        """The address of the device's own endpoint (topics, texts and availability are the device's)."""
        return self.endpoints[0][1]

    def topics(self) -> list[str]:
        """The topics its states, sensors and availability come on."""
        where = self.first.topics
        return [where.tele + t for t in _TELE_TOPICS] + [where.stat + t for t in _STAT_TOPICS]


# What a button reports with SetOption73 (`{"Button1":{"Action":"DOUBLE"}}`): its multi-presses and a long press.
BUTTON_ACTIONS = ("SINGLE", "DOUBLE", "TRIPLE", "QUAD", "PENTA", "HOLD")


class TasmotaDialect(Dialect):
    """Tasmota devices announced with Tasmota's own discovery."""

    name = DIALECT

    def __init__(self, config: TasmotaConfig, doorbells: Sequence[DoorbellConfig], *,
                 topics: CommandTopics | None = None, max_devices: int = MAX_DEVICES) -> None:
        self._prefix = config.discovery_prefix
        # Where its devices may take commands (hubd.dialects.topics); bound to every enabled dialect by `enabled.py`.
        self._command_topics = topics if topics is not None else CommandTopics(
            PublishRules(reserved=(f"{config.discovery_prefix}/",), groups=("tasmotas",)), [self])
        self._selected = Selected(config.include, config.exclude, ((d.device, d.event) for d in doorbells))
        self._max_devices = max_devices
        self._infos: dict[str, TasmotaInfo] = {}  # MAC → its last good config
        self._sensors: dict[str, dict[str, object]] = {}  # MAC → the `sn` of its sensors message
        self._devices: dict[str, Known] = {}  # MAC → the device imported
        # Lookups for the other dialects' questions: a command prefix (`cmnd/<topic>/`) → MACs; the MAC's last six
        # digits (legacy discovery's id) → MACs.
        self._cmnd: dict[str, set[str]] = {}
        self._chips: dict[str, set[str]] = {}
        # Topic prefixes no command may go to: its devices' stat and tele prefixes (read), their groups' command
        # prefixes (`cmnd/tasmotas/`: every device of the group obeys) → MACs.
        self._reads: dict[str, set[str]] = {}
        self._groups: dict[str, set[str]] = {}
        self._generation = 0  # changes when a MAC comes or goes (native_generation)
        self._topics: dict[str, tuple[str, str]] = {}  # device topic → (MAC, what comes there: LWT, STATE, ...)
        self._announced: dict[str, tuple[str, Route, Origin] | None] = {}  # endpoint → what it was (None: restored)
        self._left_out: dict[str, tuple[str, list[str]]] = {}  # MAC → (name, why it is not imported)
        self._subscribe: list[str] = []
        self._unsubscribe: list[str] = []
        self._to_poll: dict[str, None] = {}  # MACs to ask for their state once subscribed

    def subscriptions(self) -> list[tuple[str, int]]:
        """`<prefix>/#` and the topics of every device known so far, at QoS 1. Called once per connection, which
        asks every known device for its state again (what it said while hubd was away is not retained)."""
        self._to_poll.update((mac, None) for mac in self._devices)
        return [(f"{self._prefix}/#", 1), *((t, 1) for t in self._topics)]

    def pending_subscriptions(self) -> list[tuple[str, int]]:
        """The device topics learned since the last call."""
        added, self._subscribe = self._subscribe, []
        return [(t, 1) for t in added if t in self._topics]

    def pending_unsubscriptions(self) -> list[str]:
        """The topics of devices gone (or moved to another topic) since the last call."""
        removed, self._unsubscribe = self._unsubscribe, []
        return [t for t in removed if t not in self._topics]

    def requests(self) -> list[Outgoing]:
        """Once subscribed: ask each new device (and, on a new connection, every device) for its state
        (`cmnd/<topic>/STATE`) and, if it has sensors or shutters, their readings (`STATUS 10`), rather than wait up
        to a TelePeriod for them: questions to single devices, sent at once at a bounded rate (hubd.mqtt.requests)."""
        out: list[Outgoing] = []
        for mac in list(self._to_poll):
            known = self._devices.get(mac)
            if known is None:
                continue
            cmnd = known.first.topics.cmnd
            out.append(Outgoing(cmnd + "STATE", b""))
            if any(e.kind in ("sensor", "shutter", "input") for _, where in known.endpoints for e in where.entities):
                out.append(Outgoing(cmnd + "STATUS", b"10"))
        self._to_poll.clear()
        return out

    def restore(self, routes: Sequence[tuple[str, Route]]) -> None:
        """Know the devices of the kept routes (topics, entities), so the states queued for hubd are read before the
        retained configs come; each is asked for its state once subscribed."""
        grouped: dict[str, list[tuple[str, Address]]] = {}
        for device_id, route in routes:
            where = parse_address(route.address) if route.dialect == DIALECT else None
            if where is None:
                log.warning("%s: its kept Tasmota route is unreadable; it is updated when its discovery config comes",
                            device_id)
                continue
            grouped.setdefault(where.mac, []).append((device_id, where))
        for mac, endpoints in grouped.items():
            if mac in self._devices:
                continue
            own = mapping.endpoint_id(mac)
            self._use(Known(mac, tuple(sorted(endpoints, key=lambda e: (e[0] != own, e[0])))))
            self._announced.update({device_id: None for device_id, _ in endpoints})
            self._to_poll[mac] = None

    def claims(self, topic: str) -> bool:
        """Topics under the discovery prefix, and the topics of known devices."""
        return topic.startswith(self._prefix + "/") or topic in self._topics

    def decode(self, topic: str, payload: bytes, received_at: float, retained: bool) -> list[DeviceInput]:
        """The inputs a message means; a bad one is an InputRejected naming the topic and the fix."""
        if topic.startswith(self._prefix + "/"):
            return self._discovery(topic, payload)
        found = self._topics.get(topic)
        if found is None:
            return []
        mac, kind = found
        known = self._devices[mac]
        if kind == "LWT":
            return self._availability(known, topic, payload)
        return self._state(known, kind, topic, payload, received_at, retained)

    def encode_control(self, device_id: str, route: Route, request: ControlRequest) -> list[Outgoing]:
        """The publishes to `cmnd/<topic>/...` of the entity that takes the interface, from the Route address."""
        where = parse_address(route.address) if route.dialect == DIALECT else None
        if where is None:
            raise CommandRefused(f"{device_id}: its route is not a Tasmota address; wait for its discovery config to "
                                 "arrive again")
        current = self._devices.get(where.mac)
        if current is not None:  # the device's topics now (a changed FullTopic), its endpoint as it was
            where = Address(where.mac, where.name, current.first.topics, current.first.texts,
                            current.first.availability, where.entities)
        for entity in where.entities:
            if request.interface in part(entity).interfaces:
                return command(where, entity, request)
        raise CommandRefused(f"{device_id} has no Tasmota relay, light or shutter that takes {request.interface}")

    def owns_command_topic(self, topic: str) -> bool:
        """The command topics (`cmnd/<topic>/...`) of the devices this dialect imports."""
        return any(topic[:i + 1] in self._cmnd for i, c in enumerate(topic) if c == "/")

    def guards(self, topic: str) -> str | None:
        """The stat and tele topics of its devices (`stat/<topic>/POWER`, `tele/<topic>/STATE`: what they report),
        and their group topics (`cmnd/tasmotas/...` in their FullTopic's order)."""
        for prefix in (topic[:i + 1] for i, c in enumerate(topic) if c == "/"):
            for index, what in ((self._reads, "where Tasmota device {} reports"),
                                (self._groups, "the group topic of Tasmota device {}, which every device of the group "
                                               "obeys")):
                macs = index.get(prefix)
                if macs:
                    return what.format(self._label(min(macs)))
        return None

    def native_generation(self) -> int:
        """Changes whenever a device comes or goes."""
        return self._generation

    def imports_natively(self, announced: Announced) -> bool:
        """A device announced through Home Assistant discovery that is a Tasmota device imported here: one of its
        identifiers or connections is its MAC, or (Tasmota's legacy SetOption19 1 configs) the MAC's last six
        digits while its topics are that device's."""
        ids = {normal_mac(i) for i in announced.identifiers}
        ids |= {normal_mac(value) for kind, value in announced.connections if kind == "mac"}
        if not ids.isdisjoint(self._devices):
            return True
        return any(_shares_topics(self._devices[mac], announced.topics)
                   for chip in ids for mac in self._chips.get(chip, ()))

    def unexported_devices(self) -> list[Unexported]:
        """Devices not imported, with why (left out, nothing exported, a config hubd cannot use), by name."""
        out = [Unexported(mapping.endpoint_id(mac), name, tuple(reasons),
                          press_events(self._infos[mac]) if mac in self._infos else (),
                          topic=f"{self._prefix}/{mac}/config")
               for mac, (name, reasons) in self._left_out.items()]
        return sorted(out, key=lambda u: (u.name, u.endpoint_id))

    def reconfigure(self, selection: Selection) -> list[DeviceInput]:
        """New include/exclude and doorbells: every device announced again where that changes it, or gone."""
        self._selected = Selected(selection.include, selection.exclude, selection.doorbells)
        return [item for mac in list(self._infos) for item in self._rebuild(mac)]

    def doorbell_report(self) -> DoorbellReport:
        """The declarations, and each device one matched with the actions its buttons and switches report."""
        return self._selected.report()

    def doorbell_events(self, device_id: str) -> tuple[str, ...]:
        """The actions its buttons (SetOption73) and switches (SetOption114) report, for its own endpoint (its MAC:
        a doorbell is never a split-off part's)."""
        info = self._infos.get(device_id)
        return press_events(info) if info is not None and device_id in self._devices else ()

    # Discovery messages.

    def _discovery(self, topic: str, payload: bytes) -> list[DeviceInput]:
        where = parse_topic(self._prefix, topic)
        if where is None:
            if topic.endswith(("/config", "/sensors")):
                return [InputRejected("config", f"{topic}: not {self._prefix}/<MAC>/config or /sensors with a MAC "
                                                "of A-Za-z0-9_-; fix the device's discovery topic")]
            return []
        mac, kind = where
        if kind == "sensors":
            return self._sensors_message(topic, mac, payload)
        if not payload.strip():
            self._infos.pop(mac, None)
            self._left_out.pop(mac, None)
            return self._drop(mac)  # SetOption19 1: Tasmota's discovery off, the device removed
        try:
            info = read_config(mac, payload)
        except ConfigProblem as err:
            if mac not in self._devices:
                self._left_out[mac] = (mac, [f"its discovery config cannot be used: {err}"])
            return [InputRejected("config", f"{topic}: {err}; the device stays as it was")]
        if mac not in self._infos and len(self._infos) >= self._max_devices:
            reason = f"more than {self._max_devices} Tasmota devices; leave some out with tasmota.exclude"
            if len(self._left_out) < self._max_devices:
                self._left_out[mac] = (mac, [reason])
            return [InputRejected("config", f"{topic}: {reason}")]
        self._infos[mac] = info
        return self._rebuild(mac)

    def _sensors_message(self, topic: str, mac: str, payload: bytes) -> list[DeviceInput]:
        if not payload.strip():
            if self._sensors.pop(mac, None) is None:
                return []
        else:
            try:
                self._sensors[mac] = read_sensors(payload)
            except ConfigProblem as err:
                return [InputRejected("config", f"{topic}: {err}; the device's sensors stay as they were")]
        return self._rebuild(mac) if mac in self._infos else []

    def _rebuild(self, mac: str) -> list[DeviceInput]:
        """Announce what changed of a device after its config or sensors came."""
        info = self._infos[mac]
        names = info.identities()
        if not self._selected.included(names):
            self._left_out[mac] = (info.name(), ["left out by tasmota.include/exclude"])
            return self._drop(mac)
        event = self._selected.doorbell([*names, mapping.endpoint_id(mac)], device=info.name(),
                                        announces=press_events(info) or None, key=mac)
        built = build(info, self._sensors.get(mac), event)
        if not built.configs:
            self._left_out[mac] = (info.name(), [built.reason])
            return self._drop(mac)
        known = Known(mac, built.addresses, info.group_prefixes())
        refused = self._command_refusal(info, known)
        if refused is not None:
            self._left_out[mac] = (info.name(), [refused])
            return [InputRejected("config", f"{refused}; the device is not imported"), *self._drop(mac)]
        self._left_out.pop(mac, None)
        before = self._devices.get(mac)
        out: list[DeviceInput] = []
        if before is not None:
            out += [DeviceGone(e) for e, _ in before.endpoints if e not in {n for n, _ in known.endpoints}]
            for endpoint_id in (e for e, _ in before.endpoints):
                if endpoint_id not in {n for n, _ in known.endpoints}:
                    self._announced.pop(endpoint_id, None)
        if before is None or before.topics() != known.topics():
            self._to_poll[mac] = None
        if before is None:
            self._generation += 1
        self._use(known, before)
        for item in built.configs:
            seen = (item.config.canonical(), item.route, item.origin)
            if self._announced.get(item.device_id) != seen:
                self._announced[item.device_id] = seen
                out.append(item)
        return out

    def _command_refusal(self, info: TasmotaInfo, known: Known) -> str | None:
        """Why the device's command topics are not its own (None: they are): another device's `cmnd/<topic>/`
        already (two configs with one Topic: the device that holds it keeps it), or a topic hubd never publishes to
        (hubd.dialects.topics: another import's tree, a topic a device is read from, a group topic)."""
        cmnd = known.first.topics.cmnd
        holders = self._cmnd.get(cmnd, set()) - {known.mac}
        if holders:
            other = min(holders)
            return (f"its command topic {cmnd}... (t {info.topic!r}) is already Tasmota device "
                    f"{self._label(other)}'s (one command topic, one owner): give one of them another Topic")
        names = ("POWER", *(f"POWER{n + 1}" for n in range(len(info.relays))), "Dimmer", "CT", "Color2")
        for name in names:
            why = self._command_topics.refusal(cmnd + name, mapping.endpoint_id(known.mac), DIALECT)
            if why is not None:
                return f"{why}; hubd publishes only to a device's own command topics"
        return None

    def _label(self, mac: str) -> str:
        info = self._infos.get(mac)
        return f"{info.name()} ({mac})" if info is not None else mac

    def _drop(self, mac: str) -> list[DeviceInput]:
        known = self._devices.pop(mac, None)
        if known is None:
            return []
        self._generation += 1
        self._unindex(known)
        for topic in known.topics():
            self._topics.pop(topic, None)
            self._unsubscribe.append(topic)
        self._to_poll.pop(mac, None)
        for endpoint_id, _ in known.endpoints:
            self._announced.pop(endpoint_id, None)
        out: list[DeviceInput] = [DeviceGone(endpoint_id) for endpoint_id, _ in known.endpoints]
        freed = known.first.topics.cmnd  # a device refused for holding it in vain may have it now
        for other in [m for m in self._left_out if m != mac and m in self._infos]:
            if self._infos[other].topics().cmnd == freed:
                out += self._rebuild(other)
        return out

    def _use(self, known: Known, before: Known | None = None) -> None:
        """Make `known` the device of its MAC and its topics the ones the dialect reads."""
        old = before.topics() if before is not None else []
        new = known.topics()
        for topic in old:
            if topic not in new:
                self._topics.pop(topic, None)
                self._unsubscribe.append(topic)
        for topic, kind in zip(new, (*_TELE_TOPICS, *_STAT_TOPICS), strict=True):
            if self._topics.get(topic, (known.mac,))[0] != known.mac:
                log.warning("%s: topic %s is also device %s's; the device announced last reads it", known.mac, topic,
                            self._topics[topic][0])
            if topic not in self._topics:
                self._subscribe.append(topic)
            self._topics[topic] = (known.mac, kind)
        if before is not None:
            self._unindex(before)
        self._devices[known.mac] = known
        for index, key in self._lookups(known):
            index.setdefault(key, set()).add(known.mac)

    def _unindex(self, known: Known) -> None:
        for index, key in self._lookups(known):
            macs = index.get(key, set())
            macs.discard(known.mac)
            if not macs:
                index.pop(key, None)

    def _lookups(self, known: Known) -> tuple[tuple[dict[str, set[str]], str], ...]:
        where = known.first.topics
        return ((self._cmnd, where.cmnd), (self._chips, known.mac[-_CHIP_ID_DIGITS:]), (self._reads, where.stat),
                (self._reads, where.tele), *((self._groups, group) for group in known.groups))

    # Device messages.

    def _availability(self, known: Known, topic: str, payload: bytes) -> list[DeviceInput]:
        texts = known.first.availability
        if texts is None:
            return []  # a device in deep sleep says Offline between its wake-ups: not news
        text = payload.decode("utf-8", errors="replace").strip()
        if text not in texts:
            return [InputRejected("availability", f"{topic}: {text[:40]!r} is neither {texts[0]!r} nor {texts[1]!r} "
                                                  "(the onln and ofln of its discovery config)")]
        return [AvailabilityReceived(endpoint_id, text == texts[0]) for endpoint_id, _ in known.endpoints]

    def _state(self, known: Known, kind: str, topic: str, payload: bytes, received_at: float,
               retained: bool) -> list[DeviceInput]:
        data = state_object(payload)
        if data is None:
            return [InputRejected("state", f"{topic}: not a JSON object; Tasmota reports its state as one")]
        if kind == "STATUS10":
            status = data.get("StatusSNS")
            data = status if isinstance(status, dict) else {}
        out: list[DeviceInput] = []
        when = format_time(received_at)
        texts = known.first.texts
        for endpoint_id, where in known.endpoints:
            values: dict[str, StateValue] = {}
            momentary = False
            for entity in where.entities:
                if entity.kind == "doorbell":
                    if kind == "RESULT" and not retained and pressed(entity, data):
                        out.append(PressReceived(endpoint_id, when))
                    continue
                found, problems = read(entity, texts, data)
                values.update(found)
                momentary = momentary or released(entity, found)
                out += [InputRejected("state", f"{topic}: {problem}") for problem in problems]
            if values:
                samples = tuple(StateSample(interface, value, when) for interface, value in values.items())
                out.append(StateReceived(endpoint_id, samples))
            if momentary:  # a push-on input (a PIR in SwitchMode 13/14) never says OFF: its motion was a moment's
                out.append(StateReceived(endpoint_id, (StateSample("Switch", "Off", when),)))
        return out


def _shares_topics(known: Known, topics: Sequence[str]) -> bool:
    where = known.first.topics
    return any(t.startswith((where.cmnd, where.stat, where.tele)) for t in topics)


def press_events(info: TasmotaInfo) -> tuple[str, ...]:
    """The actions a device's buttons (SetOption73: SINGLE ... HOLD) and switches (SetOption114: its state texts,
    ON, OFF, TOGGLE, HOLD as it spells them) report, to declare one a doorbell; () when it reports none."""
    events: list[str] = list(BUTTON_ACTIONS) if any(info.buttons) else []
    if any(mode >= 0 for mode in info.switch_modes):
        events += [t for t in info.state_texts if t]
    return tuple(dict.fromkeys(events))
