"""A simulated zigbee2mqtt 2.x bridge: a Zigbee network of real device models, as zigbee2mqtt shows it on MQTT.

Owns one MQTT session that plays zigbee2mqtt itself (the session is simulators.discovery_session.DiscoveryDevice's:
paho's thread only hands over to the event loop). On every connect, in zigbee2mqtt's order (lib/controller.ts
start, lib/mqtt.ts onConnect): `<base>/bridge/state` `{"state":"online"}` (QoS 1, retained; the last will and
stop() say offline), the retained `<base>/bridge/devices` list (the Coordinator, then each device's entry with its
full definition, lib/extension/bridge.ts publishDevices), each device's retained `<base>/<name>/availability` and
its whole cached state on `<base>/<name>` (linkquality added; retained only with the device option `retain`).
It obeys `<base>/<name>/set[/<attribute>]` as lib/extension/publish.ts and the converters of the device's model do
(zigbee2mqtt_converters.obey) and publishes the new whole state; `/get` republishes it; it answers
`bridge/request/device/rename` and `.../remove`. Its groups (lib/model/group.ts) are published as the retained
`<base>/bridge/groups` list after bridge/devices (bridge.ts publishGroups: id, friendly_name, description, scenes,
members with their ieee_address and endpoint); a group's `<base>/<group>/set` reaches every member (each obeys it
as its own /set and publishes its state), then the group's own state goes to `<base>/<group>` (what the members
changed, as zigbee2mqtt's optimistic group state). Every message it handles is in `received`. The devices' own doings
(a door opening, a click, a reading) are methods. Payloads are compact JSON with sorted keys, as zigbee2mqtt's
json-stable-stringify writes them. Must not import hubd.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import logging
import random
import re
import secrets
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simulators.device_fleet import LOG_FORMAT, BrokerRefused, DeviceStopped
from simulators.discovery_session import DiscoveryDevice, Message, Received
from simulators.zigbee2mqtt_converters import cached, obey, parse_set
from simulators.zigbee2mqtt_models import (
    BTH_RA,
    HUE_GO_7146060PH,
    LED1545G12,
    MCCGQ11LM,
    MS_104BZ,
    MS_108ZR,
    WSDCGQ11LM,
    WXKG11LM,
    Model,
)

log = logging.getLogger(__name__)

Z2M_BASE_TOPIC = "zigbee2mqtt"
COORDINATOR_IEEE = "0x00124b00120144ae"  # zigbee2mqtt's test suite coordinator
ONLINE, OFFLINE = b'{"state":"online"}', b'{"state":"offline"}'
# zigbee-herdsman's InterviewState values.
INTERVIEW_STATES = ("PENDING", "IN_PROGRESS", "SUCCESSFUL", "FAILED")


class NoSuchDevice(KeyError):
    """The bridge has no device of that friendly name or ieee_address."""

    def __str__(self) -> str:
        return str(self.args[0])  # the message, not KeyError's repr of it


@dataclass(slots=True)
class ZigbeeDevice:
    """A device paired to the simulated bridge: its model, its names and the state zigbee2mqtt caches for it."""

    model: Model
    friendly_name: str
    ieee_address: str
    linkquality: int = 87
    available: bool = True
    disabled: bool = False
    supported: bool = True
    interview_state: str = "SUCCESSFUL"
    retain: bool = False  # zigbee2mqtt's device option `retain`: its state messages retained
    description: str | None = None  # zigbee2mqtt's device option `description`
    state: dict[str, Any] = field(default_factory=dict)  # the cached state; the model's first report if empty

    def __post_init__(self) -> None:
        check_name(self.friendly_name)
        if self.interview_state not in INTERVIEW_STATES:
            raise ValueError(f"interview_state must be one of {INTERVIEW_STATES}")
        if not self.state:
            self.state = self.model.fresh_state()

    def entry(self) -> dict[str, Any]:
        """Its bridge/devices entry, with the fields of bridge.ts publishDevices (the undefined ones left out)."""
        zigbee = copy.deepcopy(self.model.zigbee)
        entry: dict[str, Any] = {
            "ieee_address": self.ieee_address, "type": zigbee.pop("type"),
            "network_address": int(self.ieee_address[-4:], 16), "supported": self.supported,
            "friendly_name": self.friendly_name, "disabled": self.disabled,
            "definition": copy.deepcopy(self.model.definition),
            "interviewing": self.interview_state == "IN_PROGRESS",
            "interview_completed": self.interview_state == "SUCCESSFUL", "interview_state": self.interview_state,
            **zigbee,
        }
        if self.description is not None:
            entry["description"] = self.description
        return entry


@dataclass(slots=True)
class ZigbeeGroup:
    """A zigbee2mqtt group: its id, friendly name and members (friendly names or ieee_addresses of devices)."""

    id: int
    friendly_name: str
    members: list[str] = field(default_factory=list)
    description: str | None = None
    state: dict[str, Any] = field(default_factory=dict)  # what zigbee2mqtt last published for the group


def check_name(name: str) -> None:
    """zigbee2mqtt's friendly name rules (lib/util/utils.ts validateFriendlyName); ValueError with its message."""
    if not name:
        raise ValueError("friendly_name must be at least 1 char long")
    if name.startswith("/") or name.endswith("/"):
        raise ValueError("friendly_name is not allowed to end or start with /")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        raise ValueError("friendly_name is not allowed to contain control char")
    if re.search(r"/\d*$", name):
        raise ValueError(f"Friendly name cannot end with a \"/DIGIT\" ('{name}')")
    if "#" in name or "+" in name:
        raise ValueError(f"MQTT wildcard (+ and #) not allowed in friendly_name ('{name}')")


