"""The speaker's sound: which tts, players and mixer it uses (found at start), and speaking, playing, mixing.

Owns the choice of programs: the tts command (espeak-ng by default), a player for WAV files (player.command,
else the first of pw-play, paplay and aplay that can reach its sound server), a player for other audio files
(player.command, else ffplay, mpg123 for MP3, gst-play-1.0), a URL player (player.url_command) and the
mixer (volume.command). Every program gets its arguments as a list (hubd.speaker.template), never a shell.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hubd.speaker.config import SpeakerConfig
from hubd.speaker.fetch import WAV_TYPES
from hubd.speaker.process import ProcessFailed, run_program
from hubd.speaker.template import ALLOWED_CONTROLS, CommandTemplate, ValueRefused, control_character

log = logging.getLogger(__name__)

MAX_SPOKEN_CHARS = 5000
MPEG_TYPES = frozenset({"audio/mpeg", "audio/mp3"})
PLAYER_COMMAND = "player.command"  # the note of a configured player


class SoundFailed(Exception):
    """A sound could not be made or played; the text says why and what to do."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A program for one role: its command (None: none found), where it is, and how it was chosen."""

    role: str
    template: CommandTemplate | None
    path: str | None
    note: str
    types: frozenset[str] | None = None  # the content types it plays; None: all

    @property
    def usable(self) -> bool:
        """A command, and its program is installed."""
        return self.template is not None and self.path is not None


@dataclass(frozen=True, slots=True)
class Tools:
    """What the speaker found at start."""

    tts: Tool
    player: Tool  # WAV files: the tts output and WAV downloads
    file_players: tuple[Tool, ...]  # other audio files, in order of preference
    url_player: Tool | None
    mixer: Tool | None
    skipped: tuple[str, ...] = field(default=())  # players found but passed over, and why

    @property
    def player_configured(self) -> bool:
        """player.command is set: it plays every file."""
        return self.player.note == PLAYER_COMMAND

    def player_for(self, content_type: str) -> Tool | None:
        """The player for a file of this content type, or None (a configured one is tried even if it was not
        found at start: it may have been installed since)."""
        if content_type in WAV_TYPES or self.player_configured:
            return self.player if self.player.template is not None else None
        return next((p for p in self.file_players if p.types is None or content_type in p.types), None)


Which = Callable[[str], str | None]

# (program, command, the sound server it needs: a socket under $XDG_RUNTIME_DIR, or None for ALSA itself)
WAV_PLAYERS = (("pw-play", "pw-play {file}", "pipewire-0"), ("paplay", "paplay {file}", "pulse/native"),
               ("aplay", "aplay -q {file}", None))
FILE_PLAYERS = (("ffplay", "ffplay -nodisp -autoexit -loglevel error {file}", None),
                ("mpg123", "mpg123 -q {file}", MPEG_TYPES),
                ("gst-play-1.0", "gst-play-1.0 --no-interactive -q {file}", None))


def find_tools(config: SpeakerConfig, which: Which = shutil.which, env: Mapping[str, str] | None = None) -> Tools:
    """Look for the programs the config names or the agent would pick by itself."""
    environ = os.environ if env is None else env
    tts = config.tts.template
    skipped: list[str] = []
    configured = config.player.template
    if configured is not None:
        player = Tool("player", configured, which(configured.program), PLAYER_COMMAND)
        file_players: tuple[Tool, ...] = ()
    else:
        player = _wav_player(which, environ, skipped)
        file_players = tuple(Tool("audio player", CommandTemplate.parse(command, ("file",)), path, "found at start",
                                  types)
                             for program, command, types in FILE_PLAYERS if (path := which(program)) is not None)
    url = config.player.url_template
    mixer = config.volume.template
    return Tools(
        tts=Tool("tts", tts, which(tts.program), "tts.command"),
        player=player,
        file_players=file_players,
        url_player=None if url is None else Tool("url player", url, which(url.program), "player.url_command"),
        mixer=None if mixer is None else Tool("mixer", mixer, which(mixer.program), "volume.command"),
        skipped=tuple(skipped),
    )


def _wav_player(which: Which, env: Mapping[str, str], skipped: list[str]) -> Tool:
    runtime = env.get("XDG_RUNTIME_DIR", "")
    for program, command, server in WAV_PLAYERS:
        path = which(program)
        if path is None:
            continue
        if server is not None and not _server_reachable(program, server, runtime, env):
            skipped.append(f"{program} (no {'PipeWire' if program == 'pw-play' else 'PulseAudio'} server for "
                           f"this user{'' if runtime else ': XDG_RUNTIME_DIR is not set'})")
            continue
        return Tool("player", CommandTemplate.parse(command, ("file",)), path, "found at start")
    return Tool("player", None, None, "none of pw-play, paplay, aplay found: install alsa-utils (aplay) "
                                      "or set player.command")


def _server_reachable(program: str, socket_name: str, runtime: str, env: Mapping[str, str]) -> bool:
    if program == "paplay" and env.get("PULSE_SERVER"):
        return True
    if program == "pw-play" and env.get("PIPEWIRE_REMOTE"):
        return True
    return bool(runtime) and Path(runtime, socket_name).exists()


