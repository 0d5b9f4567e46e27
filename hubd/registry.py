"""The device registry: the single writer of device configs, states and availability.

It turns device messages into changes (new/updated/deleted device, changed states, presses) and
hands them with the rows to persist to the next stage (`ChangeSink`, the reporter), which writes
both in one transaction. Others read devices (`get`, `devices`) and may wait for a device's state
(`wait_for_state`), but never write. Configs and states are brought into the shape the platform accepts
(`hubd.conformance`) before anything is kept: what the platform would refuse is refused here, with the topic.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hubd import conformance
from hubd.errors import DeviceMessageInvalid
from hubd.events import DeviceMessage
from hubd.metrics import Metrics
from hubd.mqtt import codec
from hubd.mqtt.codec import CommandResult, DeviceConfig, StateSample
from hubd.mqtt.topics import valid_device_id
from hubd.store.db import Database

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Device:
    """What hubd knows of one device."""

    device_id: str
    config: DeviceConfig
    states: dict[str, StateSample] = field(default_factory=dict)
    online: bool | None = None

    def state_list(self, *, with_time: bool = True, retrievable_only: bool = False) -> list[dict[str, Any]]:
        """States as SPEC.md 2.5 objects, in capability order."""
        out: list[dict[str, Any]] = []
        for cap in self.config.capabilities:
            sample = self.states.get(cap.interface)
            if sample is None or (retrievable_only and not cap.retrievable):
                continue
            item: dict[str, Any] = {"interface": sample.interface, "value": sample.value}
            if with_time:
                item["timeOfSample"] = sample.time_of_sample
            out.append(item)
        return out

    def endpoint(self) -> dict[str, Any]:
        """The full Endpoint of SPEC.md 2.3 with current states (timeOfSample included)."""
        out = self.config.endpoint(self.device_id)
        out["states"] = self.state_list()
        return out

    def row(self) -> tuple[str, str, str, int | None]:
        """The `devices` table row."""
        states = {k: [s.value, s.time_of_sample] for k, s in self.states.items()}
        online = None if self.online is None else int(self.online)
        return (self.device_id, self.config.canonical(), json.dumps(states, separators=(",", ":")), online)


@dataclass(frozen=True, slots=True)
class DeviceAnnounced:
    """A device is new or its description changed."""

    device: Device
    endpoint: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeviceRemoved:
    """A device's config was cleared."""

    device_id: str


@dataclass(frozen=True, slots=True)
class StatesChanged:
    """Some interface values changed."""

    device_id: str
    changed: tuple[StateSample, ...]
    snapshot: tuple[dict[str, Any], ...]
    additional_info: dict[str, str]
    proactive: frozenset[str]
    cause: str


@dataclass(frozen=True, slots=True)
class DoorbellPressed:
    """A doorbell was pressed."""

    device_id: str
    timestamp: str


@dataclass(frozen=True, slots=True)
class AvailabilityChanged:
    """A device went online or offline."""

    device_id: str
    online: bool


@dataclass(frozen=True, slots=True)
class CommandResultReceived:
    """A speaker answered a command."""

    device_id: str
    result: CommandResult
    received_at: float


Change = DeviceAnnounced | DeviceRemoved | StatesChanged | DoorbellPressed | AvailabilityChanged | CommandResultReceived


@dataclass(frozen=True, slots=True)
class DeviceRows:
    """What to persist for a batch: rows to upsert and ids to delete."""

    upserts: tuple[tuple[str, str, str, int | None], ...]
    deletes: tuple[str, ...]


class ChangeSink(Protocol):
    """The next stage: persists the rows and whatever the changes cause, in one transaction."""

    async def commit(self, changes: Sequence[Change], rows: DeviceRows) -> None:
        """Persist; return once durable."""


