"""The seam between MQTT device dialects and the rest of hubd: typed device inputs, routes, the Dialect base class.

A dialect (a row of the table in `hubd.dialects.enabled`: hubd's own topics, a maker's own announcements such as
zigbee2mqtt's or Tasmota's, Home Assistant MQTT discovery) turns the MQTT messages it claims into
typed `DeviceInput`s, and a control or speaker command for one of its devices into `Outgoing` MQTT publishes.
Each lives in a folder of its own under `hubd/dialects/` on the `Dialect` base class here; `hubd.dialects.enabled`
builds the enabled ones from the config, in claim order. Everything after the seam (registry, outbox, directives,
webhook) sees only these types and never knows which dialect a device came from. A device's `Route` (its
dialect and the address that dialect gave it, `hubd.devices.model`) is kept with the device in SQLite, so a
command goes where the device listens, also after a restart. The seam knows nothing of MQTT sessions, storage or
the platform: what crosses it is typed values of the device model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hubd.devices.model import CommandResult, DeviceConfig, Origin, Route, StateSample, StateValue
from hubd.dialects.globs import DoorbellReport


@dataclass(frozen=True, slots=True)
class ConfigReceived:
    """A device is announced or its description changed (its whole config, not a delta)."""

    device_id: str
    config: DeviceConfig
    route: Route
    origin: Origin = field(default_factory=lambda: Origin("native"))


@dataclass(frozen=True, slots=True)
class DeviceGone:
    """A device was removed (an empty retained config, its last exported entity removed, gone from a bridge)."""

    device_id: str


@dataclass(frozen=True, slots=True)
class StateReceived:
    """Interface values a device reported (only interfaces it has; the registry decides what changed)."""

    device_id: str
    samples: tuple[StateSample, ...]
    cause: str = "PHYSICAL_INTERACTION"


@dataclass(frozen=True, slots=True)
class PressReceived:
    """A doorbell press (every one counts: never merged, never dropped)."""

    device_id: str
    timestamp: str  # ISO 8601 UTC with milliseconds


@dataclass(frozen=True, slots=True)
class AvailabilityReceived:
    """A device is reachable (True) or not (False)."""

    device_id: str
    online: bool


@dataclass(frozen=True, slots=True)
class ResultReceived:
    """A speaker's answer to a command."""

    device_id: str
    result: CommandResult


@dataclass(frozen=True, slots=True)
class InputRejected:
    """A message the dialect could not use: logged with the topic and counted, never raised further."""

    kind: str  # the message kind for the metric label: "config", "state", "event", ...
    reason: str  # one sentence naming the field and the fix


DeviceInput = (ConfigReceived | DeviceGone | StateReceived | PressReceived | AvailabilityReceived | ResultReceived
               | InputRejected)


def input_kind(item: DeviceInput) -> str:
    """The kind of message an input came from, for metrics labels: "config", "state", "event", ..."""
    return item.kind if isinstance(item, InputRejected) else _KINDS[type(item)]


_KINDS: dict[type, str] = {ConfigReceived: "config", DeviceGone: "config", StateReceived: "state",
                           PressReceived: "event", AvailabilityReceived: "availability",
                           ResultReceived: "command_result"}


