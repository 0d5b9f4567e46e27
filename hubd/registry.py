"""The device registry: the single writer of device configs, states and availability.

It turns typed device inputs (from the dialects, `hubd.dialects.base`: it never sees a topic's format) into
changes (new/updated/deleted device, changed states, presses) and
hands them with the rows to persist to the next stage (`ChangeSink`, the outbox writer), which writes
both in one transaction (`Device`: `hubd.devices.device`; the changes: `hubd.devices.changes`; the rows and
their SQL: `hubd.store.devices`). Others read devices (`get`, `devices`) and may wait for a device's state
(`wait_for_state`), but never write. Configs and states are brought into the shape the platform accepts
(`hubd.devices.conformance`) before anything is kept: what the platform would refuse is refused here, with the topic.
It is the one place that tells which values changed: a dialect hands every value a message carries (zigbee2mqtt and
Tasmota republish a device's whole state on every report), and a value equal to the kept one changes nothing.
The devices in memory take a batch's values before its commit, so a commit the disk refuses
(`StorageUnavailable`) is repeated as is, with the same changes and rows, until it goes through or hubd
stops: applying the batch again (or a redelivery of it) would find nothing changed and report nothing.

The owner's overrides (`hubd.devices.overrides`: name, room, hidden) are applied here when a device is described
(its config comes, or the owner changes the override: `override`), never per state change: a hidden device's
states and presses are kept but reported to nobody, and what the platform may see (`platform_devices`,
`platform_device`: Discover and directives) leaves it out. Batches and the owner's changes apply and commit one
at a time (a lock), so a DeleteReport is never overtaken by a ChangeReport of the device it hid.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from hubd.devices import conformance
from hubd.devices.changes import (
    AvailabilityChanged,
    Change,
    CommandResultReceived,
    DeviceAnnounced,
    DeviceRemoved,
    DoorbellPressed,
    StatesChanged,
)
from hubd.devices.device import Device
from hubd.devices.model import MAX_DEVICE_ID_CHARS, Route, StateSample, valid_device_id
from hubd.devices.names import NameIndex
from hubd.devices.overrides import NO_OVERRIDE, Override
from hubd.devices.waiters import Waiters
from hubd.dialects.base import (
    AvailabilityReceived,
    ConfigReceived,
    Decoded,
    DeviceGone,
    DeviceInput,
    InputRejected,
    PressReceived,
    StateReceived,
    input_kind,
)
from hubd.errors import DeviceMessageInvalid, StorageUnavailable
from hubd.metrics import Metrics
from hubd.problems import DeviceProblems, RejectionObserver
from hubd.store.db import Database
from hubd.store.devices import DeviceRows, device_row, load_devices_blocking
from hubd.store.overrides import OverrideRow, load_overrides_blocking
from hubd.store.receipts import Receipt

log = logging.getLogger(__name__)

class ChangeSink(Protocol):
    """The next stage: persists the rows and whatever the changes cause, in one transaction."""

    async def commit(self, changes: Sequence[Change], rows: DeviceRows, receipts: Sequence[Receipt] = ()) -> None:
        """Persist (with the receipts of the batch's MQTT messages); return once durable."""


class DeviceRegistry:
    """Loads devices at start, applies device messages, passes changes on."""

    name = "registry"

    def __init__(self, db: Database, sink: ChangeSink, metrics: Metrics, *, namespace: str = "Service",
                 rejections: RejectionObserver | None = None) -> None:
        self._db = db
        self._sink = sink
        self._namespace = namespace  # platform.namespace: a "<namespace>.Switch" interface is "Switch"
        self._devices: dict[str, Device] = {}
        self._waiters = Waiters()
        self._problems = DeviceProblems(metrics, rejections, self.label)
        self._names = NameIndex()  # displayName → devices, so that a name hubd chose gets a word where two share it
        self._overrides: dict[str, Override] = {}  # endpointId → the owner's override (devices absent too)
        self._lock = asyncio.Lock()  # one batch or owner's change at a time, applied and committed
        metrics.gauge("hubd_devices", "devices known", lambda: float(len(self._devices)))

    async def start(self) -> None:
        """Load the persisted devices and the owner's overrides."""
        self._overrides = await self._db.call(load_overrides_blocking)
        for device in await self._db.call(load_devices_blocking):
            self._devices[device.device_id] = device
            self._names.add(device.device_id, device.described.displayName)
            self._apply_override(device)
        log.info("loaded %d devices (%d overrides of the owner's)", len(self._devices), len(self._overrides))

    async def run(self) -> None:
        """The registry is driven by `handle`; it sums up the refusals it did not log one by one once their minute is
        over (`hubd.failures.RefusalLog.run`)."""
        await self._problems.run()

    async def stop(self) -> None:
        """Nothing to release."""

    def get(self, device_id: str) -> Device | None:
        """One device, or None."""
        return self._devices.get(device_id)

    def devices(self) -> list[Device]:
        """Every known device, sorted by id."""
        return [self._devices[k] for k in sorted(self._devices)]

    def platform_devices(self) -> list[Device]:
        """The devices the platform may know (every one the owner did not hide), sorted by id."""
        return [d for d in self.devices() if not d.hidden]

    def platform_device(self, device_id: str) -> Device | None:
        """One device the platform may know, or None (unknown, or hidden by the owner)."""
        device = self._devices.get(device_id)
        return None if device is None or device.hidden else device

    def override_of(self, device_id: str) -> Override:
        """The owner's override of an endpoint (NO_OVERRIDE when none), whether or not the device is here."""
        return self._overrides.get(device_id, NO_OVERRIDE)

    def overrides(self) -> dict[str, Override]:
        """Every override the owner set, by endpointId."""
        return dict(self._overrides)

    async def override(self, changes: Mapping[str, Override]) -> None:
        """Set the owner's overrides of these endpoints (an empty one clears them) and queue what the platform must
        hear of it, in one transaction: an AddOrUpdateReport for a new name or room or a device shown again, a
        DeleteReport for one hidden. An endpoint not here (not exported, or gone) keeps its override for when it
        comes. A commit the disk refuses raises StorageUnavailable, and nothing changed."""
        async with self._lock:
            now = time.time()
            work = _Batch()
            rows: list[OverrideRow] = []
            undo: list[tuple[str, Override | None, Device | None, tuple[object, ...]]] = []
            for device_id, override in changes.items():
                device = self._devices.get(device_id)
                undo.append((device_id, self._overrides.get(device_id), device,
                             () if device is None else (device.config, device.source, device.hidden)))
                if override.empty:
                    self._overrides.pop(device_id, None)
                else:
                    self._overrides[device_id] = override
                rows.append((device_id, override, now))
                if device is not None:
                    self._show(device, None if device.hidden else device.config.canonical(), device.hidden, work)
            try:
                await self._sink.commit(work.changes, DeviceRows((), (), tuple(rows)))
            except Exception:
                for device_id, old, device, state in reversed(undo):  # as it was: nothing was stored
                    if old is None:
                        self._overrides.pop(device_id, None)
                    else:
                        self._overrides[device_id] = old
                    if device is not None:
                        device.config, device.source, device.hidden = state  # type: ignore[assignment]
                raise
        log.info("stored the owner's overrides of %s (%d AddOrUpdateReports, %d DeleteReports)", ", ".join(changes),
                 sum(isinstance(c, DeviceAnnounced) for c in work.changes),
                 sum(isinstance(c, DeviceRemoved) for c in work.changes))

    async def wait_for_state(self, device_id: str, predicate: Callable[[Device], bool], timeout_s: float) -> bool:
        """Wait until the device's state satisfies `predicate`; False on timeout."""
        return await self._waiters.wait(device_id, lambda: (d := self._devices.get(device_id)) is not None
                                        and predicate(d), timeout_s)

    async def handle(self, batch: Sequence[Decoded], receipts: Sequence[Receipt] = ()) -> None:
        """Apply a batch of decoded messages in order; bad inputs are logged and counted, never raised.

        `receipts`: of the batch's QoS 1 messages, committed with the changes they caused (hubd.store.receipts);
        a batch that changes nothing commits nothing (a redelivery of it would change nothing either)."""
        async with self._lock:
            await self._handle(batch, receipts)

    async def _handle(self, batch: Sequence[Decoded], receipts: Sequence[Receipt]) -> None:
        work = _Batch()
        tracing = log.isEnabledFor(logging.DEBUG)  # one line per device message, at debug only
        for decoded in batch:
            first, refused = len(work.changes), []
            for item in decoded.inputs:
                try:
                    self._apply(item, decoded, work)
                except DeviceMessageInvalid as err:
                    refused.append(self._problems.invalid(input_kind(item), decoded.topic, err, decoded.received_at))
                except Exception as err:  # a bug for this message must not stop the others (nor hubd)
                    refused.append(self._problems.failed(input_kind(item), decoded.topic, err, decoded.received_at))
            if tracing:
                rejected = [i.reason for i in decoded.inputs if isinstance(i, InputRejected)]
                self._problems.trace(decoded.topic, decoded.source, work.changes[first:], [*refused, *rejected])
        if not work.changes and not work.dirty and not work.deleted:
            return
        rows = DeviceRows(tuple(device_row(d) for d in work.dirty.values()), tuple(sorted(work.deleted)))
        await self._commit(work.changes, rows, receipts)
        self._waiters.wake({*work.dirty, *work.deleted})

    def routes(self, dialect: str) -> list[tuple[str, Route]]:
        """The kept routes of one dialect's devices (device_id, route): what a dialect restores at start."""
        return [(d.device_id, d.route) for d in self.devices() if d.route.dialect == dialect]

    async def _commit(self, changes: Sequence[Change], rows: DeviceRows, receipts: Sequence[Receipt]) -> None:
        """Commit until durable; a refused commit is repeated, never the batch (the devices already hold it)."""
        held = False
        while True:
            try:
                await self._sink.commit(changes, rows, receipts)
            except StorageUnavailable as err:
                if not held:
                    held = True
                    log.warning("holding %d device changes, unacknowledged, until the database takes them: %s",
                                len(changes), err)
                await self._db.writable()
                continue
            if held:
                log.info("stored the %d held device changes", len(changes))
            return

    def _apply(self, item: DeviceInput, decoded: Decoded, work: _Batch) -> None:
        if isinstance(item, InputRejected):
            self._problems.rejected(item.kind, decoded.topic, item.reason, decoded.retained, decoded.received_at)
            return
        device_id = item.device_id
        if not valid_device_id(device_id):
            raise DeviceMessageInvalid(
                f"the endpointId must be 1 to {MAX_DEVICE_ID_CHARS} characters without '/', '+' "
                f"or '#' (it has {len(device_id)}); give the device a shorter id")
        owner = self._devices.get(device_id)
        if owner is not None and decoded.source and owner.route.dialect != decoded.source:
            raise DeviceMessageInvalid(
                f"endpointId {device_id!r} belongs to {owner.config.displayName!r}, a device of {owner.route.dialect}; "
                f"the {decoded.source} device that says so is refused (one endpointId, one owner): give one of them "
                "another identifier, or remove the other device first")
        if isinstance(item, ConfigReceived):
            self._apply_config(item, decoded.topic, work)
            if not decoded.retained:
                self._devices[device_id].last_seen = decoded.received_at
            return
        if isinstance(item, DeviceGone):
            gone = self._devices.pop(device_id, None)
            if gone is not None:
                self._names.remove(device_id, gone.described.displayName)
                if not gone.hidden:  # a hidden one's DeleteReport went when it was hidden
                    work.changes.append(DeviceRemoved(device_id))
                work.dirty.pop(device_id, None)
                work.deleted.add(device_id)
            return
        device = self._devices.get(device_id)
        if device is None:
            raise DeviceMessageInvalid(
                f"unknown device {device_id!r}: publish its config on the config topic (retained) first")
        if not decoded.retained and not (isinstance(item, AvailabilityReceived) and not item.online):
            device.last_seen = decoded.received_at
        if isinstance(item, StateReceived):
            changes = self._apply_state(device, item)
            if changes:
                if not device.hidden:  # the owner hid it: its states are kept, never reported
                    work.changes.extend(changes)
                work.dirty[device_id] = device
        elif isinstance(item, PressReceived):
            if not device.hidden:
                work.changes.append(DoorbellPressed(device_id, item.timestamp))
            self._problems.pressed(device, decoded.topic, decoded.received_at)
        elif isinstance(item, AvailabilityReceived):
            if device.online != item.online:
                device.online = item.online
                work.changes.append(AvailabilityChanged(device_id, item.online))
                work.dirty[device_id] = device
        else:
            work.changes.append(CommandResultReceived(device_id, item.result, decoded.received_at))
            if item.result.status == "error":  # a speaker's failed command: a problem to show, and to log
                self._problems.command_failed(device_id, item.result, decoded.received_at)

    def command_refused(self, device_id: str, reason: str) -> None:
        """A command the device's own config could not make (its command template failed): a problem to show."""
        self._problems.command_refused(device_id, reason, time.time())

    def label(self, device_id: str) -> str:
        """A device as log lines name it: its name and its endpointId ("Desk Lamp (lamp-1)")."""
        device = self._devices.get(device_id)
        return f"{device.config.displayName} ({device_id})" if device is not None else device_id

    def _apply_config(self, item: ConfigReceived, topic: str, work: _Batch) -> None:
        device_id = item.device_id
        existing = self._devices.get(device_id)
        config, renamed = conformance.conform_config(item.config)
        if item.origin.naming:  # a name hubd chose (a model's, say): a word where another device has it
            config = replace(config, displayName=self._names.distinct(device_id, config, existing))
        if existing is not None and existing.described.canonical() == config.canonical():
            if existing.route != item.route or existing.origin != item.origin:  # no news for the platform
                existing.route, existing.origin = item.route, item.origin
                work.dirty[device_id] = existing
            return
        if renamed:
            # Once per new or changed config (a replayed retained config is unchanged and says nothing).
            log.warning("%s: the platform refuses digits and punctuation in names, so %s",
                        topic, "; ".join(f"{r.field} {r.old!r} is sent as {r.new!r}" if r.new is not None
                                         else f"{r.field} {r.old!r} is left out" for r in renamed))
        if existing is not None:
            self._names.remove(device_id, existing.described.displayName)
        self._names.add(device_id, config.displayName)
        if existing is None:
            device = Device(device_id, config, route=item.route, origin=item.origin)
            self._devices[device_id] = device
            shown, was_hidden = None, True  # the platform has never had it
        else:
            device = existing
            shown, was_hidden = None if device.hidden else device.config.canonical(), device.hidden
            device.config, device.source, device.route, device.origin = config, None, item.route, item.origin
            kept = {c.interface for c in config.capabilities}
            device.states = {k: v for k, v in device.states.items() if k in kept}
        self._show(device, shown, was_hidden, work)
        work.dirty[device_id] = device
        work.deleted.discard(device_id)

    def _apply_override(self, device: Device) -> None:
        """The owner's override on a device: `config` is what the platform gets, `source` its own when they differ."""
        override = self._overrides.get(device.device_id, NO_OVERRIDE)
        source = device.described
        config = override.apply(source)
        device.config, device.source, device.hidden = config, None if config is source else source, override.hidden

    def _show(self, device: Device, shown: str | None, was_hidden: bool, work: _Batch) -> None:
        """Apply the owner's override to a device just described or overridden, and say what the platform must hear:
        nothing if it has it as it is now (`shown`: its config's text as the platform has it, None: it has none),
        a DeleteReport if it is hidden now, else an AddOrUpdateReport."""
        self._apply_override(device)
        if device.hidden:
            if not was_hidden:
                work.changes.append(DeviceRemoved(device.device_id))
        elif device.config.canonical() != shown:
            work.changes.append(DeviceAnnounced(device, device.endpoint()))

    def _apply_state(self, device: Device, update: StateReceived) -> list[Change]:
        changed: list[StateSample] = []
        samples: list[StateSample] = []
        for sample in update.samples:
            interface = conformance.interface_name(sample.interface, self._namespace)  # "Service.Switch"
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


@dataclass(slots=True)
class _Batch:
    """What one `handle` call collects: the changes in order, the rows to write and the ids to delete."""

    changes: list[Change] = field(default_factory=list)
    dirty: dict[str, Device] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
