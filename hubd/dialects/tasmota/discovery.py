"""Tasmota's own discovery messages read into a `TasmotaInfo` (pure): `<prefix>/<MAC>/config` and `/sensors`.

Since Tasmota 9 a device announces itself, retained, on `tasmota/discovery/<MAC>/config` (SetOption19 0, the
default): its names (`dn`, `fn`), MAC, model (`md`), topic (`t`), FullTopic (`ft`, e.g. `%prefix%/%topic%/`) and
prefixes (`tp`: cmnd, stat, tele), its LWT payloads (`onln`, `ofln`), the power state texts (`state`), what each
relay is (`rl`: 1 relay, 2 light, 3 shutter half), its switches (`swc`, `swn`, SetOption114) and buttons (`btn`,
SetOption73), some SetOptions (`so`), the light's subtype (`lt_st`) and link (`lk`), shutter options (`sho`); and
on `/sensors` its sensors' readings (`sn`, a `tele/SENSOR` object). Every field is checked: a config hubd cannot
use is a `ConfigProblem` naming the field. `Topics` are the device's command, stat and tele topic prefixes as
Tasmota builds them from the FullTopic. Names follow the rule of docs/devices.md: the device name, else the first
friendly name, else the model, never an identifier or Tasmota's default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hubd.dialects import naming
from hubd.dialects.payload import json_object
from hubd.errors import DeviceMessageInvalid

DIALECT = "tasmota"
MAX_LIST_ITEMS = 64  # Tasmota sends 8 to 32 relays, switches and buttons
MAX_TEXT_CHARS = 128
GROUP_TOPIC = "tasmotas"  # the group topic every Tasmota device listens on, as it ships
RL_RELAY, RL_LIGHT, RL_SHUTTER = 1, 2, 3
# Light subtypes (`lt_st`): 1 channel (dimmer), 2 cold/warm, 3 RGB, 4 RGBW, 5 RGBCW.
LST_SINGLE, LST_COLDWARM, LST_RGB, LST_RGBW, LST_RGBCW = 1, 2, 3, 4, 5
_MAC_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # NetworkUniqueId: the MAC without colons (others send more)
_HEX_MAC_RE = re.compile(r"^[0-9A-Fa-f]{12}$")
_DEFAULT_NAME_RE = re.compile(r"^Tasmota\d*$")  # FriendlyName1..8 and DeviceName as they ship
_IDENTIFIER_RE = re.compile(r"^(?:[0-9A-Fa-f]{2}[:-]?){6}$|^tasmota[_-][0-9A-Fa-f]{6}(?:-\d{1,4})?$", re.IGNORECASE)


class ConfigProblem(ValueError):
    """A discovery message hubd cannot use; the text names the field and the fix."""


@dataclass(frozen=True, slots=True)
class Topics:
    """Where a device listens and speaks: the command, stat and tele topic prefixes (each ends in `/`)."""

    cmnd: str
    stat: str
    tele: str


@dataclass(frozen=True, slots=True)
class TasmotaInfo:
    """One device's discovery config, checked."""

    mac: str
    device_name: str
    friendly_names: tuple[str | None, ...]
    host: str
    model: str
    version: str
    topic: str
    full_topic: str
    prefixes: tuple[str, str, str]
    state_texts: tuple[str, ...]  # OFF, ON, TOGGLE, HOLD as the device spells them
    online: str
    offline: str
    relays: tuple[int, ...]
    switch_modes: tuple[int, ...]
    switch_names: tuple[str | None, ...]
    buttons: tuple[int, ...]
    options: Mapping[str, int]
    light_linked: bool
    light_subtype: int
    shutter_options: tuple[int, ...]
    ifan: bool
    tuya: bool
    deep_sleep: bool
    group_topics: tuple[str, ...] = ()  # its GroupTopics, where its config names them (`gt`)

    def topics(self) -> Topics:
        """The device's topic prefixes, built as Tasmota builds them (GetTopic_P)."""
        return Topics(*(full_topic(self.full_topic, prefix, self.topic, self.host, self.mac, command=index == 0)
                        for index, prefix in enumerate(self.prefixes)))

    def group_prefixes(self) -> tuple[str, ...]:
        """The command topic prefixes of its groups (`cmnd/tasmotas/`, as its FullTopic makes them): a command there
        reaches every Tasmota device in the group."""
        return tuple(dict.fromkeys(full_topic(self.full_topic, self.prefixes[0], group, self.host, self.mac,
                                              command=True) for group in (GROUP_TOPIC, *self.group_topics)))

    def option(self, number: str) -> int:
        """A SetOption the config reports (0 when it does not)."""
        return self.options.get(number, 0)

    def name(self) -> str:
        """What the owner calls the device: its DeviceName, else FriendlyName1, else the model; never an identifier
        (a MAC, `tasmota_ABC123`) nor Tasmota's default `Tasmota`."""
        for candidate in (self.device_name, self.friendly_names[0] if self.friendly_names else None, self.model):
            said = naming.sayable_part(candidate, (self.mac,)) \
                if candidate and self.is_name(candidate) else ""
            if said:
                return said  # without a chip or identifier in it ("Wetterstation DS18B20" → "Wetterstation")
        return "Tasmota device"

    def is_name(self, text: str) -> bool:
        """Whether `text` is a name a person gave: not blank, not a default, not the MAC nor Tasmota's identifiers
        (`tasmota_49A3BC`, the host name `tasmota-49A3BC-0956`); a topic a person chose ("kitchen") is a name."""
        text = text.strip()
        return bool(text) and not _DEFAULT_NAME_RE.match(text) and not _IDENTIFIER_RE.match(text) \
            and text.casefold() != self.mac.casefold()

    def identities(self) -> tuple[str, ...]:
        """What a `doorbells` or include/exclude glob may match: names, topic, host name and MAC."""
        names = [self.name(), self.device_name, *(n for n in self.friendly_names if n), self.topic, self.host,
                 self.mac]
        return tuple(dict.fromkeys(n for n in names if n))


