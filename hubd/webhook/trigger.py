"""The webhook trigger body: parse and check it, with a message per field a user can act on.

Hand-written rather than a pydantic model because every message must say what to send instead
(the 422 body docs/webhook.md shows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from hubd.untrusted.kinds import json_kind
from hubd.web.jsonbody import JsonBodyInvalid, load_json

TYPES = ("tts", "audio", "asr")
MAX_TEXT = 1000  # characters of tts/asr text; a speaker says 1000 characters in about a minute
MAX_URL = 2048
MAX_FIELD = 128  # sn, roomName, tag
MAX_BODY_BYTES = 16 * 1024
URL_RE = re.compile(r"https?://[^\s/?#]+\S*")  # use fullmatch: `$` would let a trailing newline through
EXAMPLE = '{"type": "tts", "devices": {"roomName": "Kitchen"}, "data": {"text": "Dinner is ready"}}'

TriggerType = Literal["tts", "audio", "asr"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a body: where (`data.url`) and what to do about it."""

    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        """The `details` item of a 422 body."""
        return {"path": self.path, "message": self.message}


class TriggerInvalid(Exception):
    """The body breaks the contract; `problems` say where and how to fix it."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__(summary(problems))


def summary(problems: list[Problem]) -> str:
    """One sentence for the `error` field."""
    first = problems[0]
    where = "" if first.path == "(body)" else f"{first.path}: "
    more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''}, see details)" \
        if len(problems) > 1 else ""
    return f"{where}{first.message}{more}"


@dataclass(frozen=True, slots=True)
class DeviceQuery:
    """Which speakers: every given field must match (AND)."""

    sn: str | None = None
    room_name: str | None = None
    tag: str | None = None
    is_all: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The query in the platform's field names, without defaults."""
        out: dict[str, Any] = {}
        if self.sn is not None:
            out["sn"] = self.sn
        if self.room_name is not None:
            out["roomName"] = self.room_name
        if self.tag is not None:
            out["tag"] = self.tag
        if self.is_all:
            out["isAll"] = True
        return out


@dataclass(frozen=True, slots=True)
class Trigger:
    """A checked trigger: what to do and where."""

    type: TriggerType
    devices: DeviceQuery
    text: str | None = None
    url: str | None = None

    def as_body(self) -> dict[str, Any]:
        """The trigger as a webhook body (what `hubd webhook create --default-action` stores)."""
        data = {"url": self.url} if self.type == "audio" else {"text": self.text}
        return {"type": self.type, "devices": self.devices.as_dict(), "data": data}

    def command(self, command_id: str) -> dict[str, Any]:
        """The `B/device/ID/command` payload (docs/mqtt.md)."""
        out: dict[str, Any] = {"id": command_id, "type": self.type}
        if self.type == "audio":
            out["url"] = self.url
        else:
            out["text"] = self.text
        return out


def too_large(size: int | None) -> TriggerInvalid:
    """The 422 for a body over MAX_BODY_BYTES (size None: not known, it was cut off while read)."""
    said = f"{size} bytes, " if size is not None else ""
    return TriggerInvalid([Problem("(body)", f"the body is {said}more than the {MAX_BODY_BYTES} bytes allowed; "
                                             "send only type, devices and data")])


def parse_bytes(raw: bytes) -> Trigger:
    """Decode and check a request body (size and nesting bounded before it is parsed); raise TriggerInvalid."""
    if len(raw) > MAX_BODY_BYTES:
        raise too_large(len(raw))
    try:
        data = load_json(raw, max_bytes=MAX_BODY_BYTES)
    except JsonBodyInvalid as err:
        raise TriggerInvalid([Problem("(body)", f"{err}; send a UTF-8 JSON object like {EXAMPLE}")]) from None
    return parse(data)


def parse(data: Any) -> Trigger:
    """Check a decoded body; raise TriggerInvalid listing every problem found."""
    if not isinstance(data, dict):
        raise TriggerInvalid([Problem("(body)", f"the body must be a JSON object, not {json_kind(data)}; "
                                                f"send an object like {EXAMPLE}")])
    problems: list[Problem] = []
    _unknown(data, ("type", "devices", "data"), "", problems)

    kind = data.get("type")
    trigger_type: TriggerType | None = None
    if "type" not in data:
        problems.append(Problem("type", "missing; add \"type\": \"tts\", \"audio\" or \"asr\""))
    elif not isinstance(kind, str):
        problems.append(Problem("type", f"must be a string, not {json_kind(kind)}: \"tts\", \"audio\" or \"asr\""))
    elif kind not in TYPES:
        problems.append(Problem("type", f"unknown type {kind!r}; use \"tts\" (speak text), \"audio\" (play a URL) "
                                        "or \"asr\" (run a voice command)"))
    else:
        trigger_type = kind  # type: ignore[assignment]  # checked against TYPES just above

    query = _devices(data, problems)
    text, url = _data(data, trigger_type, problems)
    if problems or trigger_type is None or query is None:
        raise TriggerInvalid(problems)
    return Trigger(trigger_type, query, text=text, url=url)


