"""hubd's own device topics (`B/device/ID/config|state|event|availability|command/result`) as a dialect.

A device that speaks this dialect publishes the platform's Endpoint itself (its config is the Endpoint
without states), so decoding is the payload checks of `hubd.dialects.native.codec`; a control goes back as one
`B/device/ID/set` message and a speaker command as `B/device/ID/command`. The route's address is the
device's id in the topic. Owns the topic names.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from hubd.devices.model import Origin, Route
from hubd.dialects.base import (
    AvailabilityReceived,
    ConfigReceived,
    ControlRequest,
    DeviceGone,
    DeviceInput,
    Dialect,
    InputRejected,
    Outgoing,
    PressReceived,
    ResultReceived,
    StateReceived,
)
from hubd.dialects.native import codec as native_codec
from hubd.errors import DeviceMessageInvalid

DIALECT = "native"
_ORIGIN = Origin(DIALECT)

MessageKind = Literal["config", "state", "event", "availability", "command_result"]

_INBOUND: dict[str, MessageKind] = {
    "config": "config",
    "state": "state",
    "event": "event",
    "availability": "availability",
    "command/result": "command_result",
}

SUBSCRIBE_QOS = 1


class NativeDialect(Dialect):
    """Devices on `B/device/ID/...`: the format docs/mqtt.md describes."""

    name = DIALECT

    def __init__(self, base_topic: str, *, namespace: str = "Service") -> None:
        self._base = base_topic
        self._prefix = f"{base_topic}/device/"
        self._namespace = namespace  # platform.namespace: a "<namespace>.Switch" interface is "Switch"

    def subscriptions(self) -> list[tuple[str, int]]:
        """`B/device/+/<suffix>` for each inbound suffix, QoS 1."""
        return [(f"{self._base}/device/+/{suffix}", SUBSCRIBE_QOS) for suffix in _INBOUND]

    def claims(self, topic: str) -> bool:
        """Topics under `B/device/`."""
        return topic.startswith(self._prefix)

    def decode(self, topic: str, payload: bytes, received_at: float, retained: bool) -> list[DeviceInput]:
        """One input per message; a bad payload is an InputRejected with the native codec's reason."""
        parsed = self._parse(topic)
        if parsed is None:
            return [InputRejected("other", f"not a device topic of hubd's: use {self._prefix}<id>/config, state, "
                                           "event, availability or command/result")]
        device_id, kind = parsed
        try:
            return [self._decode(device_id, kind, payload, received_at)]
        except DeviceMessageInvalid as err:
            return [InputRejected(kind, str(err))]

    def encode_control(self, device_id: str, route: Route, request: ControlRequest) -> list[Outgoing]:
        """The `set` message: `{"id", "interface", "operation", "value"?, "delta"?}`."""
        body: dict[str, Any] = {"id": request.command_id, "interface": request.interface,
                                "operation": request.operation}
        if request.value is not None:
            body["value"] = request.value
        if request.delta is not None:
            body["delta"] = request.delta
        return [Outgoing(self._device_topic(_address(device_id, route), "set"), _json(body))]

    def encode_speaker(self, device_id: str, route: Route, command: dict[str, Any]) -> list[Outgoing]:
        """The `command` message, as the speaker agent and the simulators read it."""
        return [Outgoing(self._device_topic(_address(device_id, route), "command"), _json(command))]

    def _parse(self, topic: str) -> tuple[str, MessageKind] | None:
        """(device_id, kind) for a device topic under `B/device/`, or None for anything else."""
        if not topic.startswith(self._prefix):
            return None
        device_id, sep, suffix = topic[len(self._prefix):].partition("/")
        if not sep or not device_id:
            return None
        kind = _INBOUND.get(suffix)
        return (device_id, kind) if kind else None

    def _device_topic(self, device_id: str, suffix: str) -> str:
        """The topic `B/device/ID/suffix`."""
        return f"{self._prefix}{device_id}/{suffix}"

    def _decode(self, device_id: str, kind: str, payload: bytes, received_at: float) -> DeviceInput:
        if kind == "config":
            config = native_codec.parse_config(payload, self._namespace)
            if config is None:
                return DeviceGone(device_id)
            if config.endpointId is not None and config.endpointId != device_id:
                raise DeviceMessageInvalid(f"endpointId {config.endpointId!r} differs from the topic's "
                                           f"{device_id!r}; drop it or make them equal")
            return ConfigReceived(device_id, config, Route(DIALECT, device_id), _ORIGIN)
        if kind == "state":
            update = native_codec.parse_state(payload, received_at)
            return StateReceived(device_id, update.samples, update.cause)
        if kind == "event":
            return PressReceived(device_id, native_codec.parse_event(payload, received_at))
        if kind == "availability":
            return AvailabilityReceived(device_id, native_codec.parse_availability(payload))
        return ResultReceived(device_id, native_codec.parse_command_result(payload))


def _address(device_id: str, route: Route) -> str:
    return route.address or device_id


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
