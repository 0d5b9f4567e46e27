"""Home Assistant entities the platform controls, lights aside: switch, siren, scene, cover, climate, fan.

Each reads its state topics with its templates and payloads (Home Assistant's defaults) and publishes a
control to its command topics with its conventions: payload_on/off, command templates, a cover's
open/close/stop and set_position_template, a climate's temperature in its unit and its modes, a fan's speed
range. See entities.py for the Entity contract. Imports the entity base and the mapping.
"""

from __future__ import annotations

import json
from typing import ClassVar

from hubd.devices.model import StateValue
from hubd.dialects import convert, mapping
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf, ConfigProblem
from hubd.dialects.homeassistant.entities import (
    ECHO,
    UNKNOWN,
    Entity,
    Reading,
    StateProblem,
    format_number,
    number,
    target_number,
    target_value,
)
from hubd.dialects.homeassistant.templates import Payload, Templates

DEFAULT_CLIMATE_MODES = ("auto", "off", "cool", "heat", "dry", "fan_only")
# Preferred mode for "turn on" when neither a power topic nor the last mode says which.
_ON_MODES = ("heat", "heat_cool", "auto", "cool", "dry", "fan_only")


class Switch(Entity):
    """`switch` (`socket` for device_class outlet)."""

    component = "switch"
    value_key: ClassVar[str] = "value_template"  # the template that reads its state

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.payload_on = conf.string("payload_on", "ON")
        self.payload_off = conf.string("payload_off", "OFF")
        self.state_on = conf.string("state_on", self.payload_on)
        self.state_off = conf.string("state_off", self.payload_off)
        self.compile(self.value_key)
        self.compile("command_template")
        if not conf.text("command_topic"):
            raise ConfigProblem(f"command_topic: missing; a {self.component} needs it")
        self.part = mapping.switch(outlet=self.device_class == "outlet")

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"),)) + \
            self.echoes((("state_topic", "command_topic", "command_template", "state"),))

    def read(self, role: str, payload: Payload) -> Reading:
        echo = role.startswith(ECHO)
        text = payload.text.strip() if echo else self.render_value(self.value_key, payload)
        on, off = (self.payload_on, self.payload_off) if echo else (self.state_on, self.state_off)
        if text == on:
            return Reading({"Switch": "On"})
        if text == off:
            return Reading({"Switch": "Off"})
        if text in UNKNOWN:
            return Reading()
        raise StateProblem(f"{text[:40]!r} is neither {on!r} nor {off!r}")

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface != "Switch":
            return super().command(request)
        on = target_value(request) == "On"
        raw = self.payload_on if on else self.payload_off
        return [self.publish("command_topic", self.render_command(self.command_key(on), raw, {"value": raw}))]

    def command_key(self, on: bool) -> str:
        """The template that makes the command payload."""
        return "command_template"


class Siren(Switch):
    """`siren`: a switch that sounds it (On) and stops it (Off), with Home Assistant's payloads and states; its
    state may be JSON (`{"state": "ON", ...}`), and it may have a template of its own for Off."""

    component = "siren"
    value_key = "state_value_template"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.compile("command_off_template")
        self.part = mapping.siren(reported=conf.has("state_topic"))

    def read(self, role: str, payload: Payload) -> Reading:
        text = payload.text.strip() if role.startswith(ECHO) else self.render_value(self.value_key, payload)
        if text.startswith("{"):  # a siren's JSON state: {"state": "ON", ...}
            try:
                found = json.loads(text)
            except ValueError:
                found = None
            text = str(found.get("state")) if isinstance(found, dict) and "state" in found else text
        if text in (self.state_on, self.payload_on):
            return Reading({"Switch": "On"})
        if text in (self.state_off, self.payload_off):
            return Reading({"Switch": "Off"})
        if text in UNKNOWN:
            return Reading()
        raise StateProblem(f"{text[:40]!r} is neither {self.state_on!r} nor {self.state_off!r}")

    def command_key(self, on: bool) -> str:
        return "command_template" if on or "command_off_template" not in self._compiled else "command_off_template"


class Scene(Entity):
    """`scene`: Switch On activates it."""

    component = "scene"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        if not conf.text("command_topic"):
            raise ConfigProblem("command_topic: missing; a scene needs it")
        self.part = mapping.scene()

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface != "Switch" or target_value(request) != "On":
            raise CommandRefused("a scene can only be turned on")
        return [self.publish("command_topic", self.conf.string("payload_on", "ON"))]


