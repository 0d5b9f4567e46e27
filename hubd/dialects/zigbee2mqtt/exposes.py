"""zigbee2mqtt's `definition.exposes` (its "exposes" format), the pure part: which features hubd exports.

An expose is generic (`binary`, `numeric`, `enum`, `text`, `composite`, `list`) or specific (`light`, `switch`,
`fan`, `cover`, `lock`, `climate`, with `features`); either may name an `endpoint`, and then its properties
carry it as a suffix (`state_l1`). `read_exposes` turns one device's exposes into `Feature`s, the exported
pieces (a light, a switch, a contact sensor, a thermostat, its room temperature...), each with the state
properties it reads and the `access` bits of each (1 published in the state, 2 settable with `/set`,
4 gettable with `/get`), plus a note for every expose feature it leaves out and why. A `Feature` is plain
JSON (`spec()`), kept in the device's Route address so that states and commands work after a restart before
bridge/devices comes again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hubd.devices.model import EntityNote
from hubd.dialects import convert

PUBLISHED, SETTABLE, GETTABLE = 1, 2, 4
SPECIFIC_TYPES = frozenset({"light", "switch", "fan", "cover", "lock", "climate"})
KNOWN_TYPES = SPECIFIC_TYPES | {"binary", "numeric", "enum", "text", "composite", "list"}
KINDS = frozenset({*SPECIFIC_TYPES, "binary", "numeric", "doorbell", "scene"})  # scene: scenes.py
# zigbee2mqtt's binary properties → the device classes of the shared mapping (Home Assistant's vocabulary).
BINARY_CLASSES: Mapping[str, str] = {
    "contact": "door", "occupancy": "occupancy", "presence": "presence", "water_leak": "moisture",
    "smoke": "smoke", "gas": "gas", "carbon_monoxide": "carbon_monoxide", "tamper": "tamper",
}
SENSOR_NUMERICS = frozenset({"temperature", "humidity"})
# Which part of a device keeps an interface on its own endpoint when two want it (mapping.plan_ranked).
RANK_ACTUATOR, RANK_SENSOR, RANK_SECONDARY = 0, 1, 2
_SECONDARY = frozenset({"tamper"})
MAX_EXPOSES = 1_000
MAX_COMPOSITE_DEPTH = 4  # composites in composites: zigbee2mqtt nests one or two
DEFAULT_MIREDS = (150, 500)
DEFAULT_BRIGHTNESS_MAX = 254
FAN_NOT_SPEEDS = frozenset({"off", "on", "auto", "smart"})
ACTION = "action"


class ExposeProblem(Exception):
    """An expose hubd cannot read (the text names it and says what is wrong)."""


@dataclass(frozen=True, slots=True)
class Feature:
    """One exported piece of a device: its kind, the state properties it reads (by role), access and options."""

    kind: str  # light, switch, cover, climate, fan, lock, binary, numeric, doorbell or scene
    key: str  # its main property (unique on the device): the split-off endpoint is `<ieee>-<key>`
    props: dict[str, str]  # role → property in the state: {"state": "state_l1", "brightness": "brightness_l1"}
    access: dict[str, int]  # role → zigbee2mqtt access bits
    opts: dict[str, Any]  # on/off values, scales, modes, unit... (JSON)
    label: str = ""  # how a split-off endpoint is named after the device: "l2", "Local temperature"
    rank: int = RANK_ACTUATOR
    notes: tuple[str, ...] = ()  # the expose features it exports, for the device's notes

    def spec(self) -> dict[str, Any]:
        """What reading and commanding need (JSON), for the Route address."""
        return {"kind": self.kind, "key": self.key, "props": self.props, "access": self.access, "opts": self.opts}

    @staticmethod
    def from_spec(data: Any) -> Feature:
        """A feature from its spec; ValueError for one that is not (a route written by another version)."""
        if not isinstance(data, dict) or data.get("kind") not in KINDS or not isinstance(data.get("key"), str):
            raise ValueError("not a zigbee2mqtt feature spec")
        props, access, opts = data.get("props"), data.get("access"), data.get("opts")
        if not isinstance(props, dict) or not all(isinstance(v, str) for v in props.values()) \
                or not isinstance(access, dict) or not all(_is_access(v) for v in access.values()) \
                or not isinstance(opts, dict):
            raise ValueError("not a zigbee2mqtt feature spec")
        return Feature(data["kind"], data["key"], props, access, opts)


@dataclass(slots=True)
class Exposes:
    """What one device's exposes give: features, notes of what is left out, problems, its action values."""

    features: list[Feature] = field(default_factory=list)
    left_out: list[EntityNote] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    actions: tuple[str, ...] | None = None  # the values of its `action` (() when any); None: it has none


