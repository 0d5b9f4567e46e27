"""Home Assistant `cover` entities, exported as curtains: Position, Switch (On = open, Off = close) and
MotionSwitch (Off = stop).

A cover reads its state (open, opening, closed, closing, stopped, as it names them) and its position (scaled
between position_closed and position_open), and publishes payload_open/close/stop to its command topic and
set_position_template to its set_position_topic. See entities.py for the Entity contract.
"""

from __future__ import annotations

from hubd.devices.model import StateValue
from hubd.dialects import convert, mapping
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf
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
