"""Simulated zigbee2mqtt devices that announce themselves with Home Assistant MQTT discovery, as zigbee2mqtt does.

Owns Zigbee2MqttDevice (a device as zigbee2mqtt with `homeassistant: true` shows it; its session plays
zigbee2mqtt itself, with the bridge's availability and will), Zigbee2MqttLight, a colour-temperature bulb
that obeys its `/set` topic, and Zigbee2MqttButton, a button that presses. The payloads are zigbee2mqtt's
(compact JSON with sorted keys); each builder names its source. Must not import hubd.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, ClassVar

from simulators.discovery_session import DISCOVERY_PREFIX, DiscoveryDevice, Message, Received
from simulators.sim_device import is_number

log = logging.getLogger(__name__)

Z2M_BASE_TOPIC = "zigbee2mqtt"
# Koenkk/zigbee2mqtt@6835cbf5 (2.12.1): lib/extension/homeassistant.ts, discoveryOrigin and getDevicePayload.
Z2M_ORIGIN = {"name": "Zigbee2MQTT", "sw": "2.12.1", "url": "https://www.zigbee2mqtt.io"}
Z2M_BRIDGE_ID = "zigbee2mqtt_bridge_0x00124b00120144ae"
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


def _stable(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()


__all__ = ["BUTTON_ACTIONS", "Z2M_BASE_TOPIC", "Zigbee2MqttButton", "Zigbee2MqttDevice", "Zigbee2MqttLight"]
