"""Helpers for the zigbee2mqtt dialect's tests: real fixtures (tests/fixtures/zigbee2mqtt) in, inputs out."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from dialect_helpers import presses as presses
from dialect_helpers import states as states

from hubd.config.model import DoorbellConfig, Zigbee2MqttConfig
from hubd.devices.model import StateValue
from hubd.dialects.base import (
    AvailabilityReceived,
    ConfigReceived,
    ControlRequest,
    DeviceGone,
    DeviceInput,
    InputRejected,
)
from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect

FIXTURES = Path(__file__).parent / "fixtures" / "zigbee2mqtt"
BASE = "zigbee2mqtt"
NOW = 1_700_000_000.0


def fixture(name: str) -> dict[str, Any]:
    """One fixture file (its devices, states and source)."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


def entries(*names: str) -> list[dict[str, Any]]:
    """The bridge/devices entries of these fixtures, in order (copies: tests may change them)."""
    return [copy.deepcopy(e) for name in names for e in fixture(name)["devices"]]


def raw(payload: Any) -> bytes:
    """A payload as the bytes on the wire (text as it is, anything else as compact JSON)."""
    return payload.encode() if isinstance(payload, str) else json.dumps(payload, separators=(",", ":")).encode()


def make(*, include: list[str] | None = None, exclude: list[str] | None = None,
         doorbells: list[dict[str, str]] | None = None, base: str = BASE, max_devices: int = 2_000,
         ) -> Zigbee2MqttDialect:
    """A dialect for one installation."""
    config = Zigbee2MqttConfig(enabled=True, base_topic=base, include=include or ["*"], exclude=exclude or [])
    return Zigbee2MqttDialect(config, [DoorbellConfig(**d) for d in doorbells or []], max_devices=max_devices)


def announce(dialect: Zigbee2MqttDialect, devices: Any, *, base: str = BASE) -> list[DeviceInput]:
    """A retained bridge/devices list (or any payload on its topic)."""
    return publish(dialect, "bridge/devices", devices, retained=True, base=base)


def publish(dialect: Zigbee2MqttDialect, rest: str, payload: Any, *, retained: bool = False, at: float = NOW,
            base: str = BASE) -> list[DeviceInput]:
    """One message on `<base>/<rest>`, decoded (the dialect must claim it)."""
    topic = f"{base}/{rest}"
    assert dialect.claims(topic), topic
    return dialect.decode(topic, raw(payload), at, retained)


def replay_states(dialect: Zigbee2MqttDialect, name: str) -> list[DeviceInput]:
    """Every state example of a fixture, in order, on its device's topic."""
    out: list[DeviceInput] = []
    for state in fixture(name)["states"]:
        out += publish(dialect, state["device"], state["payload"])
    return out


def configs(inputs: list[DeviceInput]) -> dict[str, ConfigReceived]:
    """The last config announced for each endpoint."""
    return {i.device_id: i for i in inputs if isinstance(i, ConfigReceived)}


def gone(inputs: list[DeviceInput]) -> list[str]:
    """The endpoints removed, in order."""
    return [i.device_id for i in inputs if isinstance(i, DeviceGone)]


def availability(inputs: list[DeviceInput]) -> dict[str, bool]:
    """The availability reported per endpoint (later ones win)."""
    return {i.device_id: i.online for i in inputs if isinstance(i, AvailabilityReceived)}


def rejected(inputs: list[DeviceInput]) -> list[str]:
    """The reasons of the rejected inputs."""
    return [i.reason for i in inputs if isinstance(i, InputRejected)]


def unexported(dialect: Zigbee2MqttDialect) -> dict[str, tuple[str, ...]]:
    """The devices the dialect leaves out, by friendly name: why."""
    return {u.name: u.reasons for u in dialect.unexported_devices()}


def operations(item: ConfigReceived) -> dict[str, tuple[str, ...]]:
    """Each capability's operations."""
    return {c.interface: c.supportedOperations for c in item.config.capabilities}


def request(interface: str, operation: str, value: StateValue | None = None, *,
            states: dict[str, StateValue] | None = None) -> ControlRequest:
    """A control request as the directives layer resolves it."""
    return ControlRequest("cmd-1", interface, operation, value, None, states or {})


def control(dialect: Zigbee2MqttDialect, item: ConfigReceived, interface: str, operation: str,
            value: StateValue | None = None) -> list[tuple[str, Any]]:
    """The publishes of one control, as (topic, decoded JSON payload)."""
    sent = dialect.encode_control(item.device_id, item.route, request(interface, operation, value))
    return [(o.topic, json.loads(o.payload)) for o in sent]
