"""Home Assistant entities that report (and the lock, which takes one simple command): sensor, binary_sensor, lock,
event, device_automation.

Temperature (°F and K converted) and humidity sensors; binary sensors (alarm = On for leak, smoke, gas, CO,
tamper; open, detected or on = On for every other, with or without a class); a lock (On only when fully
locked; jammed or a state not understood is a fault that makes it unreachable; locked by voice, never
unlocked); an `event` entity (a doorbell when its
device_class is doorbell) and a device_automation trigger, which press a declared doorbell. See
entities.py for the Entity contract.
"""

from __future__ import annotations

from typing import Any

from hubd.dialects import convert, mapping
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf, ConfigProblem
from hubd.dialects.homeassistant.entities import UNKNOWN, Entity, Reading, StateProblem, number, target_value
from hubd.dialects.homeassistant.templates import Payload, Templates
from hubd.dialects.payload import json_text

# A sensor whose value is a button's action (zigbee2mqtt's legacy `action` and `click` sensors).
ACTION_SENSOR_SUFFIXES = ("action", "click")
SINGLE_PRESSES = frozenset({"single", "press", "short", "1"})  # a trigger's payload for a button's single press


class Sensor(Entity):
    """`sensor`: temperature and humidity are exported; every sensor may carry a declared doorbell's action."""

    component = "sensor"

    def __init__(self, conf: Conf, templates: Templates, object_id: str = "") -> None:
        super().__init__(conf, templates)
        self.unit = conf.text("unit_of_measurement")
        self.compile("value_template")
        self._object_id = object_id
        self.part = mapping.sensor(self.device_class, self.unit)
        if self.part is not None and self.device_class == "temperature" and self.unit is not None \
                and not convert.is_temperature_unit(self.unit):
            self.part = None
            self.reason = f"a temperature in {self.unit!r}; hubd converts °C, °F and K"
        elif self.part is None:
            self.reason = mapping.unmapped_reason("sensor", self.device_class)
        if not conf.has("state_topic"):
            self.part, self.reason = None, "no state_topic"

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"),))

    def read(self, role: str, payload: Payload) -> Reading:
        text = self.render_value("value_template", payload)
        if self.part is None:
            return Reading(events=(text,))
        value = number(text, "the sensor's value")
        if value is None:
            return Reading()
        if "Humidity" in self.part.interfaces:
            return Reading({"Humidity": convert.humidity_percent(value)})
        celsius = convert.celsius(value, self.unit)
        return Reading({} if celsius is None else {"Temperature": celsius})

    def press_events(self) -> tuple[str, ...] | None:
        name = self._object_id.lower()
        return () if self.part is None and name.endswith(ACTION_SENSOR_SUFFIXES) else None


class BinarySensor(Entity):
    """`binary_sensor`: door/window/opening/garage_door, motion/occupancy/presence, moisture/smoke/gas/... ."""

    component = "binary_sensor"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.payload_on = conf.string("payload_on", "ON")
        self.payload_off = conf.string("payload_off", "OFF")
        self.compile("value_template")
        self.part = mapping.binary(self.device_class)
        if not conf.has("state_topic"):
            self.part, self.reason = None, "no state_topic"

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"),))

    def read(self, role: str, payload: Payload) -> Reading:
        text = self.render_value("value_template", payload)
        if text == self.payload_on:
            return Reading({"Switch": "On"}, (text,))
        if text == self.payload_off:
            return Reading({"Switch": "Off"}, (text,))
        if text in UNKNOWN:
            return Reading()
        raise StateProblem(f"{text[:40]!r} is neither payload_on ({self.payload_on!r}) nor payload_off "
                           f"({self.payload_off!r})")

    def press_events(self) -> tuple[str, ...] | None:
        return (self.payload_on,)


