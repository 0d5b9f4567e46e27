"""Home Assistant `humidifier` entities, exported as `humidifier` (`dehumidifier` for that device_class): Switch,
and Humidity (Set, Adjust), the target humidity (its min_humidity..max_humidity, 0..100 by default).

It reads its state (payload_on/payload_off through state_value_template) and its target humidity, and sends
payload_on/off and the target through their command templates; its current humidity is not its Humidity (that is
the target the owner sets, as a thermostat's Temperature is its setpoint). See entities.py for the Entity contract.
"""

from __future__ import annotations

from hubd.dialects import mapping
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


class Humidifier(Entity):
    """`humidifier` → humidifier or dehumidifier: Switch and Humidity (the target)."""

    component = "humidifier"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.payload_on = conf.string("payload_on", "ON")
        self.payload_off = conf.string("payload_off", "OFF")
        self.low = conf.number("min_humidity", 0)
        self.high = conf.number("max_humidity", 100)
        if not 0 <= self.low < self.high <= 100:
            raise ConfigProblem(f"min_humidity/max_humidity: {self.low:g}..{self.high:g} is not a range in 0..100")
        for key in ("state_value_template", "command_template", "target_humidity_state_template",
                    "target_humidity_command_template"):
            self.compile(key)
        if not conf.text("command_topic"):
            raise ConfigProblem("command_topic: missing; a humidifier needs it")
        if not conf.text("target_humidity_command_topic"):
            raise ConfigProblem("target_humidity_command_topic: missing; a humidifier needs it")
        self.part = mapping.humidifier(dehumidifier=self.device_class == "dehumidifier",
                                       target=conf.has("target_humidity_state_topic"), settable_target=True,
                                       reported=conf.has("state_topic"))

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"), ("target_humidity_state_topic", "target"))) + \
            self.echoes((("state_topic", "command_topic", "command_template", "state"),
                         ("target_humidity_state_topic", "target_humidity_command_topic",
                          "target_humidity_command_template", "target")))

    def read(self, role: str, payload: Payload) -> Reading:
        echo = role.startswith(ECHO)
        if role.endswith("target"):
            text = payload.text.strip() if echo else self.render_value("target_humidity_state_template", payload)
            value = number(text, "the target humidity")
            if value is None:
                return Reading()
            return Reading({"Humidity": round(min(100.0, max(0.0, value)))})
        text = payload.text.strip() if echo else self.render_value("state_value_template", payload)
        if text == self.payload_on:
            return Reading({"Switch": "On"})
        if text == self.payload_off:
            return Reading({"Switch": "Off"})
        if text in UNKNOWN:
            return Reading()
        raise StateProblem(f"{text[:40]!r} is neither payload_on ({self.payload_on!r}) nor payload_off "
                           f"({self.payload_off!r})")

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface == "Switch":
            raw = self.payload_on if target_value(request) == "On" else self.payload_off
            return [self.publish("command_topic", self.render_command("command_template", raw, {"value": raw}))]
        if request.interface == "Humidity":
            value = round(target_number(request))
            if request.operation == "Adjust":  # an Adjust stops at the limit, as the platform's rule says
                value = round(min(self.high, max(self.low, value)))
            if not self.low <= value <= self.high:
                raise CommandRefused(f"the {self.part.display_type if self.part else 'humidifier'} takes "
                                     f"{self.low:g}..{self.high:g} %, not {value}")
            text = self.render_command("target_humidity_command_template", format_number(value), {"value": value})
            return [self.publish("target_humidity_command_topic", text)]
        return super().command(request)