def parse_topic(prefix: str, topic: str) -> tuple[str, str] | None:
    """(MAC, "config" or "sensors") of a discovery topic; None for any other topic."""
    rest = topic[len(prefix) + 1:] if topic.startswith(prefix + "/") else ""
    mac, _, kind = rest.partition("/")
    if kind not in ("config", "sensors") or not _MAC_RE.match(mac):
        return None
    return mac, kind


def full_topic(template: str, prefix: str, topic: str, host: str, mac: str, *, command: bool = False) -> str:
    """A topic prefix from the FullTopic: `%prefix%`, `%topic%`, `%hostname%` and `%id%` (the MAC) replaced; a
    command topic without `%prefix%` gets `/%prefix%` appended, as Tasmota does; always ends in `/`."""
    if command and "%prefix%" not in template:
        template = template.rstrip("/") + "/%prefix%"
    text = template.replace("%prefix%", prefix).replace("%topic%", topic).replace("%hostname%", host) \
        .replace("%id%", mac)
    return text if text.endswith("/") else text + "/"


def normal_mac(text: str) -> str:
    """A MAC in the spelling of Tasmota's discovery: upper case, no separators (other text: as it is)."""
    bare = text.replace(":", "").replace("-", "")
    return bare.upper() if _HEX_MAC_RE.match(bare) else text


def read_config(mac: str, payload: bytes) -> TasmotaInfo:
    """The config a `<prefix>/<MAC>/config` message holds; ConfigProblem naming the field."""
    data = _json_object(payload, "the device config Tasmota publishes")
    given = _text(data, "mac")
    if given != mac:
        raise ConfigProblem(f"mac {given!r} is not the MAC in the topic ({mac!r}); the config belongs elsewhere")
    prefixes = _texts(data, "tp", 3)
    texts = _texts(data, "state", 2)
    info = TasmotaInfo(
        mac=mac, device_name=_text(data, "dn", required=False), friendly_names=_names(data, "fn"),
        host=_text(data, "hn", required=False), model=_text(data, "md", required=False),
        version=_text(data, "sw", required=False), topic=_text(data, "t"), full_topic=_text(data, "ft"),
        prefixes=(prefixes[0], prefixes[1], prefixes[2]), state_texts=texts, online=_text(data, "onln"),
        offline=_text(data, "ofln"), relays=_ints(data, "rl"), switch_modes=_ints(data, "swc", required=False),
        switch_names=_names(data, "swn"), buttons=_ints(data, "btn", required=False), options=_options(data),
        light_linked=_int(data, "lk", 1) != 0, light_subtype=_int(data, "lt_st", 0),
        shutter_options=_ints(data, "sho", required=False), ifan=_int(data, "if", 0) != 0,
        tuya=_int(data, "ty", 0) != 0, deep_sleep=_int(data, "dslp", 0) != 0, group_topics=_groups(data))
    for name, prefix in zip(("cmnd", "stat", "tele"), _prefixes(info), strict=True):
        if not prefix.strip("/") or any(c in prefix for c in "+#\x00") or prefix.startswith("$"):
            raise ConfigProblem(f"ft {info.full_topic!r} with t {info.topic!r} makes the {name} topic {prefix!r}, "
                                "which hubd cannot subscribe or publish to; fix the device's FullTopic or Topic")
    return info


