"""Discover, control and ReportState (PROTOCOL.md 5): the handlers VendorEndpoint routes to.

Handlers are dict in, dict out (`Directive` -> reply); refusals are DirectiveError, which VendorEndpoint
turns into an ErrorResponse. A control directive becomes a `set` message on MQTT; hubd then waits up to
REPLY_BUDGET_S for the device's state to confirm it and answers with the device's states, or with the
target states (optimistic, D4) when the device is slower. The slow ones are followed in the background,
in tasks owned by this component's run(), and, if the directive carried a correlationToken, the async
`Response` goes through the outbox once the device confirms. Replies are remembered by messageId for
DUPLICATE_TTL_S, so a resent directive gets the first answer and is not executed twice (5.4).
The pure rules (interfaces, ranges, targets) live in hubd.control.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hubd import control
from hubd.cloud import messages
from hubd.errors import DirectiveError, HubdError, MqttUnavailable
from hubd.metrics import Metrics
from hubd.mqtt.codec import StateValue
from hubd.registry import Device, DeviceRegistry
from hubd.reporter import PendingEvent
from hubd.store.grants import Grant
from hubd.vendor import Directive, DirectiveHandler

log = logging.getLogger(__name__)

REPLY_BUDGET_S = 2.5  # PROTOCOL.md 5.3: every reply within 3 s; this leaves room for HTTP
CONFIRM_WAIT_S = 60.0  # how long a slow device is followed after the optimistic reply
DUPLICATE_TTL_S = 600.0  # PROTOCOL.md 5.4: resends come within about 10 minutes
DUPLICATE_MAX = 10_000
PENDING_MAX = 1_000

Outcome = dict[str, Any] | DirectiveError


class SetPublisher(Protocol):
    """The MQTT bridge, as far as control needs it."""

    @property
    def connected(self) -> bool:
        """True while the broker session is up."""

    async def publish(self, device_id: str, suffix: str, payload: bytes) -> None:
        """Publish QoS 1 to `B/device/ID/suffix`."""


class EventQueue(Protocol):
    """The reporter's outbox entry for events outside the device path."""

    async def enqueue(self, events: Sequence[PendingEvent], user_ids: Sequence[str] | None = None) -> int:
        """Queue events for these platform users (every bound user if None)."""


class GrantLookup(Protocol):
    """Who is bound: the grants table."""

    async def all(self) -> list[Grant]:
        """Every grant."""


class DirectiveRouter(Protocol):
    """VendorEndpoint's registration methods."""

    def add_handler(self, namespace: str, name: str, handler: DirectiveHandler) -> None:
        """Serve one directive."""

    def add_namespace_handler(self, namespace: str, handler: DirectiveHandler) -> None:
        """Serve every name of a namespace."""


@dataclass(frozen=True, slots=True)
class _Unconfirmed:
    """A control the device had not confirmed when the optimistic reply went out."""

    device_id: str
    target: control.Target
    before: StateValue | None
    message_id: str
    correlation_token: str | None
    user: str | None


