"""Simulated Shelly devices speaking Shelly's own MQTT: a Gen2+ relay over RPC and a Gen1 relay.

Owns ShellyPlus: a Gen2+ relay (a Shelly Plus 1PM by default) with MQTT as it ships (topic prefix = its id, RPC
over MQTT and RPC notifications on): `<prefix>/online` `true` retained (`false` its last will), answers on
`<src>/rpc` to the RPC requests on `<prefix>/rpc` (`Shelly.GetDeviceInfo`, `Shelly.GetConfig`,
`Shelly.GetStatus`, `Switch.Set`, `Switch.Toggle`, `Switch.GetStatus`; anything else an error, as the device
answers `-114`), and notifies its changes on `<prefix>/events/rpc` (`NotifyStatus`; an input's press as
`NotifyEvent`). With `discovery_script` it also runs Shelly's `shelly1p-mqtt-autodiscover` script: its Home
Assistant discovery configs (identifiers `<id>-relay-0`) retained. Owns ShellyGen1: a Shelly 1 on
`shellies/<id>/...` (`online`, `relay/0`, `input_event/0`), announcing itself on `shellies/announce` at connect and
when `announce` comes on `shellies/command` (`update` republishes its state), obeying `relay/0/command`. Owns
ShellyPlusRGBW: a Plus RGBW PM in its RGBW profile (one `rgbw:0`: output, brightness, rgb, white), answering
`RGBW.Set` and notifying the change as the relay does.
Payload shapes: tests/fixtures/shelly. Must not import hubd.
"""

from __future__ import annotations

import json
from typing import Any

from simulators.discovery_session import DISCOVERY_PREFIX, DiscoveryDevice, Message, Received

FIRMWARE = "20231107-164738/1.0.8-g8c7bb8d"
PLUS_1PM_MODEL = "SNSW-001P16EU"
PLUS_RGBW_PM_MODEL = "SNDC-0D4P10WW"