def _devices(data: dict[str, Any], problems: list[Problem]) -> DeviceQuery | None:
    if "devices" not in data:
        problems.append(Problem("devices", "missing; add a device query such as {\"roomName\": \"Kitchen\"}, "
                                           "{\"tag\": \"announce\"}, {\"sn\": \"...\"} or {\"isAll\": true}"))
        return None
    devices = data["devices"]
    if not isinstance(devices, dict):
        problems.append(Problem("devices", f"must be an object, not {json_kind(devices)}; "
                                           "for example {\"roomName\": \"Kitchen\"} or {\"isAll\": true}"))
        return None
    before = len(problems)
    _unknown(devices, ("sn", "roomName", "tag", "isAll"), "devices.", problems)
    # null in any of the four fields means the same as leaving the field out.
    fields: dict[str, str | None] = {}
    for key in ("sn", "roomName", "tag"):
        value = devices.get(key)
        if value is None:
            fields[key] = None
        elif not isinstance(value, str):
            problems.append(Problem(f"devices.{key}", f"must be a string, not {json_kind(value)}"))
        elif not value.strip():
            problems.append(Problem(f"devices.{key}", "is empty; give a value or leave the field out"))
        elif len(value) > MAX_FIELD:
            problems.append(Problem(f"devices.{key}", f"is longer than {MAX_FIELD} characters"))
        elif (bad := _unpaired_surrogate(value)) is not None:
            problems.append(Problem(f"devices.{key}", bad))
        else:
            fields[key] = value.strip()
    is_all = devices.get("isAll")
    if is_all is None:
        is_all = False
    elif not isinstance(is_all, bool):
        problems.append(Problem("devices.isAll", f"must be true or false, not {json_kind(is_all)}"))
        is_all = False
    if len(problems) > before:
        return None
    query = DeviceQuery(fields["sn"], fields["roomName"], fields["tag"], is_all)
    if not is_all and query.sn is None and query.room_name is None and query.tag is None:
        problems.append(Problem("devices", "selects nothing; give sn, roomName or tag, or \"isAll\": true "
                                           "for every speaker"))
        return None
    return query


def _data(data: dict[str, Any], kind: TriggerType | None, problems: list[Problem]) -> tuple[str | None, str | None]:
    if "data" not in data:
        hint = "{\"url\": \"https://...\"}" if kind == "audio" else "{\"text\": \"...\"}"
        problems.append(Problem("data", f"missing; add \"data\": {hint}"))
        return None, None
    body = data["data"]
    if not isinstance(body, dict):
        problems.append(Problem("data", f"must be an object, not {json_kind(body)}"))
        return None, None
    if kind is None:
        return None, None
    wanted = "url" if kind == "audio" else "text"
    for key in body:
        if key != wanted:
            problems.append(Problem(f"data.{key}", f"is not used by {kind}; {kind} takes data.{wanted} only"))
    value = body.get(wanted)
    path = f"data.{wanted}"
    if wanted not in body:
        what = "the audio URL to play (http:// or https://)" if kind == "audio" else \
            "the text to speak" if kind == "tts" else "the voice command to run"
        problems.append(Problem(path, f"missing; {kind} needs {path}: {what}"))
    elif not isinstance(value, str):
        problems.append(Problem(path, f"must be a string, not {json_kind(value)}"))
    elif (bad := _unpaired_surrogate(value)) is not None:
        problems.append(Problem(path, bad))
    elif kind == "audio":
        if len(value) > MAX_URL:
            problems.append(Problem(path, f"is longer than {MAX_URL} characters"))
        elif not URL_RE.fullmatch(value):
            problems.append(Problem(path, f"{value[:80]!r} is not an http:// or https:// URL; give the full "
                                          "address of the audio file, e.g. https://example.com/chime.mp3"))
        else:
            return None, value
    elif not value.strip():
        problems.append(Problem(path, "is empty; give the text" + (" to speak" if kind == "tts" else
                                                                  " of the voice command")))
    elif len(value) > MAX_TEXT:
        problems.append(Problem(path, f"is {len(value)} characters long; at most {MAX_TEXT} are allowed, "
                                      "split it into several calls"))
    else:
        return value.strip(), None
    return None, None


def _unpaired_surrogate(value: str) -> str | None:
    """The problem with a string JSON can carry but UTF-8 cannot (a lone \\ud800..\\udfff escape), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        return (f"has an unpaired surrogate escape (\\u{ord(value[err.start]):04x} at character {err.start + 1}); "
                "send valid Unicode text (an emoji is two escapes, e.g. \\ud83d\\ude00, or the character itself)")
    return None


def _unknown(obj: dict[str, Any], known: tuple[str, ...], prefix: str, problems: list[Problem]) -> None:
    for key in obj:
        if key not in known:
            names = ", ".join(known)
            problems.append(Problem(f"{prefix}{key}", f"unknown field; the fields are {names}"))

