"""What the speaker agent reads and writes on MQTT (docs/mqtt.md), the pure part: the retained config
it announces, the commands it takes (`{"id", "type", "text"?, "url"?}`) and the JSON it publishes.

A command is refused at the door (an `error` result at once, nothing run) when its text has a control
character other than tab, line feed and carriage return, or its URL is not one `hubd.speaker.reach` takes.
No I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hubd.speaker import mixer
from hubd.speaker.config import SpeakerConfig
from hubd.speaker.reach import url_problem
from hubd.speaker.template import ALLOWED_CONTROLS, control_character
from hubd.untrusted.depth import too_deep

MAX_COMMAND_BYTES = 64 * 1024
MAX_DEPTH = 8  # a command nests 1 level; deeper ones are refused before json.loads recurses (RecursionError)
COMMAND_TYPES = ("tts", "audio", "asr")
VOLUME_CAPABILITIES = (("Volume", mixer.VOLUME_OPERATIONS), ("Mute", mixer.MUTE_OPERATIONS))


@dataclass(frozen=True, slots=True)
class Job:
    """A checked command: `{"id", "type", "text"?, "url"?}`."""

    id: str
    type: str
    text: str | None = None
    url: str | None = None


class CommandInvalid(Exception):
    """A command payload the speaker cannot read; the text says why."""


def announcement(config: SpeakerConfig) -> dict[str, Any]:
    """The retained `B/device/ID/config`: the Endpoint without states, with `sn` and `tags`."""
    body: dict[str, Any] = {"displayName": config.name, "displayType": "speaker", "sn": config.serial,
                            "tags": list(config.tags), "capabilities": []}
    if config.room:
        body["recommendRoomName"] = config.room
    if config.volume.command is not None:
        body["capabilities"] = [{"interface": name, "supportedOperations": list(ops), "proactivelyReported": True,
                                 "retrievable": True} for name, ops in VOLUME_CAPABILITIES]
    return body


def parse_command(payload: bytes) -> tuple[str | None, Job | CommandInvalid]:
    """(the id if there is one, the job or what is wrong with it)."""
    if len(payload) > MAX_COMMAND_BYTES:
        return None, CommandInvalid(f"the command has {len(payload)} bytes; at most {MAX_COMMAND_BYTES}")
    if too_deep(payload, MAX_DEPTH):
        return None, CommandInvalid(f"the command nests more than {MAX_DEPTH} levels deep; a command is one JSON "
                                    "object")
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, CommandInvalid("the command is not JSON")
    if not isinstance(data, dict):
        return None, CommandInvalid("the command is not a JSON object")
    command_id = data.get("id")
    if not isinstance(command_id, str) or not command_id:
        return None, CommandInvalid("id: must be a non-empty string")
    bad = control_character(command_id)
    if bad is not None:
        return command_id, CommandInvalid(f"id: has {bad}; use letters, digits and punctuation")
    kind = data.get("type")
    if kind not in COMMAND_TYPES:
        return command_id, CommandInvalid(f"type: must be one of tts, audio, asr, not {kind!r}")
    field = "url" if kind == "audio" else "text"
    value = data.get(field)
    if not isinstance(value, str) or not value.strip():
        return command_id, CommandInvalid(f"{field}: a {kind} command needs a non-empty {field}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return command_id, CommandInvalid(f"{field}: has an unpaired surrogate; send valid Unicode")
    value = value.strip()
    if kind == "audio":
        problem = url_problem(value)
        if problem is not None:
            return command_id, CommandInvalid(f"url: {problem}")
        return command_id, Job(command_id, kind, url=value)
    bad = control_character(value, allowed=ALLOWED_CONTROLS)
    if bad is not None:
        return command_id, CommandInvalid(f"text: has {bad}; send plain text (tabs and line breaks are fine)")
    return command_id, Job(command_id, kind, text=value)


def encode(body: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