def read_exposes(exposes: Any, *, outlet: bool = False) -> Exposes:
    """The exported features of a device's `definition.exposes`; a bad expose is a problem, the rest stays."""
    out = Exposes()
    if exposes is None:
        return out
    if not isinstance(exposes, list):
        out.problems.append(f"definition.exposes is a {type(exposes).__name__}, not a list")
        return out
    if len(exposes) > MAX_EXPOSES:
        out.problems.append(f"definition.exposes has {len(exposes)} items; hubd reads the first {MAX_EXPOSES}")
    for index, expose in enumerate(exposes[:MAX_EXPOSES]):
        try:
            _expose(expose, outlet, out)
        except ExposeProblem as err:
            out.problems.append(f"definition.exposes[{index}]: {err}")
    return out


def access_of(item: Mapping[str, Any], depth: int = 0) -> int:
    """An expose's access bits (a composite without its own: what all its features allow)."""
    value = item.get("access")
    if isinstance(value, int) and _is_access(value):
        return value
    features = item.get("features")
    if value is None and isinstance(features, list) and features and depth < MAX_COMPOSITE_DEPTH:
        bits = PUBLISHED | SETTABLE | GETTABLE
        for feature in features:
            bits &= access_of(feature, depth + 1) if isinstance(feature, dict) else 0
        return bits
    raise ExposeProblem(f"{item.get('name') or item.get('type')!r} has access {value!r}; zigbee2mqtt's access is "
                        "0 to 7 (1 published, 2 /set, 4 /get)")


# One expose; specific ones first.


def _expose(expose: Any, outlet: bool, out: Exposes) -> None:
    if not isinstance(expose, dict):
        raise ExposeProblem(f"is a {type(expose).__name__}, not an object")
    kind = expose.get("type")
    if not isinstance(kind, str) or kind not in KNOWN_TYPES:
        raise ExposeProblem(f"type {kind!r} is not one of zigbee2mqtt's expose types "
                            f"({', '.join(sorted(KNOWN_TYPES))})")
    endpoint = expose.get("endpoint")
    if endpoint is not None and not isinstance(endpoint, str):
        raise ExposeProblem(f"endpoint {endpoint!r} is not a name")
    if kind not in SPECIFIC_TYPES:
        _generic(expose, kind, out)
        return
    features = _features(expose, kind)
    where = f"{kind}.{endpoint}" if endpoint else kind
    builders = {"light": _light, "switch": _switch, "cover": _cover, "climate": _climate, "fan": _fan,
                "lock": _lock}
    before = len(out.features)
    made = builders[kind](features, endpoint or "", where, outlet, out)
    if isinstance(made, Feature):
        out.features.append(made)
    used = {note for feature in out.features[before:] for note in feature.notes}
    for name in features:
        if f"{where}.{name}" not in used:
            reason = made if isinstance(made, str) else f"no platform interface for a {kind}'s {name}"
            out.left_out.append(EntityNote(f"{where}.{name}", False, reason))
    if not features and isinstance(made, str):
        out.left_out.append(EntityNote(where, False, made))


