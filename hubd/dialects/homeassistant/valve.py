"""Home Assistant `valve` entities (a water or gas valve), exported as a `switch`: On = open, Off = close, and
Position where it reports one (`reports_position`).

Without reports_position it reads its states (state_open, state_opening, state_closed, state_closing; or JSON
`{"state": ...}`) and sends payload_open/payload_close; with it, it reads a position (position_closed..
position_open, or JSON `{"position": ...}`) and opens, closes and positions by sending a position through its
command template. ESPHome's valve announces its position apart: a `position_topic` (0..100) it reads, a
`set_position_topic` it takes a position on, and its state topic says open, opening, closed, closing. See
entities.py for the Entity contract.
"""

from __future__ import annotations

from typing import Any

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
    number,
    target_number,
    target_value,
)
from hubd.dialects.homeassistant.templates import Payload, Templates
from hubd.dialects.payload import json_text


class Valve(Entity):
    """`valve` → switch (On = open, Off = close), Position where it reports one."""

    component = "valve"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.positioned = conf.flag("reports_position", False)
        self.payload_open = conf.payload("payload_open", "OPEN")
        self.payload_close = conf.payload("payload_close", "CLOSE")
        self.states = {conf.text("state_open", "open"): "On", conf.text("state_opening", "opening"): "On",
                       conf.text("state_closed", "closed"): "Off", conf.text("state_closing", "closing"): "Off"}
        self.open_at = conf.number("position_open", 100)
        self.closed_at = conf.number("position_closed", 0)
        if self.open_at == self.closed_at:
            raise ConfigProblem("position_open/position_closed: the same position")
        for key in ("value_template", "command_template"):
            self.compile(key)
        if not conf.text("command_topic"):
            raise ConfigProblem("command_topic: missing; a valve needs it")
        for key in ("position_template", "set_position_template"):
            self.compile(key)
        open_close = self.positioned or None not in (self.payload_open, self.payload_close)
        self.part = mapping.valve(
            position=(self.positioned and conf.has("state_topic")) or conf.has("position_topic"),
            set_position=self.positioned or bool(conf.text("set_position_topic")), open_close=open_close,
            reported=conf.has("state_topic"))
        if not self.part.capabilities:
            self.part, self.reason = None, "a valve that can neither be opened nor closed (payload_open/close off)"

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"), ("position_topic", "position"))) + \
            self.echoes((("state_topic", "command_topic", "command_template", "state"),))

    def read(self, role: str, payload: Payload) -> Reading:
        echo = role.startswith(ECHO)
        if role == "position":  # ESPHome's own position topic
            value = number(self.render_value("position_template", payload), "the position")
            if value is None:
                return Reading()
            percent = convert.percent_of(value, self.closed_at, self.open_at)
            return Reading({"Position": percent} if self.conf.has("state_topic") else
                           {"Position": percent, "Switch": convert.on_off(percent > 0)})
        text = payload.text.strip() if echo else self.render_value("value_template", payload)
        if echo and not self.positioned:
            switch = {self.payload_open: "On", self.payload_close: "Off"}.get(text)
            return Reading({} if switch is None else {"Switch": switch})
        state: Any = text
        position: Any = None
        if text.startswith("{"):  # {"state": "opening", "position": 10}
            try:
                found = json_text(text)
            except ValueError:
                found = None
            if isinstance(found, dict):
                state, position = found.get("state"), found.get("position")
        elif self.positioned and text not in self.states:
            state, position = None, text
        values: dict[str, StateValue] = {}
        if position is not None and self.positioned:
            value = number(str(position), "the position")
            if value is not None:
                percent = convert.percent_of(value, self.closed_at, self.open_at)
                values["Position"] = percent
                values["Switch"] = convert.on_off(percent > 0)
        if isinstance(state, str) and state not in UNKNOWN:
            switch = self.states.get(state)
            if switch is None:
                raise StateProblem(f"{state[:40]!r} is not one of its states {sorted(s for s in self.states if s)}")
            values.setdefault("Switch", switch)
        return Reading(values)

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface == "Switch":
            on = target_value(request) == "On"
            if self.positioned:
                return [self._position(self.open_at if on else self.closed_at)]
            raw = self.payload_open if on else self.payload_close
            if raw is None:
                raise CommandRefused("the valve cannot be opened or closed (payload_open/close is off)")
            return [self.publish("command_topic", self.render_command("command_template", raw, {"value": raw}))]
        if request.interface == "Position" and self.conf.text("set_position_topic"):
            position = round(convert.value_of(target_number(request), self.closed_at, self.open_at))
            text = self.render_command("set_position_template", str(position), {"position": position})
            return [self.publish("set_position_topic", text)]
        if request.interface == "Position" and self.positioned:
            return [self._position(round(convert.value_of(target_number(request), self.closed_at, self.open_at)))]
        return super().command(request)

    def _position(self, position: float) -> Outgoing:
        value = int(position) if float(position).is_integer() else position
        return self.publish("command_topic", self.render_command("command_template", str(value), {"value": value}))
