"""Helpers for the Home Assistant discovery dialect's tests: real fixtures in, decoded inputs out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dialect_helpers import presses as presses
from dialect_helpers import states as states

from hubd.config.model import DoorbellConfig, HomeAssistantConfig, Zigbee2MqttConfig
from hubd.devices.model import Route, StateValue
from hubd.dialects.base import ConfigReceived, ControlRequest, DeviceGone, DeviceInput
from hubd.dialects.homeassistant.dialect import HomeAssistantDialect
from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect

FIXTURES = Path(__file__).parent / "fixtures" / "homeassistant"
NOW = 1_700_000_000.0


def fixture(name: str) -> dict[str, Any]:
    """One fixture file of tests/fixtures/homeassistant (its configs and states)."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


def raw(payload: Any) -> bytes:
    """A fixture payload as the bytes on the wire (text as it is, an object as compact JSON)."""
    return payload.encode() if isinstance(payload, str) else json.dumps(payload, separators=(",", ":")).encode()


def make(*, include: list[str] | None = None, exclude: list[str] | None = None,
         doorbells: list[dict[str, str]] | None = None, defer_zigbee2mqtt: bool = False,
         max_entities: int = 20_000) -> HomeAssistantDialect:
    """A dialect with the default prefix."""
    config = HomeAssistantConfig(enabled=True, include=include or ["*"], exclude=exclude or [])
    natives = [Zigbee2MqttDialect(Zigbee2MqttConfig(enabled=True), [])] if defer_zigbee2mqtt else []
    return HomeAssistantDialect(config, [DoorbellConfig(**d) for d in doorbells or []], natives=natives,
                                max_entities=max_entities)


def announce(dialect: HomeAssistantDialect, *names: str) -> list[DeviceInput]:
    """Every config of these fixtures, as retained messages arriving at start."""
    out: list[DeviceInput] = []
    for name in names:
        for config in fixture(name)["configs"]:
            out += dialect.decode(config["topic"], raw(config["payload"]), NOW, True)
    return out


def publish(dialect: HomeAssistantDialect, topic: str, payload: Any, *, retained: bool = False,
            at: float = NOW) -> list[DeviceInput]:
    """One message, decoded (the dialect must claim its topic)."""
    assert dialect.claims(topic), topic
    return dialect.decode(topic, raw(payload), at, retained)


def replay_states(dialect: HomeAssistantDialect, name: str) -> list[DeviceInput]:
    """Every state example of a fixture whose topic the dialect reads (one of an entity it does not export: not)."""
    out: list[DeviceInput] = []
    for state in fixture(name)["states"]:
        if dialect.claims(state["topic"]):
            out += publish(dialect, state["topic"], state["payload"])
    return out


def configs(inputs: list[DeviceInput]) -> dict[str, ConfigReceived]:
    """The last config announced for each device."""
    return {i.device_id: i for i in inputs if isinstance(i, ConfigReceived)}


def routes(inputs: list[DeviceInput]) -> list[tuple[str, Route]]:
    """The routes the registry keeps after these inputs: each device's last announced one, gone ones not."""
    kept: dict[str, Route] = {}
    for item in inputs:
        if isinstance(item, ConfigReceived):
            kept[item.device_id] = item.route
        elif isinstance(item, DeviceGone):
            kept.pop(item.device_id, None)
    return sorted(kept.items())


def restarted(inputs: list[DeviceInput], **options: Any) -> HomeAssistantDialect:
    """A new dialect (as after hubd restarts) restored from the routes these inputs left; no config fed to it."""
    dialect = make(**options)
    dialect.restore(routes(inputs))
    return dialect


def operations(config: ConfigReceived) -> dict[str, tuple[str, ...]]:
    """Interface → supported operations of a config."""
    return {c.interface: c.supportedOperations for c in config.config.capabilities}


def request(interface: str, operation: str, value: StateValue | None = None, delta: float | None = None,
            states: dict[str, StateValue] | None = None) -> ControlRequest:
    """A control request as the directives layer resolves it."""
    return ControlRequest("cmd-1", interface, operation, value, delta, states or {})
