"""Home Assistant `vacuum` entities (the state schema: Valetudo's, and every MQTT vacuum since Home Assistant 2024.2),
exported as `cleanBot`: Switch (On = start, Off = return to the dock) and PlaybackControl (Pause; Play = resume)
where it can pause.

Its state topic carries JSON with a `state` (cleaning, docked, paused, idle, returning, error); its commands are the
`payload_*` of its `supported_features` on its command topic. See entities.py for the Entity contract.
"""

from __future__ import annotations

from hubd.devices.model import StateValue
from hubd.dialects import mapping
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing
from hubd.dialects.homeassistant.discovery import Conf, ConfigProblem
from hubd.dialects.homeassistant.entities import UNKNOWN, Entity, Reading, StateProblem, target_value
from hubd.dialects.homeassistant.templates import Payload, Templates
from hubd.dialects.payload import json_text

# Home Assistant's default supported_features (start, stop, return_home, status, clean_spot).
DEFAULT_FEATURES = ("start", "stop", "return_home", "status", "clean_spot")
# A vacuum's state → (Switch, PlaybackControl): a paused job is still on (Play resumes it).
_STATES: dict[str, tuple[str, str | None]] = {
    "cleaning": ("On", "Play"), "paused": ("On", "Pause"), "returning": ("Off", None), "docked": ("Off", None),
    "idle": ("Off", None),
}


class Vacuum(Entity):
    """`vacuum` → cleanBot: Switch (start / return to the dock), PlaybackControl (pause / resume)."""

    component = "vacuum"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        super().__init__(conf, templates)
        schema = conf.text("schema", "state")
        if schema != "state":
            raise ConfigProblem(f"schema: {schema!r}; Home Assistant reads only the state schema since 2024.2")
        self.features = frozenset(conf.strings("supported_features") or DEFAULT_FEATURES)
        if not conf.text("command_topic"):
            raise ConfigProblem("command_topic: missing; a vacuum needs it to start and dock")
        if "start" not in self.features or not ({"return_home", "stop"} & self.features):
            raise ConfigProblem("supported_features: a vacuum hubd exports starts (start) and docks (return_home "
                                "or stop)")
        self.part = mapping.vacuum(can_pause="pause" in self.features, reported=conf.has("state_topic"))

    def topics(self) -> list[tuple[str, str]]:
        return self.state_topics((("state_topic", "state"),))

    def read(self, role: str, payload: Payload) -> Reading:
        text = payload.text.strip()
        if text in UNKNOWN:
            return Reading()
        try:
            found = json_text(text)
        except ValueError:
            raise StateProblem(f"{text[:40]!r} is not the JSON state a vacuum sends ({{\"state\": \"docked\"}})") \
                from None
        state = found.get("state") if isinstance(found, dict) else None
        if state is None:
            return Reading()  # a state of nothing but a fan speed or battery
        if state == "error" or state in UNKNOWN:
            return Reading()
        known = _STATES.get(state) if isinstance(state, str) else None
        if known is None:
            raise StateProblem(f"state {str(state)[:40]!r} is none of {', '.join(sorted(_STATES))}, error")
        values: dict[str, StateValue] = {"Switch": known[0]}
        if known[1] is not None and "pause" in self.features:
            values["PlaybackControl"] = known[1]
        return Reading(values)

    def command(self, request: ControlRequest) -> list[Outgoing]:
        value = target_value(request)
        if request.interface == "Switch":
            if value == "On":
                return [self._send("start")]
            return [self._send("return_to_base" if "return_home" in self.features else "stop")]
        if request.interface == "PlaybackControl" and "pause" in self.features:
            return [self._send("pause" if value == "Pause" else "start")]
        return super().command(request)

    def _send(self, what: str) -> Outgoing:
        payload = self.conf.text(f"payload_{what}", what)
        if payload is None:
            raise CommandRefused(f"the vacuum has no payload_{what}")
        return self.publish("command_topic", payload)