class Directives:
    """Answers Discover, `<Interface>.<Op>` and ReportState; follows slow devices to their async Response."""

    name = "directives"

    def __init__(self, *, brand: str, registry: DeviceRegistry, publisher: SetPublisher, events: EventQueue,
                 grants: GrantLookup, metrics: Metrics, rng: random.Random | None = None,
                 reply_budget_s: float = REPLY_BUDGET_S, confirm_wait_s: float = CONFIRM_WAIT_S) -> None:
        self._brand = brand
        self._registry = registry
        self._publisher = publisher
        self._events = events
        self._grants = grants
        self._rng = rng or random.Random()
        self._budget_s = reply_budget_s
        self._confirm_wait_s = confirm_wait_s
        self._pending: asyncio.Queue[_Unconfirmed] = asyncio.Queue(PENDING_MAX)
        # messageId (and what it asked) -> (monotonic receipt time, the reply, resolved once known)
        self._replies: OrderedDict[tuple[str, ...], tuple[float, asyncio.Future[Outcome]]] = OrderedDict()
        # (device, interface) -> (messageId, value) of a sent but unconfirmed target: the base of the next Adjust
        self._expected: dict[tuple[str, str], tuple[str, StateValue]] = {}
        self._controls = metrics.counter("hubd_controls_total", "control directives sent to devices, by outcome",
                                         "outcome")
        self._resends = metrics.counter("hubd_directive_resends_total",
                                        "directives resent with a known messageId, answered from memory")

    def register(self, router: DirectiveRouter) -> None:
        """Route `{brand}.Discovery/Discover`, `{brand}.Control/*` and `{brand}.Query/ReportState` here."""
        router.add_handler(f"{self._brand}.Discovery", "Discover", self.discover)
        router.add_namespace_handler(f"{self._brand}.Control", self.control)
        router.add_handler(f"{self._brand}.Query", "ReportState", self.report_state)

    async def start(self) -> None:
        """Nothing to acquire."""

    async def run(self) -> None:
        """Follow every unconfirmed control to its confirmation, each in a task of this TaskGroup."""
        async with asyncio.TaskGroup() as group:
            while True:
                item = await self._pending.get()
                group.create_task(self._follow(item), name=f"confirm-{item.device_id}")

    async def stop(self) -> None:
        """Nothing to release; run()'s cancellation ends the follow-ups."""

    async def discover(self, directive: Directive) -> dict[str, Any]:
        """DiscoveryResponse: every device, with capabilities and current states (with timeOfSample)."""
        endpoints = [device.endpoint() for device in self._registry.devices()]
        return {"header": messages.header(self._brand, "DiscoveryResponse", directive.message_id),
                "payload": {"endpoints": endpoints}}

    async def report_state(self, directive: Directive) -> dict[str, Any]:
        """Response with the device's retrievable states; a resend gets the first answer."""
        return await self._once(directive, self._report_state)

    async def control(self, directive: Directive) -> dict[str, Any]:
        """Response once the device confirms (or optimistic at the budget); a resend gets the first answer."""
        return await self._once(directive, self._control)

    async def _report_state(self, directive: Directive) -> dict[str, Any]:
        device = self._device(directive)
        if device.online is False:
            raise DirectiveError("E_ENDPOINT_UNREACHABLE", f"device {device.device_id} is offline")
        return self._response(directive.message_id, device.device_id,
                              device.state_list(with_time=False, retrievable_only=True))

    async def _control(self, directive: Directive) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._budget_s
        interface, operation = control.parse_name(directive.name, self._brand)
        device = self._device(directive)
        capability = device.config.capability(interface.name)
        if capability is None or operation not in capability.supportedOperations:
            offered = capability.supportedOperations if capability else []
            raise DirectiveError("E_NOT_SUPPORTED_DIRECTIVE",
                                 f"device {device.device_id} does not support {interface.name}.{operation} "
                                 f"(its {interface.name} operations: {offered})")
        key = (device.device_id, interface.name)
        sample = device.states.get(interface.name)
        before = None if sample is None else sample.value
        expected = self._expected.get(key)
        target = control.resolve(
            interface, operation, directive.payload, current=before if expected is None else expected[1],
            value_range=control.limits(interface, device.config.additionalInfo, device.config.displayType),
            rng=self._rng)
        if device.online is False:
            raise DirectiveError("E_ENDPOINT_UNREACHABLE", f"device {device.device_id} is offline")
        if not self._publisher.connected:
            raise DirectiveError("E_GATEWAY_UNREACHABLE", "hubd is not connected to its MQTT broker")
        if target.value is not None:
            self._expected[key] = (directive.message_id, target.value)
        body = json.dumps(target.set_message(directive.message_id), separators=(",", ":")).encode()
        try:
            async with asyncio.timeout_at(deadline):
                await self._publisher.publish(device.device_id, "set", body)
        except (TimeoutError, MqttUnavailable) as err:
            self._forget_expected(key, directive.message_id)
            log.warning("control %s for %s: publish failed: %s", directive.name, device.device_id, err)
            raise DirectiveError("E_GATEWAY_UNREACHABLE", "the set message could not be handed to the MQTT "
                                                          "broker") from err
        confirmed = await self._registry.wait_for_state(
            device.device_id, lambda d: target.reached(before, _value(d, interface.name)),
            max(0.0, deadline - loop.time()))
        if confirmed:
            self._forget_expected(key, directive.message_id)
            self._controls.inc(label="confirmed")
            log.info("control %s on %s confirmed", directive.name, device.device_id)
            return self._response(directive.message_id, device.device_id, device.state_list(with_time=False))
        self._controls.inc(label="optimistic")
        log.info("control %s on %s not confirmed within %.1f s: optimistic reply%s", directive.name,
                 device.device_id, self._budget_s, ", async Response follows" if directive.correlation_token else "")
        item = _Unconfirmed(device.device_id, target, before, directive.message_id, directive.correlation_token,
                            directive.user)
        try:
            self._pending.put_nowait(item)
        except asyncio.QueueFull:
            self._forget_expected(key, directive.message_id)
            self._controls.inc(label="not_followed")
            log.warning("too many unconfirmed controls; not following %s on %s", directive.name, device.device_id)
        return self._response(directive.message_id, device.device_id, _with_target(device, target))

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
            if item.correlation_token is None:
                return
            body = messages.async_response(self._brand, "", item.correlation_token, item.device_id,
                                           device.config.additionalInfo, device.state_list(with_time=False))
            users = await self._users_of(item.user)
            await self._events.enqueue([PendingEvent("Response", (item.device_id,), body)], users)
            log.info("device %s confirmed %s.%s late: async Response queued", item.device_id, interface,
                     item.target.operation)
        except HubdError as err:
            log.error("device %s: async Response for %s.%s not queued: %s", item.device_id, interface,
                      item.target.operation, err)
        finally:
            self._forget_expected((item.device_id, interface), item.message_id)

    async def _users_of(self, driver_user: str | None) -> list[str] | None:
        """The platform users bound through this hubd account; every bound user if none is known."""
        users = [g.user_id for g in await self._grants.all() if driver_user is not None and
                 g.driver_user == driver_user]
        return users or None

    async def _once(self, directive: Directive,
                    handler: Callable[[Directive], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Run a handler once per messageId; a resend (even while the first still runs) gets the first reply."""
        loop = asyncio.get_running_loop()
        key = _fingerprint(directive)
        self._prune(loop.time())
        known = self._replies.get(key)
        if known is not None:
            self._resends.inc()
            log.info("directive %s %s is a resend; answering with the first reply", directive.message_id,
                     directive.name)
            try:
                async with asyncio.timeout(self._budget_s + 0.3):
                    outcome = await asyncio.shield(known[1])
            except TimeoutError:
                raise DirectiveError("E_ENDPOINT_BUSY", "the first copy of this message is still running") from None
        else:
            future: asyncio.Future[Outcome] = loop.create_future()
            self._replies[key] = (loop.time(), future)
            outcome = DirectiveError("E_INTERNAL_ERROR", "the directive was interrupted")
            try:
                outcome = await handler(directive)
            except DirectiveError as err:
                outcome = err
            finally:
                future.set_result(outcome)
        if isinstance(outcome, DirectiveError):
            raise DirectiveError(outcome.name, outcome.message)
        return outcome

    def _prune(self, now: float) -> None:
        while self._replies:
            received_at, _ = next(iter(self._replies.values()))
            if now - received_at < DUPLICATE_TTL_S and len(self._replies) < DUPLICATE_MAX:
                return
            self._replies.popitem(last=False)

    def _device(self, directive: Directive) -> Device:
        endpoint_id = (directive.endpoint or {}).get("endpointId")
        if not isinstance(endpoint_id, str) or not endpoint_id:
            raise DirectiveError("E_INTERNAL_ERROR", "endpoint.endpointId: missing or not a string")
        device = self._registry.get(endpoint_id)
        if device is None:
            raise DirectiveError("E_NO_SUCH_ENDPOINT", f"no device {endpoint_id!r} on this hub")
        return device

    def _forget_expected(self, key: tuple[str, str], message_id: str) -> None:
        expected = self._expected.get(key)
        if expected is not None and expected[0] == message_id:
            del self._expected[key]

    def _response(self, message_id: str, endpoint_id: str, states: list[dict[str, Any]]) -> dict[str, Any]:
        """The synchronous Response: endpointId and states without timeOfSample (DIFF-10), empty payload."""
        return {"header": messages.header(self._brand, "Response", message_id),
                "endpoint": {"endpointId": endpoint_id, "states": states}, "payload": {}}


def _value(device: Device, interface: str) -> StateValue | None:
    sample = device.states.get(interface)
    return None if sample is None else sample.value


def _with_target(device: Device, target: control.Target) -> list[dict[str, Any]]:
    """The device's states with the target in place of its interface's value (the optimistic reply)."""
    out = []
    for capability in device.config.capabilities:
        if capability.interface == target.interface.name and target.value is not None:
            out.append({"interface": capability.interface, "value": target.value})
        elif capability.interface in device.states:
            out.append({"interface": capability.interface, "value": device.states[capability.interface].value})
    return out


def _fingerprint(directive: Directive) -> tuple[str, ...]:
    """What makes a message a resend: same user, messageId and content (a token refresh in between is fine)."""
    endpoint_id = (directive.endpoint or {}).get("endpointId")
    payload = json.dumps(directive.payload, sort_keys=True, separators=(",", ":"), default=str)
    return (directive.user or "", directive.message_id, directive.namespace, directive.name, str(endpoint_id),
            payload)
