"""speaker.yaml: the speaker agent's pydantic models and loader (every key: speaker.example.yaml).

Read with hubd's own YAML reader (`${ENV_VAR}`, `<secret>_file`, merge keys, line numbers), and reported
as hubd's config is: one `<key.path>: <problem> (line N)` line per problem, all in one pass. Imports
hubd.config.model, hubd.config.yamlfile, hubd.errors, hubd.spoken (spoken names), hubd.devices.model (the endpointId
rule) and the command templates.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from hubd.config.model import LogConfig, MqttConfig
from hubd.config.paths import KeyPath
from hubd.config.yamlfile import parse_yaml_model, read_config_file
from hubd.devices.model import MAX_DEVICE_ID_CHARS, valid_device_id
from hubd.speaker.template import CommandTemplate, control_character
from hubd.spoken import spoken

DEFAULT_TTS = "espeak-ng -v en-us -w {wav} {text}"
EXAMPLE_FILE = "speaker.example.yaml"
_URL_RE = re.compile(r"^https?://[^/\s]+")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TtsConfig(_Model):
    """How text becomes sound: a command that writes a WAV file."""

    command: str = DEFAULT_TTS  # {wav}: the file to write; {text}: the text (without it, the text goes to stdin)
    timeout_s: float = Field(60.0, gt=0, le=3600)

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        CommandTemplate.parse(value, ("wav", "text"), required=("wav",))
        return value

    @property
    def template(self) -> CommandTemplate:
        """The command, split into arguments."""
        return CommandTemplate.parse(self.command, ("wav", "text"), required=("wav",))


class PlayerConfig(_Model):
    """How a sound file is played; unset: found at start (pw-play, paplay, aplay; ffplay, mpg123, gst-play-1.0)."""

    command: str | None = None  # gets {file}: a local audio file (the tts WAV or a download)
    url_command: str | None = None  # gets {url}: audio URLs go to it instead of being downloaded (e.g. mpv, mpc)
    timeout_s: float = Field(600.0, gt=0, le=86400)  # the longest sound

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None:
            CommandTemplate.parse(value, ("file",), required=("file",))
        return value

    @field_validator("url_command")
    @classmethod
    def _url_command(cls, value: str | None) -> str | None:
        if value is not None:
            CommandTemplate.parse(value, ("url",), required=("url",))
        return value

    @property
    def template(self) -> CommandTemplate | None:
        """`command` split into arguments, or None."""
        return None if self.command is None else CommandTemplate.parse(self.command, ("file",), ("file",))

    @property
    def url_template(self) -> CommandTemplate | None:
        """`url_command` split into arguments, or None."""
        return None if self.url_command is None else CommandTemplate.parse(self.url_command, ("url",), ("url",))


class AudioConfig(_Model):
    """Audio URLs: downloaded (http and https only), then played."""

    max_bytes: int = Field(20_000_000, ge=1024, le=2**31)  # held also when the server sends no Content-Length
    timeout_s: float = Field(30.0, gt=0, le=3600)  # the whole download
    allow_local: bool = False  # true: also from loopback and link-local addresses (hubd.speaker.reach)


class AsrConfig(_Model):
    """Voice commands: forwarded to the local voice assistant, whose answer is spoken."""

    forward: Literal["home_assistant", "command"] | None = None  # unset: asr commands are refused
    url: str | None = None  # Home Assistant's base URL, e.g. http://127.0.0.1:8123
    token: SecretStr | None = None  # a long-lived access token; usually token_file
    language: str | None = None  # sent to Home Assistant with the text (its default otherwise)
    agent_id: str | None = None  # Home Assistant's conversation agent (its default otherwise)
    command: str | None = None  # gets {text} (or the text on stdin); prints the answer
    timeout_s: float = Field(15.0, gt=0, le=600)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not _URL_RE.match(value):
            raise ValueError("must be Home Assistant's http:// or https:// base URL, e.g. http://127.0.0.1:8123")
        return value.rstrip("/") if value else value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None:
            CommandTemplate.parse(value, ("text",))
        return value

    @property
    def template(self) -> CommandTemplate | None:
        """`command` split into arguments, or None."""
        return None if self.command is None else CommandTemplate.parse(self.command, ("text",))


class VolumeConfig(_Model):
    """The mixer; unset: the speaker offers no Volume or Mute."""

    command: str | None = None  # gets {percent}: a bare number 0..100
    initial: int = Field(50, ge=0, le=100)  # set at start, so the level the speaker reports is the mixer's
    timeout_s: float = Field(10.0, gt=0, le=600)

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None:
            CommandTemplate.parse(value, ("percent",), required=("percent",))
        return value

    @property
    def template(self) -> CommandTemplate | None:
        """`command` split into arguments, or None."""
        return None if self.command is None else CommandTemplate.parse(self.command, ("percent",), ("percent",))


class SpeakerConfig(_Model):
    """The whole speaker.yaml."""

    mqtt: MqttConfig = MqttConfig()
    id: str  # the endpointId: the topics are <base_topic>/device/<id>/...
    sn: str | None = None  # the serial number webhooks select by (default: id)
    name: str  # displayName: words only (the platform refuses digits and punctuation)
    room: str | None = None  # recommendRoomName, words only
    tags: list[str] = Field(default_factory=list)
    tts: TtsConfig = TtsConfig()
    player: PlayerConfig = PlayerConfig()
    audio: AudioConfig = AudioConfig()
    asr: AsrConfig = AsrConfig()
    volume: VolumeConfig = VolumeConfig()
    queue_size: int = Field(10, ge=1, le=1000)  # commands waiting behind the one playing; more get an error
    log: LogConfig = LogConfig()

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not valid_device_id(value) or control_character(value) is not None:
            raise ValueError(f"must be 1 to {MAX_DEVICE_ID_CHARS} characters without '/', '+', '#' or control "
                             "characters, e.g. kitchen-speaker")
        return value

    @field_validator("sn")
    @classmethod
    def _sn(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty; give the serial number or leave the key out (it defaults to id)")
        return value

    @field_validator("name", "room")
    @classmethod
    def _speakable(cls, value: str | None) -> str | None:
        if value is None:
            return value
        words = spoken(value)
        if not words:
            raise ValueError(f"{value!r} has nothing the platform can speak; use words, e.g. 'Kitchen Speaker'")
        if words != value:
            raise ValueError(f"{value!r} has digits or punctuation, which the platform refuses; write {words!r}")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str]) -> list[str]:
        if any(not tag.strip() for tag in value):
            raise ValueError("a tag is empty; give words such as 'announce'")
        return value

    @property
    def client_id(self) -> str:
        """mqtt.client_id when given, else `hubd-speaker-<id>`."""
        return self.mqtt.client_id if "client_id" in self.mqtt.model_fields_set else f"hubd-speaker-{self.id}"

    @property
    def serial(self) -> str:
        """sn, or id."""
        return self.sn or self.id


def load_speaker_config(path: str | Path, env: Mapping[str, str] | None = None) -> SpeakerConfig:
    """Read, substitute and validate speaker.yaml; ConfigError with one line per problem."""
    path = Path(path)
    text = read_config_file(path, "speaker config")
    return parse_speaker_config(text, env if env is not None else os.environ, source=str(path))


def parse_speaker_config(text: str, env: Mapping[str, str], source: str = "<speaker config>") -> SpeakerConfig:
    """Validate YAML text; ConfigError with `<key.path>: <problem> (line N)` lines, all in one pass."""
    return parse_yaml_model(SpeakerConfig, text, env, source, top_level="keys (id, name, mqtt, tts, ...)",
                            example=EXAMPLE_FILE, cross_checks=_cross_checks)


def _cross_checks(data: dict[str, Any]) -> list[tuple[KeyPath, str]]:
    """What one key cannot say alone (keys that need each other, values that would hurt hubd), read from the
    raw values, so they are reported in the same pass as the rest."""
    out: list[tuple[KeyPath, str]] = []
    mqtt = _section(data, "mqtt")
    if mqtt.get("embedded") is True:
        out.append((("mqtt", "embedded"), "the speaker agent connects to hubd's broker and cannot start one; "
                                          "remove the key"))
    if mqtt.get("client_id") == "hubd":
        out.append((("mqtt", "client_id"), "'hubd' is hubd's own client id: two clients with one id throw each "
                                           "other off the broker; leave the key out (default hubd-speaker-<id>)"))
    asr = _section(data, "asr")
    if asr.get("forward") == "home_assistant":
        if asr.get("url") is None:
            out.append((("asr", "url"), "missing: forward home_assistant needs Home Assistant's base URL, "
                                        "e.g. http://127.0.0.1:8123"))
        token = asr.get("token")
        if token is None:
            out.append((("asr", "token_file"), "missing: forward home_assistant needs a file holding a long-lived "
                                               "access token (Home Assistant: your profile, Security)"))
        elif isinstance(token, str) and not token.strip():
            out.append((("asr", "token"), "the token is empty; put the long-lived access token in the file"))
    elif asr.get("forward") == "command" and asr.get("command") is None:
        out.append((("asr", "command"), "missing: forward command needs a command that gets {text} and prints "
                                        "the answer"))
    return out


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}
