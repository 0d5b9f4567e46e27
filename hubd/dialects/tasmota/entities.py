"""A Tasmota device's entities and endpoints (pure): what its discovery config and sensors give the platform.

`entities()` reads a `TasmotaInfo` (and the `sn` of its sensors message) into `Entity`s: a relay (`rl` 1), a
light (`rl` 2: a dimmer, cold/warm, RGB, RGBW or RGBCW by `lt_st`; split in an RGB and a white light when `lk` is
0; one dimmer per channel with SetOption68; a plain on/off light with SetOption30 or an iFan's light), a shutter (a
pair of `rl` 3), a switch input (SetOption114) in a sensor mode (follow, push-on, push-ignore: a PIR, a door
contact) as a read-only on/off sensor, a button (SetOption73) or push-button switch input declared as a doorbell,
and each `Temperature` and `Humidity` reading; the rest are notes with why they are left out. `build()` puts them
on endpoints with mapping.plan_ranked (the MAC is the device's own endpoint, the first relay or light on it,
`<MAC>-<key>` for the others: `<MAC>-switch1` for a PIR beside a relay), names each endpoint (a split one by its
own friendly name, or the device's and its SwitchText) and keeps in each Route address (JSON) all that reading
states and sending commands need (`Address`), so a restart reads states before the configs come again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hubd.devices.model import ADDITIONAL_INFO_MAX_CHARS, DeviceConfig, EntityNote, Origin, Route
from hubd.dialects import mapping, naming
from hubd.dialects.base import ConfigReceived
from hubd.dialects.tasmota.discovery import (
    DIALECT,
    LST_COLDWARM,
    LST_RGB,
    LST_RGBCW,
    LST_RGBW,
    RL_LIGHT,
    RL_RELAY,
    RL_SHUTTER,
    TasmotaInfo,
    Topics,
    first_index,
)
from hubd.spoken import spoken

ADDRESS_VERSION = 1
MAX_NAME_CHARS = 128
MAX_SENSORS = 64
DEFAULT_MIREDS, REDUCED_MIREDS = (153, 500), (200, 380)  # SetOption82 reduces the CT range
RANK_SENSOR = 1_000  # actuators rank by their relay number, so relay 1 (or the first light) owns the device's endpoint
_QUANTITIES = ("Temperature", "Humidity")  # the readings the platform takes, by their key in `sn`
_OUTLET_WORDS = ("plug", "socket", "outlet")
_IGNORED_SENSORS = ("Time", "TempUnit", "PressureUnit", "SpeedUnit", "Epoch")
# SwitchModes whose input is a state, not a press (hatasmota's binary sensors less its push-buttons): follow (1),
# inverted follow (2), their multi-change variants (9, 10), push-on (13, 14: a PIR, which sends only ON) and
# push-ignore (15, 16). The others (toggle, the push-buttons, 0, 3..8, 11, 12) report presses: doorbell candidates.
SENSOR_SWITCH_MODES = frozenset({1, 2, 9, 10, 13, 14, 15, 16})
PUSH_ON_SWITCH_MODES = frozenset({13, 14})
# What a switch input is, by the words of its name (SwitchText, `swn`): the device class of mapping.binary.
_INPUT_CLASSES = (("motion", ("motion", "pir", "occupancy", "presence", "movement", "bewegung")),
                  ("door", ("door", "window", "contact", "gate", "garage", "tür", "fenster")),
                  ("moisture", ("leak", "water", "flood")), ("smoke", ("smoke",)))


@dataclass(frozen=True, slots=True)
class Entity:
    """One thing of a device the platform may get: its kind, key, number (relay, shutter, button) and options."""

    kind: str  # "relay", "light", "shutter", "doorbell", "input" (a switch input's state) or "sensor"
    key: str  # relay1, light2, shutter1, button1, switch1, AM2301-Temperature
    index: int  # POWER<index+1>, Shutter<index+1>, Switch<index+1>; -1 for a sensor
    opts: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # its own name (a relay's friendly name), or what tells it apart ("Two", "Temperature")
    own_name: bool = False

    def spec(self) -> dict[str, Any]:
        """What the Route address keeps of it (JSON)."""
        return {"kind": self.kind, "key": self.key, "index": self.index, "opts": self.opts}

    @staticmethod
    def from_spec(data: Any) -> Entity:
        """An entity read back from a Route address (ValueError if it is not one)."""
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or not isinstance(data.get("key"), str) \
                or not isinstance(data.get("index"), int) or not isinstance(data.get("opts"), dict):
            raise ValueError("not an entity of a Tasmota address")
        return Entity(data["kind"], data["key"], data["index"], data["opts"])


@dataclass(frozen=True, slots=True)
class Address:
    """A Route address read back: the device and what one endpoint's entities read and command."""

    mac: str
    name: str
    topics: Topics
    texts: tuple[str, str]  # the power state texts: (off, on)
    availability: tuple[str, str] | None  # (online, offline) LWT payloads; None for a device in deep sleep
    entities: tuple[Entity, ...]


