"""Home Assistant `climate` entities, exported as thermostats (`ac` with a cool mode), and their room readings.

A climate gives Temperature (the setpoint of its current mode, in °C whatever its temperature_unit), Mode and
Switch: it reads and sets its mode and its target (one `temperature_*` target, or a low/high pair read and set by
the last mode) and turns off by its off mode or its power_command_topic.

A thermostat's Temperature is its setpoint, so the room temperature (`current_temperature_topic`) and humidity
(`current_humidity_topic`) it reports become sensor configs of the same device (`room_readings`: object_ids
current_temperature and current_humidity, keyed under the climate's discovery id), which the device's endpoints
put together on one split-off endpoint (`<device>-current_temperature`, ROOM_GROUP). A problem in one is named by
the climate's key the producer sent (`as_sent`). See entities.py for the Entity contract.
"""

from __future__ import annotations

from typing import Any

from hubd.devices.model import StateValue
from hubd.dialects import convert, mapping
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf, DiscoveryTopic, EntityConfig
from hubd.dialects.homeassistant.entities import (
    ECHO,
    Entity,
    Reading,
    format_number,
    number,
    target_number,
    target_value,
)
from hubd.dialects.homeassistant.templates import Payload, Templates

DEFAULT_CLIMATE_MODES = ("auto", "off", "cool", "heat", "dry", "fan_only")
# Preferred mode for "turn on" when neither a power topic nor the last mode says which.
_ON_MODES = ("heat", "heat_cool", "auto", "cool", "dry", "fan_only")
# A climate's room readings, exported as sensors of their own (split off the thermostat, whose Temperature is its
# setpoint): (the climate's topic key, its template key, the derived sensor's object_id, device class, unit key).
_ROOM_READINGS = (("current_temperature_topic", "current_temperature_template", "current_temperature", "temperature",
                   "temperature_unit"),
                  ("current_humidity_topic", "current_humidity_template", "current_humidity", "humidity", None))
_SHARED_WITH_READINGS = ("device", "origin", "availability", "availability_topic", "availability_template",
                         "availability_mode", "payload_available", "payload_not_available", "qos")
ROOM_GROUP = "current_temperature"  # the room readings' endpoint: `<device>-current_temperature`


class Climate(Entity):
    """`climate` → thermostat (`ac` with a cool mode): Temperature (the setpoint of its current mode), Mode, Switch.

    With one target (`temperature_*`), that target; with a low/high pair (`temperature_low_*`, `temperature_high_*`,
    as zigbee2mqtt announces a thermostat with heating and cooling setpoints), the high one in cool mode and the low
    one otherwise, read and set by the last mode. Its room temperature and humidity are sensors of their own
    (`room_readings`), split off the device."""

    component = "climate"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.modes = conf.strings("modes") or DEFAULT_CLIMATE_MODES
        self.unit = conf.text("temperature_unit", "C")
        self.step = conf.number("temp_step", 0.1) or 0.1
        self.limits_c()  # checked now: read again when its endpoint is made, where a ConfigProblem is nobody's
        for key in ("mode_state_template", "temperature_state_template", "temperature_command_template",
                    "mode_command_template", "power_command_template", "temperature_low_state_template",
                    "temperature_high_state_template", "temperature_low_command_template",
                    "temperature_high_command_template"):
            self.compile(key)
        has = conf.has
        self.pair = not (has("temperature_state_topic") or has("temperature_command_topic")) and \
            any(has(f"temperature_{side}_{kind}_topic") for side in ("low", "high") for kind in ("state", "command"))
        self._mode: str | None = None  # the last mode read (its setpoint is the Temperature), for a low/high pair
        self._setpoints: dict[str, float] = {}  # "low"/"high" → the last °C read
        target = has("temperature_state_topic") or (self.pair and (has("temperature_low_state_topic") or
                                                                    has("temperature_high_state_topic")))
        settable = has("temperature_command_topic") or (self.pair and (has("temperature_low_command_topic") or
                                                                        has("temperature_high_command_topic")))
        self.part = mapping.climate(
            modes=self.modes if has("mode_command_topic") or has("mode_state_topic") else (),
            settable_mode=has("mode_command_topic"), target=target, settable_target=settable,
            power=has("power_command_topic"), reported=has("mode_state_topic") or target)
        if not self.part.capabilities:
            self.part, self.reason = None, "a climate with no mode or target temperature topics"

    def limits_c(self) -> tuple[float, float]:
        """The target's limits in °C (Home Assistant's defaults: 7..35 °C, 44.6..95 °F)."""
        fahrenheit = self.unit in ("F", "°F")
        low = self.conf.number("min_temp", 44.6 if fahrenheit else 7)
        high = self.conf.number("max_temp", 95 if fahrenheit else 35)
        return (convert.celsius(low, self.unit) or low, convert.celsius(high, self.unit) or high)

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("mode_state_topic", "mode"), ("temperature_state_topic", "target"),
                                  ("temperature_low_state_topic", "target_low"),
                                  ("temperature_high_state_topic", "target_high"))) + \
            self.echoes((("mode_state_topic", "mode_command_topic", "mode_command_template", "mode"),
                         ("temperature_state_topic", "temperature_command_topic", "temperature_command_template",
                          "target")))

    def read(self, role: str, payload: Payload) -> Reading:
        echo = role.startswith(ECHO)
        if role.endswith(("target_low", "target_high")):
            side = role.rsplit("_", 1)[-1]
            value = number(self.render_value(f"temperature_{side}_state_template", payload),
                           f"the {side} setpoint")
            celsius = None if value is None else convert.celsius(value, self.unit)
            if celsius is None:
                return Reading()
            self._setpoints[side] = celsius
            return Reading({"Temperature": celsius} if side == self._side() else {})
        if role.endswith("target"):
            text = payload.text.strip() if echo else self.render_value("temperature_state_template", payload)
            value = number(text, "the target temperature")
            celsius = None if value is None else convert.celsius(value, self.unit)
            return Reading({} if celsius is None else {"Temperature": celsius})
        text = payload.text.strip() if echo else self.render_value("mode_state_template", payload)
        self._mode = text
        values: dict[str, StateValue] = {}
        if self.pair and (setpoint := self._setpoints.get(self._side())) is not None:
            values["Temperature"] = setpoint  # the mode changed which setpoint is the target
        if text == convert.OFF_MODE:
            return Reading({**values, "Switch": "Off"})
        platform = convert.platform_mode(text)
        if platform is not None:
            return Reading({**values, "Mode": platform, "Switch": "On"})
        return Reading(values)

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface == "Temperature":
            value = convert.from_celsius(target_number(request), self.unit)
            value = round(round(value / self.step) * self.step, 4)
            if self.pair:
                mode = request.states.get("Mode")
                side = "high" if (mode == "Cool" if isinstance(mode, str) else self._side() == "high") else "low"
                key = f"temperature_{side}"
                if not self.conf.has(f"{key}_command_topic"):
                    raise CommandRefused(f"the thermostat has no {key}_command_topic (its {side} setpoint is the "
                                         f"target in {'cool' if side == 'high' else 'this'} mode)")
                text = self.render_command(f"{key}_command_template", format_number(value), {"value": value})
                return [self.publish(f"{key}_command_topic", text)]
            text = self.render_command("temperature_command_template", format_number(value), {"value": value})
            return [self.publish("temperature_command_topic", text)]
        if request.interface == "Mode":
            mode = convert.device_mode(str(target_value(request)), self.modes)
            if mode is None:
                raise CommandRefused(f"the thermostat has no mode for {request.value} (its modes: {list(self.modes)})")
            return [self._mode_command(mode)]
        if request.interface == "Switch":
            on = target_value(request) == "On"
            if self.conf.has("power_command_topic"):
                raw = self.conf.text("payload_on" if on else "payload_off", "ON" if on else "OFF") or ""
                return [self.publish("power_command_topic",
                                     self.render_command("power_command_template", raw, {"value": raw}))]
            if not on:
                if convert.OFF_MODE not in self.modes:
                    raise CommandRefused("the thermostat has no off mode and no power_command_topic")
                return [self._mode_command(convert.OFF_MODE)]
            return [self._mode_command(self._on_mode(request))]
        return super().command(request)

    def _side(self) -> str:
        """Which of a low/high pair is the target now: high in cool mode, low otherwise."""
        return "high" if self._mode == "cool" else "low"

    def _mode_command(self, mode: str) -> Outgoing:
        return self.publish("mode_command_topic", self.render_command("mode_command_template", mode, {"value": mode}))

    def _on_mode(self, request: ControlRequest) -> str:
        last = request.states.get("Mode")
        if isinstance(last, str) and (mode := convert.device_mode(last, self.modes)) is not None:
            return mode
        for mode in _ON_MODES:
            if mode in self.modes:
                return mode
        raise CommandRefused("the thermostat has no mode to turn on in")


