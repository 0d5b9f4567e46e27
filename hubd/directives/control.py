"""Control directives (`{namespace}.Control`, `<Interface>.<Op>`): a device's command on MQTT, and its confirmation.

A control directive becomes the device's command in the device's own dialect (`hubd.dialects.commands`: hubd's
`set` message, a discovery entity's command topics, zigbee2mqtt's `/set`); hubd then waits until
the directive's deadline (the endpoint's budget, counted from the request's arrival) for the device's
state to confirm it and answers with the device's retrievable states, or with the target states
(optimistic) when the device is slower or the broker has not acknowledged the `set` yet: once the
`set` is handed to the MQTT client the device may obey, so it is never answered with an error. The slow
ones are followed in the background, in tasks owned by this component's run(), and, if the directive
carried a correlationToken, the async `Response` goes through the outbox once the device confirms.
Resends are hubd.directives.replay's (the reply is stored before the `set` goes out; run() does the
replay's writes); the pure rules (interfaces, ranges, targets) are hubd.devices.interfaces'.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hubd.cloud import messages
from hubd.devices import interfaces
from hubd.devices.device import Device
from hubd.devices.interfaces import Interface, Target
from hubd.devices.model import StateValue
from hubd.dialects.base import CommandRefused, CommandTemplateFailed, ControlRequest, Outgoing
from hubd.dialects.commands import DeviceCommands
from hubd.directives.message import Directive, DirectiveRouter, addressed_device, response
from hubd.directives.replay import Attempt, Replay
from hubd.errors import DirectiveError, HubdError, MqttUnavailable, MqttUnconfirmed
from hubd.events import PendingEvent
from hubd.metrics import Metrics
from hubd.registry import DeviceRegistry
from hubd.store.grants import Grant

log = logging.getLogger(__name__)

CONFIRM_WAIT_S = 60.0  # how long a slow device is followed after the optimistic reply
PENDING_MAX = 1_000
MIN_PUBLISH_S = 0.1  # a `set` gets at least this long to be handed to the broker
STOP_FLUSH_S = 2.0


class EventQueue(Protocol):
    """The outbox writer's entry for events outside the device path."""

    async def enqueue(self, events: Sequence[PendingEvent], user_ids: Sequence[str] | None = None) -> int:
        """Queue events for these platform users (every bound user if None)."""


class GrantLookup(Protocol):
    """Who is bound: the grants table."""

    async def all(self) -> list[Grant]:
        """Every grant."""


@dataclass(frozen=True, slots=True)
class _Unconfirmed:
    """A control the device had not confirmed when the optimistic reply went out."""

    device_id: str
    target: Target
    before: StateValue | None
    message_id: str
    correlation_token: str | None
    user: str | None