def coordinator(ieee: str = COORDINATOR_IEEE) -> dict[str, Any]:
    """The Coordinator's bridge/devices entry (bridge.test.ts, 2.12.1)."""
    return {"disabled": False, "endpoints": {"1": {"bindings": [], "clusters": {"input": [], "output": []},
                                                   "configured_reportings": [], "scenes": []}},
            "friendly_name": "Coordinator", "ieee_address": ieee, "interview_completed": True,
            "interview_state": "SUCCESSFUL", "interviewing": False, "network_address": 0, "supported": True,
            "type": "Coordinator"}


class Zigbee2MqttBridge(DiscoveryDevice):
    """zigbee2mqtt 2.x with a simulated Zigbee network: its bridge topics, device states, `/set`, `/get`.

    legacy_action_sensor is zigbee2mqtt's `homeassistant.legacy_action_sensor`: a click is published with its
    `action`, then again with an empty `action`.
    """

    def __init__(self, host: str, port: int, devices: Iterable[ZigbeeDevice] = (), *,
                 base_topic: str = Z2M_BASE_TOPIC, coordinator_ieee: str = COORDINATOR_IEEE,
                 legacy_action_sensor: bool = True, username: str | None = None, password: str | None = None,
                 groups: Iterable[ZigbeeGroup] = ()) -> None:
        self.base_topic = base_topic
        self.bridge_topic = f"{base_topic}/bridge/state"
        # lib/mqtt.ts: the will {"state":"offline"} on <base>/bridge/state, QoS 1, retained.
        super().__init__(host, port, client_id=f"zigbee2mqtt-{coordinator_ieee}-{secrets.token_hex(3)}",
                         will=Message(self.bridge_topic, OFFLINE, 1, True), username=username, password=password)
        self.coordinator_ieee = coordinator_ieee
        self.legacy_action_sensor = legacy_action_sensor
        self.devices: dict[str, ZigbeeDevice] = {}  # by friendly name, in pairing order
        for device in devices:
            self._add(device)
        self.groups: dict[str, ZigbeeGroup] = {g.friendly_name: g for g in groups}  # by friendly name

    def state_topic(self, name: str) -> str:
        """`<base>/<friendly_name>`: where the device's state goes (its `/set`, `/get`, `/availability` below)."""
        return f"{self.base_topic}/{name}"

    def device(self, name: str) -> ZigbeeDevice:
        """A device by friendly name or ieee_address (NoSuchDevice, a KeyError, if the bridge has none)."""
        found = self.devices.get(name) or next((d for d in self.devices.values() if d.ieee_address == name), None)
        if found is None:
            raise NoSuchDevice(f"Device '{name}' does not exist")  # bridge.ts getEntity's words
        return found

    def bridge_devices(self) -> list[dict[str, Any]]:
        """The retained `<base>/bridge/devices` payload: the Coordinator, then every device."""
        return [coordinator(self.coordinator_ieee), *(d.entry() for d in self.devices.values())]

    def bridge_groups(self) -> list[dict[str, Any]]:
        """The retained `<base>/bridge/groups` payload (bridge.ts publishGroups), each member at endpoint 1."""
        return [{"description": g.description, "friendly_name": g.friendly_name, "id": g.id,
                 "members": [{"endpoint": 1, "ieee_address": self.device(m).ieee_address} for m in g.members
                             if self._known(m)], "scenes": []} for g in self.groups.values()]

    async def set_group(self, group: ZigbeeGroup) -> None:
        """A group created or changed (members added or removed, renamed by its id): bridge/groups again."""
        before = next((n for n, g in self.groups.items() if g.id == group.id), None)
        if before is not None:
            del self.groups[before]
        check_name(group.friendly_name)
        self.groups[group.friendly_name] = group
        await self._listen(self._device_topics(group.friendly_name),
                           drop=self._device_topics(before) if before not in (None, group.friendly_name) else ())
        await self._publish(self._group_list())

    async def remove_group(self, name: str) -> None:
        """bridge/request/group/remove: the group is gone from bridge/groups."""
        self.groups.pop(name)
        await self._listen([], drop=self._device_topics(name))
        await self._publish(self._group_list())

    async def report(self, name: str, values: Mapping[str, Any]) -> None:
        """The device reports these values (a Zigbee message): cached, and the whole state published."""
        device = self.device(name)
        device.state.update((k, v) for k, v in values.items() if cached(k))
        await self._publish(self._state(device, {k: v for k, v in values.items() if not cached(k)}))

    async def set_contact(self, name: str, closed: bool) -> None:
        """A door or window sensor closes (`contact: true`) or opens (`contact: false`)."""
        await self.report(name, {"contact": closed})

    async def set_temperature(self, name: str, celsius: float) -> None:
        """A new temperature reading (a thermostat's `local_temperature`), two decimals as the Aqara ones send."""
        prop = "temperature" if self.device(name).model.feature("temperature") else "local_temperature"
        await self.report(name, {prop: round(celsius, 2)})

    async def set_humidity(self, name: str, percent: float) -> None:
        """A new humidity reading (%)."""
        await self.report(name, {"humidity": round(percent, 2)})

    async def press(self, name: str, action: str = "single") -> None:
        """A click: the state with `action`, then (legacy_action_sensor) with an empty one; `action` is never cached."""
        device = self.device(name)
        found = device.model.feature("action")
        actions = found[0].get("values", []) if found else []
        if action not in actions:
            raise ValueError(f"a {device.model.model} does not send action {action!r}; it sends {actions}")
        await self._publish(self._state(device, {"action": action}))
        if self.legacy_action_sensor:
            # lib/extension/homeassistant.ts onPublishEntityState: publishEntityState(entity, {action: ""}).
            await self._publish(self._state(device, {"action": ""}))

    async def set_offline(self, name: str) -> None:
        """The availability feature gives up on the device: `{"state":"offline"}` on its availability topic."""
        await self._set_available(self.device(name), False)

    async def set_online(self, name: str) -> None:
        """The device is heard again."""
        await self._set_available(self.device(name), True)

    async def rename(self, old: str, new: str) -> None:
        """What bridge/request/device/rename does (bridge.ts renameEntity): clear the old retained state and
        availability, new availability, bridge/devices, the state on the new topic."""
        device = self.device(old)
        check_name(new)
        if new in self.devices:
            raise ValueError(f"friendly_name {new!r} is already in use")
        before = device.friendly_name
        self.devices = {(new if n == before else n): d for n, d in self.devices.items()}
        device.friendly_name = new
        await self._listen(self._device_topics(new), drop=self._device_topics(before))
        await self._publish(Message(self.state_topic(before), b"", 0, True))
        await self._publish(Message(f"{self.state_topic(before)}/availability", b"", 1, True))
        await self._publish(self._availability(device))
        await self._publish(self._device_list())
        await self._publish(self._state(device))

    async def remove(self, name: str) -> None:
        """What bridge/request/device/remove does (bridge.ts removeEntity): the device leaves, its retained state
        is cleared, bridge/devices republished. zigbee2mqtt 2.12.1 leaves its retained availability; so does this."""
        device = self.device(name)
        del self.devices[device.friendly_name]
        await self._listen([], drop=self._device_topics(device.friendly_name))
        await self._publish(Message(self.state_topic(device.friendly_name), b"", 0, True))
        await self._publish(self._device_list())

    async def pair(self, device: ZigbeeDevice) -> None:
        """A new device joins and is interviewed: bridge/devices, its availability and state."""
        self._add(device)
        await self._listen(self._device_topics(device.friendly_name))
        for message in (self._device_list(), *self._device_messages(device)):
            await self._publish(message)

    async def stop_bridge(self) -> None:
        """zigbee2mqtt shutting down: the same as stop() (bridge/state offline, then DISCONNECT)."""
        await self.stop()

    # The session (DiscoveryDevice's hooks).

    def _announcement(self) -> list[Message]:
        messages = [Message(self.bridge_topic, ONLINE, 1, True), self._device_list(), self._group_list()]
        for device in self.devices.values():
            messages += self._device_messages(device)
        return messages

    def _farewell(self) -> list[Message]:
        return [Message(self.bridge_topic, OFFLINE, 0, True)]  # lib/mqtt.ts disconnect(): retained, QoS 0

    def _subscriptions(self) -> list[str]:
        # zigbee2mqtt subscribes to <base>/#; the exact topics keep what its own publishes echo out of `received`.
        request = f"{self.base_topic}/bridge/request/device"
        return [f"{request}/rename", f"{request}/remove",
                *(t for name in [*self.devices, *self.groups] for t in self._device_topics(name))]

    async def _handle(self, message: Received) -> None:
        rest = message.topic[len(self.base_topic) + 1:]
        if rest.startswith("bridge/request/device/"):
            await self._request(rest.rsplit("/", 1)[1], message.payload)
            return
        group = max((n for n in self.groups if rest.startswith(n + "/")), key=len, default=None)
        if group is not None and rest[len(group) + 1:].partition("/")[0] == "set":
            await self._group_set(self.groups[group], message.payload, rest[len(group) + 1:].partition("/")[2])
            return
        name = max((n for n in self.devices if rest.startswith(n + "/")), key=len, default=None)
        if name is None:
            return  # a device renamed or removed since the broker routed this
        device = self.devices[name]
        kind, _, attribute = rest[len(name) + 1:].partition("/")
        if kind == "get":
            await self._publish(self._state(device))
            return
        command = parse_set(message.payload.decode("utf-8", errors="replace"), attribute)
        if command is None:
            log.error("%s: invalid message %r on %s, skipping", name, message.payload[:80], message.topic)
            return
        update, problems = obey(device.model, device.state, command)
        for problem in problems:
            log.error("%s: %s", name, problem)
        if update:
            device.state.update(update)
            await self._publish(self._state(device))

    async def _group_set(self, group: ZigbeeGroup, payload: bytes, attribute: str) -> None:
        """A group's /set: every member obeys it (one Zigbee group command), then the group's state."""
        command = parse_set(payload.decode("utf-8", errors="replace"), attribute)
        if command is None:
            log.error("%s: invalid message %r, skipping", group.friendly_name, payload[:80])
            return
        changed: dict[str, Any] = {}
        for member in [self.device(m) for m in group.members if self._known(m)]:
            update, _problems = obey(member.model, member.state, command)  # a member without it ignores it
            if update:
                member.state.update(update)
                changed.update(update)
                await self._publish(self._state(member))
        if changed:
            group.state.update(changed)
            await self._publish(Message(self.state_topic(group.friendly_name), _stable(group.state), 0, False))

    # Helpers.

    def _known(self, name: str) -> bool:
        try:
            self.device(name)
        except NoSuchDevice:
            return False
        return True

    def _group_list(self) -> Message:
        return Message(f"{self.base_topic}/bridge/groups", _stable(self.bridge_groups()), 0, True)

    def _add(self, device: ZigbeeDevice) -> None:
        if device.friendly_name in self.devices or any(d.ieee_address == device.ieee_address
                                                       for d in self.devices.values()):
            raise ValueError(f"{device.friendly_name} ({device.ieee_address}) is already paired")
        self.devices[device.friendly_name] = device

    def _device_topics(self, name: str) -> list[str]:
        topic = self.state_topic(name)
        return [f"{topic}/set", f"{topic}/set/+", f"{topic}/get", f"{topic}/get/+"]

    def _device_messages(self, device: ZigbeeDevice) -> list[Message]:
        """Its availability and cached state, as zigbee2mqtt publishes them at start (none for a disabled one)."""
        if device.disabled or device.interview_state != "SUCCESSFUL":
            return []
        return [self._availability(device), self._state(device)]

    def _device_list(self) -> Message:
        return Message(f"{self.base_topic}/bridge/devices", _stable(self.bridge_devices()), 0, True)

    def _availability(self, device: ZigbeeDevice) -> Message:
        # lib/extension/availability.ts publishAvailability: JSON, QoS 1, retained.
        payload = ONLINE if device.available else OFFLINE
        return Message(f"{self.state_topic(device.friendly_name)}/availability", payload, 1, True)

    def _state(self, device: ZigbeeDevice, extra: Mapping[str, Any] | None = None) -> Message:
        # lib/controller.ts publishEntityState: the cached state plus this message's, linkquality added; QoS 0.
        payload = {**device.state, **(extra or {}), "linkquality": device.linkquality}
        return Message(self.state_topic(device.friendly_name), _stable(payload), 0, device.retain)

    async def _set_available(self, device: ZigbeeDevice, available: bool) -> None:
        device.available = available
        await self._publish(self._availability(device))

    async def _listen(self, topics: list[str], *, drop: Iterable[str] = ()) -> None:
        """Follow a rename or pairing: subscribe to the new device topics, unsubscribe from the old ones. While
        disconnected there is nothing to do: the next connect subscribes to _subscriptions()."""
        gone = list(drop)
        if not self.running or not self._client.is_connected():
            return
        if topics:
            _rc, mid = self._client.subscribe([(t, 1) for t in topics])
            await self._wait_ack(mid)
        if gone:
            _rc, mid = self._client.unsubscribe(gone)
            await self._wait_ack(mid)

    async def _request(self, op: str, payload: bytes) -> None:
        """bridge/request/device/<op>: do it, then answer on bridge/response/device/<op> (utils.getResponse)."""
        try:
            body: Any = json.loads(payload) if payload.strip().startswith(b"{") else payload.decode().strip()
        except (ValueError, UnicodeDecodeError):
            body = None
        transaction = {"transaction": body["transaction"]} if isinstance(body, dict) and "transaction" in body \
            else {}
        try:
            if op == "rename" and isinstance(body, dict) and isinstance(body.get("to"), str):
                before = self.device(str(body.get("from"))).friendly_name
                await self.rename(before, body["to"].strip())
                data: dict[str, Any] = {"from": before, "to": body["to"].strip(),
                                        "homeassistant_rename": bool(body.get("homeassistant_rename", False))}
            elif op == "remove" and isinstance(body, (dict, str)):
                ident = body.get("id") if isinstance(body, dict) else body
                await self.remove(str(ident))
                options = body if isinstance(body, dict) else {}
                data = {"id": ident, "block": bool(options.get("block")), "force": bool(options.get("force"))}
            else:
                raise ValueError("Invalid payload")
            answer: dict[str, Any] = {"data": data, "status": "ok", **transaction}
        except (KeyError, ValueError) as err:
            answer = {"data": {}, "error": str(err), "status": "error", **transaction}
        await self._publish(Message(f"{self.base_topic}/bridge/response/device/{op}", _stable(answer)))