class Loudspeaker:
    """Speaks text, plays files and URLs, and sets the mixer, with the programs found at start."""

    def __init__(self, config: SpeakerConfig, tools: Tools, workdir: Path) -> None:
        self._config = config
        self._tools = tools
        self._workdir = workdir
        self._counter = itertools.count(1)

    @property
    def tools(self) -> Tools:
        """What was found at start."""
        return self._tools

    def next_stem(self, kind: str) -> str:
        """A fresh file name stem in the work directory (numbered: a command's id never picks a path)."""
        return f"{kind}-{next(self._counter):04d}"

    @property
    def workdir(self) -> Path:
        """Where sounds are written before they are played."""
        return self._workdir

    async def say(self, text: str) -> None:
        """Synthesize `text` into a WAV file and play it."""
        if len(text) > MAX_SPOKEN_CHARS:
            raise SoundFailed(f"text: {len(text)} characters is more than the {MAX_SPOKEN_CHARS} a speaker says at "
                              "once; split it")
        bad = control_character(text, allowed=ALLOWED_CONTROLS)
        if bad is None and not text.isascii():
            try:
                text.encode()  # an assistant's JSON answer may hold a "\ud800" escape: no program takes it
            except UnicodeEncodeError as err:
                bad = f"an unpaired surrogate (U+{ord(text[err.start]):04X}) at position {err.start + 1}"
        if bad is not None:
            raise SoundFailed(f"text: the text to speak has {bad}; send plain text (tabs and line breaks are fine)")
        tts = self._tools.tts
        assert tts.template is not None  # tts always has a command (the default)
        wav = self._workdir / f"{self.next_stem('tts')}.wav"
        argv = _fill(tts.template, {"text": text, "wav": str(wav)}, "the tts command")
        stdin = None if tts.template.uses("text") else text.encode()
        try:
            await self._run(argv, "the tts command", self._config.tts.timeout_s, stdin,
                            missing="or set tts.command to a TTS program that is")
            if not wav.exists() or wav.stat().st_size == 0:
                raise SoundFailed(f"the tts command `{Path(tts.template.program).name}` wrote no sound to {{wav}}: "
                                  "check that tts.command writes its WAV file to {wav}")
            await self.play_file(wav, "audio/wav")
        finally:
            wav.unlink(missing_ok=True)

    async def play_file(self, path: Path, content_type: str) -> None:
        """Play a local audio file with the player for its type."""
        player = self._tools.player_for(content_type)
        if player is None or player.template is None:
            raise SoundFailed(self._no_player(content_type))
        await self._run(_fill(player.template, {"file": str(path)}, "the player"), "the player",
                        self._config.player.timeout_s, missing="or set player.command")

    async def play_url(self, url: str) -> None:
        """Hand the URL to player.url_command."""
        player = self._tools.url_player
        assert player is not None and player.template is not None  # the agent asks only when there is one
        what = "the URL player (player.url_command)"
        await self._run(_fill(player.template, {"url": url}, what), what, self._config.player.timeout_s)

    async def set_level(self, percent: int) -> None:
        """Run volume.command with `percent` (a bare number 0..100)."""
        mixer = self._tools.mixer
        assert mixer is not None and mixer.template is not None  # Volume is offered only with a mixer
        what = "the mixer (volume.command)"
        await self._run(_fill(mixer.template, {"percent": str(percent)}, what), what, self._config.volume.timeout_s)

    async def _run(self, argv: list[str], what: str, timeout_s: float, stdin: bytes | None = None, *,
                   missing: str = "") -> None:
        try:
            await run_program(argv, what=what, timeout_s=timeout_s, stdin=stdin)
        except ProcessFailed as err:
            message = str(err)
            if missing and "is not installed" in message:
                message = f"{message}, {missing}"
            raise SoundFailed(message) from None

    def _no_player(self, content_type: str) -> str:
        if content_type in WAV_TYPES or self._tools.player_configured:
            return f"no audio player: {self._tools.player.note}"
        names = ", ".join(program for program, _, _ in FILE_PLAYERS)
        return (f"no player for {content_type} found at start (looked for {names}): install ffmpeg (ffplay), "
                "or set player.command")


def _fill(template: CommandTemplate, values: dict[str, str], what: str) -> list[str]:
    """The command's arguments; SoundFailed when a value cannot be one (a control character)."""
    try:
        return template.fill(values)
    except ValueRefused as err:
        raise SoundFailed(f"{what}: {err}") from None


def tool_problems(tools: Tools) -> list[str]:
    """What the agent warns of at start: each tool it has no command for, or whose program is not installed."""
    problems = []
    for tool in (tools.tts, tools.player, tools.url_player, tools.mixer):
        if tool is None:
            continue
        if tool.template is None:
            problems.append(f"{tool.role}: {tool.note}")
        elif tool.path is None:
            problems.append(f"{tool.role}: `{tool.template.program}` ({tool.note}) is not installed; commands that "
                            "need it will fail (hubd speaker --check says what to install)")
    return problems