@dataclass(frozen=True, slots=True)
class Decoded:
    """What one MQTT message meant: zero or more inputs, in order, with where and when it arrived."""

    topic: str
    received_at: float  # epoch seconds
    retained: bool
    inputs: tuple[DeviceInput, ...]
    source: str = ""  # the dialect that decoded it: a device is changed only by its own dialect ("": unchecked)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One MQTT publish a dialect asks for."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """A control directive for one device, resolved to the state it must reach.

    `value` is the target state in platform terms (Switch "On", Brightness 40, Color 0xFF8800, Temperature 21.5,
    Position 30, Mode "Heat", FanSpeed 60, MotionSwitch "Off" = stop); None when only the device knows it
    (an Adjust of an unknown state), with `delta` then. `states` are the device's current states by interface,
    for dialects whose commands need more than one value (an RGB colour with its brightness).
    """

    command_id: str
    interface: str
    operation: str
    value: StateValue | None
    delta: float | None
    states: dict[str, StateValue]


@dataclass(frozen=True, slots=True)
class PublishRules:
    """The fixed part of where hubd may publish a device command (CONTRACT: a device's own command topics only); the
    part that changes with the devices (read topics, group topics, topics another device holds) is the dialects' and
    `hubd.dialects.topics.CommandTopics` asks both: that is the one rule.

    Never under hubd's own base topic but a native device's `B/device/ID/set` and `/command`, never under a
    zigbee2mqtt installation's `bridge/` (its requests: remove a device, permit joining), under a discovery prefix
    (configs), or on a `$` topic, whatever a discovery config says; never a topic with a wildcard or NUL; never on
    a group topic (`groups`: Tasmota's level `tasmotas`, which every Tasmota on the network obeys); and under another
    import's tree (`trees`: a zigbee2mqtt base topic) only for the dialects that import from it. The dialect table
    (`enabled.py`) makes it from the config and its rows, whether or not a row's dialect is enabled.
    """

    base_topic: str = "hubd"
    reserved: tuple[str, ...] = ()  # topic prefixes (ending in "/") hubd never publishes under
    trees: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (topic prefix ending in "/", the dialects that may publish)
    groups: tuple[str, ...] = ()  # topic levels that address every device of a kind at once (Tasmota's `tasmotas`)

    def refusal(self, topic: str, device_id: str | None = None, dialect: str = "") -> str | None:
        """Why hubd must not publish a command of `dialect`'s device `device_id` on `topic` (None: it may, as far as
        the fixed rules go). A native device's `set` and `command` topics are its own."""
        if not topic or "+" in topic or "#" in topic or "\x00" in topic:
            return f"{topic!r} is not a topic hubd can publish to (empty, a wildcard or NUL)"
        if topic.startswith("$"):
            return f"{topic!r} is a broker topic ($...)"
        base = self.base_topic + "/"
        if topic.startswith(base):
            if dialect == "native" and device_id is not None and topic in (f"{base}device/{device_id}/set",
                                                                           f"{base}device/{device_id}/command"):
                return None
            return f"{topic!r} is under hubd's own topics ({base}), where only its devices' set and command go"
        for prefix in self.reserved:
            if topic.startswith(prefix):
                return f"{topic!r} is under {prefix}, which is not a device's command topic"
        for prefix, dialects in self.trees:
            if topic.startswith(prefix) and dialect not in dialects:
                return f"{topic!r} is under {prefix}, the topics of another import ({', '.join(dialects)})"
        group = next((level for level in topic.split("/") if level in self.groups), None)
        if group is not None:
            return f"{topic!r} is the group topic {group!r}, which every device of its kind on the network obeys"
        return None


@dataclass(frozen=True, slots=True)
class Selection:
    """What a dialect imports and which buttons are doorbells, as the config and the owner say now: its section's
    `include`/`exclude` globs and the `doorbells` declarations `(device glob, event)`, the config's and the owner's
    (whose glob is an endpointId), and the endpointIds whose kept-back entities the owner exposed (`exposed`, a
    device's, or one entity's split-off `<device id>-<object_id>` beside its exported device: a
    diagnostic or config entity that is a real device function is then exported, with the capabilities the dialect
    gives it; never a maintenance action). Handed to `Dialect.reconfigure` when it changes (SIGHUP, the devices
    page)."""

    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    doorbells: tuple[tuple[str, str], ...] = ()
    exposed: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Unexported:
    """A device a dialect leaves out entirely (none of its entities reaches the platform), or one entity it keeps back
    by rule of a device it exports (as the split-off it would become), for the status page and the owner's devices
    page: the endpointId it would have, its name, why not (per entity), the events a press of
    its button could be (what it announces), to declare it a doorbell, and the topic its config came on.
    `exposable`: some entity is kept back by a rule the owner may lift (`{"exposed": true}`: a diagnostic or
    config entity with a platform interface); `rule`: the rule that keeps it back even from the owner (a
    maintenance action), when nothing of it may be exposed."""

    endpoint_id: str
    name: str
    reasons: tuple[str, ...]
    events: tuple[str, ...] = ()
    exposable: bool = False
    rule: str | None = None
    topic: str = ""  # where its config came (a discovery topic; several joined by ", "), where the dialect knows


# The rule no owner lifts: what restarts, erases, resets, updates or identifies a device never reaches a voice.
MAINTENANCE_RULE = ("maintenance actions (restart, reboot, erase, reset, factory reset, update/OTA, identify; any "
                    "button) are never exported, so that no voice command restarts or erases a device")


def topic_matches(pattern: str, topic: str) -> bool:
    """Whether an MQTT topic filter (`+` one level, a final `#` any levels, the parent included) matches `topic`."""
    if "+" not in pattern and "#" not in pattern:
        return pattern == topic
    want, have = pattern.split("/"), topic.split("/")
    for index, level in enumerate(want):
        if level == "#":
            return True
        if index >= len(have) or (level != "+" and level != have[index]):
            return False
    return len(want) == len(have)


class CommandRefused(Exception):
    """A dialect cannot express this command for this device (the text says why, for the platform's error)."""


class CommandTemplateFailed(CommandRefused):
    """The device's own command template failed (past its deadline or memory, say): a fault of the device's
    config, so besides the platform's error it is listed under problems."""


@dataclass(frozen=True, slots=True)
class Announced:
    """Who made a device announced through Home Assistant discovery, as its config says: for the dialects that
    import that maker natively (`Dialect.imports_natively`), so the device is imported once, natively."""

    origin: str  # the config's `origin.name` ("" without one)
    identifiers: tuple[str, ...]
    connections: tuple[tuple[str, str], ...]
    topics: tuple[str, ...]  # every *_topic of the entity


class Dialect(ABC):
    """One way devices speak MQTT. Stateful where the format needs it (discovery configs, a bridge's device list).

    The four abstract methods are what every dialect must say; the rest have the defaults most dialects want
    (no state to restore, fixed subscriptions, nothing to announce or ask, no speakers, nothing left out).
    """

    name: ClassVar[str]  # its row's name in the table: the Route's dialect, its devices' source ("native", ...)

    @abstractmethod
    def subscriptions(self) -> list[tuple[str, int]]:
        """The topic filters to subscribe to, with their QoS."""

    @abstractmethod
    def claims(self, topic: str) -> bool:
        """Whether a message on this topic is this dialect's to decode."""

    @abstractmethod
    def decode(self, topic: str, payload: bytes, received_at: float, retained: bool) -> list[DeviceInput]:
        """The inputs a message means; a bad message is an InputRejected, never an exception."""

    @abstractmethod
    def encode_control(self, device_id: str, route: Route, request: ControlRequest) -> list[Outgoing]:
        """The publishes that ask the device for the request's state; CommandRefused if it cannot be said."""

    def large_topics(self) -> tuple[str, ...]:
        """Topics whose messages may be larger than mqtt.max_message_bytes (the dialect bounds them itself): a
        bridge's whole device list. Default: none."""
        return ()

    def restore(self, routes: Sequence[tuple[str, Route]]) -> None:
        """Prime the dialect from the routes kept with its devices (device_id, route), before the first message.

        Messages queued for hubd's persistent session arrive before the retained configs that describe
        them: a dialect must be able to read a device's states from what its route kept. Default: nothing to
        prime (every topic names its device).
        """
        return

    def close(self) -> None:
        """Release what the dialect holds (a process of its own, say) at hubd's stop. Default: nothing."""
        return

    def pending_subscriptions(self) -> list[tuple[str, int]]:
        """Topic filters needed since the last call (learned from configs), to subscribe to as they appear."""
        return []

    def pending_unsubscriptions(self) -> list[str]:
        """Topics no device of the dialect reads any more since the last call (its last entity gone), to drop."""
        return []

    def announcements(self) -> list[Outgoing]:
        """What to publish once subscribed (on every connection and, while new subscriptions come, at most once every
        10 s): what reaches every device on the bus at once, e.g. Home Assistant's birth message, on which discovery
        devices announce themselves and send their states again. A question to one device is a `requests` one."""
        return []

    def requests(self) -> list[Outgoing]:
        """Questions to single devices found since the last call (Shelly's GetDeviceInfo on `<prefix>/rpc`), to send
        once the subscriptions of the batch that found them are made (their answers' topics): at once, not at the
        announcements' pace, but at a bounded rate and each checked against the one publish rule like a device
        command (`hubd.mqtt.requests`). Asked after every batch; what a connection did not send is dropped, so a
        dialect asks its devices again on every connection (`subscriptions`). Default: none."""
        return []

    def encode_speaker(self, device_id: str, route: Route, command: dict[str, Any]) -> list[Outgoing]:
        """The publishes of a speaker command (`{"id", "type", "text"?, "url"?}`); CommandRefused if not a speaker."""
        raise CommandRefused(f"{device_id} is not a speaker: it came from {self.name}, which has none hubd can command")

    def unexported_devices(self) -> list[Unexported]:
        """Devices this dialect leaves out entirely, with their endpointIds and a reason per entity (for the status
        page and the devices page), sorted by name."""
        return []

    def reconfigure(self, selection: Selection) -> list[DeviceInput]:
        """Take a new selection (include/exclude, doorbells) at run time and say what re-evaluating the devices it
        knows means: configs announced again (a doorbell declared, a device newly included), devices gone (newly
        excluded). The bridge hands the inputs to the registry as a batch, never while it pumps. Default: the
        dialect has nothing to select (no inputs)."""
        return []

    def doorbell_events(self, device_id: str) -> tuple[str, ...]:
        """The events a press of this endpoint's button could be (what the device announces), to pick one of when
        declaring it a doorbell; () when it announces none (any event may still be declared)."""
        return ()

    def doorbell_report(self) -> DoorbellReport:
        """The `doorbells` declarations this dialect matches devices against, and each device one matched with the
        events it announces (hubd.dialects.doorbells names those that cannot ring). Default: none."""
        return DoorbellReport()

    def guards(self, topic: str) -> str | None:
        """Why no command may go to `topic` for the sake of this dialect's devices (None: none), phrased to follow
        "'<topic>' is ...": a topic one of them is read from (state, availability, attributes: a command there forges
        a state hubd itself reports), or a group topic that reaches them all. Default: a topic one of the dialect's
        subscriptions matches."""
        for pattern, _ in self.subscriptions():
            if topic_matches(pattern, topic):
                return f"where {self.name} devices are read from ({pattern})"
        return None

    def owns_command_topic(self, topic: str) -> bool:
        """Whether `topic` is where this dialect's own devices take commands (so no discovered entity may publish
        there: a light of discovery on a zigbee2mqtt lock's /set, say)."""
        return False

    def native_generation(self) -> int:
        """A number that changes whenever the devices this dialect imports natively change (for `imports_natively`:
        a device discovery imported before its native config came is then left to it)."""
        return 0

    def pending_inputs(self) -> list[DeviceInput]:
        """Inputs the dialect made outside a decode since the last call (devices it now leaves to another
        dialect: gone); the bridge hands them on before the batch that caused them. Default: none."""
        return []

    def imports_natively(self, announced: Announced) -> bool:
        """Whether this dialect imports the device a Home Assistant discovery config describes itself (so that
        discovery leaves it alone: one device, one import)."""
        return False
