"""What a zigbee2mqtt Feature gives the platform, reads from a state and asks with `/set` (pure).

`part` is the feature's mapping.Part, its capabilities' operations and reporting decided by the access bits of
the property behind each interface (no `/set`: no operations; published: proactively reported; published or
`/get`: retrievable). `read` turns a device's state object (zigbee2mqtt publishes all of it each time) into
interface values; `command` turns a control request into the `/set` object zigbee2mqtt takes (`{"state": "ON"}`,
`{"brightness_l1": 128}`, `{"color": {"hex": "#ff8800"}}`, `{"occupied_heating_setpoint": 21}`, a scene's
`{"scene_recall": 1}`); `lock_fault`
says when a lock is neither locked nor unlocked (its `lock_state` not_fully_locked...), which makes it
unreachable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hubd.devices.model import Capability, StateValue
from hubd.dialects import convert, mapping
from hubd.dialects.base import CommandRefused, ControlRequest
from hubd.dialects.zigbee2mqtt.exposes import GETTABLE, PUBLISHED, SETTABLE, Feature

# Which role's access decides each interface's capability, by kind.
_ROLES: Mapping[str, Mapping[str, str]] = {
    "light": {"Switch": "state", "Brightness": "brightness", "ColorTemperature": "color_temp", "Color": "color"},
    "switch": {"Switch": "state"}, "lock": {"Switch": "state"}, "binary": {"Switch": "value"},
    "cover": {"Switch": "state", "Position": "position", "MotionSwitch": "state"},
    "climate": {"Temperature": "target", "Mode": "mode", "Switch": "mode"},
    "fan": {"Switch": "state", "FanSpeed": "speed"},
    "numeric": {"Temperature": "value", "Humidity": "value"},
    "scene": {"Switch": "scene"},
}
_ON_MODES = ("heat", "auto", "cool", "heat_cool", "dry", "fan_only")


def part(feature: Feature) -> mapping.Part | None:
    """The feature's part of the mapping table, with its access applied; None for one the table lacks."""
    props, opts = feature.props, feature.opts
    found: mapping.Part | None
    if feature.kind == "light":
        found = mapping.light(dimmable="brightness" in props, color_temperature="color_temp" in props,
                              color="color" in props)
    elif feature.kind == "switch":
        found = mapping.switch(outlet=bool(opts.get("outlet")))
    elif feature.kind == "cover":
        state = _bits(feature, "state")
        moves = bool(state & SETTABLE)
        found = mapping.cover(position=bool(_bits(feature, "position") & PUBLISHED),
                              set_position=bool(_bits(feature, "position") & SETTABLE),
                              open_close=moves and None not in (opts.get("open"), opts.get("close")),
                              stop=moves and opts.get("stop") is not None)
    elif feature.kind == "climate":
        found = mapping.climate(modes=_strings(opts.get("modes")),
                                settable_mode=bool(_bits(feature, "mode") & SETTABLE), target="target" in props,
                                settable_target=bool(_bits(feature, "target") & SETTABLE), power=False)
    elif feature.kind == "fan":
        found = mapping.fan(speed="speed" in props or "mode" in props,
                            settable_speed=bool((_bits(feature, "speed") | _bits(feature, "mode")) & SETTABLE))
    elif feature.kind == "lock":
        found = mapping.lock(can_lock=True)  # its access decides (below): locked by voice only where /set works
    elif feature.kind == "binary":
        found = mapping.binary(str(opts.get("device_class")))
    elif feature.kind == "numeric":
        found = mapping.sensor(str(opts.get("sensor")), str(opts.get("unit") or ""))
    elif feature.kind == "scene":
        found = mapping.scene()
    else:
        found = mapping.doorbell()
    if found is None:
        return None
    return mapping.Part(found.display_type, tuple(_with_access(feature, c) for c in found.capabilities))


