"""Home Assistant MQTT discovery messages, the pure part: topics, abbreviations, `~`, device-based configs.

`parse_topic` reads `<prefix>/<component>/[<node_id>/]<object_id>/config`; `read_configs` turns one discovery
message into the entity configs it holds (one, or one per component of a device-based config under `cmps`),
every key in full (the abbreviation tables, in `dev`, `o` and each availability entry too) and `~` expanded
at the start or end of any `*_topic`. `Conf` reads one config's fields with their types checked, each problem a
`ConfigProblem` naming the key and the fix; `DeviceInfo` and `Availability` are the device block and the
availability settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hubd.dialects.homeassistant.abbreviations import ABBREVIATIONS, DEVICE_ABBREVIATIONS, ORIGIN_ABBREVIATIONS
from hubd.dialects.payload import json_object
from hubd.dialects.wildcards import filter_problem
from hubd.errors import DeviceMessageInvalid

TOPIC_BASE = "~"
DEVICE_COMPONENT = "device"
_ID = r"[a-zA-Z0-9_-]+"
_TOPIC_RE = re.compile(rf"^(?P<component>\w+)/(?:(?P<node_id>{_ID})/)?(?P<object_id>{_ID})/config$")
# Options of a device-based config that its components inherit unless they set them (Home Assistant's list).
SHARED_OPTIONS = ("availability", "availability_mode", "availability_template", "availability_topic",
                  "command_topic", "encoding", "payload_available", "payload_not_available", "qos", "state_topic")
# Every component Home Assistant's MQTT discovery knows; hubd exports some of them (entities.py).
COMPONENTS = frozenset({
    "alarm_control_panel", "binary_sensor", "button", "camera", "climate", "cover", "date", "datetime",
    "device_automation", "device_tracker", "event", "fan", "humidifier", "image", "lawn_mower", "light", "lock",
    "notify", "number", "remote", "scene", "select", "sensor", "siren", "switch", "tag", "text", "time", "update",
    "vacuum", "valve", "water_heater", "infrared",
})
MAX_TEXT_CHARS = 4_096
DEFAULT_AVAILABLE, DEFAULT_NOT_AVAILABLE, DEFAULT_AVAILABILITY_MODE = "online", "offline", "latest"


class ConfigProblem(Exception):
    """A discovery config hubd cannot use; the text names the key and the fix."""


@dataclass(frozen=True, slots=True)
class DiscoveryTopic:
    """Where a config was announced; `key` is Home Assistant's discovery id of the entity."""

    component: str
    node_id: str | None
    object_id: str

    @property
    def key(self) -> tuple[str, str]:
        """(component, "[node_id ]object_id"): one entity, whichever message form announced it."""
        return self.component, f"{self.node_id} {self.object_id}" if self.node_id else self.object_id


@dataclass(frozen=True, slots=True)
class EntityConfig:
    """One entity's config from a discovery message; `config` None removes the entity."""

    topic: DiscoveryTopic
    config: dict[str, Any] | None
    sent_as: tuple[tuple[str, str], ...] = ()  # a derived config's keys and the producer's keys they came from


def parse_topic(prefix: str, topic: str) -> DiscoveryTopic | None:
    """The discovery topic's parts, or None when it is not `<prefix>/<component>/[<node_id>/]<object_id>/config`."""
    if not topic.startswith(prefix + "/"):
        return None
    match = _TOPIC_RE.match(topic[len(prefix) + 1:])
    if match is None:
        return None
    return DiscoveryTopic(match["component"], match["node_id"], match["object_id"])


def read_configs(where: DiscoveryTopic, payload: bytes) -> list[EntityConfig]:
    """The entity configs one discovery message holds, expanded; ConfigProblem for one hubd cannot read."""
    if where.component == DEVICE_COMPONENT:
        return _device_configs(where, payload)
    if not payload.strip():
        return [EntityConfig(where, None)]
    data = _json_object(payload)
    if "migrate_discovery" in data or "migr_discvry" in data:
        return []  # a hand-over between the two discovery forms: neither a config nor a removal
    expand(data, component=False)
    _resolve_base(data)
    return [EntityConfig(where, data)]


def expand(data: dict[str, Any], *, component: bool) -> None:
    """Replace abbreviated keys in place; `component`: an entry of a device-based config's `cmps`."""
    _rename(data, ABBREVIATIONS)
    availability = data.get("availability")
    for entry in availability if isinstance(availability, list) else [availability]:
        if isinstance(entry, dict):
            _rename(entry, ABBREVIATIONS)
    if component:
        return
    if isinstance(data.get("device"), dict):
        _rename(data["device"], DEVICE_ABBREVIATIONS)
    if isinstance(data.get("origin"), dict):
        _rename(data["origin"], ORIGIN_ABBREVIATIONS)