class Controls:
    """Answers `<Interface>.<Op>`; follows slow devices to their async Response. The directives' component."""

    name = "directives"  # the supervisor's name for its task

    def __init__(self, *, namespace: str, registry: DeviceRegistry, commands: DeviceCommands, events: EventQueue,
                 grants: GrantLookup, replay: Replay, metrics: Metrics, rng: random.Random | None = None,
                 confirm_wait_s: float = CONFIRM_WAIT_S) -> None:
        self._namespace = namespace
        self._registry = registry
        self._commands = commands
        self._events = events
        self._grants = grants
        self._replay = replay
        self._rng = rng or random.Random()
        self._confirm_wait_s = confirm_wait_s
        self._pending: asyncio.Queue[_Unconfirmed] = asyncio.Queue(PENDING_MAX)
        # (device, interface) -> (messageId, value) of a sent but unconfirmed target: the base of the next Adjust
        self._expected: dict[tuple[str, str], tuple[str, StateValue]] = {}
        self._warned: set[tuple[str, str]] = set()
        self._controls = metrics.counter("hubd_controls_total", "control directives sent to devices, by outcome",
                                         "outcome")

    def register(self, router: DirectiveRouter) -> None:
        """Route `{namespace}.Control/*` here."""
        router.add_namespace_handler(f"{self._namespace}.Control", self.control)

    async def start(self) -> None:
        """Nothing to acquire."""

    async def run(self) -> None:
        """Write remembered replies (the replay's writes: only controls store theirs); follow every unconfirmed
        control to its confirmation; one TaskGroup."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._replay.run(), name="directive-replies")
            while True:
                item = await self._pending.get()
                group.create_task(self._follow(item), name=f"confirm-{item.device_id}")

    async def stop(self) -> None:
        """Write the replies still queued (run()'s cancellation ended the follow-ups)."""
        await self._replay.flush(STOP_FLUSH_S)

    async def control(self, directive: Directive) -> dict[str, Any]:
        """Response once the device confirms (or optimistic at the deadline); a resend gets the first answer."""
        return await self._replay.once(directive, self._control)

    async def _control(self, directive: Directive, attempt: Attempt) -> dict[str, Any]:
        interface, operation = interfaces.parse_name(directive.name, self._namespace)
        try:
            device, target, before, outgoing = self._prepare(directive, interface, operation)
        except DirectiveError:
            # A resend after a restart: what ran then is the answer, whatever the device's state is now.
            stored = await self._replay.stored(attempt.key, directive.deadline)
            if stored is not None:
                return stored
            raise
        optimistic = response(self._namespace, directive.message_id, device.device_id, _with_target(device, target))
        stored = await self._replay.claim(attempt, optimistic, directive.deadline)
        if stored is not None:
            return stored
        key = (device.device_id, interface.name)
        if target.value is not None:
            self._expected[key] = (directive.message_id, target.value)
        loop = asyncio.get_running_loop()
        item = _Unconfirmed(device.device_id, target, before, directive.message_id, directive.correlation_token,
                            directive.user)
        attempt.fallback = optimistic  # from here on the device may obey: never an error reply
        try:
            try:
                await self._commands.send(outgoing, timeout_s=max(MIN_PUBLISH_S, directive.deadline - loop.time()))
            except MqttUnconfirmed as err:
                log.warning("control %s for %s: the broker has not acknowledged the set yet (%s); the device may "
                            "still obey: optimistic reply", directive.name, device.device_id, err)
            except MqttUnavailable as err:
                attempt.fallback = None  # it never left hubd: the claimed row goes, a retry runs
                self._forget_expected(key, directive.message_id)
                log.warning("control %s for %s: publish failed: %s", directive.name, device.device_id, err)
                raise DirectiveError("E_GATEWAY_UNREACHABLE", "the set message could not be handed to the MQTT "
                                                              "broker") from err
            confirmed = await self._registry.wait_for_state(
                device.device_id, lambda d: target.reached(before, _value(d, interface.name)),
                max(0.0, directive.deadline - loop.time()))
        except asyncio.CancelledError:
            if attempt.fallback is not None:
                self._follow_later(item, directive.name)
            raise
        if confirmed:
            self._forget_expected(key, directive.message_id)
            self._controls.inc(label="confirmed")
            log.info("control %s on %s confirmed", directive.name, device.device_id)
            reply = response(self._namespace, directive.message_id, device.device_id,
                             device.state_list(with_time=False, retrievable_only=True))
        else:
            self._controls.inc(label="optimistic")
            log.info("control %s on %s not confirmed by its deadline: optimistic reply%s", directive.name,
                     device.device_id, ", async Response follows" if directive.correlation_token else "")
            self._follow_later(item, directive.name)
            reply = response(self._namespace, directive.message_id, device.device_id, _with_target(device, target))
        self._replay.finish(attempt, reply)
        return reply

    def _prepare(self, directive: Directive, interface: Interface,
                 operation: str) -> tuple[Device, Target, StateValue | None, list[Outgoing]]:
        """The device, the target, the state before and the publishes; DirectiveError for anything that stops
        the command."""
        device = addressed_device(directive, self._registry.platform_device)  # one the owner hid is not there
        capability = device.config.capability(interface.name)
        if capability is None or operation not in capability.supportedOperations:
            offered = capability.supportedOperations if capability else []
            raise DirectiveError("E_NOT_SUPPORTED_DIRECTIVE",
                                 f"device {device.device_id} does not support {interface.name}.{operation} "
                                 f"(its {interface.name} operations: {offered})")
        value_range, problems = interfaces.limits(interface, device.config.additionalInfo, device.config.displayType)
        for problem in problems:
            if (device.device_id, problem) not in self._warned:
                self._warned.add((device.device_id, problem))
                log.warning("device %s: %s", device.device_id, problem)
        before = _value(device, interface.name)
        expected = self._expected.get((device.device_id, interface.name))
        target = interfaces.resolve(interface, operation, directive.payload,
                                    current=before if expected is None else expected[1], value_range=value_range,
                                    rng=self._rng)
        request = ControlRequest(directive.message_id, interface.name, operation, target.value, target.delta,
                                 {k: v.value for k, v in device.states.items()})
        try:
            outgoing = self._commands.encode_control(device.device_id, device.route, request)
        except CommandRefused as err:
            if isinstance(err, CommandTemplateFailed):
                self._registry.command_refused(device.device_id, str(err))
            raise DirectiveError("E_NOT_SUPPORTED_DIRECTIVE", f"device {device.device_id}: {err}") from err
        if not self._commands.connected:
            raise DirectiveError("E_GATEWAY_UNREACHABLE", "hubd is not connected to its MQTT broker")
        return device, target, before, outgoing

    async def _follow(self, item: _Unconfirmed) -> None:
        interface = item.target.interface.name
        try:
            confirmed = await self._registry.wait_for_state(
                item.device_id, lambda d: item.target.reached(item.before, _value(d, interface)),
                self._confirm_wait_s)
            device = self._registry.get(item.device_id)
            if not confirmed or device is None:
                self._controls.inc(label="never_confirmed")
                log.warning("device %s did not confirm %s.%s within %.0f s; its next state report will tell the "
                            "platform", item.device_id, interface, item.target.operation, self._confirm_wait_s)
                return
            self._controls.inc(label="confirmed_late")
            if item.correlation_token is None or device.hidden:  # hidden since: the platform has no such device
                return
            users = await self._users_of(item.user)
            if not users:
                log.warning("device %s confirmed %s.%s late, but no platform user is bound through the hubd account "
                            "%r: no async Response sent", item.device_id, interface, item.target.operation, item.user)
                return
            body = messages.async_response(self._namespace, "", item.correlation_token, item.device_id,
                                           device.config.additionalInfo,
                                           device.state_list(with_time=False, retrievable_only=True))
            await self._events.enqueue([PendingEvent("Response", (item.device_id,), body)], users)
            log.info("device %s confirmed %s.%s late: async Response queued", item.device_id, interface,
                     item.target.operation)
        except HubdError as err:
            log.error("device %s: async Response for %s.%s not queued: %s", item.device_id, interface,
                      item.target.operation, err)
        finally:
            self._forget_expected((item.device_id, interface), item.message_id)

    def _follow_later(self, item: _Unconfirmed, name: str) -> None:
        try:
            self._pending.put_nowait(item)
        except asyncio.QueueFull:
            self._forget_expected((item.device_id, item.target.interface.name), item.message_id)
            self._controls.inc(label="not_followed")
            log.warning("too many unconfirmed controls; not following %s on %s", name, item.device_id)

    async def _users_of(self, driver_user: str | None) -> list[str]:
        """The platform users bound through this hubd account (none if it is unknown)."""
        if driver_user is None:
            return []
        return [g.user_id for g in await self._grants.all() if g.driver_user == driver_user]

    def _forget_expected(self, key: tuple[str, str], message_id: str) -> None:
        expected = self._expected.get(key)
        if expected is not None and expected[0] == message_id:
            del self._expected[key]


def _value(device: Device, interface: str) -> StateValue | None:
    sample = device.states.get(interface)
    return None if sample is None else sample.value


def _with_target(device: Device, target: Target) -> list[dict[str, Any]]:
    """The device's retrievable states with the target in place of its interface's value (optimistic)."""
    out = []
    for capability in device.config.capabilities:
        if not capability.retrievable:
            continue
        if capability.interface == target.interface.name and target.value is not None:
            out.append({"interface": capability.interface, "value": target.value})
        elif capability.interface in device.states:
            out.append({"interface": capability.interface, "value": device.states[capability.interface].value})
    return out

