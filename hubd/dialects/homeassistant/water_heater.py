"""Home Assistant `water_heater` entities, exported as `waterHeater`: Switch and Temperature (Set, Adjust), its
target in °C whatever its temperature_unit.

Its state topics are read by their own templates, else by `value_template`, the default for all of them. Its
Switch is its `off` mode (read from its mode state topic: off = Off, any other mode = On) and turns it off and
on through its power_command_topic (payload_on/payload_off), else through its mode command topic (`off`, and its
first mode that is not off). Its current temperature is not its Temperature (that
is the target the owner sets). See entities.py for the Entity contract.
"""

from __future__ import annotations

from hubd.dialects import convert, mapping
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf, ConfigProblem
from hubd.dialects.homeassistant.entities import (
    ECHO,
    UNKNOWN,
    Entity,
    Reading,
    format_number,
    number,
    target_number,
    target_value,
)
from hubd.dialects.homeassistant.templates import Payload, Templates

# Home Assistant's default modes of an MQTT water heater.
DEFAULT_MODES = ("off", "eco", "electric", "gas", "heat_pump", "high_demand", "performance")


class WaterHeater(Entity):
    """`water_heater` → waterHeater: Switch (its off mode or power topic) and Temperature (the target)."""

    component = "water_heater"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.modes = conf.strings("modes") or DEFAULT_MODES
        self.unit = conf.text("temperature_unit", "C")
        self.step = conf.number("precision", 1.0) or 1.0
        for key in ("mode_state_template", "mode_command_template", "temperature_state_template",
                    "temperature_command_template", "power_command_template", "value_template"):
            self.compile(key)
        power = conf.has("power_command_topic") or (conf.has("mode_command_topic") and convert.OFF_MODE in self.modes)
        self.part = mapping.water_heater(power=power, target=conf.has("temperature_state_topic"),
                                         settable_target=conf.has("temperature_command_topic"),
                                         reported=conf.has("mode_state_topic"))
        if not self.part.capabilities:
            raise ConfigProblem("a water heater with no temperature_command_topic, power_command_topic or "
                                "mode_command_topic: nothing to set")

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("mode_state_topic", "mode"), ("temperature_state_topic", "target"))) + \
            self.echoes((("mode_state_topic", "mode_command_topic", "mode_command_template", "mode"),
                         ("temperature_state_topic", "temperature_command_topic", "temperature_command_template",
                          "target")))

    def read(self, role: str, payload: Payload) -> Reading:
        echo = role.startswith(ECHO)
        if role.endswith("target"):
            text = payload.text.strip() if echo else self.render_value(self._template("temperature"), payload)
            value = number(text, "the target temperature")
            celsius = None if value is None else convert.celsius(value, self.unit)
            return Reading({} if celsius is None else {"Temperature": celsius})
        text = payload.text.strip() if echo else self.render_value(self._template("mode"), payload)
        if text in UNKNOWN:
            return Reading()
        return Reading({"Switch": "Off" if text == convert.OFF_MODE else "On"})

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface == "Temperature":
            value = convert.from_celsius(target_number(request), self.unit)
            value = round(round(value / self.step) * self.step, 4)
            low, high = self.conf.number("min_temp", -1e9), self.conf.number("max_temp", 1e9)
            if request.operation == "Adjust":  # an Adjust stops at the limit, as the platform's rule says
                value = min(high, max(low, value))
            if not low <= value <= high:
                raise CommandRefused(f"the water heater takes {low:g}..{high:g} {self.unit}, not {value:g}")
            text = self.render_command("temperature_command_template", format_number(value), {"value": value})
            return [self.publish("temperature_command_topic", text)]
        if request.interface == "Switch":
            on = target_value(request) == "On"
            if self.conf.has("power_command_topic"):
                raw = self.conf.string("payload_on" if on else "payload_off", "ON" if on else "OFF")
                return [self.publish("power_command_topic",
                                     self.render_command("power_command_template", raw, {"value": raw}))]
            mode = convert.OFF_MODE if not on else next((m for m in self.modes if m != convert.OFF_MODE), None)
            if mode is None:
                raise CommandRefused("the water heater has no mode to turn on in")
            return [self.publish("mode_command_topic",
                                 self.render_command("mode_command_template", mode, {"value": mode}))]
        return super().command(request)

    def _template(self, role: str) -> str:
        """The template that reads a state topic: its own, else the default `value_template` for all of them."""
        own = f"{role}_state_template"
        return own if own in self._compiled else "value_template"