def _groups(data: Mapping[str, Any]) -> tuple[str, ...]:
    """Its GroupTopics (`gt`: one or a list), where the config names them; other values are not group topics."""
    value = data.get("gt")
    values = value if isinstance(value, list) else [value]
    return tuple(v for v in values if isinstance(v, str) and v.strip() and not any(c in v for c in "/+#\x00"))


def read_sensors(payload: bytes) -> dict[str, Any]:
    """The `sn` object of a `<prefix>/<MAC>/sensors` message (the device's tele/SENSOR readings)."""
    data = _json_object(payload, "the sensors message Tasmota publishes")
    sensors = data.get("sn")
    if not isinstance(sensors, dict):
        raise ConfigProblem(f"sn is {_kind(sensors)}, not the object of sensor readings Tasmota publishes")
    return sensors


def state_object(payload: bytes) -> dict[str, Any] | None:
    """A device message's JSON object (None when it is not one: Tasmota also sends plain text there)."""
    if not payload.lstrip().startswith(b"{"):
        return None
    try:
        return json_object(payload)
    except DeviceMessageInvalid:
        return None


def first_index(values: Sequence[int], wanted: int) -> int:
    """The index of the first `wanted` in `values` (-1 when absent)."""
    return values.index(wanted) if wanted in values else -1


def _prefixes(info: TasmotaInfo) -> tuple[str, str, str]:
    topics = info.topics()
    return topics.cmnd, topics.stat, topics.tele


def _json_object(payload: bytes, what: str) -> dict[str, Any]:
    try:
        data = json_object(payload)
    except DeviceMessageInvalid as err:
        raise ConfigProblem(f"{err}; expected {what}") from None
    if data.get("ver") != 1:
        raise ConfigProblem(f"ver is {data.get('ver')!r}; hubd reads Tasmota's discovery version 1")
    return data


def _text(data: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()) or len(value) > MAX_TEXT_CHARS \
            or "\x00" in value:
        raise ConfigProblem(f"{key} is {_kind(value)}; Tasmota sends a text of at most {MAX_TEXT_CHARS} characters")
    return value


def _texts(data: Mapping[str, Any], key: str, least: int) -> tuple[str, ...]:
    value = data.get(key)
    if not isinstance(value, list) or len(value) < least or len(value) > MAX_LIST_ITEMS \
            or not all(isinstance(v, str) and v and len(v) <= MAX_TEXT_CHARS for v in value):
        raise ConfigProblem(f"{key} is {_kind(value)}; Tasmota sends a list of at least {least} texts")
    return tuple(value)


def _names(data: Mapping[str, Any], key: str) -> tuple[str | None, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS \
            or not all(v is None or (isinstance(v, str) and len(v) <= MAX_TEXT_CHARS) for v in value):
        raise ConfigProblem(f"{key} is {_kind(value)}; Tasmota sends a list of names (or null)")
    return tuple(v if v and v.strip() else None for v in value)


def _ints(data: Mapping[str, Any], key: str, *, required: bool = True) -> tuple[int, ...]:
    value = data.get(key)
    if value is None and not required:
        return ()
    if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS or not all(_is_int(v) for v in value):
        raise ConfigProblem(f"{key} is {_kind(value)}; Tasmota sends a list of whole numbers")
    return tuple(value)


def _int(data: Mapping[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if not _is_int(value):
        raise ConfigProblem(f"{key} is {_kind(value)}; Tasmota sends a whole number")
    return int(value)


def _options(data: Mapping[str, Any]) -> dict[str, int]:
    value = data.get("so", {})
    if not isinstance(value, dict) or len(value) > MAX_LIST_ITEMS \
            or not all(isinstance(k, str) and _is_int(v) for k, v in value.items()):
        raise ConfigProblem(f"so is {_kind(value)}; Tasmota sends its SetOptions as an object of numbers")
    return dict(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    text = json.dumps(value)[:40] if isinstance(value, str | int | float | bool) or value is None \
        else f"a {type(value).__name__}"
    return text
