"""What a simulated device is (pure, no MQTT): capabilities, states, the `set` rules, recorded input.

Owns SimDevice (the base of every kind in simulators.device_models and simulators.speaker), the
interface value rules of docs/devices.md and the state/event payloads of docs/mqtt.md. Time is passed
in as monotonic seconds, so everything here is testable without a clock. Must not import hubd (the
simulators play the outside world) nor paho.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, Generic, TypedDict, TypeGuard, TypeVar

log = logging.getLogger(__name__)

PHYSICAL_INTERACTION = "PHYSICAL_INTERACTION"
COLOR_MAX = 0xFFFFFF
PERCENT_ADJUST_STEP = 10.0  # the platform's default Adjust step of a percentage

T = TypeVar("T")


def utc_now_ms() -> str:
    """The current time as ISO 8601 UTC with milliseconds and Z (as the platform wants it)."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


class SetRejected(ValueError):
    """A set directive the device cannot apply; the text says why."""


@dataclass(frozen=True, slots=True)
class SetDirective:
    """A control directive received on `B/device/ID/set`."""

    id: str | None
    interface: str
    operation: str
    value: object | None = None
    delta: float | None = None


def parse_set(payload: bytes) -> SetDirective:
    """`{"id", "interface", "operation", "value"?, "delta"?}` → SetDirective; ValueError says why not."""
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not JSON: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"must be a JSON object, got {type(data).__name__}")
    interface, operation = data.get("interface"), data.get("operation")
    if not isinstance(interface, str) or not interface:
        raise ValueError("interface: must be a non-empty string")
    if not isinstance(operation, str) or not operation:
        raise ValueError("operation: must be a non-empty string")
    directive_id = data.get("id")
    delta = data.get("delta")
    if delta is not None and not is_number(delta):
        raise ValueError(f"delta: must be a number, got {delta!r}")
    return SetDirective(
        id=directive_id if isinstance(directive_id, str) else None,
        interface=interface,
        operation=operation,
        value=data.get("value"),
        delta=float(delta) if delta is not None else None,
    )


@dataclass(frozen=True, slots=True)
class InterfaceSpec:
    """One capability of a device and the rules for its value (docs/devices.md)."""

    name: str
    operations: tuple[str, ...]
    enum_values: tuple[str, ...] = ()  # non-empty: an enum interface whose value is an operation name (D6)
    low: float = 0.0
    high: float = 100.0
    step: float = PERCENT_ADJUST_STEP
    presets: tuple[tuple[str, float], ...] = ()  # e.g. FanSpeed SetHigh → 100
    integer: bool = True
    proactively_reported: bool = True
    retrievable: bool = True

    def capability(self) -> dict[str, object]:
        """The capability as it goes into the device config."""
        return {
            "interface": self.name,
            "supportedOperations": list(self.operations),
            "proactivelyReported": self.proactively_reported,
            "retrievable": self.retrievable,
        }

    def coerce(self, value: object) -> object:
        """A value for this interface, clamped to its range; SetRejected if the type is wrong."""
        if self.enum_values:
            if not isinstance(value, str) or value not in self.enum_values:
                raise SetRejected(f"{self.name} takes one of {list(self.enum_values)}, got {value!r}")
            return value
        if not is_number(value):
            raise SetRejected(f"{self.name} takes a number, got {value!r}")
        number = float(value)
        clamped = min(max(number, self.low), self.high)
        if clamped != number:
            log.warning("%s %s is outside %s..%s; clamped to %s",
                        self.name, value, self.low, self.high, clamped)
        return self.number(clamped)

    def number(self, value: float) -> int | float:
        """A JSON-friendly number: an int when integral, else one decimal."""
        if self.integer:
            return round(value)
        return int(value) if float(value).is_integer() else round(value, 1)

    def resolve(self, directive: SetDirective, current: object, rng: random.Random) -> object:
        """The new value a directive asks for (docs/mqtt.md's `set` rules)."""
        if directive.value is not None:
            return self.coerce(directive.value)
        op = directive.operation
        if self.enum_values:
            if op in self.enum_values:
                return op
            raise SetRejected(f"{self.name}.{op} needs a value")
        presets = dict(self.presets)
        if op == "SetMax":
            return self.number(self.high)
        if op == "SetMin":
            return self.number(self.low)
        if op == "SetRandom":
            return rng.randint(math.ceil(self.low), math.floor(self.high))
        if op in presets:
            return self.coerce(presets[op])
        if op == "Adjust":
            base = float(current) if is_number(current) else self.low
            delta = directive.delta if directive.delta is not None else self.step
            return self.number(min(max(base + delta, self.low), self.high))
        raise SetRejected(f"{self.name}.{op} needs a value")


@dataclass(frozen=True, slots=True)
class StateReport:
    """States a device publishes; the list form carries timeOfSample and may carry a cause."""

    states: Mapping[str, object]
    cause: str | None = None
    list_form: bool = False

    def payload(self) -> dict[str, object]:
        """The `B/device/ID/state` payload: the map form, or the list form if asked for or with a cause."""
        if not (self.list_form or self.cause):
            return dict(self.states)
        when = utc_now_ms()
        body: dict[str, object] = {
            "states": [{"interface": k, "value": v, "timeOfSample": when} for k, v in self.states.items()]
        }
        if self.cause:
            body["cause"] = self.cause
        return body


