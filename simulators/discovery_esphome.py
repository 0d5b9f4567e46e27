"""A simulated ESPHome board that announces itself with Home Assistant MQTT discovery, as ESPHome does.

Owns EspHomeClimateSensor: a board with a temperature and a humidity sensor (e.g. an SHT3x), its status
topic (birth, will and shutdown message), its sensors' discovery configs with ESPHome's abbreviated keys,
and its readings as plain text with the sensor's decimals. The payloads are ESPHome's; each builder names
its source. Must not import hubd.
"""

from __future__ import annotations

import json
import re
from typing import Any

from simulators.discovery_session import DISCOVERY_PREFIX, DiscoveryDevice, Message

# Copied from tests/fixtures/homeassistant/esphome_garagedoor1_sht3x.json (captured from ESPHome 2026.8.0).
ESPHOME_SW = "2026.8.0 (config hash 0x0dd1e1e6)"


class EspHomeClimateSensor(DiscoveryDevice):
    """An ESPHome board with a temperature and a humidity sensor (e.g. an SHT3x), discovery on (the default)."""

    def __init__(self, host: str, port: int, *, node: str = "porch-climate", friendly_name: str = "Porch Climate",
                 mac: str = "a4cf12f3c2d1", area: str | None = None, temperature_name: str = "Temperature",
                 humidity_name: str = "Humidity", temperature_c: float = 21.5, humidity: float = 48.0,
                 accuracy_decimals: int = 1, discovery_prefix: str = DISCOVERY_PREFIX, username: str | None = None,
                 password: str | None = None) -> None:
        # esphome/components/mqtt/__init__.py: birth, will and shutdown message on <topic_prefix>/status,
        # QoS 0, retained; the topic prefix defaults to the node name.
        self.status_topic = f"{node}/status"
        super().__init__(host, port, client_id=f"{node}-{mac}", will=Message(self.status_topic, b"offline", 0, True),
                         username=username, password=password)
        self.node, self.friendly_name, self.mac, self.area = node, friendly_name, mac, area
        self.temperature_c = temperature_c
        self.humidity = humidity
        self.accuracy_decimals = accuracy_decimals
        self.discovery_prefix = discovery_prefix
        # device_class -> (entity name, object_id, unit)
        self._sensors = {"temperature": (temperature_name, _object_id(temperature_name), "°C"),
                         "humidity": (humidity_name, _object_id(humidity_name), "%")}
        self.temperature_topic = self._state_topic("temperature")
        self.humidity_topic = self._state_topic("humidity")

    async def set_temperature(self, celsius: float) -> None:
        """A new reading: published as ESPHome does, plain text with the sensor's decimals, retained."""
        self.temperature_c = celsius
        await self._publish(self._reading("temperature", celsius))

    async def set_humidity(self, percent: float) -> None:
        """A new humidity reading (%)."""
        self.humidity = percent
        await self._publish(self._reading("humidity", percent))

    def _announcement(self) -> list[Message]:
        messages = [Message(self.status_topic, b"online", 0, True)]
        for device_class, value in (("temperature", self.temperature_c), ("humidity", self.humidity)):
            messages += [self._config(device_class), self._reading(device_class, value)]
        return messages

    def _farewell(self) -> list[Message]:
        return [Message(self.status_topic, b"offline", 0, True)]

    def _state_topic(self, device_class: str) -> str:
        return f"{self.node}/sensor/{self._sensors[device_class][1]}/state"  # ESPHome's default state topic

    def _reading(self, device_class: str, value: float) -> Message:
        # esphome/components/mqtt/mqtt_sensor.cpp publish_state: value_accuracy_to_string; QoS 0, retain on.
        return Message(self._state_topic(device_class), f"{value:.{self.accuracy_decimals}f}".encode(), 0, True)

    def _config(self, device_class: str) -> Message:
        # The shape of esphome/components/mqtt/mqtt_component.cpp send_discovery_ and mqtt_sensor.cpp, with
        # abbreviated keys (use_abbreviations defaults on), in the order of the fixture captured from a board.
        name, object_id, unit = self._sensors[device_class]
        device: dict[str, Any] = {"ids": self.mac, "name": self.friendly_name, "sw": ESPHOME_SW, "mdl": "esp32",
                                  "mf": "Espressif"}
        if self.area:
            device["sa"] = self.area
        device["cns"] = [["mac", self.mac]]
        config = {
            "sug_dsp_prc": self.accuracy_decimals, "unit_of_meas": unit, "stat_cla": "measurement", "name": name,
            "dev_cla": device_class, "stat_t": self._state_topic(device_class), "avty_t": self.status_topic,
            "uniq_id": f"ESPsensor{object_id}", "dev": device,
        }
        return Message(f"{self.discovery_prefix}/sensor/{self.node}/{object_id}/config", _compact(config), 0, True)


def _object_id(name: str) -> str:
    """ESPHome's object_id of an entity name (str_snake_case, then str_sanitize)."""
    return re.sub(r"[^a-z0-9_-]", "_", name.lower().replace(" ", "_"))


def _compact(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


__all__ = ["ESPHOME_SW", "EspHomeClimateSensor"]
