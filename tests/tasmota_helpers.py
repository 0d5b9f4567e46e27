"""Helpers for the Tasmota dialect's tests: real fixtures (tests/fixtures/tasmota) in, inputs out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dialect_helpers import presses as presses
from dialect_helpers import states as states

from hubd.config.model import DoorbellConfig, TasmotaConfig
from hubd.devices.model import StateValue
from hubd.dialects.base import ConfigReceived, ControlRequest, DeviceInput, InputRejected, Outgoing
from hubd.dialects.tasmota.dialect import TasmotaDialect

FIXTURES = Path(__file__).parent / "fixtures" / "tasmota"
PREFIX = "tasmota/discovery"
NOW = 1_700_000_000.0
ATOM = "142B2F9FAF38"  # atomlite2_rgb_light: an M5Stack Atom Lite, one RGB light, topic atomlite2
BASIC = "00000049A3BC"  # ha_default_config_49A3BC: a Sonoff Basic, FullTopic %topic%/%prefix%/


def messages(name: str) -> list[tuple[str, str]]:
    """One fixture's messages (topic, payload) in order."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return [(m["topic"], m["payload"]) for m in data["messages"]]


def payload(name: str, topic_end: str, nth: int = 0) -> str:
    """The payload of the fixture's `nth` message whose topic ends so."""
    return [p for t, p in messages(name) if t.endswith(topic_end)][nth]


def basic_config(**changes: Any) -> dict[str, Any]:
    """Home Assistant's tests' Sonoff Basic discovery config, with the fields a test sets (as their tests do)."""
    config: dict[str, Any] = json.loads(payload("ha_default_config_49A3BC", "/config"))
    config.update(changes)
    return config


def make(doorbells: list[tuple[str, str]] | None = None, **config: Any) -> TasmotaDialect:
    """A Tasmota dialect on the default prefix, with `doorbells` as (device glob, event)."""
    return TasmotaDialect(TasmotaConfig(enabled=True, **config),
                          [DoorbellConfig(device=d, event=e) for d, e in doorbells or []])


def publish(dialect: TasmotaDialect, topic: str, data: object, *, retained: bool = False) -> list[DeviceInput]:
    """Decode one message (a dict is sent as JSON) if the dialect claims its topic."""
    raw = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    if not dialect.claims(topic):
        return []
    return dialect.decode(topic, raw.encode(), NOW, retained)


def announce(dialect: TasmotaDialect, mac: str, config: dict[str, Any] | str,
             sensors: dict[str, Any] | None = None) -> list[DeviceInput]:
    """A device's retained discovery config (and sensors message)."""
    out = publish(dialect, f"{PREFIX}/{mac}/config", config, retained=True)
    if sensors is not None:
        out += publish(dialect, f"{PREFIX}/{mac}/sensors", {"sn": sensors, "ver": 1}, retained=True)
    return out


def configs(inputs: list[DeviceInput]) -> dict[str, ConfigReceived]:
    """The configs announced, by endpoint (later ones win)."""
    return {i.device_id: i for i in inputs if isinstance(i, ConfigReceived)}


def rejected(inputs: list[DeviceInput]) -> list[str]:
    """The reasons of the inputs refused."""
    return [i.reason for i in inputs if isinstance(i, InputRejected)]


def operations(config: ConfigReceived) -> dict[str, tuple[str, ...]]:
    """Each capability's operations."""
    return {c.interface: c.supportedOperations for c in config.config.capabilities}


def control(dialect: TasmotaDialect, announced: ConfigReceived, interface: str, operation: str,
            value: StateValue | None, states_now: dict[str, StateValue] | None = None) -> list[tuple[str, str]]:
    """The publishes of a control for an announced endpoint, as (topic, payload)."""
    request = ControlRequest("c1", interface, operation, value, None, states_now or {})
    sent: list[Outgoing] = dialect.encode_control(announced.device_id, announced.route, request)
    return [(m.topic, m.payload.decode()) for m in sent]
