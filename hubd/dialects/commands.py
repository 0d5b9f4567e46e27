"""The device-command port over the dialects: how directives and the webhook reach a device, whatever its dialect.

A command is encoded by the dialect the device's route names (`hubd.dialects.base.Dialect`), checked against
the one rule of where hubd may publish (`hubd.dialects.topics`: a device's own command topics only; a refusal
logged, throttled), then handed to the MQTT bridge as plain publishes. Encoding and sending are separate steps so
that a caller can refuse a command it cannot express before it records anything (a directive claims its reply
first, then sends).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from hubd.devices.model import Route
from hubd.dialects.base import CommandRefused, ControlRequest, Dialect, Outgoing, PublishRules
from hubd.dialects.topics import CommandTopics
from hubd.failures import RefusalLog

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """The MQTT side (the bridge): publishes one message, waiting briefly for a connection."""

    @property
    def connected(self) -> bool:
        """True while the broker session is up."""

    async def publish(self, message: Outgoing, *, timeout_s: float | None = None) -> None:
        """Publish; MqttUnavailable when not connected in time, MqttUnconfirmed when the PUBACK is late."""


class DeviceCommands:
    """Encodes controls and speaker commands with the device's dialect and sends them."""

    def __init__(self, dialects: Sequence[Dialect], publisher: Publisher, rules: PublishRules | None = None) -> None:
        self._dialects = {d.name: d for d in dialects}
        self._publisher = publisher
        # Asked again at every publish: a topic accepted with the device's config may be read from since.
        self._topics = CommandTopics(rules if rules is not None else PublishRules(), dialects)
        self._refusals = RefusalLog(log, what="refused device commands", line="refused a command on %s: %s%s")

    @property
    def connected(self) -> bool:
        """True while hubd is connected to its MQTT broker."""
        return self._publisher.connected

    def encode_control(self, device_id: str, route: Route, request: ControlRequest) -> list[Outgoing]:
        """The publishes of a control; CommandRefused when the device's dialect cannot say it, or would say it
        where hubd must not publish."""
        return self._checked(device_id, route, self._dialect(route).encode_control(device_id, route, request))

    def encode_speaker(self, device_id: str, route: Route, command: dict[str, Any]) -> list[Outgoing]:
        """The publishes of a speaker command; CommandRefused when the device cannot take one."""
        return self._checked(device_id, route, self._dialect(route).encode_speaker(device_id, route, command))

    async def send(self, messages: Sequence[Outgoing], *, timeout_s: float | None = None) -> None:
        """Publish each message in order (the whole call bounded by timeout_s, when given)."""
        for message in messages:
            await self._publisher.publish(message, timeout_s=timeout_s)
            log.debug("command published on %s: %s", message.topic,
                      message.payload[:300].decode("utf-8", errors="replace"))

    def _checked(self, device_id: str, route: Route, messages: list[Outgoing]) -> list[Outgoing]:
        for message in messages:
            why = self._topics.refusal(message.topic, device_id, route.dialect)
            if why is not None:
                self._refusals.refused(message.topic, f"{device_id}: {why}",
                                       "; hubd publishes only to a device's own command topics")
                raise CommandRefused(f"hubd does not publish there: {why}")
        return messages

    def _dialect(self, route: Route) -> Dialect:
        dialect = self._dialects.get(route.dialect)
        if dialect is None:
            raise CommandRefused(f"the device came from {route.dialect}, which is not enabled in hubd's config")
        return dialect
