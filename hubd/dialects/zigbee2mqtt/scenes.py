"""zigbee2mqtt's scenes as platform endpoints (pure): one endpoint per scene, recalled with `{"scene_recall": id}`.

zigbee2mqtt lists a device's scenes under each of its endpoints in `bridge/devices`
(`endpoints: {"11": {"scenes": [{"id": 1, "name": "Chill scene"}]}}`) and a group's under the group in
`bridge/groups` (`scenes: [...]`). Its own Home Assistant discovery makes each one a `scene` entity of object_id
`scene_<id>` whose command is `{ "scene_recall": <id> }` on the device's or group's `<base>/<friendly_name>/set`
(lib/extension/homeassistant.ts, scenes of every endpoint of a device: the first of an id wins there too). Natively
each is the same: its own endpoint `<device or group key>-scene_<id>` (discovery's `<device id>-<object_id>`),
`displayType` scene with Switch On (the mapping's `scene`), named by the scene.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hubd.devices.model import DeviceConfig, EntityNote, Origin, Route
from hubd.dialects import mapping, naming
from hubd.dialects.base import ConfigReceived
from hubd.dialects.zigbee2mqtt.exposes import RANK_ACTUATOR, SETTABLE, Feature

SCENE = "scene"  # the Feature kind, and its one role
MAX_SCENES = 256  # of one device or group: a Zigbee scene id is 0..255
MAX_SCENE_NAME_CHARS = 128


def device_scenes(entry: Mapping[str, Any]) -> list[tuple[int, str]]:
    """A bridge/devices entry's scenes, (id, name), over all its endpoints in their order; an id once."""
    endpoints = entry.get("endpoints")
    if not isinstance(endpoints, dict):
        return []
    listed: list[Any] = []
    for value in list(endpoints.values())[:MAX_SCENES]:
        if isinstance(value, dict) and isinstance(value.get("scenes"), list):
            listed += value["scenes"][:MAX_SCENES]
    return read_scenes(listed)


def read_scenes(listed: Any) -> list[tuple[int, str]]:
    """(id, name) of a `scenes` list; entries without an integer id are skipped, an id is kept once."""
    out: dict[int, str] = {}
    for raw in listed if isinstance(listed, list) else []:
        sid = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(sid, int) or isinstance(sid, bool) or sid < 0 or sid in out:
            continue
        name = raw.get("name")
        out[sid] = name[:MAX_SCENE_NAME_CHARS] if isinstance(name, str) else ""
        if len(out) >= MAX_SCENES:
            break
    return list(out.items())


def scene_feature(scene_id: int) -> Feature:
    """The feature of one scene: nothing read, Switch On publishes `{"scene_recall": id}`."""
    return Feature(SCENE, f"scene_{scene_id}", {}, {SCENE: SETTABLE}, {"id": scene_id}, f"Scene {scene_id}",
                   RANK_ACTUATOR, (f"scene.{scene_id}",))


def scene_endpoint_id(key: str, scene_id: int) -> str:
    """`<ieee>-scene_<id>` / `<base>-group-<gid>-scene_<id>`: discovery's `<device id>-<object_id>`."""
    return mapping.endpoint_id(f"{key}-scene_{scene_id}")


def scene_configs(key: str, friendly_name: str, spoken_name: str, scenes: list[tuple[int, str]],
                  info: dict[str, str], route_of: Callable[[Feature], Route]) -> list[tuple[ConfigReceived, Feature]]:
    """Each scene's endpoint: its config (named by the scene, else `<device> Scene <id>`) and its feature;
    `route_of` gives a feature's Route as the device's other endpoints have theirs."""
    out: list[tuple[ConfigReceived, Feature]] = []
    part = mapping.scene()
    for scene_id, name in scenes:
        feature = scene_feature(scene_id)
        sayable = naming.sayable_part(name) if name else ""
        display = sayable or naming.part_name(spoken_name, feature.label)
        why = "" if sayable and sayable == name else \
            f"its name {name!r} has an identifier in it, left out" if sayable else \
            f"the scene's name {name!r} is nothing a voice can say: named after its device"
        config = DeviceConfig(displayName=display[:MAX_SCENE_NAME_CHARS], displayType=part.display_type,
                              capabilities=part.capabilities, additionalInfo=dict(info))
        note = EntityNote(f"scene.{scene_id}", True, f"zigbee2mqtt scene {scene_id} of {friendly_name}: Switch On "
                                                     "recalls it (scene_recall)")
        route = route_of(feature)
        out.append((ConfigReceived(scene_endpoint_id(key, scene_id), config, route,
                                   Origin(route.dialect, (note,), why)), feature))
    return out
