"""The simulated speaker: a Volume device that takes tts/audio/asr commands, and its command line.

Owns `B/device/ID/command` handling (docs/mqtt.md): records every command, speaks tts through
espeak-ng into a WAV file when espeak-ng is installed (else logs the text), logs audio and asr, and
answers on `command/result`. Must not import hubd.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

from simulators.device_fleet import LOG_FORMAT, DeviceFleet, add_broker_arguments, serve
from simulators.sim_device import CommonOptions, InterfaceSpec, Recorder, SimDevice

log = logging.getLogger(__name__)

TTS_TIMEOUT_S = 10.0
COMMAND_TYPES = ("tts", "audio", "asr")
URL_RE = re.compile(r"^https?://")


class CommandFailed(Exception):
    """A command the speaker could not carry out; the text goes into the result's message."""


@dataclass(frozen=True, slots=True)
class ReceivedCommand:
    """A command the speaker received, with what became of it."""

    payload: dict[str, object]  # the decoded JSON object ({} if the payload was not one)
    raw: bytes
    status: str  # "done" or "error"
    message: str | None = None
    wav_path: Path | None = None

    @property
    def id(self) -> str | None:
        """The command id, if it was a string."""
        return self._text("id")

    @property
    def type(self) -> str | None:
        """tts, audio or asr (or whatever else was sent)."""
        return self._text("type")

    @property
    def text(self) -> str | None:
        """The text of a tts or asr command."""
        return self._text("text")

    @property
    def url(self) -> str | None:
        """The URL of an audio command."""
        return self._text("url")

    def _text(self, key: str) -> str | None:
        value = self.payload.get(key)
        return value if isinstance(value, str) else None


