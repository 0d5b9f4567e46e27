"""Every real device fixture (tests/fixtures/**, each with its source) through its dialect: the name the platform
hears for each endpoint (hubd's conformance of the config: numbers spelled) and why hubd chose it."""

from __future__ import annotations

import json
from pathlib import Path

import homeassistant_helpers as ha
import shelly_helpers as shelly
import tasmota_helpers as tasmota
import zigbee2mqtt_helpers as z2m

from hubd.devices.conformance import conform_config
from hubd.dialects.base import ConfigReceived, DeviceInput

FIXTURES = Path(__file__).parent / "fixtures"
# Fixtures that announce no device (Tasmota's tele/stat messages without a discovery config; zigbee2mqtt's
# frontend messages, which are no bridge/devices list).
NO_DISCOVERY = ("tasmota/docs_results", "tasmota/docs_sensors", "zigbee2mqtt/nurikk_frontend_home",
                # Shelly: notifications and status topics of devices that only answers to hubd's RPC announce, and
                # Home Assistant discovery configs of Shelly's script (their names: homeassistant/shelly_script_*).
                "shelly/asnowfix_notifications", "shelly/jhnul_plus_ht_status", "shelly/plus1pm_shellies_prefix",
                "shelly/script_discovery_plus1")


def fixtures() -> list[str]:
    """Every fixture that announces devices, as `<producer dir>/<name>`."""
    found = [f"{p.parent.name}/{p.stem}" for p in sorted(FIXTURES.glob("*/*.json"))]
    return [f for f in found if f not in NO_DISCOVERY]


def announced(fixture: str) -> list[DeviceInput]:
    """The inputs the fixture's discovery gives, alone on a fresh dialect."""
    kind, name = fixture.split("/")
    if kind == "homeassistant":
        return ha.announce(ha.make(), name)
    if kind == "zigbee2mqtt":
        dialect = z2m.make()
        found = z2m.announce(dialect, z2m.entries(name))
        listed = z2m.fixture(name).get("groups")  # a fixture of zigbee2mqtt groups: its bridge/groups too
        return found + (z2m.publish(dialect, "bridge/groups", listed, retained=True) if listed is not None else [])
    if kind == "shelly":  # a Gen2+ device's answers to hubd's RPC, or Gen1 messages
        device = shelly.fixture(name)
        if "shelly" in device:
            return shelly.discover(shelly.make(), device)
        dialect = shelly.make()
        return [i for topic, payload in shelly.messages(name) for i in shelly.publish(dialect, topic, payload)]
    dialect = tasmota.make()
    data = json.loads((FIXTURES / kind / f"{name}.json").read_text(encoding="utf-8"))
    out: list[DeviceInput] = []
    for message in data["messages"]:
        topic = message["topic"]
        if topic.startswith(tasmota.PREFIX):
            out += tasmota.publish(dialect, topic, message["payload"], retained=True)
    return out


def names(fixture: str) -> dict[str, tuple[str, str]]:
    """Each endpoint's name as the platform hears it, and why hubd chose it ("" for the source's own)."""
    found = {i.device_id: i for i in announced(fixture) if isinstance(i, ConfigReceived)}
    return {device_id: (conform_config(item.config)[0].displayName, item.origin.naming)
            for device_id, item in found.items()}
