"""Home Assistant `light` entities in their three schemas: basic (default), json and template.

Switch, Brightness (the device's brightness_scale, 255 unless it says), ColorTemperature (mireds between
min_mireds and max_mireds, or kelvin with color_temp_kelvin; 0 % = warmest) and Color (rgb, hs or xy as the
platform's RGB integer). Basic lights read and command one topic per attribute, with their value and command
templates and on_command_type; json lights read and send one JSON object; template lights render
command_on/off_template and read state/brightness/colour templates. See entities.py for the Entity
contract.
"""

from __future__ import annotations

import json
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

COLOR_MODES = frozenset({"hs", "xy", "rgb", "rgbw", "rgbww"})
DIMMABLE_MODES = COLOR_MODES | {"brightness", "color_temp", "white"}
# (state topic, command topic, command template, role) of a basic light, for optimistic echoes.
_BASIC_ECHOES = (("state_topic", "command_topic", "_", "state"),
                 ("brightness_state_topic", "brightness_command_topic", "brightness_command_template", "brightness"),
                 ("color_temp_state_topic", "color_temp_command_topic", "color_temp_command_template", "color_temp"),
                 ("rgb_state_topic", "rgb_command_topic", "rgb_command_template", "rgb"),
                 ("hs_state_topic", "hs_command_topic", "hs_command_template", "hs"),
                 ("xy_state_topic", "xy_command_topic", "xy_command_template", "xy"))
_COLOR_KEYS = {"rgb": ("r", "g", "b"), "xy": ("x", "y"), "hs": ("h", "s")}
_BASIC_TEMPLATES = {"state": "state_value_template", "brightness": "brightness_value_template",
                    "color_temp": "color_temp_value_template", "rgb": "rgb_value_template",
                    "hs": "hs_value_template", "xy": "xy_value_template"}