class Lock(Entity):
    """`lock` (locked = On): locked by voice through its command topic; never unlocked (no Switch.Off).

    On only when it is fully locked (state_locked); unlocked, open, opening, unlocking and locking are Off (not
    locked yet); jammed, an unknown state or any state it does not declare is a fault: Off, and the device
    unreachable until it reports locked or unlocked again."""

    component = "lock"
    faults = True

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.locked = conf.string("state_locked", "LOCKED")
        self.unlocked = {conf.string(key, default) for key, default in (
            ("state_unlocked", "UNLOCKED"), ("state_open", "OPEN"), ("state_opening", "OPENING"),
            ("state_unlocking", "UNLOCKING"), ("state_locking", "LOCKING"))}
        self.jammed = conf.string("state_jammed", "JAMMED")
        self.payload_lock = conf.payload("payload_lock", "LOCK")
        self.compile("value_template")
        self.compile("command_template")
        can_lock = bool(conf.text("command_topic")) and self.payload_lock is not None
        if conf.has("state_topic") or can_lock:
            self.part = mapping.lock(can_lock=can_lock)
        else:
            self.reason = "a lock without a state_topic or a command_topic: nothing to report or do"

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"),))

    def read(self, role: str, payload: Payload) -> Reading:
        text = self.render_value("value_template", payload)
        if text == self.locked:
            return Reading({"Switch": "On"})
        if text in self.unlocked:
            return Reading({"Switch": "Off"})
        unknown = text in UNKNOWN or text.casefold() == "unknown"
        what = "jammed" if text == self.jammed else \
            "in an unknown state" if unknown else "in a state it does not declare"
        return Reading({"Switch": "Off"}, fault=f"the lock is {what}")

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface != "Switch" or target_value(request) != "On" or self.payload_lock is None:
            raise CommandRefused("hubd locks a door (Switch.On) but never unlocks one from the platform")
        payload = self.render_command("command_template", self.payload_lock, {"value": self.payload_lock})
        return [self.publish("command_topic", payload)]


class Event(Entity):
    """`event`: each message is an event `{"event_type": ...}`; a doorbell's is a press."""

    component = "event"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        self.event_types = conf.strings("event_types") or ()
        self.compile("value_template")
        if not conf.has("state_topic"):
            self.reason = "no state_topic"
        elif self.device_class == "doorbell":
            self.part = mapping.doorbell()
        else:
            self.reason = (f"an event of device_class {self.device_class or 'none'} is not a doorbell; declare it "
                           "under doorbells: to make it one")

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"),))

    def read(self, role: str, payload: Payload) -> Reading:
        text = self.render_value("value_template", payload)
        if text in UNKNOWN or text == "{}":
            return Reading()
        try:
            data: Any = json_text(text)
        except ValueError:
            raise StateProblem(f"the event {text[:40]!r} is not JSON like {{\"event_type\": \"press\"}}") from None
        event_type = data.get("event_type") if isinstance(data, dict) else None
        if not isinstance(event_type, str) or not event_type:
            raise StateProblem('the event has no "event_type"')
        if self.event_types and event_type not in self.event_types:
            raise StateProblem(f"event_type {event_type!r} is not one of its event_types {list(self.event_types)}")
        return Reading(events=(event_type,))

    def press_events(self) -> tuple[str, ...] | None:
        return self.event_types


class Trigger(Entity):
    """`device_automation` (a trigger): a message on its topic (equal to its payload, if it has one) fires it."""

    component = "device_automation"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        if conf.text("automation_type", "trigger") != "trigger":
            raise ConfigProblem("automation_type: only \"trigger\" exists")
        self.subtype = conf.text("subtype") or ""
        self.payload = conf.text("payload")
        self.compile("value_template")
        if conf.topic("topic") is None:
            raise ConfigProblem("topic: missing; a trigger needs the topic it fires on")
        self.reason = f"a device trigger ({conf.text('type') or 'action'} {self.subtype}): no platform interface; " \
                      "a button's press rings when declared under doorbells: (one entity of it carries the presses)"

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("topic", "trigger"),))

    def read(self, role: str, payload: Payload) -> Reading:
        text = self.render_value("value_template", payload)
        if self.payload is not None and text != self.payload:
            return Reading()
        return Reading(events=tuple(dict.fromkeys(e for e in (self.subtype, text) if e)))

    def press_events(self) -> tuple[str, ...] | None:
        return tuple(e for e in (self.subtype, self.payload) if e)

    def press_rank(self) -> int:
        kind, payload = (self.conf.text("type") or "").casefold(), (self.payload or "").casefold()
        return 0 if "short" in kind or payload in SINGLE_PRESSES else 1
