"""A control request as Tasmota commands (pure): publishes to the device's own `cmnd/<topic>/<Command>`.

Tasmota takes one command per topic, its parameter as the payload: `POWER<n>` with the device's state text
(`ON`/`OFF`), `Dimmer` 0..100 (`Dimmer1`/`Dimmer2` for a split light, `Dimmer3` on a TuyaMCU, `Channel<n>` with
SetOption68), `CT` in mireds, `Color2` "r,g,b" (`=` kept for the white channels of a split light),
`ShutterPosition<n>` 0..100, `ShutterOpen<n>`, `ShutterClose<n>`, `ShutterStop<n>`. A colour or colour temperature
for a light that is not on is preceded by `POWER<n> ON`, as Home Assistant's turn_on does: with SetOption20 a
Tasmota light would take the colour and stay off.
"""

from __future__ import annotations

from hubd.devices.model import StateValue
from hubd.dialects import convert
from hubd.dialects.base import CommandRefused, ControlRequest, Outgoing
from hubd.dialects.tasmota.entities import Address, Entity


def command(where: Address, entity: Entity, request: ControlRequest) -> list[Outgoing]:
    """The publishes that ask the device for the request's state; CommandRefused if it cannot be said."""
    interface, value = request.interface, request.value
    if entity.kind in ("relay", "light") and interface == "Switch":
        return [_power(where, entity, value == "On")]
    if entity.kind == "light":
        return _light(where, entity, request)
    if entity.kind == "shutter":
        return _shutter(where, entity, interface, value, request)
    raise CommandRefused(f"a Tasmota {entity.kind} takes no {interface}.{request.operation}")


def _light(where: Address, entity: Entity, request: ControlRequest) -> list[Outgoing]:
    opts, interface = entity.opts, request.interface
    target = _number(request)
    if interface == "Brightness" and opts.get("dimmer") is not None:
        if target <= 0:
            return [_power(where, entity, False)]
        out = [_send(where, str(opts["dimmer"]), str(round(min(target, 100))))]
        if not opts.get("linked_power", True) and request.states.get("Switch") != "On":
            out.insert(0, _power(where, entity, True))  # SetOption20: a dimmer change leaves the power as it is
        return out
    if interface == "ColorTemperature" and opts.get("ct"):
        low, high = opts.get("mireds") or (153, 500)
        out = [_send(where, "CT", str(convert.mireds_from_percent(target, low, high)))]
    elif interface == "Color" and opts.get("color"):
        red, green, blue = convert.rgb_parts(int(target))
        out = [_send(where, "Color2", f"{red},{green},{blue}{opts.get('suffix', '')}")]
    else:
        raise CommandRefused(f"this Tasmota light takes no {interface}")
    if request.states.get("Switch") != "On":
        out.insert(0, _power(where, entity, True))  # a colour for an off light also turns it on
    return out


def _shutter(where: Address, entity: Entity, interface: str, value: StateValue | None,
             request: ControlRequest) -> list[Outgoing]:
    number = entity.index + 1
    if interface == "Position":
        percent = round(min(max(_number(request), 0), 100))
        return [_send(where, f"ShutterPosition{number}", str(100 - percent if entity.opts.get("invert") else percent))]
    if interface == "MotionSwitch":
        if value != "Off":
            raise CommandRefused("a shutter can only be stopped (MotionSwitch.Off); open or close it to move it")
        return [_send(where, f"ShutterStop{number}", "")]
    if interface == "Switch":
        return [_send(where, f"ShutterOpen{number}" if value == "On" else f"ShutterClose{number}", "")]
    raise CommandRefused(f"a Tasmota shutter takes no {interface}")


def _power(where: Address, entity: Entity, on: bool) -> Outgoing:
    return _send(where, f"POWER{entity.index + 1}", where.texts[1] if on else where.texts[0])


def _send(where: Address, name: str, parameter: str) -> Outgoing:
    return Outgoing(where.topics.cmnd + name, parameter.encode())


def _number(request: ControlRequest) -> float:
    value = request.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CommandRefused(f"{request.interface}.{request.operation} needs the device's current value, which hubd "
                             "does not know yet; set a value instead")
    return float(value)