class ShellyPlus(DiscoveryDevice):
    """A Gen2+ Shelly relay (one switch:0 and a button input:0), RPC over MQTT on its default prefix."""

    def __init__(self, host: str, port: int, *, mac: str = "A8032AB12345", app: str = "Plus1PM",
                 model: str = PLUS_1PM_MODEL, name: str | None = None, prefix: str | None = None, on: bool = False,
                 discovery_script: bool = False, username: str | None = None, password: str | None = None) -> None:
        self.device_id = f"shelly{app.lower()}-{mac.lower()}"
        self.prefix = prefix or self.device_id
        super().__init__(host, port, client_id=self.device_id,
                         will=Message(f"{self.prefix}/online", b"false", 1, True), username=username,
                         password=password)
        self.mac, self.app, self.model, self.name = mac, app, model, name
        self.on = on
        self.discovery_script = discovery_script
        self.requests: list[dict[str, Any]] = []  # every RPC request it answered, in order

    def device_info(self) -> dict[str, Any]:
        """Shelly.GetDeviceInfo's result (the shape of ha_2pm_gen3.json's `shelly`)."""
        return {"name": self.name, "id": self.device_id, "mac": self.mac, "slot": 0, "model": self.model, "gen": 2,
                "fw_id": FIRMWARE, "ver": "1.0.8", "app": self.app, "auth_en": False, "auth_domain": None}

    def config(self) -> dict[str, Any]:
        """Shelly.GetConfig's result: its input (a button), its switch and its MQTT settings."""
        return {"input:0": {"id": 0, "name": None, "type": "button", "enable": True, "invert": False,
                            "factory_reset": True},
                "switch:0": {"id": 0, "name": None, "in_mode": "momentary", "initial_state": "match_input",
                             "auto_on": False, "auto_off": False},
                "mqtt": {"enable": True, "topic_prefix": self.prefix, "client_id": self.device_id, "rpc_ntf": True,
                         "status_ntf": False, "enable_rpc": True, "enable_control": True}}

    def status(self) -> dict[str, Any]:
        """Shelly.GetStatus's result."""
        return {"input:0": {"id": 0, "state": None}, "switch:0": self._switch(), "mqtt": {"connected": True}}

    async def turn(self, on: bool) -> None:
        """Switched at the wall: NotifyStatus with the new output."""
        self.on = on
        await self._notify_status("button")

    async def press(self, event: str = "single_push") -> None:
        """Its button pressed: NotifyEvent of input:0."""
        await self._publish(Message(f"{self.prefix}/events/rpc", _compact({
            "src": self.device_id, "dst": f"{self.prefix}/events", "method": "NotifyEvent",
            "params": {"ts": 1700000000.0, "events": [{"component": "input:0", "id": 0, "event": event,
                                                       "ts": 1700000000.0}]}}), 0))

    def _switch(self) -> dict[str, Any]:
        return {"id": 0, "source": "init", "output": self.on, "apower": 0.0, "voltage": 230.1, "current": 0.0,
                "aenergy": {"total": 0.0, "by_minute": [0.0, 0.0, 0.0], "minute_ts": 1700000000},
                "temperature": {"tC": 40.6, "tF": 105.1}}

    async def _notify_status(self, source: str) -> None:
        await self._publish(Message(f"{self.prefix}/events/rpc", _compact({
            "src": self.device_id, "dst": f"{self.prefix}/events", "method": "NotifyStatus",
            "params": {"ts": 1700000000.0, "switch:0": {"id": 0, "output": self.on, "source": source}}}), 0))

    def _announcement(self) -> list[Message]:
        out = [Message(f"{self.prefix}/online", b"true", 1, True)]
        if self.discovery_script:
            out += [Message(topic, _compact(config), 0, True) for topic, config in self._script_configs().items()]
        return out

    def _farewell(self) -> list[Message]:
        return [Message(f"{self.prefix}/online", b"false", 1, True)]

    def _subscriptions(self) -> list[str]:
        return [f"{self.prefix}/rpc"]

    async def _handle(self, message: Received) -> None:
        try:
            frame = message.json()
        except ValueError:
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("src"), str):
            return  # a request without src cannot be answered
        self.requests.append(frame)
        method, params = frame.get("method"), frame.get("params") or {}
        reply: dict[str, Any] = {"id": frame.get("id"), "src": self.device_id, "dst": frame["src"]}
        changed = False
        if method == "Shelly.GetDeviceInfo":
            reply["result"] = self.device_info()
        elif method == "Shelly.GetConfig":
            reply["result"] = self.config()
        elif method == "Shelly.GetStatus":
            reply["result"] = self.status()
        elif method == "Switch.GetStatus" and params.get("id") == 0:
            reply["result"] = self._switch()
        elif method in ("Switch.Set", "Switch.Toggle") and params.get("id") == 0:
            reply["result"] = {"was_on": self.on}
            changed = self.on != (not self.on if method == "Switch.Toggle" else bool(params.get("on")))
            self.on = not self.on if method == "Switch.Toggle" else bool(params.get("on"))
        else:
            reply["error"] = {"code": -114, "message": f"Method {method} failed: No such component or method"}
        await self._publish(Message(f"{frame['src']}/rpc", _compact(reply), 1))
        if changed:
            await self._notify_status("MQTT")

    def _script_configs(self) -> dict[str, dict[str, Any]]:
        """The configs Shelly's shelly1p-mqtt-autodiscover script publishes (tests/fixtures/shelly)."""
        def config(devname: str, extra: dict[str, Any]) -> dict[str, Any]:
            name = f"{self.name or self.device_id}-{devname}"
            return {"name": name, "device": {"name": name, "ids": f"{self.device_id}-{devname}", "mdl": self.model,
                                             "mf": "Allterco", "sw_version": FIRMWARE},
                    "unique_id": f"{self.mac}-{devname}", **extra}
        relay = f"shellies/{self.device_id}/relay/0"
        return {f"{DISCOVERY_PREFIX}/switch/{self.device_id}-relay-0/config": config(
            "relay-0", {"pl_on": "on", "pl_off": "off", "cmd_t": "~/command", "stat_t": "~", "~": relay})}


