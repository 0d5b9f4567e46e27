"""A simulated Tasmota bulb that announces itself with Tasmota's own discovery, as Tasmota does since version 9.

Owns TasmotaBulb: an RGBCW bulb (a Sonoff B1, say) with Tasmota's defaults (SetOption19 0, FullTopic
`%prefix%/%topic%/`): its retained discovery config on `tasmota/discovery/<MAC>/config` and sensors on `/sensors`
(the shape Tasmota's own discovery driver, xdrv_12_discovery.ino in arendst/Tasmota, builds), its LWT
(`tele/<topic>/LWT`, `Online` retained, `Offline` its last will), its `tele/<topic>/STATE`, and the commands it
obeys on `cmnd/<topic>/<Command>`: `POWER1`, `Dimmer`, `CT`, `Color2` and `STATE`, each answered with the
light's state on `stat/<topic>/RESULT` as Tasmota answers. `tasmota_config` is that config for any device (the
bench's sensors). Must not import hubd.
"""

from __future__ import annotations

import colorsys
import json
from collections.abc import Sequence
from typing import Any

from simulators.discovery_session import DiscoveryDevice, Message, Received

TASMOTA_DISCOVERY_PREFIX = "tasmota/discovery"
TASMOTA_VERSION = "15.0.1.4"
MAX_RELAYS = 32  # Tasmota's discovery lists 32 relays, 28 switches and 32 buttons (ESP32)


def tasmota_config(*, mac: str, device_name: str, model: str, topic: str, host_name: str, ip: str,
                   relays: Sequence[int] = (), light_subtype: int = 0) -> dict[str, Any]:
    """A device's discovery config, as xdrv_12_discovery.ino's TasDiscoverMessage builds it (FullTopic
    `%prefix%/%topic%/`, no switch, no button): `relays` the first relays' types (2: a light; the others 0,
    none), `light_subtype` the light's channels (0: no light, 5: RGBCW)."""
    return {
        "ip": ip, "dn": device_name, "fn": [device_name] + [None] * 7, "hn": host_name, "mac": mac, "md": model,
        "ty": 0, "if": 0, "cam": 0, "ofln": "Offline", "onln": "Online", "state": ["OFF", "ON", "TOGGLE", "HOLD"],
        "sw": TASMOTA_VERSION, "t": topic, "ft": "%prefix%/%topic%/", "tp": ["cmnd", "stat", "tele"],
        "rl": [*relays] + [0] * (MAX_RELAYS - len(relays)), "swc": [-1] * 28, "swn": [None] * 28,
        "btn": [0] * MAX_RELAYS,
        "so": {"4": 0, "11": 0, "13": 0, "17": 0, "20": 0, "30": 0, "68": 0, "73": 0, "82": 0, "114": 0, "117": 0},
        "lk": 1, "lt_st": light_subtype, "bat": 0, "dslp": 0, "sho": [], "sht": [], "ver": 1,
    }