@dataclass(frozen=True, slots=True)
class DoorbellPressed:
    """A doorbell press to publish on `B/device/ID/event`."""

    def payload(self) -> dict[str, object]:
        """The event payload with the press time in UTC milliseconds."""
        return {"name": "DoorbellPress", "timestamp": utc_now_ms()}


Happening = StateReport | DoorbellPressed


class Recorder(Generic[T]):
    """Items a simulator received, in order, with an awaitable lookup for tests."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self._waiters: list[tuple[Callable[[T], bool], asyncio.Future[T]]] = []

    def add(self, item: T) -> None:
        """Record an item and wake whoever waits for one like it."""
        self.items.append(item)
        for pred, fut in self._waiters:
            if not fut.done() and pred(item):
                fut.set_result(item)
        self._waiters = [(p, f) for p, f in self._waiters if not f.done()]

    async def wait_for(self, pred: Callable[[T], bool] | None = None, timeout_s: float = 5.0) -> T:
        """The first recorded item matching `pred` (any if None), waiting up to timeout_s; TimeoutError."""
        match = pred or (lambda _item: True)
        for item in self.items:
            if match(item):
                return item
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiters.append((match, fut))
        try:
            async with asyncio.timeout(timeout_s):
                return await fut
        finally:
            fut.cancel()
            self._waiters = [(p, f) for p, f in self._waiters if f is not fut]


class CommonOptions(TypedDict, total=False):
    """Options every device kind takes."""

    display_name: str
    room: str
    home: str
    delay_s: float
    seed: int | None


class SimDevice:
    """A simulated device: its config, its current states and how it reacts to set and time."""

    kind: ClassVar[str] = ""
    label: ClassVar[str] = "Device"  # the default display name is "<room> <label>" (no digits: the platform's rule)
    display_type: ClassVar[str] = "unknown"
    accepts_commands: ClassVar[bool] = False

    def __init__(
        self,
        endpoint_id: str,
        *,
        interfaces: Sequence[InterfaceSpec],
        initial: Mapping[str, object],
        additional_info: Mapping[str, str] | None = None,
        display_name: str | None = None,
        room: str = "Living Room",
        home: str = "Home",
        delay_s: float = 0.0,
        seed: int | None = None,
    ) -> None:
        if not endpoint_id or any(c in endpoint_id for c in "/+#\x00"):
            raise ValueError(f"endpoint id {endpoint_id!r} cannot be used in a topic (no '/', '+', '#')")
        self.endpoint_id = endpoint_id
        self.display_name = display_name or f"{room} {self.label}"
        self.room = room
        self.home = home
        self.delay_s = delay_s
        self.rng = random.Random(seed)
        self.additional_info: dict[str, str] = {"kind": self.kind, **(additional_info or {})}
        self.sets: Recorder[SetDirective] = Recorder()
        self._specs = {spec.name: spec for spec in interfaces}
        self._values: dict[str, object] = {name: initial[name] for name in self._specs}

    @property
    def controllable(self) -> bool:
        """Whether any interface takes operations (then the device listens on `set`)."""
        return any(spec.operations for spec in self._specs.values())

    def config(self) -> dict[str, object]:
        """The retained `B/device/ID/config` payload (the Endpoint without states)."""
        return {
            "displayName": self.display_name,
            "displayType": self.display_type,
            "recommendRoomName": self.room,
            "recommendHomeName": self.home,
            "additionalInfo": dict(self.additional_info),
            "capabilities": [spec.capability() for spec in self._specs.values()],
        }

    def state(self) -> dict[str, object]:
        """Every interface's current value."""
        return dict(self._values)

    def apply_set(self, directive: SetDirective, now: float) -> None:
        """Apply a set directive; SetRejected (nothing changed) if the device cannot."""
        spec = self._specs.get(directive.interface)
        if spec is None:
            raise SetRejected(f"no interface {directive.interface!r}; it has {list(self._specs)}")
        if directive.operation not in spec.operations:
            raise SetRejected(f"{spec.name} does not support {directive.operation!r}; it supports "
                              f"{list(spec.operations)}")
        self._assign(spec.name, spec.resolve(directive, self._values[spec.name], self.rng), now)

    def absorb(self, states: Mapping[str, object], now: float) -> None:
        """Take over states published from outside the model (values it cannot hold are skipped)."""
        for name, value in states.items():
            spec = self._specs.get(name)
            if spec is None:
                continue
            try:
                self._values[name] = spec.coerce(value)
            except SetRejected:
                continue

    def random_step(self, now: float) -> Happening | None:
        """A realistic spontaneous change for one random-mode interval, or None."""
        return None

    def next_deadline(self, now: float) -> float | None:
        """When the device next wants advance() called (monotonic seconds), or None."""
        return None

    def advance(self, now: float) -> Happening | None:
        """Apply changes that are due by `now` (movement, hold times); what to publish, or None."""
        return None

    async def handle_command(self, payload: bytes) -> dict[str, object] | None:
        """Execute a `B/device/ID/command`; the `command/result` payload, or None when there is no id."""
        raise NotImplementedError(f"{self.kind} devices take no commands")

    def _assign(self, name: str, value: object, now: float) -> None:
        self._values[name] = value


def is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def as_float(value: object) -> float:
    """A stored numeric state as float (TypeError if it is not a number)."""
    if not is_number(value):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)
