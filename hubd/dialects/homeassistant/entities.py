"""One discovered Home Assistant entity: the base every component's class shares.

An `Entity` is built from one entity config (`Conf`, every key in full): it compiles its templates once, says
what it gives the platform (`part`, a mapping.Part, or None and `reason`), which topics carry its state
(`topics()`: (topic, role) pairs), turns one message on such a topic into interface values (`read`), and turns
a control request into MQTT publishes (`command`). The device's Route address keeps the entity's config, so
that after a restart an entity rebuilt from it reads and commands exactly as the one built from discovery.

An entity without a state topic is optimistic, as in Home Assistant: it reads its own untemplated commands
back from their command topics (roles `echo:<role>`), so a control is confirmed as for any device.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hubd.devices.model import StateValue
from hubd.dialects import mapping
from hubd.dialects.base import CommandRefused, CommandTemplateFailed, ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf, ConfigProblem
from hubd.dialects.homeassistant.templates import Compiled, Payload, TemplateError, Templates

ECHO = "echo:"
SETTING_CATEGORIES = frozenset({"config", "diagnostic"})
# Words that mark a switch or button as the device's own maintenance (OpenMQTTGateway's "SYS: Restart gateway" and
# "SYS: Erase credentials" come without an entity_category): never exported, whatever category they lack.
MAINTENANCE = re.compile(r"(?:^|[^a-z])(restart|reboot|erase|reset|factory|firmware|ota|update|identify|"
                         r"credentials|discovery)(?:[^a-z]|$)|^sys:")
MAINTAINABLE = frozenset({"switch", "button"})
# Payloads that mean "unknown" rather than a value (Home Assistant's PAYLOAD_NONE, and what templates give).
UNKNOWN = frozenset({"", "None", "none", "null", "unknown", "unavailable"})


class StateProblem(Exception):
    """A state payload the entity cannot use (the text says what and the fix)."""


class TemplateFailed(Exception):
    """A template of the entity failed on a message."""

    def __init__(self, key: str, source: str, reason: str) -> None:
        super().__init__(f"{key} {_short(source)} failed: {reason}")
        self.key = key


@dataclass(slots=True)
class Reading:
    """What one message told about an entity: interface values, the events it names (for doorbells), and a fault:
    a state that makes the device unreachable until it reports a state hubd understands again (a lock jammed, not
    fully locked, or in a state not known: never reported locked)."""

    values: dict[str, StateValue] = field(default_factory=dict)
    events: tuple[str, ...] = ()
    fault: str | None = None


class Entity:
    """A discovered entity (the base: no state, no commands, not exported)."""

    component: ClassVar[str] = ""
    faults: ClassVar[bool] = False  # whether its readings may carry a fault (a lock's): then a reading decides reach

    def __init__(self, conf: Conf, templates: Templates) -> None:
        self.conf = conf
        self.templates = templates
        self.part: mapping.Part | None = None
        self.reason = f"no platform interface for {self.component or 'this component'} (not in the mapping table)"
        self.device_class = conf.text("device_class")
        self.category = conf.text("entity_category")
        # Home Assistant never exposes a config or diagnostic entity to a voice assistant: nor does hubd (a plug's
        # "power outage memory" switch must not become the plug).
        self.setting = self.category in SETTING_CATEGORIES
        # A switch or button whose name says restart, erase, reset...: kept back even when the owner exposes the
        # device's kept-back entities (so is any button: `hubd.dialects.homeassistant.devices.Record.maintenance`).
        self.maintenance = self.component in MAINTAINABLE and _maintenance(conf)
        if not self.setting and self.maintenance:
            self.setting, self.category = True, "maintenance"
        self.qos = conf.qos()
        self.retain = conf.flag("retain", False)
        self._compiled: dict[str, Compiled] = {}
        self.sent_as: dict[str, str] = {}  # a key read under another name, and the name the producer sent

    def topics(self) -> list[tuple[str, str]]:
        """The (topic, role) pairs whose messages `read` understands."""
        return []

    def read(self, role: str, payload: Payload) -> Reading:
        """The interface values a message on one of `topics()` carries."""
        return Reading()

    def command(self, request: ControlRequest) -> list[Outgoing]:
        """The publishes that ask the device for the request's state; CommandRefused when it cannot."""
        raise CommandRefused(f"a {self.component} takes no {request.interface}.{request.operation}")

    def press_events(self) -> tuple[str, ...] | None:
        """The events a declared doorbell may name on this entity (None: this entity never presses)."""
        return None

    def press_rank(self) -> int:
        """Among a device's entities a declaration names alike, which carries the press: 0 first (a button's single
        press before its double press: Tasmota's triggers share the subtype `button_1`)."""
        return 0

    # Helpers for the components.

    def compile(self, key: str) -> Compiled | None:
        """The entity's template `key`, compiled now (once: entities keep it), or None when it has none."""
        source = self.conf.text(key)
        if source is None:
            return None
        if not source.strip():
            raise ConfigProblem(f"{self.sent_as.get(key, key)}: empty; leave it out, or give a template such as "
                                "{{ value_json.state }}")
        try:
            compiled = self.templates.compile(source)
        except TemplateError as err:
            raise ConfigProblem(f"{self.sent_as.get(key, key)}: {err}; fix the template") from None
        self._compiled[key] = compiled
        return compiled

    def render_value(self, key: str | None, payload: Payload) -> str:
        """The payload through the value template `key` (the raw text when there is none)."""
        template = self._compiled.get(key) if key else None
        if template is None:
            return payload.text.strip()
        try:
            return self.templates.render_value(template, payload)
        except TemplateError as err:
            raise TemplateFailed(key or "", self.conf.text(key or "") or "", str(err)) from None

    def render_command(self, key: str, default: str, variables: Mapping[str, Any]) -> str:
        """A command payload through the command template `key`, or `default` when there is none."""
        template = self._compiled.get(key)
        if template is None:
            return default
        try:
            return self.templates.render(template, variables)
        except TemplateError as err:
            raise CommandTemplateFailed(f"{key} failed: {err}") from None

    def publish(self, topic_key: str, payload: str) -> Outgoing:
        """One publish to the command topic `topic_key` with the entity's qos and retain."""
        topic = self.conf.text(topic_key)
        if not topic:
            raise CommandRefused(f"the {self.component} has no {topic_key}")
        if "+" in topic or "#" in topic:
            raise CommandRefused(f"{topic_key} {topic!r} has MQTT wildcards; hubd cannot publish to it")
        return Outgoing(topic, payload.encode("utf-8"), self.qos, self.retain)

    def state_topics(self, pairs: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
        """(topic, role) for each (topic key, role) the config has; checked to be plain topics."""
        out = []
        for key, role in pairs:
            topic = self.conf.topic(key)
            if topic is not None:
                out.append((topic, role))
        return out

    def echoes(self, pairs: tuple[tuple[str, str, str, str], ...]) -> list[tuple[str, str]]:
        """Echo roles for optimistic options: (state key, command key, command template key, role)."""
        out = []
        for state_key, command_key, template_key, role in pairs:
            topic = self.conf.text(command_key)
            if topic and not self.conf.has(state_key) and not self.conf.has(template_key) \
                    and "+" not in topic and "#" not in topic:
                out.append((topic, ECHO + role))
        return out


def number(text: str, what: str) -> float | None:
    """A state number, or None for an unknown value; StateProblem for text that is not a number."""
    if text in UNKNOWN:
        return None
    try:
        value = float(text)
    except ValueError:
        raise StateProblem(f"{what}: {_short(text)} is not a number") from None
    if not math.isfinite(value):
        raise StateProblem(f"{what}: {_short(text)} is not a finite number")
    return value


def target_value(request: ControlRequest) -> StateValue:
    """The value a request asks for; CommandRefused when only the device knows it (an Adjust of an unknown state)."""
    if request.value is None:
        raise CommandRefused(f"{request.interface}.{request.operation}: the current value is unknown, so hubd "
                             f"cannot work out the target; use {request.interface}.Set")
    return request.value


def target_number(request: ControlRequest) -> float:
    """The numeric value a request asks for."""
    value = target_value(request)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CommandRefused(f"{request.interface} takes a number, got {value!r}")
    return float(value)


def format_number(value: float) -> str:
    """A number as a command payload: an integer without a fraction, else the shortest decimal."""
    return str(int(value)) if float(value).is_integer() else repr(round(value, 4))


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _maintenance(conf: Conf) -> bool:
    """Whether a switch's or button's name or unique_id says it maintains the device (restart, erase, update...)."""
    return any(MAINTENANCE.search(text.lower()) for text in (conf.text("name"), conf.text("unique_id")) if text)
