"""The one table from real device kinds to the platform's displayType and capabilities, and the value conversions.

docs/devices.md (its mapping table), shared by every dialect that imports real devices (Home Assistant
MQTT discovery, zigbee2mqtt). A dialect says what each part of a device is, in Home Assistant's vocabulary of
device classes, which zigbee2mqtt's own discovery uses too (`light(dimmable=True)`, `binary("door")`,
`cover(...)`): each gives a `Part`, a display type and capabilities, or None with `unmapped_reason()`.
`plan_ranked()` puts a device's parts on endpoints, the device's own and a split-off `<device>-<key>` one for each
part whose interface is already taken, stable whatever order the parts arrived in. The value conversions are
hubd.dialects.convert's.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hubd.devices.model import Capability
from hubd.dialects import convert

_SET_MAX_MIN_ADJUST = ("Set", "SetMax", "SetMin", "Adjust")
FAN_SPEED_OPERATIONS = (*_SET_MAX_MIN_ADJUST, "SetHigh", "SetMedium", "SetLow")
# When parts of one device have different display types, the device shows as the first of these it has.
DISPLAY_PRECEDENCE = ("light", "ac", "thermostat", "waterHeater", "humidifier", "dehumidifier", "cleanBot", "curtain",
                      "fan", "socket", "switch", "door", "scene", "alarm", "unknown")
MAX_ENDPOINT_ID_CHARS = 256
_UNSAFE_ID_RE = re.compile(r"[^A-Za-z0-9._-]")

# Home Assistant binary_sensor device classes (zigbee2mqtt maps its properties onto the same ones).
ALARM_CLASSES = frozenset({"moisture", "smoke", "gas", "carbon_monoxide", "safety", "tamper"})



@dataclass(frozen=True, slots=True)
class Part:
    """What one piece of a device (an entity, a feature) gives the platform."""

    display_type: str
    capabilities: tuple[Capability, ...]

    @property
    def interfaces(self) -> frozenset[str]:
        """The interface names this part takes on an endpoint."""
        return frozenset(cap.interface for cap in self.capabilities)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One platform endpoint of a device: the parts (by key) on it, its display type and capabilities."""

    endpoint_id: str
    keys: tuple[str, ...]
    display_type: str
    capabilities: tuple[Capability, ...]
    split: bool  # True for a `<device>-<key>` endpoint


def _cap(interface: str, operations: Sequence[str], reported: bool) -> Capability:
    return Capability.of(interface, operations, reported, reported)


def light(*, dimmable: bool, color_temperature: bool, color: bool, reported: bool = True) -> Part:
    """A light: Switch, Brightness if dimmable, ColorTemperature and Color if it has them."""
    caps = [_cap("Switch", ("On", "Off"), reported)]
    if dimmable:
        caps.append(_cap("Brightness", _SET_MAX_MIN_ADJUST, reported))
    if color_temperature:
        caps.append(_cap("ColorTemperature", _SET_MAX_MIN_ADJUST, reported))
    if color:
        caps.append(_cap("Color", ("Set", "SetRandom"), reported))
    return Part("light", tuple(caps))


def switch(*, outlet: bool = False, reported: bool = True) -> Part:
    """A switch, or a plug (`socket`) for an outlet."""
    return Part("socket" if outlet else "switch", (_cap("Switch", ("On", "Off"), reported),))


def binary(device_class: str | None) -> Part:
    """A binary sensor by its device class: alarm (alarm = On) for leak, smoke, gas, CO and tamper; any other (a
    contact, motion, or one without a class hubd knows: a garage door, a Shelly input) is an on/off sensor (open,
    detected, on = On), as Home Assistant shows it."""
    if device_class in ALARM_CLASSES:
        return Part("alarm", (_cap("Switch", (), True),))
    return Part("unknown", (_cap("Switch", (), True),))


def sensor(device_class: str | None, unit: str | None) -> Part | None:
    """A temperature (°C) or humidity (%) sensor; without a device class, a reading whose unit is a temperature
    unit (°C, °F, K) counts too: a blank or whitespace unit is no unit (Tasmota's analog input is not 812 °C)."""
    classless_temperature = device_class is None and unit is not None and unit.strip() != "" \
        and convert.is_temperature_unit(unit)
    if device_class == "temperature" or classless_temperature:
        return Part("unknown", (_cap("Temperature", (), True),))
    if device_class == "humidity":
        return Part("unknown", (_cap("Humidity", (), True),))
    return None


def cover(*, position: bool, set_position: bool, open_close: bool, stop: bool, reported: bool = True) -> Part:
    """A curtain: Position, Switch (On = open, Off = close), MotionSwitch (Off = stop)."""
    caps = []
    if open_close:
        caps.append(_cap("Switch", ("On", "Off"), reported))
    if position or set_position:
        caps.append(_cap("Position", ("Set", "Adjust") if set_position else (), position or reported))
    if stop:
        caps.append(_cap("MotionSwitch", ("Off",), reported))
    return Part("curtain", tuple(caps))


