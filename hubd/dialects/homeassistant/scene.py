"""Home Assistant `scene` entities: a Switch that can only be turned on, which activates the scene.

A scene has no state; it publishes payload_on to its command topic. See entities.py for the Entity contract.
"""

from __future__ import annotations

from hubd.dialects import mapping
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf, ConfigProblem
from hubd.dialects.homeassistant.entities import (
    Entity,
    target_value,
)
from hubd.dialects.homeassistant.templates import Templates


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