def _features(expose: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """A specific expose's features by name (checked: objects with a name, a property and access)."""
    features = expose.get("features")
    if not isinstance(features, list):
        raise ExposeProblem(f"a {kind} without a features list")
    out: dict[str, dict[str, Any]] = {}
    for feature in features:
        if not isinstance(feature, dict) or not isinstance(feature.get("name"), str) \
                or not isinstance(feature.get("property"), str) or not feature["property"]:
            raise ExposeProblem(f"a feature of a {kind} is not an object with a name and a property")
        access_of(feature)
        out.setdefault(feature["name"], feature)
    return out


def _left_out(out: Exposes, where: str, reason: str) -> None:
    out.left_out.append(EntityNote(where, False, reason))


def _on_off(feature: Mapping[str, Any], on: Any, off: Any) -> dict[str, Any]:
    return {"on": feature.get("value_on", on), "off": feature.get("value_off", off)}


def _light(f: dict[str, dict[str, Any]], endpoint: str, where: str, outlet: bool, out: Exposes) -> Feature | str:
    state = f.get("state")
    if state is None or state.get("type") != "binary":
        return "a light without a binary state feature"
    props, access = {"state": state["property"]}, {"state": access_of(state)}
    opts: dict[str, Any] = _on_off(state, "ON", "OFF")
    used = ["state"]
    if (brightness := f.get("brightness")) is not None:
        props["brightness"], access["brightness"] = brightness["property"], access_of(brightness)
        opts["brightness_max"] = _number(brightness.get("value_max"), DEFAULT_BRIGHTNESS_MAX) or DEFAULT_BRIGHTNESS_MAX
        used.append("brightness")
    if (warmth := f.get("color_temp")) is not None:
        props["color_temp"], access["color_temp"] = warmth["property"], access_of(warmth)
        low = _number(warmth.get("value_min"), DEFAULT_MIREDS[0])
        high = _number(warmth.get("value_max"), DEFAULT_MIREDS[1])
        opts["mireds"] = [low, high] if low < high else list(DEFAULT_MIREDS)
        used.append("color_temp")
    colors = [name for name in f if name in ("color_xy", "color_hs")]
    if colors:
        props["color"], access["color"] = f[colors[0]]["property"], access_of(f[colors[0]])
        opts["color_modes"] = [name.removeprefix("color_") for name in colors]
        used += colors
    props["color_mode"] = "color_mode" + state["property"].removeprefix("state")
    return Feature("light", state["property"], props, access, opts, endpoint or "Light", RANK_ACTUATOR,
                   tuple(f"{where}.{name}" for name in used))


def _switch(f: dict[str, dict[str, Any]], endpoint: str, where: str, outlet: bool, out: Exposes) -> Feature | str:
    state = f.get("state")
    if state is None or state.get("type") != "binary":
        return "a switch without a binary state feature"
    if not _is_state(state["property"], endpoint):
        return f"a switch of a setting ({state['property']}), not of power"
    opts = {**_on_off(state, "ON", "OFF"), "outlet": outlet}
    return Feature("switch", state["property"], {"state": state["property"]}, {"state": access_of(state)}, opts,
                   endpoint or "Switch", RANK_ACTUATOR, (f"{where}.state",))


def _cover(f: dict[str, dict[str, Any]], endpoint: str, where: str, outlet: bool, out: Exposes) -> Feature | str:
    state, position = f.get("state"), f.get("position")
    props: dict[str, str] = {}
    access: dict[str, int] = {}
    opts: dict[str, Any] = {"open": None, "close": None, "stop": None}
    used = []
    if state is not None:
        props["state"], access["state"] = state["property"], access_of(state)
        if state.get("type") == "binary":
            opts["open"], opts["close"] = state.get("value_on"), state.get("value_off")
        else:
            listed = state.get("values")
            values = listed if isinstance(listed, list) else []
            opts.update({k: v for k, v in (("open", "OPEN"), ("close", "CLOSE"), ("stop", "STOP")) if v in values})
        used.append("state")
    if position is not None and position.get("type") == "numeric":
        props["position"], access["position"] = position["property"], access_of(position)
        opts["range"] = [_number(position.get("value_min"), 0), _number(position.get("value_max"), 100)]
        used.append("position")
    if not props:
        return "a cover without a state or position feature"
    key = props.get("state") or props["position"]
    return Feature("cover", key, props, access, opts, endpoint or "Cover", RANK_ACTUATOR,
                   tuple(f"{where}.{name}" for name in used))


def _climate(f: dict[str, dict[str, Any]], endpoint: str, where: str, outlet: bool, out: Exposes) -> Feature | str:
    target = next((f[n] for n in ("occupied_heating_setpoint", "current_heating_setpoint",
                                  "occupied_cooling_setpoint") if n in f), None)
    mode = f.get("system_mode")
    if (local := f.get("local_temperature")) is not None and local.get("type") == "numeric" \
            and access_of(local) & PUBLISHED:
        unit = local.get("unit") if isinstance(local.get("unit"), str) else "°C"
        out.features.append(Feature("numeric", local["property"], {"value": local["property"]},
                                    {"value": access_of(local)}, {"sensor": "temperature", "unit": unit},
                                    endpoint or _text(local.get("label"), "Local temperature"), RANK_SECONDARY,
                                    (f"{where}.local_temperature",)))
    props: dict[str, str] = {}
    access: dict[str, int] = {}
    opts: dict[str, Any] = {}
    used = []
    if target is not None and target.get("type") == "numeric":
        props["target"], access["target"] = target["property"], access_of(target)
        cooling = f.get("occupied_cooling_setpoint")
        if cooling is not None and cooling is not target and cooling.get("type") == "numeric":
            # Heating and cooling setpoints: the cooling one is the Temperature in cool mode (features.read).
            props["target_cool"], access["target_cool"] = cooling["property"], access_of(cooling)
            used.append("occupied_cooling_setpoint")
        opts["unit"] = target.get("unit") if isinstance(target.get("unit"), str) else "°C"
        opts["step"] = _number(target.get("value_step"), 0.1) or 0.1
        opts["min"], opts["max"] = target.get("value_min"), target.get("value_max")
        used.append(target["name"])
    if mode is not None and mode.get("type") == "enum" and isinstance(mode.get("values"), list):
        props["mode"], access["mode"] = mode["property"], access_of(mode)
        opts["modes"] = [v for v in mode["values"] if isinstance(v, str)]
        used.append("system_mode")
    if not props:
        return "a climate without a heating setpoint or a system_mode"
    return Feature("climate", props.get("target") or props["mode"], props, access, opts, endpoint or "Climate",
                   RANK_ACTUATOR, tuple(f"{where}.{name}" for name in used))


def _fan(f: dict[str, dict[str, Any]], endpoint: str, where: str, outlet: bool, out: Exposes) -> Feature | str:
    state = f.get("state")
    if state is None or state.get("type") != "binary":
        return "a fan without a binary state feature"
    props, access = {"state": state["property"]}, {"state": access_of(state)}
    opts: dict[str, Any] = _on_off(state, "ON", "OFF")
    used = ["state"]
    if (speed := f.get("speed")) is not None and speed.get("type") == "numeric":
        props["speed"], access["speed"] = speed["property"], access_of(speed)
        opts["range"] = [_number(speed.get("value_min"), 0), _number(speed.get("value_max"), 100)]
        used.append("speed")
    elif (mode := f.get("mode")) is not None and isinstance(mode.get("values"), list):
        speeds = [v for v in mode["values"] if isinstance(v, str) and v not in FAN_NOT_SPEEDS]
        if speeds:
            props["mode"], access["mode"] = mode["property"], access_of(mode)
            opts["speeds"] = speeds
            used.append("mode")
    return Feature("fan", state["property"], props, access, opts, endpoint or "Fan", RANK_ACTUATOR,
                   tuple(f"{where}.{name}" for name in used))


def _lock(f: dict[str, dict[str, Any]], endpoint: str, where: str, outlet: bool, out: Exposes) -> Feature | str:
    state = f.get("state")
    if state is None or state.get("type") != "binary":
        return "a lock without a binary state feature"
    if not _is_state(state["property"], endpoint):
        return f"a lock of a setting ({state['property']}, e.g. a child lock), not a door lock"
    if not access_of(state) & (PUBLISHED | SETTABLE):
        return "a lock whose state is neither published nor settable: nothing to report or do"
    props, access, used = {"state": state["property"]}, {"state": access_of(state)}, ["state"]
    actual = f.get("lock_state")  # locked, unlocked, not_fully_locked: what the lock is, beside what it was told
    if actual is not None and actual.get("type") == "enum" and access_of(actual) & PUBLISHED:
        props["lock_state"], access["lock_state"] = actual["property"], access_of(actual)
        used.append("lock_state")
    return Feature("lock", state["property"], props, access, _on_off(state, "LOCK", "UNLOCK"), endpoint or "Lock",
                   RANK_ACTUATOR, tuple(f"{where}.{name}" for name in used))


# Generic exposes.


def _generic(expose: dict[str, Any], kind: str, out: Exposes) -> None:
    name, prop = expose.get("name"), expose.get("property")
    if kind == "composite" or kind == "list":
        label = f"{kind}.{prop or name}"
        _left_out(out, label, f"no platform interface for {kind} {name or prop}")
        return
    if not isinstance(name, str) or not isinstance(prop, str) or not prop:
        raise ExposeProblem(f"a {kind} without a name and a property")
    access = access_of(expose)
    label = f"{kind}.{prop}"
    if kind == "enum" and name == ACTION:
        values = expose.get("values")
        found = tuple(v for v in values if isinstance(v, str)) if isinstance(values, list) else ()
        out.actions = (out.actions or ()) + found
        _left_out(out, label, "a button's action: a DoorbellPress when the device is declared in doorbells")
        return
    exported = (kind == "binary" and name in BINARY_CLASSES) or (kind == "numeric" and name in SENSOR_NUMERICS)
    if not exported:
        _left_out(out, label, f"no platform interface for {name}")
        return
    if not access & PUBLISHED:
        _left_out(out, label, f"{name} is never published in the device's state (access {access})")
        return
    endpoint = expose.get("endpoint") or ""
    caption = endpoint or _text(expose.get("label"), name.replace("_", " ").capitalize())
    rank = RANK_SECONDARY if name in _SECONDARY else RANK_SENSOR
    if kind == "binary":
        on_off = _on_off(expose, name != "contact", name == "contact")  # contact true is closed (off)
        opts: dict[str, Any] = {**on_off, "device_class": BINARY_CLASSES[name]}
    else:
        given = expose.get("unit")
        unit = given if isinstance(given, str) else ("°C" if name == "temperature" else "%")
        if name == "temperature" and not convert.is_temperature_unit(unit):
            _left_out(out, label, f"a temperature in {unit!r}; hubd converts °C, °F and K")
            return
        opts = {"sensor": name, "unit": unit}
    out.features.append(Feature(kind, prop, {"value": prop}, {"value": access}, opts, caption, rank, (label,)))


def _is_state(prop: str, endpoint: str) -> bool:
    """Whether a specific expose's state property is the device's own (`state`, `state_<endpoint>`)."""
    return prop == "state" or (bool(endpoint) and prop == f"state_{endpoint}")


def _is_access(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 7


def _number(value: Any, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return default


def _text(value: Any, default: str) -> str:
    return value if isinstance(value, str) and value.strip() else default