def read(feature: Feature, state: Mapping[str, Any]) -> tuple[dict[str, StateValue], list[tuple[str, str]]]:
    """The interface values a state object gives, and its unusable values as (property, why)."""
    values: dict[str, StateValue] = {}
    problems: list[tuple[str, str]] = []
    props, opts = feature.props, feature.opts

    def number(role: str) -> float | None:
        prop = props.get(role)
        value = state.get(prop) if prop else None
        if value is None or not prop:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            problems.append((prop, f"{prop} is {_show(value)}, not a number"))
            return None
        return float(value)

    def switch(role: str, on: Any, off: Any) -> str | None:
        prop = props.get(role)
        value = state.get(prop) if prop else None
        if value is None or not prop:
            return None
        if value == on and type(value) is type(on):
            return "On"
        if value == off and type(value) is type(off):
            return "Off"
        problems.append((prop, f"{prop} is {_show(value)}, neither {_show(on)} nor {_show(off)}"))
        return None

    kind = feature.kind
    if kind in ("light", "switch", "fan", "lock", "binary"):
        role = "value" if kind == "binary" else "state"
        if (on := switch(role, opts.get("on"), opts.get("off"))) is not None:
            values["Switch"] = on
    if kind == "lock" and (actual := state.get(props.get("lock_state", ""))) is not None:
        values["Switch"] = "On" if actual == "locked" else "Off"  # locked only when fully locked (lock_fault)
    if kind == "light":
        _read_light(feature, state, number, values, problems)
    elif kind == "cover":
        _read_cover(feature, state, number, values, problems)
    elif kind == "climate":
        cooling = "target_cool" in props and state.get(props.get("mode", "")) == "cool"
        if (target := number("target_cool" if cooling else "target")) is not None:
            celsius = convert.celsius(target, str(opts.get("unit") or ""))
            if celsius is not None:
                values["Temperature"] = celsius
        _read_mode(feature, state, values, problems)
    elif kind == "fan":
        if (speed := number("speed")) is not None:
            low, high = _range(opts)
            values["FanSpeed"] = convert.percent_of(speed, low, high)
        mode = state.get(props.get("mode", ""))
        speeds = _strings(opts.get("speeds"))
        if isinstance(mode, str) and mode in speeds:
            values["FanSpeed"] = convert.ranged_percent(speeds.index(mode) + 1, 1, len(speeds))
        elif mode == "off":
            values["FanSpeed"] = 0
    elif kind == "numeric" and (value := number("value")) is not None:
        if opts.get("sensor") == "humidity":
            values["Humidity"] = convert.humidity_percent(value)
        elif (celsius := convert.celsius(value, str(opts.get("unit") or ""))) is not None:
            values["Temperature"] = celsius
    return values, problems


def lock_fault(feature: Feature, state: Mapping[str, Any]) -> str | None:
    """What a lock's state says that makes it unreachable (never reported locked): its `lock_state` neither locked
    nor unlocked (not_fully_locked, jammed, motor blocked, unknown...), or its state neither locked nor unlocked."""
    if feature.kind != "lock":
        return None
    props, opts = feature.props, feature.opts
    actual = state.get(props.get("lock_state", ""))
    if actual is not None:
        return None if actual in ("locked", "unlocked") else f"the lock is {_show(actual)}"
    told = state.get(props.get("state", ""))
    if told is None or told in (opts.get("on"), opts.get("off")):
        return None
    return f"the lock is {_show(told)}"


def command(feature: Feature, request: ControlRequest) -> dict[str, Any]:
    """The `/set` object for a request; CommandRefused when the feature cannot do it."""
    props, opts, interface = feature.props, feature.opts, request.interface
    role = _ROLES.get(feature.kind, {}).get(interface)
    if feature.kind == "lock" and (interface != "Switch" or request.value != "On"):
        raise CommandRefused("hubd locks a door (Switch.On) but never unlocks one from the platform")
    if feature.kind == "scene":
        scene_id = opts.get("id")
        if interface != "Switch" or request.value != "On":
            raise CommandRefused("a scene can only be turned on")
        if not isinstance(scene_id, int) or isinstance(scene_id, bool):
            raise CommandRefused("the scene's route has no scene id; wait for zigbee2mqtt's device list again")
        return {"scene_recall": scene_id}
    if role is None or feature.kind in ("binary", "numeric", "doorbell"):
        raise CommandRefused(f"a zigbee2mqtt {feature.kind} takes no {interface}.{request.operation}")
    if feature.kind == "fan" and interface == "FanSpeed" and "speed" not in props:
        role = "mode"
    if not _bits(feature, role) & SETTABLE:
        raise CommandRefused(f"zigbee2mqtt does not let {props.get(role, role)} be set (its access has no /set)")
    value = _target(request)
    if interface == "Switch" and feature.kind in ("light", "switch", "fan", "lock"):
        return {props["state"]: opts.get("on") if value == "On" else opts.get("off")}
    if feature.kind == "light":
        return _light_command(feature, interface, _number(request, value))
    if feature.kind == "cover":
        return _cover_command(feature, interface, value, request)
    if feature.kind == "climate":
        return _climate_command(feature, interface, value, request)
    speed = _number(request, value)
    if speed <= 0:
        return {props["state"]: opts.get("off")}
    if "speed" in props:
        low, high = _range(opts)
        return {props["speed"]: round(convert.value_of(speed, low, high))}
    speeds = _strings(opts.get("speeds"))
    return {props["mode"]: speeds[convert.ranged_value(speed, 1, len(speeds)) - 1]}


