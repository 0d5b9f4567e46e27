"""zigbee2mqtt's groups (`<base>/bridge/groups`) as platform endpoints (pure).

A zigbee2mqtt group is one thing to command: `<base>/<group friendly_name>/set` reaches every member at once, and
zigbee2mqtt publishes the group's own state on `<base>/<group friendly_name>` (its properties unsuffixed, whatever
the members' endpoints). `read_groups` reads the already-parsed list (zigbee2mqtt 1.x `{"id", "friendly_name",
"members"}`, later 1.x and 2.x with `description` and `scenes` too); `build_group` makes one group a `Z2mDevice`
of one endpoint, `<base>-group-<id>`, whose capabilities are its members' common ones (a group of dimmable bulbs
is a dimmable light; of lights and plugs, a switch), or says why it is not exported (no members, no member
imported, nothing in common). Its members stay their own endpoints. Each scene of an exported group is its own
endpoint `<base>-group-<id>-scene_<sid>` (scenes.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hubd.devices.model import DeviceConfig, EntityNote, Origin, Route
from hubd.dialects import mapping, naming
from hubd.dialects.base import ConfigReceived
from hubd.dialects.globs import Selected
from hubd.dialects.zigbee2mqtt.devices import DIALECT, MAX_NAME_CHARS, Slot, Z2mDevice, address
from hubd.dialects.zigbee2mqtt.exposes import DEFAULT_BRIGHTNESS_MAX, DEFAULT_MIREDS, RANK_ACTUATOR, Feature
from hubd.dialects.zigbee2mqtt.features import part
from hubd.dialects.zigbee2mqtt.scenes import read_scenes, scene_configs

MAX_GROUPS = 1_000
MAX_MEMBERS = 1_000
_LIGHT_ROLES = ("state", "brightness", "color_temp", "color")
_COVER_ROLES = ("state", "position")
_GROUPABLE = frozenset({"light", "switch", "cover"})


@dataclass(frozen=True, slots=True)
class GroupEntry:
    """One bridge/groups entry: its id, friendly name, members (ieee_address, endpoint) and scenes (id, name)."""

    id: int
    name: str
    members: tuple[tuple[str, int | None], ...]
    scenes: tuple[tuple[int, str], ...] = ()


def group_key(base_topic: str, group_id: int) -> str:
    """The group's endpointId, `<base>-group-<id>` (CONTRACT 6), which is also its key among the devices."""
    return mapping.endpoint_id(f"{base_topic}-group-{group_id}")


def read_groups(data: Any) -> tuple[list[GroupEntry], list[str]]:
    """The groups of a parsed bridge/groups payload, and a problem per entry hubd cannot read."""
    if not isinstance(data, list):
        return [], [f"a {type(data).__name__}, not the list of groups zigbee2mqtt publishes"]
    out: list[GroupEntry] = []
    problems: list[str] = []
    if len(data) > MAX_GROUPS:
        problems.append(f"more than {MAX_GROUPS} groups; hubd reads the first {MAX_GROUPS}")
    for index, raw in enumerate(data[:MAX_GROUPS]):
        gid = raw.get("id") if isinstance(raw, dict) else None
        name = raw.get("friendly_name") if isinstance(raw, dict) else None
        if not isinstance(gid, int) or isinstance(gid, bool):
            problems.append(f"group {index}: id {gid!r} is not a group number")
            continue
        if not isinstance(name, str) or not name or "+" in name or "#" in name or len(name) > 1_000:
            problems.append(f"group {gid}: friendly_name {name!r} is not a name hubd can publish to; rename the "
                            "group in zigbee2mqtt")
            continue
        listed = raw.get("members")
        members: list[tuple[str, int | None]] = []
        for member in listed[:MAX_MEMBERS] if isinstance(listed, list) else []:
            ieee = member.get("ieee_address") if isinstance(member, dict) else None
            endpoint = member.get("endpoint") if isinstance(member, dict) else None
            if isinstance(ieee, str):
                members.append((ieee, endpoint if isinstance(endpoint, int) else None))
        out.append(GroupEntry(gid, name, tuple(members), tuple(read_scenes(raw.get("scenes")))))
    return out, problems