@dataclass(frozen=True, slots=True)
class Built:
    """A device's endpoints: each one's config, route, origin and address; why none, when none."""

    configs: tuple[ConfigReceived, ...]
    addresses: tuple[tuple[str, Address], ...]
    reason: str = ""




def entities(info: TasmotaInfo, sensors: Mapping[str, Any] | None,
             doorbell: str | None) -> tuple[list[Entity], list[EntityNote]]:
    """The device's entities the platform may get, and notes of what it leaves out and why."""
    found: list[Entity] = []
    notes: list[EntityNote] = []
    found += _relays_and_lights(info)
    found += _shutters(info, notes)
    bells = _doorbells(info, doorbell, notes)
    found += bells
    found += _inputs(info, {e.key for e in bells})
    found += _sensors(info, sensors or {}, notes)
    return found, notes


def part(entity: Entity) -> mapping.Part:
    """The entity's part of the mapping table."""
    opts = entity.opts
    if entity.kind == "relay":
        return mapping.switch(outlet=bool(opts.get("outlet")))
    if entity.kind == "light":
        return mapping.light(dimmable=opts.get("dimmer") is not None, color_temperature=bool(opts.get("ct")),
                             color=bool(opts.get("color")))
    if entity.kind == "shutter":
        return mapping.cover(position=True, set_position=True, open_close=True, stop=True)
    if entity.kind == "input":
        return mapping.binary(opts.get("class"))
    if entity.kind == "sensor":
        found = mapping.sensor("temperature" if opts["quantity"] == "Temperature" else "humidity", None)
        assert found is not None  # both quantities are in the mapping table
        return found
    return mapping.doorbell()


def build(info: TasmotaInfo, sensors: Mapping[str, Any] | None, doorbell: str | None) -> Built:
    """The device's endpoints (mapping.plan_ranked), each with its config, route, origin notes and address."""
    found, left_out = entities(info, sensors, doorbell)
    by_key = {e.key: e for e in found}
    parts = {e.key: part(e) for e in found}
    rank = {e.key: mapping.ranked(e.index if e.kind in ("relay", "light", "shutter") else RANK_SENSOR, e.label)
            for e in found}
    name = info.name()
    relays = sum(1 for e in found if e.kind in ("relay", "light"))
    configs: list[ConfigReceived] = []
    addresses: list[tuple[str, Address]] = []
    for planned in mapping.plan_ranked(mapping.endpoint_id(info.mac), parts, rank):
        members = tuple(by_key[k] for k in planned.keys)
        shown = [EntityNote(_note_name(e), True, _exported_reason(e)) for e in members]
        if not planned.split:
            shown += left_out
        config = DeviceConfig(displayName=_endpoint_name(name, members[0], planned.split, relays)[:MAX_NAME_CHARS],
                              displayType=planned.display_type, capabilities=planned.capabilities,
                              additionalInfo=_info(info))
        where = Address(info.mac, name, info.topics(), (info.state_texts[0], info.state_texts[1]),
                        None if info.deep_sleep else (info.online, info.offline), members)
        configs.append(ConfigReceived(planned.endpoint_id, config, Route(DIALECT, address(where)),
                                      Origin(DIALECT, tuple(sorted(shown, key=lambda n: n.name)))))
        addresses.append((planned.endpoint_id, where))
    if configs:
        return Built(tuple(configs), tuple(addresses))
    names = ", ".join(dict.fromkeys(n.name for n in left_out)) or "no relay, light, shutter or sensor"
    return Built((), (), f"nothing it has reaches the platform ({names})")


def address(where: Address) -> str:
    """The Route address of one endpoint (JSON)."""
    data = {"v": ADDRESS_VERSION, "mac": where.mac, "name": where.name,
            "topics": [where.topics.cmnd, where.topics.stat, where.topics.tele], "texts": list(where.texts),
            "availability": list(where.availability) if where.availability else None,
            "entities": [e.spec() for e in where.entities]}
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_address(text: str) -> Address | None:
    """A Route address read back; None for one that is not this version's."""
    try:
        data: Any = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != ADDRESS_VERSION:
            return None
        topics, texts, availability = data["topics"], data["texts"], data["availability"]
        if not isinstance(data["mac"], str) or not isinstance(data["name"], str) \
                or not _strings(topics, 3) or not _strings(texts, 2) \
                or not (availability is None or _strings(availability, 2)):
            return None
        return Address(data["mac"], data["name"], Topics(*topics), (texts[0], texts[1]),
                       None if availability is None else (availability[0], availability[1]),
                       tuple(Entity.from_spec(e) for e in data["entities"]))
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


