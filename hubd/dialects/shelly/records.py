"""Shelly's own messages read into checked records (pure): Gen2+ RPC frames and device info, Gen1 announcements.

Gen2+ (Plus, Pro, Gen3, Gen4) speak JSON-RPC over MQTT: a request `{"id", "src", "method", "params"}` on
`<prefix>/rpc` is answered on `<src>/rpc` with `{"id", "src": <device id>, "dst", "result"}` (or `"error"`), and
the device notifies on `<prefix>/events/rpc` (`NotifyStatus`, `NotifyFullStatus`, `NotifyEvent`, its `src` the
device id). `Shelly.GetDeviceInfo` says who it is (`id`, `mac`, `model`, `gen`, `app`, `ver`, the owner's `name`).
Gen1 devices announce themselves on `shellies/announce` (`{"id", "model", "mac", "ip", "new_fw", "fw_ver"}`).
Every field hubd uses is checked: a message it cannot use is a `ConfigProblem` naming the field. Names follow
docs/devices.md: the owner's name, else the model's words (`MODEL_WORDS`), never the id or the MAC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hubd.dialects import naming
from hubd.dialects.payload import json_object
from hubd.errors import DeviceMessageInvalid
from hubd.spoken import spoken

DIALECT = "shelly"
MAX_TEXT_CHARS = 128
# A Gen2+ device id as it ships (and so its default topic prefix): `shelly<model>-<MAC, 12 hex digits>`.
GEN2_ID_RE = re.compile(r"^shelly[a-z0-9]+-[0-9a-f]{12}$", re.IGNORECASE)
# A topic level hubd may use as a device id or a prefix: no wildcard, no separator, no NUL, not a `$` topic.
_LEVEL_RE = re.compile(r"^[^/+#$\x00][^/+#\x00]{0,127}$")
_MAC_RE = re.compile(r"^[0-9A-Fa-f]{1,16}$")  # 12 hex digits as shipped; docs and logs shorten them

# Shelly's model codes (GetDeviceInfo `model`, Gen1 announce `model`) to the words the product is sold as.
MODEL_WORDS = {
    # Gen1
    "SHSW-1": "1", "SHSW-PM": "1PM", "SHSW-L": "1L", "SHSW-21": "2", "SHSW-25": "2.5", "SHPLG-S": "Plug S",
    "SHPLG-1": "Plug", "SHPLG2-1": "Plug", "SHPLG-U1": "Plug US", "SHDM-1": "Dimmer", "SHDM-2": "Dimmer 2",
    "SHHT-1": "H&T", "SHBTN-1": "Button 1", "SHBTN-2": "Button 1", "SHIX3-1": "i3", "SHEM": "EM", "SHEM-3": "3EM",
    "SHWT-1": "Flood", "SHDW-1": "Door Window", "SHDW-2": "Door Window 2", "SHMOS-01": "Motion",
    "SHBLB-1": "Bulb", "SHBDUO-1": "Duo", "SHVIN-1": "Vintage", "SHRGBW2": "RGBW2", "SHCB-1": "Duo RGBW",
    "SHUNI-1": "Uni",
    # Gen2 (Plus, Pro)
    "SNSW-001X16EU": "Plus 1", "SNSW-001X8EU": "Plus 1 Mini", "SNSW-001P16EU": "Plus 1PM",
    "SNSW-001P8EU": "Plus 1PM Mini", "SNSW-002P16EU": "Plus 2PM", "SNSW-102P16EU": "Plus 2PM",
    "SNPL-00112EU": "Plus Plug S", "SNPL-00110IT": "Plus Plug IT", "SNPL-00112UK": "Plus Plug UK",
    "SNPL-00116US": "Plus Plug US", "SNSN-0013A": "Plus H&T", "SNSN-0024X": "Plus i4", "SNSN-0D24X": "Plus i4 DC",
    "SNDM-0013US": "Plus Wall Dimmer", "SNDM-00100WW": "Plus 0-10V Dimmer", "SNSN-0043X": "Plus Uni",
    "SNDC-0D4P10WW": "Plus RGBW PM",
    "SPSW-001XE16EU": "Pro 1", "SPSW-001PE16EU": "Pro 1PM", "SPSW-002XE16EU": "Pro 2", "SPSW-002PE16EU": "Pro 2PM",
    "SPSW-003XE16EU": "Pro 3", "SPSW-004PE16EU": "Pro 4PM", "SPSW-104PE16EU": "Pro 4PM",
    # Gen3, Gen4
    "S3SW-001X16EU": "1 Gen3", "S3SW-001X8EU": "1 Mini Gen3", "S3SW-001P16EU": "1PM Gen3",
    "S3SW-001P8EU": "1PM Mini Gen3", "S3SW-002P16EU": "2PM Gen3", "S3PL-00112EU": "Plug S Gen3",
    "S3SN-0U12A": "H&T Gen3", "S3SN-0024X": "i4 Gen3", "S3DM-0010WW": "Dimmer 0-10V Gen3",
    "S4SW-001X16EU": "1 Gen4", "S4SW-001P16EU": "1PM Gen4", "S4SW-002P16EU": "2PM Gen4",
}
_OUTLET_WORDS = ("plug",)


class ConfigProblem(ValueError):
    """A Shelly message hubd cannot use; the text names the field and the fix."""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """Who a device is: Gen2+ `Shelly.GetDeviceInfo`'s result or a Gen1 announcement, checked."""

    id: str  # the device id: its endpointId (`shellyplus1pm-a8032ab12345`, Gen1 `shelly1-ABCDEF`)
    gen: int
    mac: str  # upper case, no separators
    model: str  # Shelly's model code (`SNSW-001P16EU`, `SHSW-1`)
    app: str  # Gen2+ firmware application (`Plus1PM`, `S2PMG3`); "" for Gen1
    version: str
    given: str | None  # the owner's name (Gen2+ `name`); None without one

    def model_words(self) -> str:
        """The product as sold, from the model code (else the app's words): "Plus 1PM", "H&T"; "" if unknown."""
        words = MODEL_WORDS.get(self.model.upper())
        if words is None and self.app:
            words = re.sub(r"(?<=[a-z])(?=[A-Z0-9])", " ", self.app)
        return words or ""

    def outlet(self) -> bool:
        """Whether the device is a plug (its relay shows as a socket)."""
        return any(w in self.model_words().casefold() for w in _OUTLET_WORDS)

    def name(self, kind: str = "switch") -> tuple[str, str]:
        """Its displayName and why hubd chose it ("" when it is the owner's): the owner's name, else "Shelly" and
        the model's words ("Shelly Plus One PM"), else Shelly's class of device ("Shelly switch")."""
        by_model = spoken(f"Shelly {self.model_words()}".replace("&", " and ")).strip()
        words = by_model if by_model != "Shelly" else f"Shelly {kind}"
        if self.given and self.given.strip():
            name, why = naming.device_name(self.given.strip(), (self.id, self.mac), None, None, kind)
            if not why:
                return name, ""
            if not name.casefold().startswith(kind.casefold()):
                return name, why
            return words, f"its name {self.given!r} is an identifier, so it is named after its model"
        return words, "it has no name of its own, so it is named after its model"

    def identities(self) -> tuple[str, ...]:
        """What include/exclude and doorbell globs match: its name, id, MAC and model."""
        return tuple(x for x in (self.given, self.id, self.mac, self.model, self.name()[0]) if x)


