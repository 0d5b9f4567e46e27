"""Home Assistant `fan` entities: Switch and FanSpeed (the fan's speed_range scaled to 0..100).

A fan reads its state and percentage topics with their templates and publishes payload_on/off and its percentage
(a speed of 0 turns it off) through its command templates. See entities.py for the Entity contract.
"""

from __future__ import annotations

from hubd.dialects import convert, mapping
from hubd.dialects.base import ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf, ConfigProblem
from hubd.dialects.homeassistant.entities import (
    ECHO,
    UNKNOWN,
    Entity,
    Reading,
    StateProblem,
    number,
    target_number,
    target_value,
)
from hubd.dialects.homeassistant.templates import Payload, Templates


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