# Kinds with more than one value.


def _read_light(feature: Feature, state: Mapping[str, Any], number: Any, values: dict[str, StateValue],
                problems: list[tuple[str, str]]) -> None:
    opts = feature.opts
    mode = state.get(feature.props.get("color_mode", ""))
    if (brightness := number("brightness")) is not None:
        values["Brightness"] = convert.brightness_percent(brightness, float(opts.get("brightness_max") or 254))
    if (mireds := number("color_temp")) is not None and mode in (None, "color_temp"):
        low, high = _pair(opts.get("mireds"), (150, 500))
        values["ColorTemperature"] = convert.color_temperature_percent_from_mireds(mireds, low, high)
    prop = feature.props.get("color")
    color = state.get(prop) if prop else None
    if color is None or mode == "color_temp" or not prop:
        return
    rgb = _rgb(color, mode) if isinstance(color, dict) else None
    if rgb is None:
        problems.append((prop, f"{prop} is {_show(color)}, not a colour with x/y, hue/saturation or r/g/b"))
    else:
        values["Color"] = rgb


def _rgb(color: Mapping[str, Any], mode: Any) -> int | None:
    def nums(*keys: str) -> list[float] | None:
        found = [color.get(k) for k in keys]
        ok = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in found)
        return [float(v) for v in found] if ok else None  # type: ignore[arg-type]

    forms = ["xy", "hs", "rgb"]
    if mode in forms:  # the colour the light is in; the others zigbee2mqtt derives from it
        forms.remove(mode)
        forms.insert(0, mode)
    for form in forms:
        if form == "xy" and (xy := nums("x", "y")) is not None:
            return convert.rgb_from_xy(*xy)
        if form == "hs" and (hs := nums("hue", "saturation") or nums("h", "s")) is not None:
            return convert.rgb_from_hs(*hs)
        if form == "rgb" and (rgb := nums("r", "g", "b")) is not None:
            return convert.rgb_value(*rgb)
    return None


def _read_cover(feature: Feature, state: Mapping[str, Any], number: Any, values: dict[str, StateValue],
                problems: list[tuple[str, str]]) -> None:
    opts, prop = feature.opts, feature.props.get("state", "")
    value = state.get(prop) if prop else None
    if value is not None:
        if value == opts.get("open"):
            values["Switch"] = "On"
        elif value == opts.get("close"):
            values["Switch"] = "Off"
        elif value != opts.get("stop") and value not in ("STOP", "stop"):
            problems.append((prop, f"{prop} is {_show(value)}, not {_show(opts.get('open'))} or "
                                   f"{_show(opts.get('close'))}"))
    if (position := number("position")) is not None:
        low, high = _range(opts)
        values["Position"] = convert.percent_of(position, low, high)
        if not prop:
            values["Switch"] = convert.on_off(position > low)


def _read_mode(feature: Feature, state: Mapping[str, Any], values: dict[str, StateValue],
               problems: list[tuple[str, str]]) -> None:
    prop = feature.props.get("mode", "")
    mode = state.get(prop) if prop else None
    if mode is None:
        return
    if not isinstance(mode, str):
        problems.append((prop, f"{prop} is {_show(mode)}, not a mode"))
    elif mode == convert.OFF_MODE:
        values["Switch"] = "Off"
    elif (platform := convert.platform_mode(mode)) is not None:
        values["Mode"], values["Switch"] = platform, "On"


