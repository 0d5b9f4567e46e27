"""Simulated devices that announce themselves with Home Assistant MQTT discovery, as their real producers do.

Owns an ESPHome board with a temperature and humidity sensor, a zigbee2mqtt colour-temperature bulb that
obeys its `/set` topic, and a zigbee2mqtt button that presses; `python -m simulators discovery` runs one of
each. Every device has its own paho session (loop_start; its callbacks only hand over to the event loop,
as in simulators.device_fleet), publishes its retained discovery configs, availability and state on each
connect, and records what it received. The payloads are the real ones; each builder names its source.
Must not import hubd.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import re
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from simulators.device_fleet import (
    KEEPALIVE_S,
    LOG_FORMAT,
    PUBLISH_TIMEOUT_S,
    RECONNECT_MAX_DELAY_S,
    RECONNECT_MIN_DELAY_S,
    START_TIMEOUT_S,
    BrokerRefused,
    DeviceStopped,
    tcp_nodelay,
)
from simulators.sim_device import is_number

log = logging.getLogger(__name__)

DISCOVERY_PREFIX = "homeassistant"
Z2M_BASE_TOPIC = "zigbee2mqtt"
# Koenkk/zigbee2mqtt@6835cbf5 (2.12.1): lib/extension/homeassistant.ts, discoveryOrigin and getDevicePayload.
Z2M_ORIGIN = {"name": "Zigbee2MQTT", "sw": "2.12.1", "url": "https://www.zigbee2mqtt.io"}
Z2M_BRIDGE_ID = "zigbee2mqtt_bridge_0x00124b00120144ae"
# Copied from tests/fixtures/homeassistant/esphome_garagedoor1_sht3x.json (captured from ESPHome 2026.8.0).
ESPHOME_SW = "2026.8.0 (config hash 0x0dd1e1e6)"
BUTTON_ACTIONS = ("single", "double", "triple", "quadruple", "hold", "release")  # WXKG11LM's `action` values
# The event entity's value_template, verbatim (zigbee2mqtt's actionValueTemplate; homeassistant.ts line 2380ff).
Z2M_ACTION_TEMPLATE = (
    "{% set patterns = [\n"
    "{\"pattern\": '^(?P<button>(?:button_)?[a-z0-9]+)_(?P<action>(?:press|hold)(?:_release)?)$', "
    "\"groups\": [\"button\", \"action\"]},\n"
    "{\"pattern\": '^(?P<action>recall|scene)_(?P<scene>[0-2][0-9]{0,2})$', \"groups\": [\"action\", \"scene\"]},\n"
    "{\"pattern\": '^(?P<actionPrefix>region_)(?P<region>[1-9]|10)_(?P<action>enter|leave|occupied|unoccupied)$', "
    "\"groups\": [\"actionPrefix\", \"region\", \"action\"]},\n"
    "{\"pattern\": '^(?P<action>dial_rotate)_(?P<direction>left|right)_(?P<speed>step|slow|fast)$', "
    "\"groups\": [\"action\", \"direction\", \"speed\"]},\n"
    "{\"pattern\": '^(?P<action>brightness_step)(?:_(?P<direction>up|down))?$', "
    "\"groups\": [\"action\", \"direction\"]}\n"
    "] %}\n"
    "{% set action_value = value_json.action|default('') %}\n"
    "{% set ns = namespace(r=[('action', action_value)]) %}\n"
    "{% for p in patterns %}\n"
    "  {% set m = action_value|regex_findall(p.pattern) %}\n"
    "  {% if m[0] is undefined %}{% continue %}{% endif %}\n"
    "  {% for key, value in zip(p.groups, m[0]) %}\n"
    "    {% set ns.r = ns.r|rejectattr(0, 'eq', key)|list + [(key, value)] %}\n"
    "  {% endfor %}\n"
    "{% endfor %}\n"
    "{% if (ns.r|selectattr(0, 'eq', 'actionPrefix')|first) is defined %}\n"
    "  {% set ns.r = ns.r|rejectattr(0, 'eq', 'action')|list + [('action', ns.r|selectattr(0, 'eq', 'actionPrefix')"
    "|map(attribute=1)|first + ns.r|selectattr(0, 'eq', 'action')|map(attribute=1)|first)] %}\n"
    "{% endif %}\n"
    "{% set ns.r = ns.r + [('event_type', ns.r|selectattr(0, 'eq', 'action')|map(attribute=1)|first)] %}\n"
    "{{dict.from_keys(ns.r|rejectattr(0, 'in', ('action', 'actionPrefix'))|reject('eq', ('event_type', None))"
    "|reject('eq', ('event_type', '')))|to_json}}"
)


@dataclass(frozen=True, slots=True)
class Message:
    """One MQTT message a device publishes."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False