def climate(*, modes: Iterable[str], settable_mode: bool, target: bool, settable_target: bool, power: bool,
            reported: bool = True) -> Part:
    """A thermostat (`ac` with a cool mode): Temperature (the target setpoint), Mode, Switch (power / off mode)."""
    device_modes = list(modes)
    platform = sorted({convert.PLATFORM_MODES[m] for m in device_modes if m in convert.PLATFORM_MODES})
    caps = []
    if target or settable_target:
        caps.append(_cap("Temperature", ("Set", "Adjust") if settable_target else (), reported or target))
    if platform:
        caps.append(_cap("Mode", platform if settable_mode else (), reported))
    if power or (settable_mode and convert.OFF_MODE in device_modes):
        caps.append(_cap("Switch", ("On", "Off"), reported))
    elif convert.OFF_MODE in device_modes:
        caps.append(_cap("Switch", (), reported))
    return Part("ac" if "cool" in device_modes else "thermostat", tuple(caps))


def fan(*, speed: bool, settable_speed: bool = True, reported: bool = True) -> Part:
    """A fan: Switch and FanSpeed."""
    caps = [_cap("Switch", ("On", "Off"), reported)]
    if speed:
        caps.append(_cap("FanSpeed", FAN_SPEED_OPERATIONS if settable_speed else (), reported))
    return Part("fan", tuple(caps))


def scene() -> Part:
    """A scene: Switch On activates it (it has no state to report)."""
    return Part("scene", (_cap("Switch", ("On",), False),))


def lock(*, can_lock: bool = False) -> Part:
    """A lock (locked = On): locking by voice where the lock takes commands (Switch.On), unlocking never (no
    Switch.Off: the platform answers that directive E_NOT_SUPPORTED_DIRECTIVE)."""
    return Part("door", (_cap("Switch", ("On",) if can_lock else (), True),))


def siren(*, reported: bool = True) -> Part:
    """A siren: a switch (On sounds it, Off stops it)."""
    return Part("switch", (_cap("Switch", ("On", "Off"), reported),))


def valve(*, position: bool, set_position: bool, open_close: bool, reported: bool = True) -> Part:
    """A valve (a water or gas valve): a `switch`, On = open, Off = close; Position where it reports one."""
    caps = []
    if open_close or set_position:
        caps.append(_cap("Switch", ("On", "Off"), reported))
    if position:
        caps.append(_cap("Position", ("Set", "Adjust") if set_position else (), True))
    return Part("switch", tuple(caps))


def humidifier(*, dehumidifier: bool, target: bool, settable_target: bool, reported: bool = True) -> Part:
    """A humidifier or dehumidifier: Switch, and Humidity (Set, Adjust), its target humidity."""
    caps = [_cap("Switch", ("On", "Off"), reported)]
    if target or settable_target:
        caps.append(_cap("Humidity", ("Set", "Adjust") if settable_target else (), target or reported))
    return Part("dehumidifier" if dehumidifier else "humidifier", tuple(caps))


def water_heater(*, power: bool, target: bool, settable_target: bool, reported: bool = True) -> Part:
    """A water heater (a boiler): Switch where it can be turned on and off, and Temperature (Set, Adjust), its
    target."""
    caps = []
    if power:
        caps.append(_cap("Switch", ("On", "Off"), reported))
    if target or settable_target:
        caps.append(_cap("Temperature", ("Set", "Adjust") if settable_target else (), target or reported))
    return Part("waterHeater", tuple(caps))


def vacuum(*, can_pause: bool, reported: bool = True) -> Part:
    """A robot vacuum (`cleanBot`): Switch (On = start cleaning, Off = return to the dock), and PlaybackControl
    (Pause; Play = resume) where it can pause."""
    caps = [_cap("Switch", ("On", "Off"), reported)]
    if can_pause:
        caps.append(_cap("PlaybackControl", ("Play", "Pause"), reported))
    return Part("cleanBot", tuple(caps))


# A device's primary function keeps its endpoint (and decides its display type) before its sensors: a plug is its
# relay, not its power meter; a thermostat keeps Temperature for its setpoint.
ACTUATOR_TYPES = frozenset({"light", "socket", "switch", "curtain", "thermostat", "ac", "fan", "door", "scene",
                            "humidifier", "dehumidifier", "waterHeater", "cleanBot"})


# What keeps a device running, never its function: a status LED, a restart or identify button, the radio's signal
# strength, uptime, IP, firmware. Matched as words of an entity's name, object_id or property.
_HOUSEKEEPING = re.compile(r"(?<![^\W_])(?:status\W*(?:led|light)|(?:power|wifi|link|blue|red|green)\W*led"
                           r"|leds?\W*(?:indicator|enabled?|disabled|mode|night)|indicator|restart|reboot|identify"
                           r"|reset|rssi|linkquality|link\W*quality|signal|uptime|ip|firmware|version|wifi|ssid)"
                           r"(?![^\W_])", re.IGNORECASE)