def _stable(payload: Any) -> bytes:
    """json-stable-stringify: sorted keys, no spaces."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()


DEMO_BUTTON = "Garden Gate Button"
DEMO_GROUP = "Living room"


def make_demo_bridge(host: str, port: int, *, base_topic: str = Z2M_BASE_TOPIC, username: str | None = None,
                     password: str | None = None) -> Zigbee2MqttBridge:
    """A small zigbee2mqtt home, one device of each model: the demo's and the CLI's bridge."""
    devices = [
        ZigbeeDevice(MCCGQ11LM, "Back Door Contact", "0x00158d00091e7bd6", linkquality=117),
        ZigbeeDevice(WSDCGQ11LM, "Living Room Sensor", "0x00158d00040726f1", linkquality=152),
        ZigbeeDevice(LED1545G12, "Living Room Bulb", "0x000b57fffec6a5c2", linkquality=120),
        ZigbeeDevice(HUE_GO_7146060PH, "Sofa Lamp", "0x0017880103a1b2c4", linkquality=98),
        ZigbeeDevice(MS_104BZ, "Kitchen Switch", "0xcc86ecfffe4e9d25", linkquality=143),
        ZigbeeDevice(WXKG11LM, DEMO_BUTTON, "0x00158d0002b5c7e1", linkquality=76),
        ZigbeeDevice(MS_108ZR, "Bedroom Blind", "0x70ac08fffee6dd5e", linkquality=101),
        ZigbeeDevice(BTH_RA, "Bedroom Radiator", "0x18fc2600000d7ae2", linkquality=89),
    ]
    groups = [ZigbeeGroup(1, DEMO_GROUP, ["Living Room Bulb", "Sofa Lamp"])]
    return Zigbee2MqttBridge(host, port, devices, base_topic=base_topic, username=username, password=password,
                             groups=groups)


def main(argv: list[str]) -> int:
    """`python -m simulators zigbee2mqtt ...`: a zigbee2mqtt bridge with one device of each model until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m simulators zigbee2mqtt", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="MQTT broker host")
    parser.add_argument("--port", type=int, default=1883, help="MQTT broker port")
    parser.add_argument("--username", help="broker login")
    parser.add_argument("--password", help="broker password")
    parser.add_argument("--base-topic", default=Z2M_BASE_TOPIC, help="zigbee2mqtt's mqtt.base_topic")
    parser.add_argument("--interval-s", type=float, default=10.0, help="seconds between temperature readings")
    parser.add_argument("--press-every-s", type=float, help=f"click {DEMO_BUTTON!r} about this often")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    bridge = make_demo_bridge(args.host, args.port, base_topic=args.base_topic, username=args.username,
                              password=args.password)
    return asyncio.run(_serve(bridge, interval_s=args.interval_s, press_every_s=args.press_every_s))


async def _serve(bridge: Zigbee2MqttBridge, *, interval_s: float, press_every_s: float | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await bridge.start()
    except (TimeoutError, BrokerRefused) as err:
        log.error("cannot start: %s", err)
        return 1
    rng = random.Random()
    sensor = bridge.device("Living Room Sensor")
    next_press = loop.time() + (press_every_s or 0)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await stop.wait()
        if stop.is_set():
            break
        with contextlib.suppress(TimeoutError, DeviceStopped):
            celsius = float(sensor.state["temperature"]) + rng.choice((-0.3, -0.1, 0.1, 0.3))
            await bridge.set_temperature(sensor.friendly_name, celsius)
            if press_every_s and loop.time() >= next_press:
                await bridge.press(DEMO_BUTTON)
                next_press = loop.time() + press_every_s
    await bridge.stop()
    return 0


__all__ = ["COORDINATOR_IEEE", "DEMO_BUTTON", "DEMO_GROUP", "Z2M_BASE_TOPIC", "NoSuchDevice", "Zigbee2MqttBridge",
           "ZigbeeDevice", "ZigbeeGroup", "check_name", "coordinator", "main", "make_demo_bridge"]