@dataclass(frozen=True, slots=True)
class Received:
    """A message a device received on a topic it listens to."""

    topic: str
    payload: bytes

    def json(self) -> Any:
        """The payload as JSON (ValueError if it is not)."""
        return json.loads(self.payload)


class DiscoveryDevice:
    """One device's own MQTT session: announces itself on every connect, reacts to what it listens to."""

    def __init__(self, host: str, port: int, *, client_id: str, will: Message, username: str | None = None,
                 password: str | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.received: list[Received] = []
        self.announced = 0  # how often it announced itself (once per connection)
        self.running = False
        self._will = will
        self._credentials = (username, password)
        self._changed = asyncio.Condition()
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started: asyncio.Future[None] | None = None

    def discovery(self) -> dict[str, dict[str, Any]]:
        """The discovery configs it publishes at start (retained), by topic."""
        return {m.topic: json.loads(m.payload) for m in self._announcement() if "/config" in m.topic}

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Connect; returns once its configs, availability and state are on the broker."""
        if self.running:
            return
        self._loop = asyncio.get_running_loop()
        self._started = self._loop.create_future()
        self._client = self._make_client()
        self.running = True
        self._client.loop_start()
        try:
            async with asyncio.timeout(timeout_s):
                await self._started
        except (TimeoutError, BrokerRefused):
            await self.kill()
            raise

    async def stop(self) -> None:
        """Graceful: what the producer publishes when it shuts down (its `offline`), then DISCONNECT."""
        if not self.running:
            return
        if self._client.is_connected():
            try:
                for message in self._farewell():
                    await self._publish(message)
            except (TimeoutError, DeviceStopped) as err:
                log.warning("%s: offline not sent: %s", self.client_id, err)
        await self._shut_down(graceful=True)

    async def kill(self) -> None:
        """Drop the connection without DISCONNECT, as a power cut would; the broker publishes the will."""
        if self.running:
            await self._shut_down(graceful=False)

    async def wait_until(self, check: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Wait until check() is true; re-evaluated after each message it handled and each announcement."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(check)

    # What a device kind defines.

    def _announcement(self) -> list[Message]:
        """What it publishes on every connect: discovery configs, availability, state."""
        raise NotImplementedError

    def _farewell(self) -> list[Message]:
        return []

    def _subscriptions(self) -> list[str]:
        return []

    async def _handle(self, message: Received) -> None:
        """React to a message on one of its subscriptions."""

    # The session.

    async def _publish(self, message: Message) -> None:
        """Publish; waits for the PUBACK (QoS 1) or until paho wrote it (QoS 0)."""
        if not self.running:
            raise DeviceStopped(f"{self.client_id} is not running")
        info = self._client.publish(message.topic, message.payload, qos=message.qos, retain=message.retain)
        if info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN and message.qos == 0:
            return  # lost, as a real device's QoS 0 message is while it is offline
        if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
            raise DeviceStopped(f"{self.client_id}: publish failed: {mqtt.error_string(info.rc)}")
        await self._wait_ack(info.mid)

    async def _wait_ack(self, mid: int) -> None:
        assert self._loop is not None
        # Safe against an ack that beat us here: it reaches the loop only via call_soon_threadsafe.
        fut: asyncio.Future[None] = self._loop.create_future()
        self._acks[mid] = fut
        async with asyncio.timeout(PUBLISH_TIMEOUT_S):
            await fut

    def _make_client(self) -> Any:
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=self.client_id, clean_session=True)
        if self._credentials[0] is not None:
            client.username_pw_set(*self._credentials)
        client.will_set(self._will.topic, self._will.payload, qos=self._will.qos, retain=self._will.retain)
        client.reconnect_delay_set(RECONNECT_MIN_DELAY_S, RECONNECT_MAX_DELAY_S)  # type: ignore[arg-type]
        client.on_socket_open = tcp_nodelay
        client.on_connect = lambda _c, _u, _f, reason, _p: self._to_loop(self._connected, reason)
        client.on_disconnect = lambda *_args: self._to_loop(self._cancel_announce)
        client.on_message = lambda _c, _u, msg: self._to_loop(self._arrived, Received(msg.topic, bytes(msg.payload)))
        client.on_publish = lambda _c, _u, mid, _r, _p: self._to_loop(self._acked, mid)
        client.on_subscribe = lambda _c, _u, mid, _r, _p: self._to_loop(self._acked, mid)
        client.on_unsubscribe = lambda _c, _u, mid, _r, _p: self._to_loop(self._acked, mid)
        client.connect_async(self.host, self.port, KEEPALIVE_S)
        return client

    def _to_loop(self, func: Callable[..., None], *args: Any) -> None:
        # paho's thread: hand over only. A callback can still fire while the loop shuts down.
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(func, *args)

    def _connected(self, reason: Any) -> None:
        if reason.is_failure:
            if self._started is not None and not self._started.done():
                self._started.set_exception(BrokerRefused(f"broker refused {self.client_id}: {reason}"))
            return
        if self.running:
            self._spawn(self._announce(), "announce")

    def _cancel_announce(self) -> None:
        for task in self._tasks:
            if task.get_name().endswith("announce"):
                task.cancel()

    def _arrived(self, message: Received) -> None:
        # Some brokers (amqtt) hand a new subscriber every retained message, whatever its filter.
        if self.running and any(mqtt.topic_matches_sub(sub, message.topic) for sub in self._subscriptions()):
            self._spawn(self._take(message), "message")

    def _acked(self, mid: int) -> None:
        fut = self._acks.pop(mid, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _spawn(self, coro: Any, what: str) -> None:
        task = asyncio.create_task(coro, name=f"sim-{self.client_id}-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _announce(self) -> None:
        """On every (re)connect: subscribe (the session is clean), then announce."""
        try:
            topics = self._subscriptions()
            if topics:
                rc, mid = self._client.subscribe([(t, 1) for t in topics])
                if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                    raise DeviceStopped(f"subscribe failed: {mqtt.error_string(rc)}")
                await self._wait_ack(mid)
            for message in self._announcement():
                await self._publish(message)
            # The broker handles one client's packets in order: its UNSUBACK (of a topic never subscribed,
            # which changes nothing) means every QoS 0 message before it is on the broker.
            _rc, mid = self._client.unsubscribe(self._will.topic)
            await self._wait_ack(mid)
        except (TimeoutError, DeviceStopped) as err:
            log.warning("%s: announcing failed (the next connect tries again): %s", self.client_id, err)
            return
        self.announced += 1
        if self._started is not None and not self._started.done():
            self._started.set_result(None)
        log.info("%s announced itself", self.client_id)
        await self._notify()

    async def _take(self, message: Received) -> None:
        self.received.append(message)
        try:
            await self._handle(message)
        except (TimeoutError, DeviceStopped) as err:
            log.warning("%s: could not answer %s: %s", self.client_id, message.topic, err)
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _shut_down(self, *, graceful: bool) -> None:
        self.running = False
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if not graceful:
            sock = self._client.socket()
            # No DISCONNECT gets out after this; the disconnect() below only stops paho's reconnecting.
            if isinstance(sock, socket.socket):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._client.disconnect()
        await asyncio.to_thread(self._client.loop_stop)
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(DeviceStopped(f"{self.client_id} stopped"))
        self._acks.clear()
        if self._started is not None and not self._started.done():
            self._started.cancel()


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


class Zigbee2MqttDevice(DiscoveryDevice):
    """A device as zigbee2mqtt (homeassistant: true) shows it; the session plays zigbee2mqtt itself.

    Each session publishes `<base>/bridge/state` online and has the bridge's will, so devices that share a
    base topic share one bridge availability, as under one zigbee2mqtt: stopping one marks all offline.
    """

    model: ClassVar[dict[str, str]] = {}

    def __init__(self, host: str, port: int, *, name: str, ieee: str, base_topic: str = Z2M_BASE_TOPIC,
                 discovery_prefix: str = DISCOVERY_PREFIX, linkquality: int = 87, username: str | None = None,
                 password: str | None = None) -> None:
        # Koenkk/zigbee2mqtt lib/mqtt.ts: the will {"state":"offline"} on <base>/bridge/state, QoS 1, retained.
        self.bridge_topic = f"{base_topic}/bridge/state"
        super().__init__(host, port, client_id=f"zigbee2mqtt-{ieee}",
                         will=Message(self.bridge_topic, b'{"state":"offline"}', 1, True),
                         username=username, password=password)
        self.name, self.ieee, self.base_topic = name, ieee, base_topic
        self.discovery_prefix = discovery_prefix
        self.state_topic = f"{base_topic}/{name}"
        self.linkquality = linkquality

    def _bridge_online(self) -> Message:
        return Message(self.bridge_topic, b'{"state":"online"}', 1, True)

    def _farewell(self) -> list[Message]:
        return [Message(self.bridge_topic, b'{"state":"offline"}', 0, True)]  # lib/mqtt.ts disconnect()

    def _entity(self, component: str, object_id: str, payload: dict[str, Any]) -> Message:
        """A discovery config as homeassistant.ts discover() completes it; keys sorted (json-stable-stringify)."""
        entity_id = re.sub(r"\s+", "_", self.name).lower() + ("" if object_id == component else f"_{object_id}")
        full = {
            **payload, "state_topic": self.state_topic, "object_id": entity_id,
            "default_entity_id": f"{component}.{entity_id}", "unique_id": f"{self.ieee}_{object_id}_{self.base_topic}",
            "device": self._device(), "origin": Z2M_ORIGIN,
            "availability": [{"topic": self.bridge_topic, "value_template": "{{ value_json.state }}"}],
        }
        return Message(f"{self.discovery_prefix}/{component}/{self.ieee}/{object_id}/config", _stable(full), 1, True)

    def _device(self) -> dict[str, Any]:
        return {"identifiers": [f"zigbee2mqtt_{self.ieee}"], **self.model, "name": self.name,
                "via_device": Z2M_BRIDGE_ID}


class Zigbee2MqttLight(Zigbee2MqttDevice):
    """An IKEA white-spectrum bulb (LED1545G12) that obeys JSON commands on `<base>/<name>/set`."""

    model: ClassVar[dict[str, str]] = {
        "manufacturer": "IKEA", "model": "TRADFRI bulb E26/E27, white spectrum, globe, opal, 980 lm",
        "model_id": "LED1545G12"}
    MIN_MIREDS, MAX_MIREDS = 250, 454
    # zigbee-herdsman-converters' colour temperature presets (what `color_temp: "warmest"` means).
    PRESETS: ClassVar[dict[str, int]] = {"coolest": 153, "cool": 250, "neutral": 370, "warm": 454, "warmest": 500}

    def __init__(self, host: str, port: int, *, name: str = "bulb", ieee: str = "0x000b57fffec6a5b2",
                 on: bool = True, brightness: int = 127, color_temp: int = 454, **options: Any) -> None:
        super().__init__(host, port, name=name, ieee=ieee, **options)
        self.command_topic = f"{self.state_topic}/set"
        self.state: dict[str, Any] = {"brightness": brightness, "color_mode": "color_temp",
                                      "color_temp": color_temp, "state": "ON" if on else "OFF"}

    def _announcement(self) -> list[Message]:
        # Koenkk/zigbee2mqtt@6835cbf5 test/extensions/homeassistant.test.ts lines 597-625 (the bulb).
        light = self._entity("light", "light", {
            "brightness": True, "brightness_scale": 254, "supported_color_modes": ["color_temp"],
            "min_mireds": self.MIN_MIREDS, "max_mireds": self.MAX_MIREDS, "command_topic": self.command_topic,
            "effect": True, "effect_list": ["blink", "breathe", "okay", "channel_change", "finish_effect",
                                            "stop_effect"],
            "name": None, "schema": "json",
        })
        return [self._bridge_online(), light, self._state_message()]

    def _subscriptions(self) -> list[str]:
        return [self.command_topic, f"{self.command_topic}/+", f"{self.state_topic}/get"]

    async def _handle(self, message: Received) -> None:
        # Koenkk/zigbee2mqtt lib/extension/publish.ts parseMessage: JSON, or `ON`/`OFF`/`TOGGLE` as the state;
        # `/set/<attribute>` carries one attribute's value.
        if message.topic != f"{self.state_topic}/get":
            text = message.payload.decode("utf-8", errors="replace")
            attribute = message.topic.removeprefix(self.command_topic).lstrip("/")
            try:
                value = json.loads(text)
            except ValueError:
                value = text
            if attribute:
                value = {attribute: value}
            elif isinstance(value, str):
                value = {"state": value}
            if not isinstance(value, dict):
                log.warning("%s: ignored a command that is not a JSON object: %r", self.name, text[:80])
                return
            self._obey(value)
        await self._publish(self._state_message())

    def _obey(self, command: dict[str, Any]) -> None:
        """Apply a command as the bulb and zigbee-herdsman-converters do (light_onoff_brightness, colortemp)."""
        state = command.get("state")
        if isinstance(state, str) and state.upper() in ("ON", "OFF", "TOGGLE"):
            flip = "OFF" if self.state["state"] == "ON" else "ON"
            self.state["state"] = flip if state.upper() == "TOGGLE" else state.upper()
        brightness = command.get("brightness")
        if is_number(brightness):
            if brightness <= 0:
                self.state["state"] = "OFF"
            else:
                self.state["brightness"] = min(round(brightness), 254)
                self.state["state"] = "ON"
        mireds = command.get("color_temp")
        if isinstance(mireds, str):
            mireds = self.PRESETS.get(mireds.lower())
        if is_number(mireds):
            self.state["color_temp"] = min(max(round(mireds), self.MIN_MIREDS), self.MAX_MIREDS)
            self.state["color_mode"] = "color_temp"

    def _state_message(self) -> Message:
        # The whole cached state (cache_state defaults on), linkquality added; QoS 0, not retained.
        return Message(self.state_topic, _stable({**self.state, "linkquality": self.linkquality}))


class Zigbee2MqttButton(Zigbee2MqttDevice):
    """An Aqara wireless mini switch (WXKG11LM): `press()` publishes what zigbee2mqtt publishes for a click.

    event_entity is zigbee2mqtt's `homeassistant.experimental_event_entities`, legacy_action_sensor its
    `homeassistant.legacy_action_sensor` (both default to off in zigbee2mqtt 2.x).
    """

    model: ClassVar[dict[str, str]] = {"manufacturer": "Aqara", "model": "Wireless mini switch", "model_id": "WXKG11LM"}

    def __init__(self, host: str, port: int, *, name: str = "button", ieee: str = "0x0017880104e45520",
                 event_entity: bool = True, legacy_action_sensor: bool = True, battery: int = 100,
                 voltage: int = 3005, **options: Any) -> None:
        super().__init__(host, port, name=name, ieee=ieee, **options)
        self.action_topic = f"{self.state_topic}/action"
        self.event_entity = event_entity
        self.legacy_action_sensor = legacy_action_sensor
        self.state: dict[str, Any] = {"battery": battery, "device_temperature": 24, "power_outage_count": 3,
                                      "voltage": voltage}
        self.presses: list[str] = []
        self._triggers: set[str] = set()  # actions whose device_automation config it published

    def trigger_topic(self, action: str) -> str:
        """The device_automation config zigbee2mqtt publishes at the first press of `action`."""
        return f"{self.discovery_prefix}/device_automation/{self.ieee}/action_{action}/config"

    async def press(self, action: str = "single") -> None:
        """One click; the messages of homeassistant.ts onPublishEntityState, in its order."""
        if action not in BUTTON_ACTIONS:
            raise ValueError(f"a {self.model['model_id']} does not send {action!r}; it sends {BUTTON_ACTIONS}")
        messages = [self._state_message(action)]
        if self.legacy_action_sensor:
            messages.append(self._state_message(""))
        if action not in self._triggers:
            # test/extensions/homeassistant.test.ts "Should discover trigger when action is published".
            trigger = {"automation_type": "trigger", "type": "action", "subtype": action, "payload": action,
                       "topic": self.action_topic, "device": self._device(), "origin": Z2M_ORIGIN}
            messages.append(Message(self.trigger_topic(action), _stable(trigger), 1, True))
        messages.append(Message(self.action_topic, action.encode()))
        for message in messages:
            await self._publish(message)
        self._triggers.add(action)
        self.presses.append(action)

    def _announcement(self) -> list[Message]:
        # homeassistant.test.ts: the battery sensor (lines 485-510 shape), the event entity (lines 627-655),
        # the legacy action sensor ("Legacy action sensor"; exposeToConfig's enum branch).
        messages = [self._bridge_online(), self._entity("sensor", "battery", {
            "unit_of_measurement": "%", "device_class": "battery", "state_class": "measurement",
            "value_template": '{{ value_json["battery"] }}', "enabled_by_default": True,
            "entity_category": "diagnostic"})]
        if self.event_entity:
            messages.append(self._entity("event", "action", {
                "event_types": list(BUTTON_ACTIONS), "icon": "mdi:gesture-double-tap", "name": "Action",
                "value_template": Z2M_ACTION_TEMPLATE}))
        if self.legacy_action_sensor:
            messages.append(self._entity("sensor", "action", {
                "name": "Action", "value_template": '{{ value_json["action"] }}', "entity_category": "diagnostic",
                "icon": "mdi:gesture-double-tap"}))
        return [*messages, self._state_message(None)]

    def _state_message(self, action: str | None) -> Message:
        # The cached state never holds `action` (lib/state.ts does not cache it): present only in a press.
        state = {**self.state, "linkquality": self.linkquality}
        if action is not None:
            state["action"] = action
        return Message(self.state_topic, _stable(state))


def make_demo_discovery_devices(host: str, port: int, *, username: str | None = None, password: str | None = None,
                                ) -> tuple[EspHomeClimateSensor, Zigbee2MqttLight, Zigbee2MqttButton]:
    """One of each, as a newcomer's Raspberry Pi might have them: the demo's and the CLI's devices."""
    broker: dict[str, Any] = {"username": username, "password": password}
    return (EspHomeClimateSensor(host, port, node="porch-climate", friendly_name="Porch Climate", area="Porch",
                                 **broker),
            Zigbee2MqttLight(host, port, name="Hallway Bulb", **broker),
            Zigbee2MqttButton(host, port, name="Front Door Button", **broker))


def main(argv: list[str]) -> int:
    """`python -m simulators discovery ...`: an ESPHome sensor, a zigbee2mqtt bulb and button until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m simulators discovery", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="MQTT broker host")
    parser.add_argument("--port", type=int, default=1883, help="MQTT broker port")
    parser.add_argument("--username", help="broker login")
    parser.add_argument("--password", help="broker password")
    parser.add_argument("--interval-s", type=float, default=10.0, help="seconds between temperature readings")
    parser.add_argument("--press-every-s", type=float, help="press the button about this often")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    return asyncio.run(_serve(make_demo_discovery_devices(args.host, args.port, username=args.username,
                                                          password=args.password),
                              interval_s=args.interval_s, press_every_s=args.press_every_s))


async def _serve(devices: tuple[EspHomeClimateSensor, Zigbee2MqttLight, Zigbee2MqttButton], *, interval_s: float,
                 press_every_s: float | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sensor, _light, button = devices
    try:
        for device in devices:
            await device.start()
    except (TimeoutError, BrokerRefused) as err:
        log.error("cannot start: %s", err)
        for device in devices:
            await device.stop()
        return 1
    rng = random.Random()
    next_press = loop.time() + (press_every_s or 0)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await stop.wait()
        if stop.is_set():
            break
        with contextlib.suppress(TimeoutError, DeviceStopped):
            await sensor.set_temperature(round(sensor.temperature_c + rng.choice((-0.3, -0.1, 0.1, 0.3)), 1))
            if press_every_s and loop.time() >= next_press:
                await button.press()
                next_press = loop.time() + press_every_s
    for device in devices:
        await device.stop()
    return 0


def _object_id(name: str) -> str:
    """ESPHome's object_id of an entity name (str_snake_case, then str_sanitize)."""
    return re.sub(r"[^a-z0-9_-]", "_", name.lower().replace(" ", "_"))


def _compact(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def _stable(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()


__all__ = ["BUTTON_ACTIONS", "DiscoveryDevice", "EspHomeClimateSensor", "Message", "Received", "Zigbee2MqttButton",
           "Zigbee2MqttLight", "main", "make_demo_discovery_devices"]