RANK_PRIMARY, RANK_SENSOR, RANK_HOUSEKEEPING = 0, 1, 1_000_000  # above every dialect's own ranks


def housekeeping(*names: str | None) -> bool:
    """Whether an entity so named (its name, object_id, property) keeps the device running rather than being what
    it is for: `Garage ESP Status LED`, `restart`, `linkquality`, `wifi-rssi`, `uptime`."""
    return any(name and _HOUSEKEEPING.search(name.replace("_", " ")) for name in names)


def primary_rank(part: Part, *names: str | None) -> int:
    """For plan_ranked: RANK_PRIMARY for a device's primary function (light, relay, cover, climate, fan, lock),
    RANK_SENSOR for sensors, RANK_HOUSEKEEPING for a status LED, a restart button, a signal or uptime reading
    (`names`: the entity's name, object_id or property), which never hold the device's own endpoint."""
    if housekeeping(*names):
        return RANK_HOUSEKEEPING
    return RANK_PRIMARY if part.display_type in ACTUATOR_TYPES else RANK_SENSOR


def ranked(rank: int, *names: str | None) -> int:
    """A dialect's own rank of a part (relay number, zigbee2mqtt's actuator/sensor/secondary), or
    RANK_HOUSEKEEPING for a part so named (`housekeeping`): one rule for every dialect."""
    return RANK_HOUSEKEEPING if housekeeping(*names) else rank


def doorbell() -> Part:
    """A doorbell: no capability; each press is a DoorbellPress."""
    return Part("unknown", ())


def unmapped_reason(component: str, device_class: str | None) -> str:
    """Why a part of this kind has no platform interface (for the device's entity notes)."""
    if device_class:
        return f"no platform interface for device_class {device_class}"
    return f"no platform interface for a {component} without a device_class hubd knows"


def plan_ranked(device_id: str, parts: Mapping[str, Part], rank: Mapping[str, int],
                groups: Mapping[str, str] | None = None) -> list[Endpoint]:
    """The device's endpoints: a part of a lower rank takes its interfaces first (by key order within a rank), and
    a part whose interface is taken goes to `<device id>-<key>`.

    zigbee2mqtt ranks a device's actuators before its sensors, and its main sensors before secondary ones:
    a thermostat keeps Temperature for its target setpoint and its room temperature splits off, a leak sensor
    keeps its alarm and its tamper switch splits off. Stable whatever order the parts arrived in.
    `groups`: parts (by key) that always split off together, as one endpoint `<device>-<group>` (a thermostat's
    room temperature and humidity: one room sensor); a part whose interfaces its group already has splits alone.
    """
    groups = groups or {}
    taken: set[str] = set()
    main: list[str] = []
    out: list[Endpoint] = []
    grouped: dict[str, list[str]] = {}
    for key in sorted(parts, key=lambda k: (rank.get(k, 0), k)):
        part = parts[key]
        group = groups.get(key)
        if group is not None and not part.interfaces & {i for k in grouped.get(group, ()) for i in parts[k].interfaces}:
            grouped.setdefault(group, []).append(key)
            continue
        if part.interfaces & taken or group is not None:
            out.append(Endpoint(endpoint_id(f"{device_id}-{key}"), (key,), part.display_type,
                                tuple(sorted(part.capabilities, key=lambda c: c.interface)), True))
            continue
        taken |= part.interfaces
        main.append(key)
    for group, keys in sorted(grouped.items()):
        caps = sorted((c for key in keys for c in parts[key].capabilities), key=lambda c: c.interface)
        out.append(Endpoint(endpoint_id(f"{device_id}-{group}"), tuple(keys),
                            merged_display_type(parts[key].display_type for key in keys), tuple(caps), True))
    if main:
        caps = sorted((c for key in main for c in parts[key].capabilities), key=lambda c: c.interface)
        display = merged_display_type(parts[key].display_type for key in main)
        out.insert(0, Endpoint(endpoint_id(device_id), tuple(main), display, tuple(caps), False))
    return out


def merged_display_type(types: Iterable[str]) -> str:
    """The display type of a device made of parts of these types."""
    present = set(types)
    for candidate in DISPLAY_PRECEDENCE:
        if candidate in present:
            return candidate
    return "unknown"


def endpoint_id(raw: str) -> str:
    """A topic-safe endpointId: every character outside A-Za-z0-9._- becomes `_`, and an identifier that had such
    characters (or was too long) gets a short suffix of its own, so that `кухня` and `ванна`, or `a:b` and `a_b`,
    stay two endpoints. The same raw identifier always gives the same endpointId; a safe one is kept as it is."""
    safe = _UNSAFE_ID_RE.sub("_", raw)
    if safe == raw and 0 < len(raw) <= MAX_ENDPOINT_ID_CHARS:
        return raw
    suffix = hashlib.blake2s(raw.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{safe[:MAX_ENDPOINT_ID_CHARS - len(suffix) - 1] or '_'}-{suffix}"