class SimSpeaker(SimDevice):
    """A smart speaker: Volume, a serial number and tags, and tts/audio/asr commands."""

    kind = "speaker"
    label = "Speaker"
    display_type = "speaker"
    accepts_commands = True

    def __init__(self, endpoint_id: str, *, sn: str | None = None, tags: Sequence[str] = (),
                 volume: int = 50, out_dir: Path | None = None, tts_timeout_s: float = TTS_TIMEOUT_S,
                 **common: Unpack[CommonOptions]) -> None:
        super().__init__(
            endpoint_id,
            interfaces=(InterfaceSpec("Volume", ("Set", "Adjust", "SetMax", "SetMin")),),
            initial={"Volume": volume},
            **common,
        )
        self.sn = sn or endpoint_id
        self.tags = list(tags)
        self.out_dir = out_dir
        self.tts_timeout_s = tts_timeout_s
        self.received: Recorder[ReceivedCommand] = Recorder()

    @property
    def commands(self) -> list[ReceivedCommand]:
        """Every command received so far, in order."""
        return self.received.items

    async def wait_for_command(self, pred: Callable[[ReceivedCommand], bool] | None = None,
                               timeout_s: float = 5.0) -> ReceivedCommand:
        """The first command (handled, result known) matching pred; TimeoutError after timeout_s."""
        return await self.received.wait_for(pred, timeout_s)

    def config(self) -> dict[str, object]:
        """The device config plus `sn` and `tags`."""
        return {**super().config(), "sn": self.sn, "tags": list(self.tags)}

    async def handle_command(self, payload: bytes) -> dict[str, object] | None:
        """Carry out a command; the `command/result` payload, or None if there is no id to answer to."""
        data = _json_object(payload)
        command_id = data.get("id") if data is not None else None
        wav_path: Path | None = None
        try:
            if data is None:
                raise CommandFailed("payload is not a JSON object")
            if not isinstance(command_id, str) or not command_id:
                raise CommandFailed("id: must be a non-empty string")
            wav_path = await self._execute(data)
        except CommandFailed as err:
            log.warning("speaker %s: command %r failed: %s", self.endpoint_id, command_id, err)
            self.received.add(ReceivedCommand(data or {}, payload, "error", str(err)))
            if not isinstance(command_id, str | int) or isinstance(command_id, bool):
                return None
            return {"id": command_id, "status": "error", "message": str(err)}
        self.received.add(ReceivedCommand(data, payload, "done", wav_path=wav_path))
        return {"id": command_id, "status": "done"}

    async def _execute(self, data: dict[str, object]) -> Path | None:
        kind = data.get("type")
        if kind not in COMMAND_TYPES:
            raise CommandFailed(f"type: must be one of {list(COMMAND_TYPES)}, got {kind!r}")
        if kind == "audio":
            url = data.get("url")
            if not isinstance(url, str) or not URL_RE.match(url):
                raise CommandFailed("url: an audio command needs an http(s) URL")
            _check_unicode("url", url)
            log.info("speaker %s plays %s", self.endpoint_id, url)
            return None
        text = data.get("text")
        if not isinstance(text, str) or not text.strip():
            raise CommandFailed(f"text: a {kind} command needs a non-empty text")
        _check_unicode("text", text)
        if kind == "asr":
            log.info("speaker %s hears the voice command %r", self.endpoint_id, text)
            return None
        return await self._speak(text)

    async def _speak(self, text: str) -> Path | None:
        espeak = shutil.which("espeak-ng")
        if espeak is None:
            log.info("speaker %s says %r (espeak-ng is not installed, so no audio)", self.endpoint_id, text)
            return None
        if self.out_dir is None:
            self.out_dir = Path(tempfile.mkdtemp(prefix=f"sim-{self.endpoint_id}-"))
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # Numbered file names: the command id comes from outside and must not pick the path.
        path = self.out_dir / f"{self.endpoint_id}-{len(self.received.items) + 1:04d}.wav"
        proc = await asyncio.create_subprocess_exec(
            espeak, "-w", str(path), "--stdin",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(self.tts_timeout_s):
                _, stderr = await proc.communicate(text.encode())
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise CommandFailed(f"espeak-ng took longer than {self.tts_timeout_s} s") from None
        except BaseException:  # cancelled (the speaker stops): espeak-ng must not outlive it, nor its pipes the loop
            if proc.returncode is None:
                proc.kill()
            await asyncio.shield(proc.wait())
            raise
        if proc.returncode != 0:
            why = stderr.decode(errors="replace").strip()[:200]
            raise CommandFailed(f"espeak-ng exited with {proc.returncode}: {why}")
        log.info("speaker %s says %r into %s", self.endpoint_id, text, path)
        return path


def main(argv: list[str]) -> int:
    """`python -m simulators speaker ...`: one speaker until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m simulators speaker", description=main.__doc__)
    add_broker_arguments(parser)
    parser.add_argument("--sn", required=True, help="serial number (also the endpointId unless --id)")
    parser.add_argument("--room", required=True, help="recommendRoomName, no digits (e.g. 'Living Room')")
    parser.add_argument("--tag", action="append", default=[], help="a tag for webhook targeting (repeatable)")
    parser.add_argument("--id", help="endpointId (default: the serial number)")
    parser.add_argument("--name", help="displayName (default: '<room> Speaker')")
    parser.add_argument("--out-dir", type=Path, help="where tts WAV files go (default: a new temp directory)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="sim-speaker-"))
    try:
        speaker = SimSpeaker(args.id or args.sn, sn=args.sn, tags=args.tag, room=args.room, out_dir=out_dir,
                             **({"display_name": args.name} if args.name else {}))
    except ValueError as err:
        parser.error(str(err))
    log.info("speaker %s: tts output goes to %s", speaker.endpoint_id, out_dir)
    fleet = DeviceFleet(host=args.host, port=args.port, base_topic=args.base_topic, devices=[speaker],
                        username=args.username, password=args.password)
    return asyncio.run(serve(fleet, interval_s=None))


def _check_unicode(field: str, value: str) -> None:
    """JSON can carry a lone surrogate (\\ud800) that no UTF-8 text, and so no espeak-ng input, can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise CommandFailed(f"{field}: has an unpaired surrogate at character {err.start + 1}; "
                            "send valid Unicode") from None


def _json_object(payload: bytes) -> dict[str, object] | None:
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