# The kinds of entity.


def _relays_and_lights(info: TasmotaInfo) -> list[Entity]:
    out: list[Entity] = []
    relays = list(info.relays)
    as_light = info.option("30") == 1  # SetOption30: every relay is a light (on/off)
    first_light = first_index(relays, RL_LIGHT)
    outlet = any(word in info.model.casefold() for word in _OUTLET_WORDS)
    for index, kind in enumerate(relays):
        label, own = _relay_label(info, index)
        if kind == RL_RELAY and (as_light or (info.ifan and index == 0)):
            out.append(Entity("light", f"light{index + 1}", index, {"dimmer": None}, label, own))
        elif kind == RL_RELAY:
            out.append(Entity("relay", f"relay{index + 1}", index, {"outlet": outlet}, label, own))
        elif kind == RL_LIGHT and info.ifan and index == 0:
            out.append(Entity("light", f"light{index + 1}", index, {"dimmer": None}, label, own))
        elif kind == RL_LIGHT:
            out.append(Entity("light", f"light{index + 1}", index, _light(info, index - first_light, index),
                              label, own))
    return out


def _light(info: TasmotaInfo, nth: int, index: int) -> dict[str, Any]:
    """What a light does: its Dimmer command and state key, CT, colour (hatasmota's reading of the same fields)."""
    subtype = info.light_subtype
    mireds = list(REDUCED_MIREDS if info.option("82") == 1 else DEFAULT_MIREDS)
    opts: dict[str, Any] = {"dimmer": "Dimmer3" if info.tuya else "Dimmer", "state": "Dimmer", "ct": False,
                            "color": False, "suffix": "", "mireds": mireds, "linked_power": info.option("20") == 0}
    if subtype == 0 and not info.tuya:
        opts["dimmer"] = None  # a relay shown as a light
    elif info.option("68") == 1:  # SetOption68: one dimmer per PWM channel
        opts.update(dimmer=f"Channel{index + 1}", state=f"Channel{index + 1}")
    elif not info.light_linked and subtype >= LST_RGBW:  # split: RGB (Dimmer1) and white/CT (Dimmer2)
        white = nth == 1
        opts.update(dimmer=f"Dimmer{2 if white else 1}", state=f"Dimmer{2 if white else 1}",
                    ct=white and subtype == LST_RGBCW, color=not white, suffix="" if white else "=")
    else:
        opts.update(ct=subtype in (LST_COLDWARM, LST_RGBCW), color=subtype in (LST_RGB, LST_RGBW, LST_RGBCW))
    return opts


def _shutters(info: TasmotaInfo, notes: list[EntityNote]) -> list[Entity]:
    out: list[Entity] = []
    relays = list(info.relays)
    index = 0
    while index < len(relays):
        if relays[index] != RL_SHUTTER:
            index += 1
            continue
        number = len(out)
        if index + 1 >= len(relays) or relays[index + 1] != RL_SHUTTER:
            notes.append(EntityNote(f"shutter{number + 1}", False, f"relay {index + 1} is half a shutter without "
                                    f"relay {index + 2}; fix the device's ShutterRelay"))
            break
        options = info.shutter_options[number] if number < len(info.shutter_options) else 0
        label = "" if number == 0 else spoken(str(number + 1))
        out.append(Entity("shutter", f"shutter{number + 1}", number, {"invert": bool(options & 1)}, label))
        index += 2
    return out


def _doorbells(info: TasmotaInfo, event: str | None, notes: list[EntityNote]) -> list[Entity]:
    """The buttons (SetOption73) and push-button switch inputs (SetOption114) that report actions, when the device
    is declared in `doorbells`: each rings on the declared action only. A switch input in a sensor mode (a PIR, a
    contact) is a sensor, unless the device has no other input to ring (a bell push wired as a follow switch)."""
    sources = [(f"button{i + 1}", i, f"Button{i + 1}") for i, on in enumerate(info.buttons) if on]
    switches = [(f"switch{i + 1}", i, _switch_name(info, i), mode in SENSOR_SWITCH_MODES)
                for i, mode in enumerate(info.switch_modes) if mode >= 0]
    sources += [(key, i, name) for key, i, name, sensor in switches if not sensor]
    if event is not None and not sources:
        sources = [(key, i, name) for key, i, name, _ in switches]
    if event is None:
        notes += [EntityNote(key, False, f"{source}'s actions are a DoorbellPress when the device is declared in "
                             "doorbells") for key, _, source in sources]
        return []
    if not sources:
        notes.append(EntityNote("doorbell", False, f"declared in doorbells (event {event!r}), but it reports no "
                                "button or switch actions (Tasmota's SetOption73 for buttons, SetOption114 for "
                                "switches)"))
        return []
    return [Entity("doorbell", key, index, {"source": source, "event": event}) for key, index, source in sources]