class Light(Entity):
    """`light`, any schema."""

    component = "light"

    def __init__(self, conf: Conf, templates: Templates) -> None:
        aliased = conf.has("value_template") and not conf.has("state_value_template") and \
            (conf.text("schema", "basic") or "basic") in ("basic", "default")
        if aliased:
            # The legacy alias of state_value_template that Tasmota's discovery still sends (`val_tpl`).
            conf = Conf({**conf.data, "state_value_template": conf.data["value_template"]})
        super().__init__(conf, templates)
        if aliased:
            self.sent_as["state_value_template"] = "value_template"
        self.schema = conf.text("schema", "basic") or "basic"
        if self.schema == "default":
            self.schema = "basic"
        if self.schema not in ("basic", "json", "template"):
            raise ConfigProblem(f"schema: {self.schema!r}; use basic, json or template")
        self.payload_on = conf.string("payload_on", "ON")
        self.payload_off = conf.string("payload_off", "OFF")
        self.scale = conf.number("brightness_scale", 255) or 255
        self.kelvin = conf.flag("color_temp_kelvin", False)
        self.mireds = (conf.number("min_mireds", 153), conf.number("max_mireds", 500))
        self.kelvins = (conf.number("min_kelvin", 2000), conf.number("max_kelvin", 6535))
        modes = set(conf.strings("supported_color_modes") or ())
        has = conf.has
        if self.schema == "basic":
            for key in (*_BASIC_TEMPLATES.values(), "brightness_command_template", "color_temp_command_template",
                        "rgb_command_template", "hs_command_template", "xy_command_template"):
                self.compile(key)
            dimmable = has("brightness_command_topic") or has("brightness_state_topic")
            warmth = has("color_temp_command_topic") or has("color_temp_state_topic")
            color = any(has(f"{c}_command_topic") or has(f"{c}_state_topic") for c in ("rgb", "hs", "xy"))
        elif self.schema == "json":
            flags = {k for k in ("brightness", "color_temp", "rgb", "hs", "xy") if conf.flag(k, False)}
            dimmable = bool(modes & DIMMABLE_MODES) or bool(flags)
            warmth = "color_temp" in modes or "color_temp" in flags
            color = bool(modes & COLOR_MODES) or bool(flags & COLOR_MODES)
        else:
            for key in ("command_on_template", "command_off_template", "state_template", "brightness_template",
                        "color_temp_template", "red_template", "green_template", "blue_template"):
                self.compile(key)
            if "command_on_template" not in self._compiled or "command_off_template" not in self._compiled:
                raise ConfigProblem("command_on_template/command_off_template: a template light needs both")
            dimmable, warmth = has("brightness_template"), has("color_temp_template")
            color = all(has(f"{c}_template") for c in ("red", "green", "blue"))
        if not conf.text("command_topic"):
            raise ConfigProblem("command_topic: missing; a light needs it")
        self.part = mapping.light(dimmable=dimmable, color_temperature=warmth, color=color)

    def topics(self) -> list[tuple[str, str]]:
        if self.schema != "basic":
            return self.state_topics((("state_topic", "state"),)) + \
                self.echoes((("state_topic", "command_topic", "command_on_template", "state"),))
        pairs = tuple((f"{role}_state_topic" if role != "state" else "state_topic", role) for role in _BASIC_TEMPLATES)
        return self.state_topics(pairs) + self.echoes(_BASIC_ECHOES)

    def read(self, role: str, payload: Payload) -> Reading:
        echo = role.startswith(ECHO)
        role = role.removeprefix(ECHO)
        if self.schema == "json":
            return Reading(self._json_state(payload.text))
        if self.schema == "template":
            return Reading(self._template_state(payload))
        text = payload.text.strip() if echo else self.render_value(_BASIC_TEMPLATES[role], payload)
        if text in UNKNOWN:
            return Reading()
        if role == "state":
            if text not in (self.payload_on, self.payload_off):
                raise StateProblem(f"{text[:40]!r} is neither {self.payload_on!r} nor {self.payload_off!r}")
            return Reading({"Switch": convert.on_off(text == self.payload_on)})
        if role == "brightness":
            value = number(text, "the brightness")
            return Reading({} if value is None else {"Brightness": convert.brightness_percent(value, self.scale)})
        if role == "color_temp":
            value = number(text, "the colour temperature")
            return Reading({} if value is None else {"ColorTemperature": self._warmth(value)})
        return Reading({"Color": _color(role, [p.strip() for p in text.split(",")])})

    def command(self, request: ControlRequest) -> list[Outgoing]:
        if request.interface not in ("Switch", "Brightness", "ColorTemperature", "Color"):
            return super().command(request)
        value = target_value(request)
        if (request.interface == "Switch" and value == "Off") or (request.interface == "Brightness" and value == 0):
            return self._off()
        if self.schema == "json":
            return [self.publish("command_topic", json.dumps(self._json_command(request), separators=(",", ":")))]
        if self.schema == "template":
            text = self.render_command("command_on_template", "", {"state": "on", **self._variables(request)})
            return [self.publish("command_topic", text)]
        return self._basic_command(request)

    # The basic schema.

    def _basic_command(self, request: ControlRequest) -> list[Outgoing]:
        on = self.publish("command_topic", self.payload_on)
        if request.interface == "Switch":
            return [on]
        if request.interface == "Brightness":
            raw = convert.brightness_value(target_number(request), self.scale)
            attribute = self._attribute("brightness", str(raw), {"value": raw})
        elif request.interface == "ColorTemperature":
            warmth = self._warmth_value(target_number(request))
            attribute = self._attribute("color_temp", str(warmth), {"value": warmth})
        elif self.conf.has("rgb_command_topic"):
            red, green, blue = convert.rgb_parts(int(target_number(request)))
            attribute = self._attribute("rgb", f"{red},{green},{blue}", {"red": red, "green": green, "blue": blue})
        elif self.conf.has("hs_command_topic"):
            hue, sat = convert.hs_from_rgb(int(target_number(request)))
            attribute = self._attribute("hs", f"{hue},{sat}", {"hue": hue, "sat": sat})
        else:
            x, y = convert.xy_from_rgb(int(target_number(request)))
            attribute = self._attribute("xy", f"{x},{y}", {"x": x, "y": y})
        order = self.conf.text("on_command_type", "last")
        if order == "brightness":
            return [attribute]
        return [on, attribute] if order == "first" else [attribute, on]

    def _attribute(self, name: str, default: str, variables: dict[str, Any]) -> Outgoing:
        if not self.conf.has(f"{name}_command_topic"):
            raise CommandRefused(f"the light has no {name}_command_topic")
        return self.publish(f"{name}_command_topic",
                            self.render_command(f"{name}_command_template", default, variables))

    # The json schema.

    def _json_state(self, text: str) -> dict[str, StateValue]:
        try:
            data: Any = json_text(text)
        except ValueError:
            raise StateProblem(f"{text[:40]!r} is not the JSON state of a json-schema light") from None
        if not isinstance(data, dict):
            raise StateProblem("the state of a json-schema light must be a JSON object")
        out: dict[str, StateValue] = {}
        state = data.get("state")
        if isinstance(state, str) and state.upper() in ("ON", "OFF"):
            out["Switch"] = convert.on_off(state.upper() == "ON")
        mode = data.get("color_mode")
        if _is_number(data.get("brightness")):
            out["Brightness"] = convert.brightness_percent(float(data["brightness"]), self.scale)
        if _is_number(data.get("color_temp")) and mode in (None, "color_temp"):
            out["ColorTemperature"] = self._warmth(float(data["color_temp"]))
        color = data.get("color")
        if isinstance(color, dict) and (mode is None or mode in COLOR_MODES):
            roles = ("rgb", "xy", "hs") if mode is None else ("rgb" if mode.startswith("rgb") else mode,)
            for role in roles:
                keys = _COLOR_KEYS[role]
                if all(_is_number(color.get(k)) for k in keys):
                    out["Color"] = _color(role, [str(color[k]) for k in keys])
                    break
        return out

    def _json_command(self, request: ControlRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"state": "ON"}
        if request.interface == "Brightness":
            body["brightness"] = convert.brightness_value(target_number(request), self.scale)
        elif request.interface == "ColorTemperature":
            body["color_temp"] = self._warmth_value(target_number(request))
        elif request.interface == "Color":
            rgb = int(target_number(request))
            modes = set(self.conf.strings("supported_color_modes") or ()) | \
                {k for k in ("rgb", "hs", "xy") if self.conf.flag(k, False)}
            if modes & {"rgb", "rgbw", "rgbww"} or not modes & {"hs", "xy"}:
                red, green, blue = convert.rgb_parts(rgb)
                body["color"] = {"r": red, "g": green, "b": blue}
            elif "hs" in modes:
                hue, sat = convert.hs_from_rgb(rgb)
                body["color"] = {"h": hue, "s": sat}
            else:
                x, y = convert.xy_from_rgb(rgb)
                body["color"] = {"x": x, "y": y}
        return body

    # The template schema.

    def _template_state(self, payload: Payload) -> dict[str, StateValue]:
        out: dict[str, StateValue] = {}
        state = self.render_value("state_template", payload) if "state_template" in self._compiled else ""
        if state.lower() in ("on", "off"):
            out["Switch"] = convert.on_off(state.lower() == "on")
        if "brightness_template" in self._compiled:
            value = number(self.render_value("brightness_template", payload), "the brightness")
            if value is not None:
                out["Brightness"] = convert.brightness_percent(value, 255)
        if "color_temp_template" in self._compiled:
            value = number(self.render_value("color_temp_template", payload), "the colour temperature")
            if value is not None:
                out["ColorTemperature"] = self._warmth(value)
        if all(f"{c}_template" in self._compiled for c in ("red", "green", "blue")):
            parts = [self.render_value(f"{c}_template", payload) for c in ("red", "green", "blue")]
            if not any(p in UNKNOWN for p in parts):
                out["Color"] = _color("rgb", parts)
        return out

    def _variables(self, request: ControlRequest) -> dict[str, Any]:
        if request.interface == "Brightness":
            return {"brightness": convert.brightness_value(target_number(request), 255)}
        if request.interface == "ColorTemperature":
            return {"color_temp": self._warmth_value(target_number(request))}
        if request.interface == "Color":
            rgb = int(target_number(request))
            red, green, blue = convert.rgb_parts(rgb)
            hue, sat = convert.hs_from_rgb(rgb)
            return {"red": red, "green": green, "blue": blue, "hue": hue, "sat": sat}
        return {}

    # Shared.

    def _off(self) -> list[Outgoing]:
        if self.schema == "json":
            return [self.publish("command_topic", '{"state":"OFF"}')]
        if self.schema == "template":
            return [self.publish("command_topic", self.render_command("command_off_template", "", {"state": "off"}))]
        return [self.publish("command_topic", self.payload_off)]

    def _warmth(self, value: float) -> int:
        if self.kelvin:
            return convert.color_temperature_percent_from_kelvin(value, *self.kelvins)
        return convert.color_temperature_percent_from_mireds(value, *self.mireds)

    def _warmth_value(self, percent: float) -> int:
        if self.kelvin:
            return convert.kelvin_from_percent(percent, *self.kelvins)
        return convert.mireds_from_percent(percent, *self.mireds)


def _color(role: str, parts: list[str]) -> int:
    """A colour state ("r,g,b", "h,s" or "x,y") as the platform's RGB integer."""
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise StateProblem(f"{','.join(parts)[:40]!r} is not a {role} colour") from None
    if role == "rgb" and len(values) >= 3:
        return convert.rgb_value(*values[:3])
    if role == "hs" and len(values) == 2:
        return convert.rgb_from_hs(*values)
    if role == "xy" and len(values) == 2:
        return convert.rgb_from_xy(*values)
    raise StateProblem(f"{','.join(parts)[:40]!r} is not a {role} colour")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