class Conf:
    """One entity's config, its fields read with their types checked (Home Assistant's coercions)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data

    def has(self, key: str) -> bool:
        """Whether the key is given (and not null)."""
        return self.data.get(key) is not None

    def text(self, key: str, default: str | None = None) -> str | None:
        """A string; numbers and booleans become text as Home Assistant's `cv.string` does (False → "False")."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool | int | float):
            return str(value)
        if not isinstance(value, str):
            raise ConfigProblem(f"{key}: must be a string, got {type(value).__name__}")
        if len(value) > MAX_TEXT_CHARS:
            raise ConfigProblem(f"{key}: longer than {MAX_TEXT_CHARS} characters")
        return value

    def string(self, key: str, default: str) -> str:
        """A string with a default for when it is absent; an explicit empty string is kept as given."""
        value = self.text(key)
        return default if value is None else value

    def payload(self, key: str, default: str | None) -> str | None:
        """A payload option: given, its text; null, None (the option is off); absent, the default."""
        if key in self.data and self.data[key] is None:
            return None
        return self.text(key, default)

    def topic(self, key: str) -> str | None:
        """A topic hubd reads from (a subscription it makes): a plain topic, or a wildcard filter
        `hubd.dialects.wildcards` accepts (Theengs Gateway's `+/+/BTtoMQTT/<MAC>`). Never where it publishes."""
        value = self.text(key)
        if value is None:
            return None
        why = filter_problem(value)
        if why is not None:
            raise ConfigProblem(f"{key}: {value!r} {why}; give the topic the device publishes to (a + or # "
                                "filter needs a literal level before #, never at the root nor on $ topics)")
        return value

    def number(self, key: str, default: float) -> float:
        """A number (numeric strings too, as zigbee2mqtt sends `"max_temp": "35"`)."""
        value = self.data.get(key)
        if value is None:
            return default
        try:
            if isinstance(value, bool):
                raise ValueError(value)
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigProblem(f"{key}: must be a number, got {value!r}") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise ConfigProblem(f"{key}: must be a finite number")
        return number

    def flag(self, key: str, default: bool) -> bool:
        """A boolean (true/false, or the strings Home Assistant accepts)."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "on", "off", "yes", "no", "1", "0"):
            return value.lower() in ("true", "on", "yes", "1")
        raise ConfigProblem(f"{key}: must be true or false, got {value!r}")

    def strings(self, key: str) -> tuple[str, ...] | None:
        """A list of strings, or None when absent."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
            raise ConfigProblem(f"{key}: must be a list of strings")
        return tuple(str(v) for v in value)

    def qos(self) -> int:
        """The entity's MQTT QoS (0 unless it says)."""
        qos = self.number("qos", 0)
        if qos not in (0, 1, 2):
            raise ConfigProblem(f"qos: must be 0, 1 or 2, got {qos:g}")
        return int(qos)


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """The `device` block: what makes entities one device, and what the platform shows of it."""

    identifiers: tuple[str, ...]
    connections: tuple[tuple[str, str], ...]
    name: str | None
    suggested_area: str | None
    manufacturer: str | None
    model: str | None
    sw_version: str | None
    hw_version: str | None

    @staticmethod
    def read(data: Any) -> DeviceInfo | None:
        """The device block of a config, or None when there is none."""
        if data is None:
            return None
        if not isinstance(data, dict):
            raise ConfigProblem("device: must be an object with identifiers or connections")
        conf = Conf(data)
        raw_ids = data.get("identifiers")
        ids = [raw_ids] if isinstance(raw_ids, str | int) else raw_ids or []
        if not isinstance(ids, list) or not all(isinstance(i, str | int) for i in ids):
            raise ConfigProblem("device.identifiers: must be a string or a list of strings")
        raw_cns = data.get("connections") or []
        if not isinstance(raw_cns, list) or not all(isinstance(c, list) and len(c) == 2 for c in raw_cns):
            raise ConfigProblem('device.connections: must be a list of [type, value] pairs, e.g. [["mac", "…"]]')
        connections = tuple((str(kind), str(value).lower()) for kind, value in raw_cns)
        if not ids and not connections:
            raise ConfigProblem("device: give identifiers or connections, or leave the device block out")
        return DeviceInfo(tuple(str(i) for i in ids), connections, conf.text("name"), conf.text("suggested_area"),
                          conf.text("manufacturer"), conf.text("model"), conf.text("sw_version"),
                          conf.text("hw_version"))

    def tokens(self) -> tuple[tuple[str, ...], ...]:
        """What entities of one device share: any identifier or connection."""
        return tuple(("id", i) for i in self.identifiers) + tuple(("cn", k, v) for k, v in self.connections)


@dataclass(frozen=True, slots=True)
class AvailabilitySource:
    """One availability topic and how to read it."""

    topic: str
    available: str
    not_available: str
    template: str | None