def room_reading_of(key: tuple[str, str]) -> tuple[str, str] | None:
    """The climate's key, when `key` is one of its room readings (room_readings); None for any other entity."""
    component, discovery_id = key
    climate, _, object_id = discovery_id.rpartition(" ")
    if component != "sensor" or not climate or object_id not in {r[2] for r in _ROOM_READINGS}:
        return None
    return "climate", climate


def as_sent(problem: str, sent_as: tuple[tuple[str, str], ...]) -> str:
    """A derived config's problem named by the key the producer sent ("value_template: empty" of a room reading is
    "current_temperature_template: empty")."""
    for derived, producer in sent_as:
        if problem.startswith(f"{derived}:"):
            return f"{producer}{problem[len(derived):]}"
    return problem


def room_readings(entity: EntityConfig) -> list[EntityConfig]:
    """A climate's room temperature and humidity as sensor configs of the same device (removals when its config
    is gone or no longer has them). Only for a climate with a device block: the sensor must be of its device."""
    if entity.topic.component != "climate":
        return []
    data = entity.config
    if data is not None and not isinstance(data.get("device"), dict):
        return []
    out = []
    for topic_key, template_key, object_id, device_class, unit_key in _ROOM_READINGS:
        where = DiscoveryTopic("sensor", entity.topic.key[1], object_id)
        topic = data.get(topic_key) if data is not None else None
        if data is None or not isinstance(topic, str):
            out.append(EntityConfig(where, None))
            continue
        config: dict[str, Any] = {k: data[k] for k in _SHARED_WITH_READINGS if k in data}
        sent_as = [("state_topic", topic_key), ("value_template", template_key)]
        if unit_key:
            sent_as.append(("unit_of_measurement", unit_key))
        config.update({"state_topic": topic, "device_class": device_class,
                       "name": "Room temperature" if device_class == "temperature" else "Room humidity"})
        if isinstance(data.get(template_key), str):
            config["value_template"] = data[template_key]
        unit = data.get(unit_key) if unit_key else "%"
        if isinstance(unit, str):
            config["unit_of_measurement"] = unit
        if isinstance(data.get("unique_id"), str):
            config["unique_id"] = f"{data['unique_id']}_{object_id}"
        out.append(EntityConfig(where, config, tuple(sent_as)))
    return out
