"""Home Assistant `switch` and `siren` entities: one Switch each (a switch is a `socket` for device_class outlet).

A switch reads its state topic with value_template and state_on/state_off, and sends payload_on/payload_off
through command_template. A siren is a switch that sounds (On) and stops (Off), with Home Assistant's siren
payloads: its state may be JSON, and it may have a template of its own for Off. See entities.py for the Entity
contract.
"""

from __future__ import annotations

from typing import ClassVar

from hubd.dialects import mapping
from hubd.dialects.base import ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf, ConfigProblem
from hubd.dialects.homeassistant.entities import (
    ECHO,
    UNKNOWN,
    Entity,
    Reading,
    StateProblem,
    target_value,
)
from hubd.dialects.homeassistant.templates import Payload, Templates
from hubd.dialects.payload import json_text


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
                found = json_text(text)
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