def build_group(key: str, entry: GroupEntry, devices: Mapping[str, Z2mDevice],
                selected: Selected) -> Z2mDevice | str:
    """The group as a device of one endpoint, or why it is not exported."""
    if not selected.included((entry.name, key)):
        return "left out by zigbee2mqtt.include/exclude"
    if not entry.members:
        return "a group without members"
    found = [f for ieee, endpoint in entry.members if (d := devices.get(ieee)) is not None
             and (f := _actuator(d, endpoint)) is not None]
    imported = [ieee for ieee, _ in entry.members if ieee in devices]
    if not imported:
        return "none of its members is imported by hubd"
    if len(found) < len(imported):
        return "its members have no capability in common (some are no light, switch or cover)"
    feature = _common(found)
    if feature is None:
        return f"its members have no capability in common ({', '.join(sorted({f.kind for f in found}))})"
    found_part = part(feature)
    if found_part is None or not found_part.capabilities:
        return "its members have no capability in common"
    spoken_name, why = naming.device_name(entry.name, (key,), None, None, found_part.display_type)
    config = DeviceConfig(displayName=spoken_name[:MAX_NAME_CHARS], displayType=found_part.display_type,
                          capabilities=tuple(sorted(found_part.capabilities, key=lambda c: c.interface)),
                          additionalInfo={"model": "zigbee2mqtt group"})
    members = ", ".join(devices[i].name for i in dict.fromkeys(imported))
    notes = (EntityNote(f"group.{entry.id}", True, f"zigbee2mqtt group {entry.id} of {members}: their common "
                                                   "capabilities; each member stays its own endpoint"),)
    route = Route(DIALECT, address(key, entry.name, [feature]))
    received = ConfigReceived(key, config, route, Origin(DIALECT, notes, why))
    slots = [Slot(key, (feature,), frozenset(c.interface for c in found_part.capabilities))]
    configs = [received]
    for scene_received, scene in scene_configs(key, entry.name, spoken_name, list(entry.scenes),
                                               {"model": "zigbee2mqtt group"},
                                               lambda f: Route(DIALECT, address(key, entry.name, [f]))):
        configs.append(scene_received)
        slots.append(Slot(scene_received.device_id, (scene,),
                          frozenset(c.interface for c in scene_received.config.capabilities)))
    return Z2mDevice(key, entry.name, tuple(slots), None, tuple(configs), frozenset(feature.props.values()))


def _actuator(device: Z2mDevice, endpoint: int | None) -> Feature | None:
    """The member's feature a group command reaches: the one of its endpoint (`l2`...), else its first light,
    switch or cover."""
    features = [f for s in device.slots for f in s.features if f.kind in _GROUPABLE]
    if endpoint is not None:
        named = [f for f in features if f.label.casefold() in (f"l{endpoint}", f"ep{endpoint}", str(endpoint))]
        if named:
            return named[0]
    return features[0] if features else None


def _common(features: Sequence[Feature]) -> Feature | None:
    """One feature of what all the members' features have, on the group's own (unsuffixed) properties."""
    kinds = {f.kind for f in features}
    if kinds == {"light"}:
        roles = [r for r in _LIGHT_ROLES if all(r in f.props for f in features)]
        if "state" not in roles:
            return None
        props = {r: r for r in roles}
        props["color_mode"] = "color_mode"
        opts: dict[str, Any] = {"on": "ON", "off": "OFF"}
        if "brightness" in roles:
            opts["brightness_max"] = DEFAULT_BRIGHTNESS_MAX
        if "color_temp" in roles:
            low = max(_pair(f.opts.get("mireds"))[0] for f in features)
            high = min(_pair(f.opts.get("mireds"))[1] for f in features)
            opts["mireds"] = [low, high] if low < high else list(DEFAULT_MIREDS)
        if "color" in roles:
            modes = [m for m in ("xy", "hs") if all(m in (f.opts.get("color_modes") or ()) for f in features)]
            if not modes:
                del props["color"]
                roles.remove("color")
            else:
                opts["color_modes"] = modes
        return Feature("light", "state", props, _access(features, roles), opts, "Group", RANK_ACTUATOR)
    if kinds <= {"light", "switch"}:
        outlet = all(f.kind == "switch" and f.opts.get("outlet") for f in features)
        return Feature("switch", "state", {"state": "state"}, _access(features, ["state"]),
                       {"on": "ON", "off": "OFF", "outlet": outlet}, "Group", RANK_ACTUATOR)
    if kinds == {"cover"}:
        roles = [r for r in _COVER_ROLES if all(r in f.props for f in features)]
        if not roles:
            return None
        first = features[0].opts
        same = all(f.opts.get(k) == first.get(k) for f in features for k in ("open", "close", "stop"))
        opts = {"open": first.get("open"), "close": first.get("close"), "stop": first.get("stop")} if same \
            else {"open": None, "close": None, "stop": None}
        if "position" in roles:
            opts["range"] = first.get("range", [0, 100])
        return Feature("cover", roles[0], {r: r for r in roles}, _access(features, roles), opts, "Group",
                       RANK_ACTUATOR)
    return None


def _access(features: Sequence[Feature], roles: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for role in roles:
        bits = 7
        for feature in features:
            bits &= int(feature.access.get(role, 0))
        out[role] = bits
    return out


def _pair(value: Any) -> tuple[float, float]:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
        return float(value[0]), float(value[1])
    return float(DEFAULT_MIREDS[0]), float(DEFAULT_MIREDS[1])
