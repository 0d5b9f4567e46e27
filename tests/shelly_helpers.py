"""Helpers for the Shelly dialect's tests: real fixtures (tests/fixtures/shelly) in, inputs out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dialect_helpers import presses as presses
from dialect_helpers import states as states

from hubd.config.model import DoorbellConfig, ShellyConfig
from hubd.devices.model import StateValue
from hubd.dialects.base import ConfigReceived, ControlRequest, DeviceInput, InputRejected, Outgoing
from hubd.dialects.shelly.dialect import ShellyDialect

FIXTURES = Path(__file__).parent / "fixtures" / "shelly"
NOW = 1_700_000_000.0
REPLIES = "hubd-hubd/rpc"  # hubd's own src, with mqtt.client_id "hubd"
TWO_PM = "shelly2pmg3-aabbccddeeff"  # ha_2pm_gen3: a Shelly 2PM Gen3 named "Test Name"


def fixture(name: str) -> dict[str, Any]:
    """One fixture file."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


def messages(name: str) -> list[tuple[str, str]]:
    """A fixture's messages (topic, payload as sent) in order."""
    out = []
    for m in fixture(name)["messages"]:
        payload = m["payload"]
        out.append((m["topic"], payload if isinstance(payload, str) else json.dumps(payload)))
    return out


def make(doorbells: list[tuple[str, str]] | None = None, **config: Any) -> ShellyDialect:
    """A Shelly dialect with client id "hubd", `doorbells` as (device glob, event)."""
    return ShellyDialect(ShellyConfig(enabled=True, **config),
                         [DoorbellConfig(device=d, event=e) for d, e in doorbells or []], client_id="hubd")


def publish(dialect: ShellyDialect, topic: str, data: object, *, retained: bool = False) -> list[DeviceInput]:
    """Decode one message (a dict is sent as JSON) if the dialect claims its topic."""
    raw = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    if not dialect.claims(topic):
        return []
    return dialect.decode(topic, raw.encode(), NOW, retained)


def asked(dialect: ShellyDialect) -> list[tuple[str, dict[str, Any]]]:
    """The RPC requests the dialect asks (`requests`), as (topic, frame)."""
    return [(m.topic, json.loads(m.payload)) for m in dialect.requests()]


ASKED = ("Shelly.GetDeviceInfo", "Shelly.GetConfig", "Shelly.GetStatus")


def answer(dialect: ShellyDialect, device: dict[str, Any], requests: list[tuple[str, dict[str, Any]]],
           order: tuple[str, ...] = ASKED) -> list[DeviceInput]:
    """The device's answers (a fixture's `shelly`, `config`, `status`) to the requests, in `order`."""
    results = {"Shelly.GetDeviceInfo": device["shelly"], "Shelly.GetConfig": device["config"],
               "Shelly.GetStatus": device["status"]}
    out: list[DeviceInput] = []
    by_method = {frame["method"]: frame for _, frame in requests}
    for method in order:
        frame = by_method[method]
        out += publish(dialect, f"{frame['src']}/rpc", {"id": frame["id"], "src": device["shelly"]["id"],
                                                        "dst": frame["src"], "result": results[method]})
    return out


def discover(dialect: ShellyDialect, device: dict[str, Any], prefix: str | None = None) -> list[DeviceInput]:
    """A Gen2+ device says online, hubd asks, it answers: the inputs of the answers."""
    prefix = prefix or device["shelly"]["id"]
    publish(dialect, f"{prefix}/online", "true", retained=True)
    return answer(dialect, device, asked(dialect))


def configs(inputs: list[DeviceInput]) -> dict[str, ConfigReceived]:
    """The configs announced, by endpoint (later ones win)."""
    return {i.device_id: i for i in inputs if isinstance(i, ConfigReceived)}


def rejected(inputs: list[DeviceInput]) -> list[str]:
    """The reasons of the inputs refused."""
    return [i.reason for i in inputs if isinstance(i, InputRejected)]


def control(dialect: ShellyDialect, announced: ConfigReceived, interface: str, operation: str,
            value: StateValue | None) -> list[tuple[str, Any]]:
    """The publishes of a control for an announced endpoint, as (topic, payload: JSON read, else text)."""
    request = ControlRequest("c1", interface, operation, value, None, {})
    sent: list[Outgoing] = dialect.encode_control(announced.device_id, announced.route, request)
    out: list[tuple[str, Any]] = []
    for m in sent:
        text = m.payload.decode()
        out.append((m.topic, json.loads(text) if text.startswith("{") else text))
    return out
