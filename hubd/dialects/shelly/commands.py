"""A control request as Shelly commands (pure): RPC on a Gen2+ device's own `<prefix>/rpc`, Gen1 topics.

Gen2+: one JSON-RPC request `{"id", "src", "method", "params"}` on `<prefix>/rpc` (its answer goes to hubd's own
`<src>/rpc`): `Switch.Set {"id", "on"}`, `Light.Set {"id", "on", "brightness"}`, a colour light's `RGB.Set` or
`RGBW.Set` (the same, and `"rgb": [r, g, b]` for a Color, which turns it on), `Cover.Open`, `Cover.Close`,
`Cover.Stop`, `Cover.GoToPosition {"id", "pos"}`. Gen1: `shellies/<id>/relay/<n>/command` (`on`, `off`),
`roller/<n>/command` (`open`, `close`, `stop`) and `roller/<n>/command/pos`, `light/<n>/set` (`{"turn",
"brightness"}`), a colour light's `color/<n>/command` (`on`, `off`) and `color/<n>/set` (`{"turn", "gain",
"brightness"}` for a brightness: colour mode reads the one, white mode the other; `{"turn", "red", "green", "blue"}`
for a colour).
"""

from __future__ import annotations

import json
from typing import Any

from hubd.dialects import convert
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing
from hubd.dialects.shelly.parts import Address, Component

_LIGHT_METHODS = {"light": "Light.Set", "rgb": "RGB.Set", "rgbw": "RGBW.Set"}  # by Gen2+ component type


def rpc(prefix: str, request_id: int, src: str, method: str, params: dict[str, Any] | None = None) -> Outgoing:
    """One RPC request on `<prefix>/rpc` (QoS 1, not retained)."""
    frame: dict[str, Any] = {"id": request_id, "src": src, "method": method}
    if params is not None:
        frame["params"] = params
    return Outgoing(f"{prefix}/rpc", json.dumps(frame, separators=(",", ":")).encode())


def command(where: Address, component: Component, request: ControlRequest, request_id: int,
            src: str) -> list[Outgoing]:
    """The publishes that ask the device for the request's state; CommandRefused if it cannot be said."""
    if where.gen >= 2:
        method, params = _gen2(component, request)
        return [rpc(where.prefix, request_id, src, method, params)]
    return [_gen1(where, component, request)]


def _gen2(component: Component, request: ControlRequest) -> tuple[str, dict[str, Any]]:
    interface, value, n = request.interface, request.value, component.n
    if component.kind == "switch" and interface == "Switch":
        return "Switch.Set", {"id": n, "on": value == "On"}
    method = _LIGHT_METHODS.get(component.type, "Light.Set")
    if component.kind == "light" and interface == "Switch":
        return method, {"id": n, "on": value == "On"}
    if component.kind == "light" and interface == "Brightness":
        level = _percent(request)
        return (method, {"id": n, "on": False}) if level <= 0 else \
            (method, {"id": n, "on": True, "brightness": level})
    if component.kind == "light" and interface == "Color" and component.opts.get("color"):
        return method, {"id": n, "on": True, "rgb": list(_color(request))}
    if component.kind == "cover":
        if interface == "Position":
            return "Cover.GoToPosition", {"id": n, "pos": _percent(request)}
        if interface == "Switch":
            return ("Cover.Open" if value == "On" else "Cover.Close"), {"id": n}
        if interface == "MotionSwitch" and value == "Off":
            return "Cover.Stop", {"id": n}
    raise CommandRefused(f"a Shelly {component.type} takes no {interface}.{request.operation}")


def _gen1(where: Address, component: Component, request: ControlRequest) -> Outgoing:
    interface, value = request.interface, request.value
    base = f"{where.prefix}/{component.type}/{component.n}"
    if component.kind in ("switch", "light") and interface == "Switch":
        return Outgoing(f"{base}/command", b"on" if value == "On" else b"off")
    if component.kind == "light" and interface == "Brightness":
        level = _percent(request)
        # A colour light's brightness is its gain in colour mode and its brightness in white mode (a Bulb's, a Duo
        # RGBW's); each mode ignores the other's key (an RGBW2 has no white mode here), so both go: the level holds
        # in whichever mode the light is in, which hubd need not remember (docs/devices.md, "Shelly").
        data: dict[str, Any] = {"turn": "off"} if level <= 0 else \
            {"turn": "on", "gain": level, "brightness": level} if component.opts.get("color") else \
            {"turn": "on", "brightness": level}
        return Outgoing(f"{base}/set", json.dumps(data, separators=(",", ":")).encode())
    if component.kind == "light" and interface == "Color" and component.opts.get("color"):
        red, green, blue = _color(request)
        data = {"turn": "on", "red": red, "green": green, "blue": blue}
        return Outgoing(f"{base}/set", json.dumps(data, separators=(",", ":")).encode())
    if component.kind == "cover":
        if interface == "Position":
            return Outgoing(f"{base}/command/pos", str(_percent(request)).encode())
        if interface == "Switch":
            return Outgoing(f"{base}/command", b"open" if value == "On" else b"close")
        if interface == "MotionSwitch" and value == "Off":
            return Outgoing(f"{base}/command", b"stop")
    raise CommandRefused(f"a Shelly {component.type} takes no {interface}.{request.operation}")


def _color(request: ControlRequest) -> tuple[int, int, int]:
    value = request.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CommandRefused(f"Color.{request.operation} needs a colour (a whole number 0..16777215)")
    return convert.rgb_parts(int(min(max(value, 0), 0xFFFFFF)))


def _percent(request: ControlRequest) -> int:
    value = request.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CommandRefused(f"{request.interface}.{request.operation} needs the device's current value, which hubd "
                             "does not know yet; set a value instead")
    return round(min(max(float(value), 0.0), 100.0))