@dataclass(frozen=True, slots=True)
class Availability:
    """An entity's availability: its topics and `availability_mode` (all, any, latest)."""

    sources: tuple[AvailabilitySource, ...]
    mode: str

    @staticmethod
    def read(conf: Conf) -> Availability | None:
        """The availability settings of a config, or None when it has none (always available)."""
        default_on = conf.text("payload_available", DEFAULT_AVAILABLE) or DEFAULT_AVAILABLE
        default_off = conf.text("payload_not_available", DEFAULT_NOT_AVAILABLE) or DEFAULT_NOT_AVAILABLE
        sources: list[AvailabilitySource] = []
        single = conf.topic("availability_topic")
        if single is not None:
            sources.append(AvailabilitySource(single, default_on, default_off, conf.text("availability_template")))
        entries = conf.data.get("availability")
        if isinstance(entries, dict):
            entries = [entries]  # Home Assistant's schema takes one object as a list of one (ensure_list)
        if entries is not None:
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise ConfigProblem("availability: must be a list of {topic, payload_available?, ...}")
            for i, entry in enumerate(entries):
                item = Conf(entry)
                try:
                    topic = item.topic("topic")
                    if topic is None:
                        raise ConfigProblem("topic: missing")
                    sources.append(AvailabilitySource(topic, item.text("payload_available", default_on) or default_on,
                                                      item.text("payload_not_available", default_off) or default_off,
                                                      item.text("value_template")))
                except ConfigProblem as err:
                    raise ConfigProblem(f"availability[{i}].{err}") from None
        if not sources:
            return None
        mode = conf.text("availability_mode", DEFAULT_AVAILABILITY_MODE) or DEFAULT_AVAILABILITY_MODE
        if mode not in ("all", "any", "latest"):
            raise ConfigProblem(f"availability_mode: {mode!r}; use all, any or latest")
        return Availability(tuple(sources), mode)


def _device_configs(where: DiscoveryTopic, payload: bytes) -> list[EntityConfig]:
    """A device-based config (`<prefix>/device/<object_id>/config`): one config per component.

    An empty payload is handled by the caller (it removes every entity the device announced).
    """
    if not payload.strip():
        return []
    data = _json_object(payload)
    if "migrate_discovery" in data or "migr_discvry" in data:
        return []
    expand(data, component=False)
    components = data.get("components")
    if not isinstance(components, dict) or not components:
        raise ConfigProblem("cmps: a device-based config needs `cmps` (components): {id: {p: <platform>, ...}}")
    if not isinstance(data.get("device"), dict):
        raise ConfigProblem("dev: a device-based config needs its `dev` (device) block")
    out: list[EntityConfig] = []
    for component_id, raw in components.items():
        if not isinstance(raw, dict) or not re.fullmatch(_ID, str(component_id)):
            raise ConfigProblem(f"cmps.{component_id}: must be an object under an id of A-Za-z0-9_- characters")
        config = dict(raw)
        expand(config, component=True)
        platform = config.pop("platform", None)
        if not isinstance(platform, str):
            raise ConfigProblem(f"cmps.{component_id}.p: missing; give the component's platform, e.g. \"sensor\"")
        object_id = f"{where.node_id} {component_id}" if where.node_id else str(component_id)
        topic = DiscoveryTopic(platform, where.object_id, object_id)
        if not config:  # only `p`: this component is removed
            out.append(EntityConfig(topic, None))
            continue
        config["device"] = data["device"]
        if "origin" in data:
            config["origin"] = data["origin"]
        for option in SHARED_OPTIONS:
            if option in data and option not in config:
                config[option] = data[option]
        if TOPIC_BASE in data and TOPIC_BASE not in config:
            # Home Assistant leaves a device-level `~` unused; hubd lends it to the components (harmless, kinder).
            config[TOPIC_BASE] = data[TOPIC_BASE]
        _resolve_base(config)
        out.append(EntityConfig(topic, config))
    return out


def _rename(data: dict[str, Any], table: Mapping[str, str]) -> None:
    for short in [k for k in data if k in table and table[k] != k]:
        data[table[short]] = data.pop(short)  # as Home Assistant: the abbreviated key wins over a full one


def _resolve_base(data: dict[str, Any]) -> None:
    """`~` at the start or end of a `*_topic` value (and of each availability topic) is the `~` value."""
    base = data.pop(TOPIC_BASE, None)
    if not isinstance(base, str):
        return

    def expanded(value: str) -> str:
        if value.startswith(TOPIC_BASE):
            value = base + value[1:]
        if value.endswith(TOPIC_BASE):
            value = value[:-1] + base
        return value

    for key, value in data.items():
        if key.endswith("topic") and isinstance(value, str) and value:
            data[key] = expanded(value)
    availability = data.get("availability")
    for entry in availability if isinstance(availability, list) else [availability]:
        if isinstance(entry, dict) and isinstance(entry.get("topic"), str) and entry["topic"]:
            entry["topic"] = expanded(entry["topic"])


def _json_object(payload: bytes) -> dict[str, Any]:
    try:
        return json_object(payload)
    except DeviceMessageInvalid as err:
        raise ConfigProblem(f"{err}; a discovery config is a JSON object") from None