def text(data: dict[str, Any], key: str, *, required: bool = True) -> str | None:
    """A string field (at most MAX_TEXT_CHARS), None when absent and not required; ConfigProblem otherwise."""
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigProblem(f"{key} is {_show(value)}, not a text")
    if len(value) > MAX_TEXT_CHARS:
        raise ConfigProblem(f"{key} is {len(value)} characters; at most {MAX_TEXT_CHARS}")
    return value


def topic_level(value: str, key: str) -> str:
    """A device id or prefix that is one topic level hubd may publish under; ConfigProblem otherwise."""
    if not _LEVEL_RE.match(value):
        raise ConfigProblem(f"{key} {value[:40]!r} is not one MQTT topic level (no /, +, #, $ or NUL)")
    return value


def read_device_info(result: Any) -> DeviceInfo:
    """`Shelly.GetDeviceInfo`'s result; ConfigProblem naming the field it lacks."""
    if not isinstance(result, dict):
        raise ConfigProblem(f"result is {_show(result)}, not GetDeviceInfo's object")
    device_id = topic_level(str(text(result, "id")), "id")
    gen = result.get("gen")
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 2:
        raise ConfigProblem(f"gen is {_show(gen)}; a Gen2+ device says 2 or more")
    return DeviceInfo(device_id, gen, _mac(result), str(text(result, "model")), text(result, "app", required=False)
                      or "", text(result, "ver", required=False) or "", _given(result.get("name")))


def read_announce(payload: bytes) -> DeviceInfo:
    """A Gen1 `shellies/announce`; ConfigProblem naming the field it lacks."""
    try:
        data = json_object(payload)
    except DeviceMessageInvalid as err:
        raise ConfigProblem(str(err)) from err
    device_id = topic_level(str(text(data, "id")), "id")
    return DeviceInfo(device_id, 1, _mac(data), str(text(data, "model")), "",
                      text(data, "fw_ver", required=False) or "", None)


@dataclass(frozen=True, slots=True)
class Frame:
    """One RPC frame: a reply (`id` with `result` or `error`) or a notification (`method`, `params`)."""

    src: str
    id: int | None
    method: str | None
    params: dict[str, Any]
    result: Any
    error: str | None


def read_frame(payload: bytes) -> Frame:
    """An RPC frame (reply or notification); ConfigProblem naming what it lacks."""
    try:
        data = json_object(payload)
    except DeviceMessageInvalid as err:
        raise ConfigProblem(str(err)) from err
    src = data.get("src")
    if not isinstance(src, str) or not src:
        raise ConfigProblem(f"src is {_show(src)}; a Shelly RPC frame names its device in src")
    frame_id, method, params = data.get("id"), data.get("method"), data.get("params", {})
    if frame_id is not None and (isinstance(frame_id, bool) or not isinstance(frame_id, int)):
        raise ConfigProblem(f"id is {_show(frame_id)}, not a number")
    if method is not None and not isinstance(method, str):
        raise ConfigProblem(f"method is {_show(method)}, not a text")
    if not isinstance(params, dict):
        raise ConfigProblem(f"params is {_show(params)}, not an object")
    error = data.get("error")
    message = None
    if error is not None:
        message = str(error.get("message", error)) if isinstance(error, dict) else str(error)
    return Frame(src, frame_id, method, params, data.get("result"), message[:200] if message else None)


def _mac(data: dict[str, Any]) -> str:
    mac = str(text(data, "mac")).replace(":", "").replace("-", "").upper()
    if not _MAC_RE.match(mac):
        raise ConfigProblem(f"mac {mac[:40]!r} is not hexadecimal digits")
    return mac


def _given(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()[:MAX_TEXT_CHARS]


def _show(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