class ShellyPlusRGBW(ShellyPlus):
    """A Shelly Plus RGBW PM in its RGBW profile: one `rgbw:0` (the shape of tests/fixtures/shelly/plusrgbwpm_rgbw.json)
    and its four button inputs' first."""

    def __init__(self, host: str, port: int, *, mac: str = "A0A3B35C7024", name: str | None = None,
                 prefix: str | None = None, on: bool = False, rgb: tuple[int, int, int] = (0, 0, 128),
                 brightness: int = 50) -> None:
        super().__init__(host, port, mac=mac, app="PlusRGBWPM", model=PLUS_RGBW_PM_MODEL, name=name, prefix=prefix,
                         on=on)
        self.rgb, self.brightness, self.white = list(rgb), brightness, 128

    def config(self) -> dict[str, Any]:
        """Shelly.GetConfig's result: its input, its rgbw:0 and its MQTT settings."""
        found = super().config()
        del found["switch:0"]
        found["rgbw:0"] = {"id": 0, "name": None, "initial_state": "restore_last", "auto_on": False, "auto_off": False,
                           "transition_duration": 3, "in_mode": "dim", "current_limit": 10}
        return found

    def status(self) -> dict[str, Any]:
        """Shelly.GetStatus's result."""
        return {"input:0": {"id": 0, "state": None}, "rgbw:0": self._light(), "mqtt": {"connected": True}}

    async def paint(self, rgb: tuple[int, int, int]) -> None:
        """Its colour changed from its app: NotifyStatus with the new rgb."""
        self.rgb = list(rgb)
        await self._notify_light({"id": 0, "rgb": self.rgb, "source": "WS_in"})

    def _light(self) -> dict[str, Any]:
        return {"id": 0, "source": "init", "output": self.on, "rgb": self.rgb, "brightness": self.brightness,
                "white": self.white, "temperature": {"tC": 51.1, "tF": 124}, "apower": 0, "current": 0,
                "voltage": 12.6}

    async def _notify_light(self, changed: dict[str, Any]) -> None:
        await self._publish(Message(f"{self.prefix}/events/rpc", _compact({
            "src": self.device_id, "dst": f"{self.prefix}/events", "method": "NotifyStatus",
            "params": {"ts": 1722607400.0, "rgbw:0": changed}}), 0))

    async def _handle(self, message: Received) -> None:
        try:
            frame = message.json()
        except ValueError:
            return
        if not isinstance(frame, dict) or frame.get("method") != "RGBW.Set" or not isinstance(frame.get("src"), str):
            await super()._handle(message)
            return
        self.requests.append(frame)
        params = frame.get("params") or {}
        reply: dict[str, Any] = {"id": frame.get("id"), "src": self.device_id, "dst": frame["src"]}
        if params.get("id") != 0 or ("on" not in params and "brightness" not in params):
            reply["error"] = {"code": -103, "message": "Invalid argument: on or brightness required"}
            await self._publish(Message(f"{frame['src']}/rpc", _compact(reply), 1))
            return
        reply["result"] = {}
        self.on = bool(params.get("on", self.on))
        self.brightness = int(params.get("brightness", self.brightness))
        rgb = params.get("rgb")
        if isinstance(rgb, list) and len(rgb) == 3:
            self.rgb = [int(c) for c in rgb]
        await self._publish(Message(f"{frame['src']}/rpc", _compact(reply), 1))
        await self._notify_light({"id": 0, "output": self.on, "brightness": self.brightness, "rgb": self.rgb,
                                  "source": "MQTT"})


class ShellyGen1(DiscoveryDevice):
    """A Gen1 Shelly 1 (`SHSW-1`) on `shellies/<id>/`."""

    def __init__(self, host: str, port: int, *, mac: str = "8CAAB5ABCDEF", on: bool = False,
                 username: str | None = None, password: str | None = None) -> None:
        self.device_id = f"shelly1-{mac[-6:].upper()}"
        self.base = f"shellies/{self.device_id}"
        super().__init__(host, port, client_id=self.device_id, will=Message(f"{self.base}/online", b"false", 1, True),
                         username=username, password=password)
        self.mac = mac
        self.on = on
        self.event_count = 0
        self.commands: list[Received] = []  # every command it obeyed, in order

    def announce_message(self) -> Message:
        """Its `shellies/announce` (the shape of gen1_messages.json's)."""
        return Message("shellies/announce", _compact({"id": self.device_id, "model": "SHSW-1", "mac": self.mac,
                                                      "ip": "192.0.2.41", "new_fw": False, "fw_ver": FIRMWARE}), 0)

    async def turn(self, on: bool) -> None:
        """Switched at the wall."""
        self.on = on
        await self._publish(self._relay())

    async def press(self, event: str = "S") -> None:
        """Its input pressed: `input_event/0` with the next event count."""
        self.event_count += 1
        await self._publish(Message(f"{self.base}/input_event/0",
                                    _compact({"event": event, "event_cnt": self.event_count}), 0))

    def _relay(self) -> Message:
        return Message(f"{self.base}/relay/0", b"on" if self.on else b"off", 0)

    def _announcement(self) -> list[Message]:
        return [Message(f"{self.base}/online", b"true", 1, True), self.announce_message(), self._relay()]

    def _farewell(self) -> list[Message]:
        return [Message(f"{self.base}/online", b"false", 1, True)]

    def _subscriptions(self) -> list[str]:
        return ["shellies/command", f"{self.base}/command", f"{self.base}/relay/0/command"]

    async def _handle(self, message: Received) -> None:
        text = message.payload.decode("utf-8", errors="replace").strip()
        if message.topic.endswith("/relay/0/command"):
            if text not in ("on", "off", "toggle"):
                return
            self.commands.append(message)
            self.on = (not self.on) if text == "toggle" else text == "on"
            await self._publish(self._relay())
        elif text == "announce":
            await self._publish(self.announce_message())
        elif text == "update":
            await self._publish(self._relay())


def _compact(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


__all__ = ["ShellyGen1", "ShellyPlus", "ShellyPlusRGBW"]