def _light_command(feature: Feature, interface: str, value: float) -> dict[str, Any]:
    props, opts = feature.props, feature.opts
    if interface == "Brightness":
        if value <= 0:
            return {props["state"]: opts.get("off")}
        return {props["brightness"]: convert.brightness_value(value, float(opts.get("brightness_max") or 254))}
    # A colour or colour temperature also turns the light on, as Home Assistant's turn_on does (in Zigbee these
    # commands leave an off light off; its brightness command turns it on by itself).
    on = {props["state"]: opts.get("on")} if _bits(feature, "state") & SETTABLE else {}
    if interface == "ColorTemperature":
        low, high = _pair(opts.get("mireds"), (150, 500))
        return {**on, props["color_temp"]: convert.mireds_from_percent(value, low, high)}
    red, green, blue = convert.rgb_parts(int(value))
    return {**on, props["color"]: {"hex": f"#{red:02x}{green:02x}{blue:02x}"}}


def _cover_command(feature: Feature, interface: str, value: StateValue, request: ControlRequest) -> dict[str, Any]:
    props, opts = feature.props, feature.opts
    if interface == "Position":
        low, high = _range(opts)
        return {props["position"]: round(convert.value_of(_number(request, value), low, high))}
    if interface == "MotionSwitch":
        if value != "Off" or opts.get("stop") is None:
            raise CommandRefused("the cover can only be stopped (MotionSwitch.Off); open or close it to move it")
        return {props["state"]: opts["stop"]}
    raw = opts.get("open") if value == "On" else opts.get("close")
    if raw is None or "state" not in props:
        raise CommandRefused("the cover cannot be opened or closed, only positioned")
    return {props["state"]: raw}


def _climate_command(feature: Feature, interface: str, value: StateValue, request: ControlRequest) -> dict[str, Any]:
    props, opts = feature.props, feature.opts
    modes = _strings(opts.get("modes"))
    if interface == "Temperature":
        raw = convert.from_celsius(_number(request, value), str(opts.get("unit") or ""))
        step = float(opts.get("step") or 0.1)
        raw = round(round(raw / step) * step, 4)
        low, high = opts.get("min"), opts.get("max")
        if isinstance(low, int | float) and isinstance(high, int | float) and not low <= raw <= high:
            raise CommandRefused(f"the thermostat takes {low}..{high} {opts.get('unit')}, not {raw}")
        # In cool mode the cooling setpoint is the target (a thermostat with both).
        role = "target_cool" if "target_cool" in props and request.states.get("Mode") == "Cool" else "target"
        return {props[role]: convert.state_value(raw)}
    if interface == "Mode":
        mode = convert.device_mode(str(value), modes)
        if mode is None:
            raise CommandRefused(f"the thermostat has no mode for {value} (its modes: {modes})")
        return {props["mode"]: mode}
    if value == "Off":
        if convert.OFF_MODE not in modes:
            raise CommandRefused("the thermostat has no off mode")
        return {props["mode"]: convert.OFF_MODE}
    last = request.states.get("Mode")
    mode = convert.device_mode(last, modes) if isinstance(last, str) else None
    mode = mode or next((m for m in _ON_MODES if m in modes), None)
    if mode is None:
        raise CommandRefused("the thermostat has no mode to turn on in")
    return {props["mode"]: mode}


# Helpers.


def _with_access(feature: Feature, cap: Capability) -> Capability:
    role = _ROLES.get(feature.kind, {}).get(cap.interface, "")
    if feature.kind == "fan" and cap.interface == "FanSpeed" and "speed" not in feature.props:
        role = "mode"
    bits = _bits(feature, role)
    if feature.kind == "cover" and cap.interface == "MotionSwitch":
        bits &= SETTABLE  # nothing reports whether a cover moves
    ops = cap.supportedOperations if bits & SETTABLE else ()
    return Capability.of(cap.interface, ops, bool(bits & PUBLISHED), bool(bits & (PUBLISHED | GETTABLE)))


def _bits(feature: Feature, role: str) -> int:
    return feature.access.get(role, 0)


def _target(request: ControlRequest) -> StateValue:
    if request.value is None:
        raise CommandRefused(f"{request.interface}.{request.operation}: the current value is unknown, so hubd "
                             f"cannot work out the target; use {request.interface}.Set")
    return request.value


def _number(request: ControlRequest, value: StateValue) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CommandRefused(f"{request.interface} takes a number, got {value!r}")
    return float(value)


def _range(opts: Mapping[str, Any]) -> tuple[float, float]:
    return _pair(opts.get("range"), (0, 100))


def _pair(value: Any, default: tuple[float, float]) -> tuple[float, float]:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int | float) for v in value) \
            and value[0] < value[1]:
        return float(value[0]), float(value[1])
    return default


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
