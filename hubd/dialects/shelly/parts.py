"""A Shelly device's components and endpoints (pure): what the platform gets of it, and the Route address.

A Gen2+ device's components come from `Shelly.GetConfig` (their keys `switch:0`, `cover:0`, `light:0`, the
colour lights `rgb:0` and `rgbw:0`, `input:0`, `temperature:0`, `humidity:0`, and each one's own `name`) and
`Shelly.GetStatus` (a cover's `pos_control`); a Gen1 device's from the topics it publishes (`relay/<n>`,
`roller/<n>`, `light/<n>`, a colour light's `color/<n>`, `sensor/temperature`, `sensor/humidity`,
`input_event/<n>`). `build()` puts them on endpoints with
mapping.plan_ranked: the device id is the device's own endpoint (its first switch, cover or light on it, then its
sensors), another component `<id>-<component>-<n>` (`shellypro4pm-f008d1d8b8b8-switch-1`); an input is a
doorbell only when the device is declared in `doorbells` (its events `single_push`..., Gen1's `S`, `L`...).
Each endpoint's Route address (JSON) keeps what reading states and sending commands need, so a restart reads
states before the device is asked again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hubd.devices.model import ADDITIONAL_INFO_MAX_CHARS, DeviceConfig, EntityNote, Origin, Route
from hubd.dialects import mapping, naming
from hubd.dialects.base import ConfigReceived
from hubd.dialects.shelly.records import DIALECT, DeviceInfo
from hubd.spoken import spoken
from hubd.untrusted.numbers import ascii_int

ADDRESS_VERSION = 1
MAX_COMPONENTS = 64
MAX_NAME_CHARS = 128
# What a button input reports (Gen2+ NotifyEvent; Gen1 input_event/<n> `event`), to declare one a doorbell.
GEN2_EVENTS = ("single_push", "double_push", "triple_push", "long_push", "btn_down", "btn_up")
GEN1_EVENTS = ("S", "SS", "SSS", "L", "SL", "LS")
# Gen2+ component types and Gen1 topic names, by what they are.
ACTUATORS = {"switch": "switch", "relay": "switch", "cover": "cover", "roller": "cover", "light": "light",
             "rgb": "light", "rgbw": "light"}
COLOR_LIGHTS = ("rgb", "rgbw", "color")  # Gen2+ `rgb:<n>`, `rgbw:<n>`; Gen1 `color/<n>` (RGBW2, Bulb, Duo RGBW)
SENSORS = {"temperature": "temperature", "humidity": "humidity"}
_RANK_SENSOR, _RANK_INPUT = 1_000, 2_000


@dataclass(frozen=True, slots=True)
class Component:
    """One component of a device: its type as the device names it (`switch`, Gen1 `relay`...), its number, what
    it is (`kind`), its options (a cover's position, a plug's outlet, a doorbell's event) and its own name."""

    type: str
    n: int
    kind: str  # switch, cover, light, temperature, humidity, doorbell
    opts: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # its own name (GetConfig `name`), "" without one

    @property
    def key(self) -> str:
        """`<component>-<n>`: what a split-off endpoint's id ends in."""
        return f"{self.type}-{self.n}"

    @property
    def status_key(self) -> str:
        """Gen2+ `<component>:<n>`, as GetStatus and NotifyStatus key it."""
        return f"{self.type}:{self.n}"

    def spec(self) -> dict[str, Any]:
        """What the Route address keeps of it."""
        return {"type": self.type, "n": self.n, "kind": self.kind, "opts": self.opts}

    @staticmethod
    def from_spec(data: Any) -> Component:
        """A component read back from a Route address (ValueError if it is not one)."""
        if not isinstance(data, dict) or not isinstance(data.get("type"), str) or not isinstance(data.get("n"), int) \
                or not isinstance(data.get("kind"), str) or not isinstance(data.get("opts"), dict):
            raise ValueError("not a component of a Shelly address")
        return Component(data["type"], data["n"], data["kind"], data["opts"])


@dataclass(frozen=True, slots=True)
class Address:
    """A Route address read back: the device (id, generation, topic prefix) and one endpoint's components."""

    id: str
    gen: int
    prefix: str  # Gen2+: the topic prefix; Gen1: `shellies/<id>`
    components: tuple[Component, ...]


@dataclass(frozen=True, slots=True)
class Built:
    """A device's endpoints: each one's config and address; why none, when none."""

    configs: tuple[ConfigReceived, ...]
    addresses: tuple[tuple[str, Address], ...]
    reason: str = ""


def gen2_components(config: dict[str, Any], status: dict[str, Any], outlet: bool,
                    doorbell: str | None) -> tuple[list[Component], list[EntityNote]]:
    """A Gen2+ device's components from GetConfig and GetStatus, and notes of what is left out and why."""
    found: list[Component] = []
    notes: list[EntityNote] = []
    for key in sorted(config):
        kind_type, _, number = key.partition(":")
        n = component_number(number, 3)
        if n is None or len(found) >= MAX_COMPONENTS:
            continue
        own = config[key]
        given = own.get("name") if isinstance(own, dict) else None
        label = given if isinstance(given, str) else ""
        if kind_type in ACTUATORS:
            opts: dict[str, Any] = {}
            if kind_type == "switch":
                opts["outlet"] = outlet
            elif kind_type == "cover":
                now = status.get(key)
                opts["position"] = isinstance(now, dict) and now.get("pos_control") is True
            elif kind_type == "light":
                opts["dimmable"] = True
            elif kind_type in COLOR_LIGHTS:
                opts.update(dimmable=True, color=True)
            found.append(Component(kind_type, n, ACTUATORS[kind_type], opts, label.strip()))
        elif kind_type in SENSORS:
            found.append(Component(kind_type, n, SENSORS[kind_type], {}, label.strip()))
        elif kind_type == "input":
            found += _input(kind_type, n, own.get("type") if isinstance(own, dict) else None, GEN2_EVENTS,
                            doorbell, notes)
        elif kind_type in ("em", "em1", "pm1", "emdata", "em1data", "pm1data", "devicepower", "illuminance",
                           "voltmeter", "smoke", "script"):
            notes.append(EntityNote(key, False, f"no platform interface for a Shelly {kind_type}"))
    return found, notes


def component_number(text: str, digits: int) -> int | None:
    """The number of a component (`switch:<n>`, Gen1 `relay/<n>`) written as Shelly writes it (ASCII digits, no
    leading zero: `01` and `١` are no second name of 1), of at most `digits` digits; None for any other text, which
    names no component."""
    return ascii_int(text, max_digits=digits, leading_zeros=False)


def gen1_component(topic_type: str, n: int, outlet: bool) -> Component | None:
    """The component a Gen1 topic (`relay`, `roller`, `light`, `color`, `temperature`, `humidity`) shows; None if
    not."""
    if topic_type == "relay":
        return Component("relay", n, "switch", {"outlet": outlet})
    if topic_type == "roller":
        return Component("roller", n, "cover", {"position": True})
    if topic_type == "light":
        return Component("light", n, "light", {"dimmable": True})
    if topic_type == "color":
        return Component("color", n, "light", {"dimmable": True, "color": True})
    if topic_type in SENSORS:
        return Component(topic_type, n, topic_type)
    return None


def gen1_input(n: int, doorbell: str | None, notes: list[EntityNote]) -> list[Component]:
    """A Gen1 input that reported an event (`input_event/<n>`): a doorbell when declared."""
    return _input("input", n, "button", GEN1_EVENTS, doorbell, notes)


def _input(kind_type: str, n: int, mode: Any, events: tuple[str, ...], doorbell: str | None,
           notes: list[EntityNote]) -> list[Component]:
    if mode not in (None, "button"):
        notes.append(EntityNote(f"input:{n}", False, f"a {mode} input, not a button (only a button rings)"))
        return []
    if doorbell is None:
        notes.append(EntityNote(f"input:{n}", False, f"its presses ({', '.join(events)}) are a DoorbellPress when "
                                "the device is declared in doorbells"))
        return []
    return [Component(kind_type, n, "doorbell", {"event": doorbell})]


def part(component: Component) -> mapping.Part:
    """The component's part of the mapping table."""
    opts = component.opts
    if component.kind == "switch":
        return mapping.switch(outlet=bool(opts.get("outlet")))
    if component.kind == "light":
        return mapping.light(dimmable=bool(opts.get("dimmable")), color_temperature=False,
                             color=bool(opts.get("color")))
    if component.kind == "cover":
        position = bool(opts.get("position"))
        return mapping.cover(position=position, set_position=position, open_close=True, stop=True)
    if component.kind in SENSORS:
        found = mapping.sensor(component.kind, None)
        assert found is not None  # temperature and humidity are in the mapping table
        return found
    return mapping.doorbell()


def build(info: DeviceInfo, prefix: str, components: list[Component], left_out: list[EntityNote]) -> Built:
    """The device's endpoints (mapping.plan_ranked), each with its config, route, origin notes and address."""
    by_key = {c.key: c for c in components}
    parts = {c.key: part(c) for c in components}
    rank = {c.key: (c.n if c.kind in ("switch", "cover", "light") else
                    _RANK_SENSOR if c.kind in SENSORS else _RANK_INPUT) for c in components}
    kind = next((c.kind for c in sorted(components, key=lambda c: rank[c.key])), "switch")
    name, why = info.name("sensor" if kind in SENSORS else "switch" if kind == "doorbell" else kind)
    configs: list[ConfigReceived] = []
    addresses: list[tuple[str, Address]] = []
    for planned in mapping.plan_ranked(mapping.endpoint_id(info.id), parts, rank):
        members = tuple(by_key[k] for k in planned.keys)
        shown = [EntityNote(m.status_key if info.gen > 1 else m.key.replace("-", "/"), True, _exported(m))
                 for m in members]
        if not planned.split:
            shown += left_out
        config = DeviceConfig(displayName=_endpoint_name(name, members[0], planned.split)[:MAX_NAME_CHARS],
                              displayType=planned.display_type, capabilities=planned.capabilities,
                              additionalInfo=_info(info))
        where = Address(info.id, info.gen, prefix, members)
        configs.append(ConfigReceived(planned.endpoint_id, config, Route(DIALECT, address(where)),
                                      Origin(DIALECT, tuple(sorted(shown, key=lambda n: n.name)),
                                             "" if planned.split else why)))
        addresses.append((planned.endpoint_id, where))
    if configs:
        return Built(tuple(configs), tuple(addresses))
    names = ", ".join(dict.fromkeys(n.name for n in left_out)) or "no switch, cover, light or sensor"
    return Built((), (), f"nothing it has reaches the platform ({names})")


def address(where: Address) -> str:
    """The Route address of one endpoint (JSON)."""
    data = {"v": ADDRESS_VERSION, "id": where.id, "gen": where.gen, "prefix": where.prefix,
            "components": [c.spec() for c in where.components]}
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_address(text: str) -> Address | None:
    """A Route address read back; None for one that is not this version's."""
    try:
        data: Any = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != ADDRESS_VERSION or not isinstance(data.get("id"), str) \
                or not isinstance(data.get("gen"), int) or not isinstance(data.get("prefix"), str):
            return None
        return Address(data["id"], data["gen"], data["prefix"],
                       tuple(Component.from_spec(c) for c in data["components"]))
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def _endpoint_name(device: str, component: Component, split: bool) -> str:
    """The device's name on its own endpoint; a split one's own name (GetConfig `name`), else the device's name and
    the component's number in words ("Shelly Pro Four PM Two" for switch:1)."""
    if not split:
        return device
    own = spoken(component.label) if component.label else ""
    if own:
        return own
    what = spoken(str(component.n + 1)) if component.kind in ("switch", "cover", "light") else \
        spoken(component.kind.capitalize())
    return naming.part_name(device, what)


def _exported(component: Component) -> str:
    if component.kind == "doorbell":
        return f"a declared doorbell: the input's {component.opts['event']!r} is a DoorbellPress"
    return ""


def _info(info: DeviceInfo) -> dict[str, str]:
    out = {"manufacturer": "Shelly"}
    for key, value in (("model", info.model), ("swVersion", info.version)):
        if value.strip():
            out[key] = value[:ADDITIONAL_INFO_MAX_CHARS]
    return out