class Cover(Entity):
    """`cover` → curtain: Position, Switch (On = open, Off = close), MotionSwitch (Off = stop)."""

    component = "cover"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.payload_open = conf.payload("payload_open", "OPEN")
        self.payload_close = conf.payload("payload_close", "CLOSE")
        self.payload_stop = conf.payload("payload_stop", "STOP")
        self.states = {conf.text("state_open", "open"): ("On", "Off"), conf.text("state_opening", "opening"):
                       ("On", "On"), conf.text("state_closed", "closed"): ("Off", "Off"),
                       conf.text("state_closing", "closing"): ("Off", "On"),
                       conf.text("state_stopped", "stopped"): (None, "Off")}
        self.open_at = conf.number("position_open", 100)
        self.closed_at = conf.number("position_closed", 0)
        for key in ("value_template", "position_template", "set_position_template"):
            self.compile(key)
        commands = bool(conf.text("command_topic"))
        self.part = mapping.cover(position=conf.topic("position_topic") is not None,
                                  set_position=bool(conf.text("set_position_topic")),
                                  open_close=commands and None not in (self.payload_open, self.payload_close),
                                  stop=commands and self.payload_stop is not None,
                                  reported=conf.has("state_topic") or conf.has("position_topic"))
        if not self.part.capabilities:
            self.part, self.reason = None, "a cover with no command_topic, set_position_topic or position_topic"

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"), ("position_topic", "position"))) + \
            self.echoes((("state_topic", "command_topic", "_", "state"),
                         ("position_topic", "set_position_topic", "set_position_template", "position")))

    def read(self, role: str, payload: Payload) -> Reading:
        echo = role.startswith(ECHO)
        if role.endswith("position"):
            text = payload.text.strip() if echo else self.render_value("position_template", payload)
            value = number(text, "the position")
            if value is None:
                return Reading()
            percent = convert.percent_of(value, self.closed_at, self.open_at)
            values: dict[str, StateValue] = {"Position": percent}
            if not self.conf.has("state_topic"):
                values["Switch"] = convert.on_off(percent > 0)
            return Reading(values)
        text = payload.text.strip() if echo else self.render_value("value_template", payload)
        if echo:
            moving = {self.payload_open: ("On", "Off"), self.payload_close: ("Off", "Off"),
                      self.payload_stop: (None, "Off")}.get(text)
        else:
            moving = self.states.get(text)
        if moving is None:
            if text in UNKNOWN:
                return Reading()
            raise StateProblem(f"{text[:40]!r} is not one of its states {sorted(s for s in self.states if s)}")
        switch, motion = moving
        out: dict[str, StateValue] = {"MotionSwitch": motion} if self.payload_stop is not None else {}
        if switch is not None:
            out["Switch"] = switch
        return Reading(out)

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface == "Switch":
            payload = self.payload_open if target_value(request) == "On" else self.payload_close
            if payload is None:
                raise CommandRefused("the cover cannot be opened or closed (payload_open/close is off)")
            return [self.publish("command_topic", payload)]
        if request.interface == "MotionSwitch":
            if target_value(request) != "Off" or self.payload_stop is None:
                raise CommandRefused("the cover can only be stopped (MotionSwitch.Off); open or close it to move it")
            return [self.publish("command_topic", self.payload_stop)]
        if request.interface == "Position":
            position = round(convert.value_of(target_number(request), self.closed_at, self.open_at))
            variables = {"position": position, "position_open": self.open_at, "position_closed": self.closed_at}
            text = self.render_command("set_position_template", str(position), variables)
            return [self.publish("set_position_topic", text)]
        return super().command(request)


class Climate(Entity):
    """`climate` → thermostat (`ac` with a cool mode): Temperature (the setpoint of its current mode), Mode, Switch.

    With one target (`temperature_*`), that target; with a low/high pair (`temperature_low_*`, `temperature_high_*`,
    as zigbee2mqtt announces a thermostat with heating and cooling setpoints), the high one in cool mode and the low
    one otherwise, read and set by the last mode. Its room temperature and humidity are sensors of their own
    (discovery.room_readings), split off the device."""

    component = "climate"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.modes = conf.strings("modes") or DEFAULT_CLIMATE_MODES
        self.unit = conf.text("temperature_unit", "C")
        self.step = conf.number("temp_step", 0.1) or 0.1
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


class Fan(Entity):
    """`fan`: Switch and FanSpeed (its speed_range scaled to 0..100)."""

    component = "fan"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.payload_on = conf.string("payload_on", "ON")
        self.payload_off = conf.string("payload_off", "OFF")
        self.reset = conf.text("payload_reset_percentage", "None")
        self.low = int(conf.number("speed_range_min", 1))
        self.high = int(conf.number("speed_range_max", 100))
        if not 1 <= self.low <= self.high:
            raise ConfigProblem(f"speed_range_min/max: {self.low}..{self.high} is not a range from 1 up")
        for key in ("state_value_template", "command_template", "percentage_value_template",
                    "percentage_command_template"):
            self.compile(key)
        if not conf.text("command_topic"):
            raise ConfigProblem("command_topic: missing; a fan needs it")
        speed = conf.has("percentage_command_topic") or conf.has("percentage_state_topic")
        self.part = mapping.fan(speed=speed, settable_speed=conf.has("percentage_command_topic"))

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"), ("percentage_state_topic", "percentage"))) + \
            self.echoes((("state_topic", "command_topic", "command_template", "state"),
                         ("percentage_state_topic", "percentage_command_topic", "percentage_command_template",
                          "percentage")))

    def read(self, role: str, payload: Payload) -> Reading:
        echo = role.startswith(ECHO)
        if role.endswith("percentage"):
            text = payload.text.strip() if echo else self.render_value("percentage_value_template", payload)
            if text == self.reset:
                return Reading()
            value = number(text, "the speed")
            return Reading({} if value is None else {"FanSpeed": convert.ranged_percent(value, self.low, self.high)})
        text = payload.text.strip() if echo else self.render_value("state_value_template", payload)
        if text == self.payload_on:
            return Reading({"Switch": "On"})
        if text == self.payload_off:
            return Reading({"Switch": "Off"})
        if text in UNKNOWN:
            return Reading()
        raise StateProblem(f"{text[:40]!r} is neither payload_on ({self.payload_on!r}) nor payload_off")

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface == "Switch":
            raw = self.payload_on if target_value(request) == "On" else self.payload_off
            return [self.publish("command_topic", self.render_command("command_template", raw, {"value": raw}))]
        if request.interface == "FanSpeed":
            step = convert.ranged_value(target_number(request), self.low, self.high)
            if step == 0:
                return [self.publish("command_topic",
                                     self.render_command("command_template", self.payload_off,
                                                         {"value": self.payload_off}))]
            text = self.render_command("percentage_command_template", str(step), {"value": step})
            return [self.publish("percentage_command_topic", text)]
        return super().command(request)