def _inputs(info: TasmotaInfo, ringing: set[str]) -> list[Entity]:
    """The switch inputs in a sensor mode (SetOption114): each a read-only on/off sensor, motion or contact by its
    name (`swn`), read from its `{"<name>":{"Action":"ON"}}` in RESULT and `"<name>":"ON"` in SENSOR and STATUS10."""
    out = []
    for index, mode in enumerate(info.switch_modes):
        key = f"switch{index + 1}"
        if mode not in SENSOR_SWITCH_MODES or key in ringing:
            continue
        source = _switch_name(info, index)
        custom = source != f"Switch{index + 1}"
        label = source.replace("_", " ").strip() if custom else f"Input {spoken(str(index + 1))}"
        opts = {"source": source, "class": _input_class(source), "push_on": mode in PUSH_ON_SWITCH_MODES}
        out.append(Entity("input", key, index, opts, label))
    return out


def _switch_name(info: TasmotaInfo, index: int) -> str:
    """The key a switch input's state and actions come under: its SwitchText (`swn`), else `Switch<n>`."""
    named = info.switch_names[index] if index < len(info.switch_names) else None
    return named or f"Switch{index + 1}"


def _input_class(name: str) -> str | None:
    words = name.replace("_", " ").casefold()
    return next((cls for cls, marks in _INPUT_CLASSES if any(mark in words for mark in marks)), None)


def _sensors(info: TasmotaInfo, sensors: Mapping[str, Any], notes: list[EntityNote]) -> list[Entity]:
    out: list[Entity] = []
    unit = sensors.get("TempUnit") if isinstance(sensors.get("TempUnit"), str) else "C"
    inputs = {_switch_name(info, i) for i, mode in enumerate(info.switch_modes) if mode >= 0}
    for sensor, readings in sensors.items():
        if sensor in _IGNORED_SENSORS or sensor.startswith("Shutter") or sensor.startswith("Switch") \
                or sensor in inputs:  # a switch input's state (`"Motion":"ON"`): the input's, not a sensor's
            continue
        if not isinstance(readings, dict):
            notes.append(EntityNote(sensor, False, f"no platform interface for {sensor}"))
            continue
        for quantity, value in readings.items():
            key = f"{sensor}-{quantity}"
            if quantity not in _QUANTITIES or isinstance(value, bool) or not isinstance(value, int | float):
                notes.append(EntityNote(f"{sensor}.{quantity}", False, _why_not(quantity)))
            elif len(out) >= MAX_SENSORS:
                notes.append(EntityNote(f"{sensor}.{quantity}", False, f"more than {MAX_SENSORS} readings"))
            else:
                opts = {"path": [sensor, quantity], "quantity": quantity, "unit": unit}
                out.append(Entity("sensor", key, -1, opts, spoken(quantity)))
    return out


# Names and notes.


def _relay_label(info: TasmotaInfo, index: int) -> tuple[str, bool]:
    """A relay's own name (its friendly name, when it is one and not the device's), else its number in words."""
    names = info.friendly_names
    own = names[index] if index < len(names) else None
    if own is not None and info.is_name(own) and own.strip().casefold() != info.name().casefold():
        return own.strip(), True
    return spoken(str(index + 1)), False


def _endpoint_name(device: str, entity: Entity, split: bool, relays: int) -> str:
    """The device's name on its own endpoint, but relay 1's own name (`fn[0]`) there on a device with more than one
    relay (its `dn` names the device, not a relay); a split endpoint's own name, else the device's and what it is."""
    if not split:
        return entity.label if entity.own_name and relays > 1 else device
    if entity.own_name:
        return entity.label
    return naming.part_name(device, entity.label)  # the device's name said once


def _note_name(entity: Entity) -> str:
    return {"relay": "relay", "light": "light", "shutter": "shutter", "doorbell": "doorbell",
            "input": "binary_sensor"}.get(
        entity.kind, "sensor") + "." + entity.key


def _exported_reason(entity: Entity) -> str:
    if entity.kind == "doorbell":
        return f"a declared doorbell: {entity.opts['source']} action {entity.opts['event']!r} is a DoorbellPress"
    return ""


def _why_not(quantity: str) -> str:
    if "temp" in quantity.casefold() or "point" in quantity.casefold():
        return f"{quantity} is not a room temperature the platform takes (only Temperature readings are)"
    return f"no platform interface for {quantity}"


def _info(info: TasmotaInfo) -> dict[str, str]:
    out = {"manufacturer": "Tasmota"}
    for key, value in (("model", info.model), ("swVersion", info.version)):
        if value.strip():
            out[key] = value[:ADDITIONAL_INFO_MAX_CHARS]
    return out


def _strings(value: Any, count: int) -> bool:
    return isinstance(value, list) and len(value) == count and all(isinstance(v, str) for v in value)
