"""`hubd speaker -c FILE --check`: say what the speaker found and play a test sentence, so a user can tell in
one command why the speaker is silent.

Owns the report: one line each for the tts, the players, the mixer, the voice assistant and the broker,
then the test sentence spoken through the tts and the player; exit 0 when all of it works, else 1 with
what to install or fix. Never runs the mixer (it would change the volume).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import aiohttp

from hubd.errors import MqttUnavailable
from hubd.mqtt.client import MqttClient
from hubd.speaker.assistant import AssistantFailed, HomeAssistant, make_assistant
from hubd.speaker.config import SpeakerConfig
from hubd.speaker.process import PACKAGES
from hubd.speaker.sound import FILE_PLAYERS, Loudspeaker, SoundFailed, Tool, find_tools

MQTT_CHECK_TIMEOUT_S = 5.0

Say = Callable[[str, str], None]  # (label, text): one line of the report


def test_sentence(config: SpeakerConfig) -> str:
    """What --check says: the speaker's name, so a user with several knows which one spoke."""
    return f"This is the speaker {config.name}. Can you hear me?"


async def run_check(config: SpeakerConfig, out: TextIO = sys.stdout) -> int:
    """Print what was found, play the test sentence; 0 if everything works, else 1."""
    tools = find_tools(config)
    problems: list[str] = []
    missing: set[str] = set()

    def say(label: str, text: str) -> None:
        print(f"{label + ':':<13}{text}", file=out, flush=True)

    def tool_line(label: str, tool: Tool, required: bool = True) -> None:
        if tool.template is None:
            say(label, f"NONE: {tool.note}")
            problems.append(f"{label}: {tool.note}")
            missing.add("alsa-utils")
            return
        if tool.path is None:
            say(label, f"{tool.template.text}  -> `{tool.template.program}` NOT INSTALLED ({tool.note})")
            if required:
                problems.append(f"{label}: `{tool.template.program}` is not installed")
            package = PACKAGES.get(Path(tool.template.program).name)
            if package is not None:
                missing.add(package)
            return
        say(label, f"{tool.template.text}  -> {tool.path} ({tool.note})")

    room = f", room {config.room}" if config.room else ""
    say("speaker", f"{config.id} ({config.name}{room}), topics {config.mqtt.base_topic}/device/{config.id}/...")
    tool_line("tts", tools.tts)
    tool_line("player", tools.player)
    for skipped in tools.skipped:
        say("", f"passed over: {skipped}")
    if not tools.player_configured:
        if tools.file_players:
            say("audio files", ", ".join(f"{p.template.program if p.template else '?'} ({p.path})"
                                         for p in tools.file_players))
        else:
            names = ", ".join(program for program, _, _ in FILE_PLAYERS)
            say("audio files", f"none of {names}: only WAV URLs can play (sudo apt-get install ffmpeg for MP3 "
                               "and Ogg)")
    if tools.url_player is not None:
        tool_line("url player", tools.url_player)
    if tools.mixer is not None:
        tool_line("mixer", tools.mixer)  # never run here: it would change the volume
    else:
        hint = '; e.g. volume: {command: "amixer -q set Master {percent}%"}' if shutil.which("amixer") else ""
        say("mixer", f"not configured (volume.command): the speaker offers no Volume or Mute{hint}")

    async with aiohttp.ClientSession() as session:
        await _check_assistant(config, session, say, problems)
    await _check_broker(config, say, problems)

    sentence = test_sentence(config)
    if tools.tts.usable and tools.player.usable:
        with tempfile.TemporaryDirectory(prefix="hubd-speaker-check-") as workdir:
            started = time.monotonic()
            try:
                await Loudspeaker(config, tools, Path(workdir)).say(sentence)
            except SoundFailed as err:
                say("test", f"FAILED: {err}")
                problems.append(f"test sentence: {err}")
            else:
                say("test", f"said {sentence!r} (tts and player took {time.monotonic() - started:.1f} s); "
                            "heard nothing? check the card and its level: aplay -l, alsamixer")
    else:
        say("test", "not played: a tts and a player are needed first")
        problems.append("test sentence: not played")

    if not problems:
        print("ok", file=out)
        return 0
    print(f"{len(problems)} problem{'s' if len(problems) > 1 else ''}: " + "; ".join(problems), file=out)
    if missing:
        print(f"install: sudo apt-get install {' '.join(sorted(missing))}", file=out)
    return 1


async def _check_assistant(config: SpeakerConfig, session: aiohttp.ClientSession, say: Say,
                           problems: list[str]) -> None:
    assistant = make_assistant(config.asr, session)
    if assistant is None:
        say("asr", "not configured (asr.forward): asr commands get an error result")
    elif isinstance(assistant, HomeAssistant):
        try:
            say("asr", f"Home Assistant at {config.asr.url}: {await assistant.probe()}")
        except AssistantFailed as err:
            say("asr", f"FAILED: {err}")
            problems.append(f"asr: {err}")
    else:
        template = config.asr.template
        program = template.program if template else "?"
        found = shutil.which(program)
        say("asr", f"command {config.asr.command}  -> {found or 'NOT INSTALLED'}")
        if found is None:
            problems.append(f"asr: `{program}` is not installed")


async def _check_broker(config: SpeakerConfig, say: Say, problems: list[str]) -> None:
    mqtt = config.mqtt
    where = f"{mqtt.host}:{mqtt.port}"
    client = MqttClient(host=mqtt.host, port=mqtt.port, client_id=f"{config.client_id}-check", clean_session=True,
                        username=mqtt.username,
                        password=mqtt.password.get_secret_value() if mqtt.password else None,
                        tls=mqtt.tls, ca_file=str(mqtt.ca_file) if mqtt.ca_file else None)
    try:
        await client.connect(timeout_s=MQTT_CHECK_TIMEOUT_S)
    except MqttUnavailable as err:
        say("mqtt", f"FAILED: {err}")
        problems.append(f"mqtt: {where} cannot be reached; commands will not arrive")
        client.abort("check failed")
        return
    await client.disconnect()
    say("mqtt", f"{where}: connected (the agent connects as {config.client_id})")