class DeviceRegistry:
    """Loads devices at start, applies device messages, passes changes on."""

    name = "registry"

    def __init__(self, db: Database, sink: ChangeSink, metrics: Metrics, *, brand: str = "Service") -> None:
        self._db = db
        self._sink = sink
        self._brand = brand  # platform.namespace: a "<brand>.Switch" interface is "Switch"
        self._devices: dict[str, Device] = {}
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._invalid = metrics.counter("hubd_device_messages_invalid_total",
                                        "device messages ignored as invalid, by kind", "kind")
        metrics.gauge("hubd_devices", "devices known", lambda: float(len(self._devices)))

    async def start(self) -> None:
        """Load the persisted devices."""
        for device in await self._db.call(load_devices_blocking):
            self._devices[device.device_id] = device
        log.info("loaded %d devices", len(self._devices))

    async def run(self) -> None:
        """The registry is driven by `handle`; nothing to loop over."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Nothing to release."""

    def get(self, device_id: str) -> Device | None:
        """One device, or None."""
        return self._devices.get(device_id)

    def devices(self) -> list[Device]:
        """Every known device, sorted by id."""
        return [self._devices[k] for k in sorted(self._devices)]

    async def wait_for_state(self, device_id: str, predicate: Callable[[Device], bool], timeout_s: float) -> bool:
        """Wait until the device's state satisfies `predicate`; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            device = self._devices.get(device_id)
            if device is not None and predicate(device):
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.setdefault(device_id, []).append(future)
            try:
                async with asyncio.timeout(remaining):
                    await future
            except TimeoutError:
                return False
            finally:
                waiters = self._waiters.get(device_id, [])
                if future in waiters:
                    waiters.remove(future)

    async def handle(self, messages: Sequence[DeviceMessage]) -> None:
        """Apply a batch in order; invalid messages are logged and counted, never raised."""
        changes: list[Change] = []
        dirty: dict[str, Device] = {}
        deleted: set[str] = set()
        for message in messages:
            try:
                for change in self._apply(message):
                    changes.append(change)
                    if isinstance(change, DeviceRemoved):
                        dirty.pop(change.device_id, None)
                        deleted.add(change.device_id)
                    elif not isinstance(change, DoorbellPressed | CommandResultReceived):
                        device = self._devices[change.device.device_id if isinstance(change, DeviceAnnounced)
                                               else change.device_id]
                        dirty[device.device_id] = device
                        deleted.discard(device.device_id)
            except DeviceMessageInvalid as err:
                self._invalid.inc(label=message.kind)
                log.warning("ignored message on %s: %s", message.topic, err)
        if not changes:
            return
        rows = DeviceRows(tuple(d.row() for d in dirty.values()), tuple(sorted(deleted)))
        await self._sink.commit(changes, rows)
        for device_id in {*dirty, *deleted}:
            for future in self._waiters.pop(device_id, []):
                if not future.done():
                    future.set_result(None)

    def _apply(self, message: DeviceMessage) -> list[Change]:
        device_id = message.device_id
        if not valid_device_id(device_id):
            raise DeviceMessageInvalid("the endpointId in the topic may not contain '/', '+' or '#'")
        if message.kind == "config":
            return self._apply_config(device_id, message)
        device = self._devices.get(device_id)
        if device is None:
            raise DeviceMessageInvalid(
                f"unknown device {device_id!r}: publish its config on the config topic (retained) first")
        if message.kind == "state":
            return self._apply_state(device, codec.parse_state(message.payload, message.received_at))
        if message.kind == "event":
            return [DoorbellPressed(device_id, codec.parse_event(message.payload, message.received_at))]
        if message.kind == "availability":
            online = codec.parse_availability(message.payload)
            if device.online == online:
                return []
            device.online = online
            return [AvailabilityChanged(device_id, online)]
        return [CommandResultReceived(device_id, codec.parse_command_result(message.payload), message.received_at)]

    def _apply_config(self, device_id: str, message: DeviceMessage) -> list[Change]:
        config = codec.parse_config(message.payload, self._brand)
        existing = self._devices.get(device_id)
        if config is None:
            if existing is None:
                return []
            del self._devices[device_id]
            return [DeviceRemoved(device_id)]
        if config.endpointId is not None and config.endpointId != device_id:
            raise DeviceMessageInvalid(
                f"endpointId {config.endpointId!r} differs from the topic's {device_id!r}; drop it or make them equal")
        config, renamed = conformance.conform_config(config)
        if existing is not None and existing.config.canonical() == config.canonical():
            return []
        if renamed:
            # Once per new or changed config (a replayed retained config is unchanged and says nothing).
            log.warning("%s: the platform refuses digits and punctuation in names (PROTOCOL.md 8), so %s",
                        message.topic, "; ".join(f"{r.field} {r.old!r} is sent as {r.new!r}" if r.new is not None
                                                 else f"{r.field} {r.old!r} is left out" for r in renamed))
        if existing is None:
            device = Device(device_id, config)
            self._devices[device_id] = device
        else:
            device = existing
            device.config = config
            kept = {c.interface for c in config.capabilities}
            device.states = {k: v for k, v in device.states.items() if k in kept}
        return [DeviceAnnounced(device, device.endpoint())]

    def _apply_state(self, device: Device, update: codec.StateUpdate) -> list[Change]:
        changed: list[StateSample] = []
        samples: list[StateSample] = []
        for sample in update.samples:
            interface = conformance.interface_name(sample.interface, self._brand)  # "Service.Switch"
            cap = device.config.capability(interface)
            if cap is None:
                raise DeviceMessageInvalid(
                    f"interface {sample.interface!r} is not in the device's capabilities "
                    f"({[c.interface for c in device.config.capabilities]}); add it to the config first")
            # The whole message is refused if one value is: the platform would refuse the ChangeReport.
            value = conformance.conform_value(interface, sample.value)
            same = interface == sample.interface and value is sample.value
            samples.append(sample if same else StateSample(interface, value, sample.time_of_sample))
        for sample in samples:
            old = device.states.get(sample.interface)
            if old is not None and old.value == sample.value:
                continue
            device.states[sample.interface] = sample
            changed.append(sample)
        if not changed:
            return []
        proactive = frozenset(c.interface for c in device.config.capabilities if c.proactivelyReported)
        return [StatesChanged(device.device_id, tuple(changed), tuple(device.state_list()),
                              dict(device.config.additionalInfo), proactive, update.cause)]


def load_devices_blocking(conn: sqlite3.Connection) -> list[Device]:
    """Every device in the `devices` table, sorted by id (the registry at start; a new grant's devices)."""
    devices = []
    for device_id, config_json, states_json, online in conn.execute(
            "SELECT id, config, states, online FROM devices ORDER BY id"):
        states = {k: StateSample(k, v[0], v[1]) for k, v in json.loads(states_json).items()}
        devices.append(Device(device_id, codec.load_config(config_json), states,
                              None if online is None else bool(online)))
    return devices


def write_rows_blocking(conn: sqlite3.Connection, rows: DeviceRows) -> None:
    """Upsert and delete device rows (inside the caller's transaction)."""
    conn.executemany(
        "INSERT INTO devices (id, config, states, online) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET config=excluded.config, states=excluded.states, online=excluded.online",
        rows.upserts,
    )
    conn.executemany("DELETE FROM devices WHERE id = ?", [(d,) for d in rows.deletes])