class TasmotaBulb(DiscoveryDevice):
    """An RGBCW Tasmota bulb on its default topics, Tasmota's discovery on (the default)."""

    def __init__(self, host: str, port: int, *, mac: str = "A4CF12D4E5F6", device_name: str = "Hallway Light",
                 model: str = "Sonoff B1", on: bool = False, dimmer: int = 60, ct: int = 300,
                 discovery_prefix: str = TASMOTA_DISCOVERY_PREFIX, username: str | None = None,
                 password: str | None = None) -> None:
        self.topic = f"tasmota_{mac[-6:]}"
        self.lwt_topic = f"tele/{self.topic}/LWT"
        super().__init__(host, port, client_id=f"DVES_{mac[-6:]}", will=Message(self.lwt_topic, b"Offline", 1, True),
                         username=username, password=password)
        self.mac, self.device_name, self.model = mac, device_name, model
        self.discovery_prefix = discovery_prefix
        self.state: dict[str, Any] = {"POWER": "ON" if on else "OFF", "Dimmer": dimmer, "CT": ct,
                                      "HSBColor": "0,0,100"}
        self.commands: list[Received] = []  # every command it obeyed, in order

    @property
    def config_topic(self) -> str:
        """Where it announces itself."""
        return f"{self.discovery_prefix}/{self.mac}/config"

    def config(self) -> dict[str, Any]:
        """Its discovery config, as xdrv_12_discovery.ino's TasDiscoverMessage builds it: one relay, the light."""
        return tasmota_config(mac=self.mac, device_name=self.device_name, model=self.model, topic=self.topic,
                              host_name=f"tasmota-{self.mac[-6:]}-{int(self.mac[-4:], 16) % 10000:04d}",
                              ip="192.0.2.31", relays=[2], light_subtype=5)

    async def turn(self, on: bool) -> None:
        """Switched at the wall or in its web page: Tasmota reports the change on stat/RESULT."""
        self.state["POWER"] = "ON" if on else "OFF"
        await self._publish(self._result())

    def _announcement(self) -> list[Message]:
        sensors = {"sn": {"Time": "2026-08-18T12:00:00"}, "ver": 1}
        return [Message(self.lwt_topic, b"Online", 1, True),
                Message(self.config_topic, _compact(self.config()), 1, True),
                Message(f"{self.discovery_prefix}/{self.mac}/sensors", _compact(sensors), 1, True),
                Message(f"tele/{self.topic}/STATE", _compact({"Time": "2026-08-18T12:00:00", **self._light()}), 0)]

    def _farewell(self) -> list[Message]:
        return [Message(self.lwt_topic, b"Offline", 1, True)]

    def _subscriptions(self) -> list[str]:
        return [f"cmnd/{self.topic}/+"]

    async def _handle(self, message: Received) -> None:
        command = message.topic.rsplit("/", 1)[-1].upper()
        value = message.payload.decode("utf-8", errors="replace").strip()
        self.commands.append(message)
        if command in ("POWER", "POWER1") and value.upper() in ("ON", "OFF", "TOGGLE"):
            toggled = "OFF" if self.state["POWER"] == "ON" else "ON"
            self.state["POWER"] = toggled if value.upper() == "TOGGLE" else value.upper()
        elif command == "DIMMER" and value.isdigit():
            self.state["Dimmer"] = min(int(value), 100)
            self.state["POWER"] = "ON" if self.state["Dimmer"] else "OFF"  # SetOption20 0: a dimmer turns it on
        elif command == "CT" and value.isdigit():
            self.state.update(CT=min(max(int(value), 153), 500), POWER="ON", HSBColor="0,0,100")
        elif command == "COLOR2":
            red, green, blue = (int(c) for c in value.rstrip("=").split(",")[:3])
            hue, saturation, _ = colorsys.rgb_to_hsv(red / 255, green / 255, blue / 255)
            self.state.update(HSBColor=f"{round(hue * 360)},{round(saturation * 100)},{self.state['Dimmer']}",
                              POWER="ON")
        elif command != "STATE":
            return
        await self._publish(self._result())

    def _light(self) -> dict[str, Any]:
        hue, saturation, _ = (float(p) for p in str(self.state["HSBColor"]).split(","))
        red, green, blue = colorsys.hsv_to_rgb(hue / 360, saturation / 100, self.state["Dimmer"] / 100)
        return {"POWER": self.state["POWER"], "Dimmer": self.state["Dimmer"],
                "Color": f"{round(red * 255):02X}{round(green * 255):02X}{round(blue * 255):02X}0000",
                "HSBColor": f"{round(hue)},{round(saturation)},{self.state['Dimmer']}", "White": 0,
                "CT": self.state["CT"], "Channel": [round(red * 100), round(green * 100), round(blue * 100), 0, 0]}

    def _result(self) -> Message:
        return Message(f"stat/{self.topic}/RESULT", _compact(self._light()), 0)


def _compact(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


__all__ = ["TASMOTA_DISCOVERY_PREFIX", "TasmotaBulb", "tasmota_config"]
