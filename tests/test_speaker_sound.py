"""The speaker agent's parts against real programs and servers: speaking through espeak-ng into a player,
downloads from a local aiohttp server, the asr assistants (a Home Assistant stand-in and a command), and the
ending of a program that is stopped."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from mosquitto import free_port
from speaker_rig import (
    HA_ANSWER,
    HA_TOKEN,
    AudioServer,
    HomeAssistantStandIn,
    make_wav,
    need,
    slow_player,
    wait_until,
    wav_stat,
)

from hubd.speaker.assistant import AssistantFailed, CommandAssistant, HomeAssistant
from hubd.speaker.config import SpeakerConfig, parse_speaker_config
from hubd.speaker.fetch import DownloadFailed, download
from hubd.speaker.process import ProcessFailed, run_program
from hubd.speaker.sound import Loudspeaker, SoundFailed, find_tools
from hubd.speaker.template import CommandTemplate


def _config(out_dir: Path, **sections: dict[str, object]) -> SpeakerConfig:
    data = {"id": "kitchen-speaker", "name": "Kitchen Speaker", "player": {"command": f"cp {{file}} {out_dir}/"},
            **sections}
    return parse_speaker_config(yaml.safe_dump(data), {})


def _speaker(config: SpeakerConfig, workdir: Path) -> Loudspeaker:
    workdir.mkdir(exist_ok=True)
    return Loudspeaker(config, find_tools(config), workdir)


async def test_text_is_spoken_into_non_silent_audio_of_a_plausible_length(tmp_path: Path) -> None:
    need("espeak-ng", "sox")
    out = tmp_path / "out"
    out.mkdir()
    speaker = _speaker(_config(out), tmp_path / "work")
    await speaker.say("Dinner is ready")
    played = list(out.iterdir())
    assert len(played) == 1 and played[0].suffix == ".wav"
    stat = wav_stat(played[0])
    print(f"'Dinner is ready': {stat}")
    assert 0.5 <= stat.length_s <= 10 and stat.rms > 0.01
    assert list((tmp_path / "work").iterdir()) == []  # the tts file is gone once played


async def test_a_tts_that_is_missing_or_writes_nothing_and_a_failing_player_say_what_to_do(tmp_path: Path) -> None:
    need("espeak-ng")
    out = tmp_path / "out"
    out.mkdir()
    missing = _speaker(_config(out, tts={"command": "no-such-tts-program {wav} {text}"}), tmp_path / "a")
    with pytest.raises(SoundFailed, match=r"the tts command: `no-such-tts-program` is not installed or not on PATH; "
                                          r"install it or give the full path, or set tts.command"):
        await missing.say("hello")
    silent = _speaker(_config(out, tts={"command": "true {wav} {text}"}), tmp_path / "b")
    with pytest.raises(SoundFailed, match=r"wrote no sound to \{wav\}: check that tts.command writes its WAV file"):
        await silent.say("hello")
    script = "import sys; sys.stderr.write('aplay: main:831: audio open error: No such file or directory'); sys.exit(1)"
    failing = _speaker(_config(out, player={"command": f"{sys.executable} -c \"{script}\" {{file}}"}),
                       tmp_path / "c")
    with pytest.raises(SoundFailed, match=r"the player `python[\d.]*` exited with 1: aplay: main:831: audio open "
                                          r"error: No such file or directory"):
        await failing.say("hello")
    assert list(out.iterdir()) == []


@pytest.fixture
async def audio_server(tmp_path: Path) -> AsyncIterator[AudioServer]:
    need("sox")
    server = AudioServer(make_wav(tmp_path / "chime.wav").read_bytes())
    await server.start()
    yield server
    await server.stop()


async def test_downloads_take_audio_only_within_size_and_time(audio_server: AudioServer, tmp_path: Path) -> None:
    async def fetch(url: str, max_bytes: int = 1_000_000, timeout_s: float = 10.0) -> Path:
        async with aiohttp.ClientSession() as session:
            got = await download(session, url, tmp_path, "audio-0001", max_bytes=max_bytes, timeout_s=timeout_s)
        return got.path

    url = audio_server.url
    path = await fetch(f"{url}/chime.wav")
    assert path.name == "audio-0001.wav" and path.read_bytes() == audio_server.wav
    cases = [
        (f"{url}/gone.mp3?token=secret", r"^http://127\.0\.0\.1:\d+/gone\.mp3 answered HTTP 404 Not Found: check that "
                                         r"the URL is right and the file is there$"),
        (f"{url}/page.html", r"is text/html, not audio: give the URL of an audio file"),
        (f"{url}/huge.mp3", r"huge\.mp3 is more than audio\.max_bytes \(1000000 bytes; the server sent no size"),
        (f"{url}/huge-sized.mp3", r"huge-sized\.mp3 is 50000000 bytes, more than audio\.max_bytes \(1000000\); use a "
                                  r"shorter sound or raise audio\.max_bytes"),
        (f"http://127.0.0.1:{free_port()}/x.mp3", r"cannot connect to 127\.0\.0\.1:\d+ for .*: connection refused; "
                                                  r"check the URL and that the server is up"),
        ("ftp://example.com/x.mp3", r"only http:// and https:// URLs are played, not ftp"),
    ]
    for bad, message in cases:
        with pytest.raises(DownloadFailed, match=message):
            await fetch(bad)
        assert "secret" not in bad or "secret" not in message
    assert audio_server.huge_sent < 10_000_000  # the 50 MB body was cut off, not read to its end
    with pytest.raises(DownloadFailed, match=r"took longer than audio\.timeout_s \(0\.5 s\)"):
        await fetch(f"{url}/stalls.mp3", timeout_s=0.5)


@pytest.fixture
async def home_assistant() -> AsyncIterator[HomeAssistantStandIn]:
    ha = HomeAssistantStandIn()
    await ha.start()
    yield ha
    await ha.stop()


async def test_home_assistant_gets_the_text_and_the_token_and_its_answer_comes_back(
        home_assistant: HomeAssistantStandIn) -> None:
    async with aiohttp.ClientSession() as session:
        ha = HomeAssistant(session, url=home_assistant.url, token=HA_TOKEN, language="en", agent_id=None,
                           timeout_s=10)
        answer = await ha.ask("what is the temperature in the kitchen")
        assert answer.speech == HA_ANSWER and answer.problem is None
        assert home_assistant.requests == [{"text": "what is the temperature in the kitchen", "language": "en"}]
        assert (await ha.probe()).startswith("reachable, token accepted")
        wrong = HomeAssistant(session, url=home_assistant.url, token="stale", language=None, agent_id=None,
                              timeout_s=10)
        with pytest.raises(AssistantFailed, match=r"Home Assistant refused the token \(HTTP 401\): make a long-lived "
                                                  r"access token .* put it in asr\.token_file"):
            await wrong.ask("hello")
        elsewhere = HomeAssistant(session, url=home_assistant.url + "/ha", token=HA_TOKEN, language=None,
                                  agent_id=None, timeout_s=10)
        with pytest.raises(AssistantFailed, match=r"HTTP 404\): check asr\.url"):
            await elsewhere.ask("hello")
        gone = HomeAssistant(session, url=f"http://127.0.0.1:{free_port()}", token=HA_TOKEN, language=None,
                             agent_id=None, timeout_s=10)
        with pytest.raises(AssistantFailed, match=r"cannot reach Home Assistant at .*; is it running, and is asr\.url "
                                                  r"right\?"):
            await gone.ask("hello")


async def test_a_value_no_program_can_take_fails_its_command_with_a_reason(tmp_path: Path) -> None:
    # The last line: whatever reaches run_program, a NUL or a string the file system encoding cannot take.
    for bad in ("a\x00b", "\ud800"):
        with pytest.raises(ProcessFailed, match=r"^the player: cannot run `python.*`: an argument cannot be passed"):
            await run_program([sys.executable, "-c", "pass", bad], what="the player", timeout_s=10)
    # Before it: every place a text or URL becomes an argument refuses a control character, naming it.
    speaker = _speaker(_config(tmp_path / "out", player={"command": f"cp {{file}} {tmp_path}/",
                                                         "url_command": f"{sys.executable} -c pass {{url}}"}),
                       tmp_path / "work")
    with pytest.raises(SoundFailed, match=r"^text: the text to speak has a control character \(U\+0000\) at position "
                                          r"2; send plain text"):
        await speaker.say("a\x00b")
    with pytest.raises(SoundFailed, match=r"^text: the text to speak has an unpaired surrogate \(U\+D800\) at "):
        await speaker.say("Home Assistant said \ud800")  # json.loads makes one of a "\\ud800" escape
    with pytest.raises(SoundFailed, match=r"^the URL player \(player\.url_command\): \{url\} has a control character "
                                          r"\(U\+0000\) at position 10"):
        await speaker.play_url("http://x/\x00")
    assistant = CommandAssistant(CommandTemplate.parse(f"{sys.executable} -c pass {{text}}", ("text",)), 10)
    with pytest.raises(AssistantFailed, match=r"^the asr command: \{text\} has a control character \(U\+001B\)"):
        await assistant.ask("\x1b[2J")


async def test_an_asr_command_gets_the_text_and_prints_the_answer() -> None:
    script = "import sys; print('You said: ' + (sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read()))"
    as_argument = CommandAssistant(CommandTemplate.parse(f"{sys.executable} -c \"{script}\" {{text}}", ("text",)), 10)
    assert (await as_argument.ask("lights on; rm -rf /")).speech == "You said: lights on; rm -rf /"
    on_stdin = CommandAssistant(CommandTemplate.parse(f"{sys.executable} -c \"{script}\"", ("text",)), 10)
    assert (await on_stdin.ask("lights off")).speech == "You said: lights off"
    failing = CommandAssistant(CommandTemplate.parse("false {text}", ("text",)), 10)
    with pytest.raises(AssistantFailed, match=r"the asr command `false` exited with 1"):
        await failing.ask("x")


async def test_a_cancelled_program_is_ended_with_its_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "player.pid"
    argv = CommandTemplate.parse(slow_player(pid_file), ("file",)).fill({"file": "x.wav"})
    task = asyncio.create_task(run_program(argv, what="the player", timeout_s=600))
    pid = int(await wait_until(lambda: pid_file.exists() and pid_file.read_text(), "the player to start"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # ended and reaped
