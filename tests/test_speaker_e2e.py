"""The speaker agent end to end: `python -m hubd speaker` as a real subprocess on a real mosquitto, with hubd (a real
subprocess too) and the platform simulator where the path goes through them: the webhook's tts, audio and asr,
a Volume control from the platform, a full queue, a stop in the middle of a long sound, and `--check`.

The player is a command that copies each sound into a directory, and sox tells whether what was played is
speech: non-silent audio of a plausible length for the text.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hubd_proc import REPO, HubdProcess
from mosquitto import Mosquitto, free_port
from rig import Rig
from speaker_rig import (
    HA_ANSWER,
    HA_TOKEN,
    WAIT_S,
    AudioServer,
    HomeAssistantStandIn,
    SpeakerProcess,
    SpeakerWatch,
    lan_address,
    make_wav,
    need,
    slow_player,
    speaker_config,
    url_recorder,
    volume_command,
    wait_until,
    wav_stat,
)

from simulators.platform_directives import DirectiveClient

SPEAKER = "kitchen-speaker"
STOP_BOUND_S = 10.0  # systemd's TimeoutStopSec: the agent must be gone well before it kills (its own aim: 5 s)

MakeAgent = Callable[..., SpeakerProcess]


@pytest.fixture
def make_agent(tmp_path: Path) -> Iterator[MakeAgent]:
    """Start `hubd speaker -c <config>`; killed at teardown if still running."""
    started: list[SpeakerProcess] = []

    def make(config: dict[str, Any]) -> SpeakerProcess:
        agent = SpeakerProcess(tmp_path / f"speaker{len(started)}", config)
        agent.start()
        started.append(agent)
        return agent

    yield make
    for agent in started:
        agent.kill()


@pytest.fixture
async def watch_factory(mosquitto: Mosquitto) -> AsyncIterator[Callable[[str], Awaitable[SpeakerWatch]]]:
    watches: list[SpeakerWatch] = []

    async def make(device_id: str = SPEAKER) -> SpeakerWatch:
        watch = SpeakerWatch(mosquitto.port, device_id)
        await watch.start()
        watches.append(watch)
        return watch

    yield make
    for watch in watches:
        await watch.stop()


@pytest.fixture
async def audio_server(tmp_path: Path) -> AsyncIterator[AudioServer]:
    need("sox")
    server = AudioServer(make_wav(tmp_path / "chime.wav").read_bytes())
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def home_assistant() -> AsyncIterator[HomeAssistantStandIn]:
    ha = HomeAssistantStandIn()
    await ha.start()
    yield ha
    await ha.stop()


def _webhook(hub: HubdProcess) -> str:
    done = subprocess.run([sys.executable, "-m", "hubd", "webhook", "create", "-c", str(hub.config_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["token"])


async def _speaker_online(hub: HubdProcess, agent: SpeakerProcess) -> dict[str, Any]:
    async def online() -> dict[str, Any] | None:
        assert agent.proc is not None and agent.proc.poll() is None, agent.log()
        _, body = await hub.get("/api/devices")
        found = [d for d in body["devices"] if d["endpointId"] == agent.id and d["online"]]
        return found[0] if found else None
    device: dict[str, Any] = await hub.wait_for(online, WAIT_S, f"{agent.id} online in hubd")
    return device


async def _trigger(hub: HubdProcess, token: str, kind: str, value: str) -> str:
    data = {"url": value} if kind == "audio" else {"text": value}
    status, body, _ = await hub.post(f"/trigger/with/{token}", {"type": kind, "devices": {"isAll": True},
                                                                "data": data})
    assert status == 200, body
    assert [d["endpointId"] for d in body["devices"]] == [SPEAKER], body
    return str(body["id"])


async def _outcome(hub: HubdProcess, agent: SpeakerProcess, command_id: str) -> dict[str, Any]:
    """The speaker's target in GET /api/commands/<id> once it is done or error."""
    async def final() -> dict[str, Any] | None:
        status, body = await hub.get(f"/api/commands/{command_id}")
        assert status == 200, body
        target = body["targets"][0]
        return dict(target) if target["status"] in ("done", "error") else None
    try:
        result: dict[str, Any] = await hub.wait_for(final, WAIT_S, f"the result of {command_id}")
    except AssertionError as err:
        raise AssertionError(f"{err}\nspeaker log:\n{agent.log()[-3000:]}") from None
    return result


def _played(out: Path) -> list[Path]:
    return sorted(out.iterdir())


async def test_the_webhook_makes_the_speaker_say_it_aloud(make_rig: Callable[..., Awaitable[Rig]],
                                                          make_agent: MakeAgent, tmp_path: Path) -> None:
    need("espeak-ng", "sox")
    rig = await make_rig()
    out = tmp_path / "played"
    agent = make_agent(speaker_config(rig.broker.port, out))
    device = await _speaker_online(rig.hub, agent)
    assert (device["displayType"], device["displayName"], device["recommendRoomName"], device["sn"],
            device["tags"]) == ("speaker", "Kitchen Speaker", "Kitchen", SPEAKER, ["announce"])

    command_id = await _trigger(rig.hub, _webhook(rig.hub), "tts", "Dinner is ready")
    target = await _outcome(rig.hub, agent, command_id)
    assert (target["status"], target["message"]) == ("done", None), target
    played = _played(out)
    assert len(played) == 1, played
    stat = wav_stat(played[0])
    print(f"'Dinner is ready' as played: {stat.length_s:.2f} s, RMS {stat.rms:.3f}, peak {stat.max_amplitude:.3f}")
    assert 0.5 <= stat.length_s <= 10, stat
    assert stat.rms > 0.01, stat


async def test_audio_urls_play_and_bad_ones_are_errors_a_user_can_act_on(
        make_rig: Callable[..., Awaitable[Rig]], make_agent: MakeAgent, audio_server: AudioServer,
        tmp_path: Path) -> None:
    rig = await make_rig()
    out = tmp_path / "played"
    # The server is on 127.0.0.1: with allow_local the agent fetches from this machine too (off by default).
    agent = make_agent(speaker_config(rig.broker.port, out, audio={"max_bytes": 1_000_000, "allow_local": True}))
    await _speaker_online(rig.hub, agent)
    token = _webhook(rig.hub)

    chime = await _trigger(rig.hub, token, "audio", f"{audio_server.url}/chime.wav")
    assert (await _outcome(rig.hub, agent, chime))["status"] == "done"
    [played] = _played(out)
    assert played.read_bytes() == audio_server.wav  # what the server sent is what the player got

    cases = {
        "gone.mp3": "answered HTTP 404 Not Found: check that the URL is right",
        "page.html": "is text/html, not audio: give the URL of an audio file",
        "huge.mp3": "is more than audio.max_bytes (1000000 bytes; the server sent no size",
        "huge-sized.mp3": "is 50000000 bytes, more than audio.max_bytes (1000000)",
    }
    unreachable = f"http://127.0.0.1:{free_port()}/chime.mp3"
    for name, message in [*cases.items(), (unreachable, "connection refused; check the URL and that the server is up")]:
        url = name if name.startswith("http") else f"{audio_server.url}/{name}"
        target = await _outcome(rig.hub, agent, await _trigger(rig.hub, token, "audio", url))
        assert target["status"] == "error" and message in target["message"], (name, target)
    assert audio_server.huge_sent < 10_000_000
    assert len(_played(out)) == 1  # nothing else reached the player


async def test_asr_goes_to_home_assistant_and_its_answer_is_spoken(
        make_rig: Callable[..., Awaitable[Rig]], make_agent: MakeAgent, home_assistant: HomeAssistantStandIn,
        tmp_path: Path) -> None:
    need("espeak-ng", "sox")
    rig = await make_rig()
    token_file = tmp_path / "ha-token"
    token_file.write_text(HA_TOKEN + "\n")  # as `echo TOKEN > file` writes it
    out = tmp_path / "played"
    agent = make_agent(speaker_config(rig.broker.port, out, asr={
        "forward": "home_assistant", "url": home_assistant.url, "token_file": str(token_file), "language": "en"}))
    await _speaker_online(rig.hub, agent)

    command_id = await _trigger(rig.hub, _webhook(rig.hub), "asr", "what is the temperature in the kitchen")
    target = await _outcome(rig.hub, agent, command_id)
    assert target["status"] == "done", (target, home_assistant.refused)
    assert target["message"] == f"Home Assistant answered: {HA_ANSWER}"
    assert home_assistant.refused == []
    assert home_assistant.requests == [{"text": "what is the temperature in the kitchen", "language": "en"}]
    [played] = _played(out)
    stat = wav_stat(played)
    print(f"'{HA_ANSWER}' as played: {stat.length_s:.2f} s, RMS {stat.rms:.3f}")
    assert 0.5 <= stat.length_s <= 10 and stat.rms > 0.01, stat


async def test_volume_and_mute_from_the_platform_run_the_mixer_and_are_confirmed(
        make_rig: Callable[..., Awaitable[Rig]], make_agent: MakeAgent, tmp_path: Path) -> None:
    rig = await make_rig()
    levels = tmp_path / "levels"
    agent = make_agent(speaker_config(rig.broker.port, tmp_path / "played",
                                      volume={"command": volume_command(levels), "initial": 40}))
    device = await _speaker_online(rig.hub, agent)
    assert [c["interface"] for c in device["capabilities"]] == ["Volume", "Mute"]
    await wait_until(lambda: levels.exists() and levels.read_text() == "40\n", "volume.initial set at start",
                     log=agent.log)
    bound = await rig.bind()
    async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
        steps: list[tuple[str, dict[str, Any] | None, dict[str, Any], str]] = [
            ("Volume.Set", {"value": 30}, {"Volume": 30, "Mute": "Off"}, "30"),
            ("Mute.On", None, {"Volume": 30, "Mute": "On"}, "0"),
            ("Mute.Off", None, {"Volume": 30, "Mute": "Off"}, "30"),
            ("Volume.Adjust", {"delta": -10}, {"Volume": 20, "Mute": "Off"}, "20"),
            ("Volume.SetMax", None, {"Volume": 100, "Mute": "Off"}, "100"),
        ]
        for name, payload, states, mixer_line in steps:
            reply = await client.control(SPEAKER, name, payload)
            assert reply.name == "Response", (name, reply.body)
            assert reply.states == states, (name, reply.states)
            assert levels.read_text().splitlines()[-1] == mixer_line, name
    # Each Response came from the speaker's own state, not hubd's guess at its deadline.
    assert await rig.hub.metric("hubd_controls_total", 'outcome="confirmed"') == len(steps)
    assert levels.read_text().split() == ["40", "30", "0", "30", "20", "100"]


async def test_a_full_queue_answers_error_at_once_and_commands_run_in_order(
        mosquitto: Mosquitto, make_agent: MakeAgent, watch_factory: Callable[[str], Awaitable[SpeakerWatch]],
        tmp_path: Path) -> None:
    need("espeak-ng")
    pid_file = tmp_path / "player.pid"
    watch = await watch_factory(SPEAKER)
    agent = make_agent(speaker_config(mosquitto.port, tmp_path / "played", queue_size=1,
                                      player={"command": slow_player(pid_file)}))
    await watch.availability("online", log=agent.log)
    watch.command({"id": "first", "type": "tts", "text": "The first one plays for a long time"})
    await wait_until(pid_file.exists, "the first command playing", log=agent.log)
    watch.command({"id": "second", "type": "tts", "text": "The second one waits"})
    watch.command({"id": "third", "type": "tts", "text": "The third one finds the queue full"})
    third = await watch.result("third", log=agent.log)
    assert third["status"] == "error"
    assert third["message"] == ("the speaker is busy: its queue is full (1 waiting, queue_size); send the command "
                                "again when they are done")
    assert set(watch.results()) == {"third"}  # answered while the first still plays and the second waits

    agent.signal(signal.SIGTERM)
    assert agent.wait(STOP_BOUND_S) == 0, agent.log()
    assert await watch.result("first") == {"id": "first", "status": "error",
                                           "message": "stopped: the speaker agent was asked to stop while this played"}
    assert await watch.result("second") == {"id": "second", "status": "error",
                                            "message": "the speaker agent stopped before it came to this command"}
    assert [r.json()["id"] for r in watch.on("command/result")] == ["third", "first", "second"]


async def test_a_stop_during_a_long_sound_ends_it_says_offline_and_exits_in_time(
        mosquitto: Mosquitto, make_agent: MakeAgent, watch_factory: Callable[[str], Awaitable[SpeakerWatch]],
        tmp_path: Path) -> None:
    need("espeak-ng")
    pid_file = tmp_path / "player.pid"
    watch = await watch_factory(SPEAKER)
    agent = make_agent(speaker_config(mosquitto.port, tmp_path / "played", player={"command": slow_player(pid_file)}))
    await watch.availability("online", log=agent.log)
    watch.command({"id": "long", "type": "tts", "text": "A sound that would play for a minute"})
    player_pid = int(await wait_until(lambda: pid_file.exists() and pid_file.read_text(), "the long sound playing",
                                      log=agent.log))
    started = time.monotonic()
    agent.signal(signal.SIGTERM)
    code = agent.wait(STOP_BOUND_S)  # raises TimeoutExpired if it is still there when systemd would kill it
    took = time.monotonic() - started
    print(f"stopped {took:.2f} s after SIGTERM")
    assert code == 0, agent.log()
    with pytest.raises(ProcessLookupError):
        os.kill(player_pid, 0)  # the player was ended, not left behind
    assert (await watch.result("long"))["status"] == "error"
    await watch.availability("offline", log=agent.log)
    assert "disconnected from MQTT broker" in agent.log()  # a clean DISCONNECT: `offline` is the agent's own
    # The retained availability says offline to whoever comes next.
    late = await watch_factory(SPEAKER)
    await wait_until(lambda: late.on("availability"), "the retained availability")
    assert late.on("availability")[-1].payload == b"offline" and late.on("availability")[-1].retain


async def test_bad_tools_give_error_results_with_what_to_do(
        mosquitto: Mosquitto, make_agent: MakeAgent, watch_factory: Callable[[str], Awaitable[SpeakerWatch]],
        tmp_path: Path) -> None:
    need("espeak-ng")
    watch = await watch_factory(SPEAKER)
    missing_tts = make_agent(speaker_config(mosquitto.port, tmp_path / "played",
                                            tts={"command": "no-such-tts-program -o {wav} {text}"}))
    await watch.availability("online", log=missing_tts.log)
    watch.command({"id": "t1", "type": "tts", "text": "hello"})
    watch.command({"id": "a1", "type": "asr", "text": "turn on the lights"})
    assert (await watch.result("t1", log=missing_tts.log))["message"] == (
        "the tts command: `no-such-tts-program` is not installed or not on PATH; install it or give the full path, "
        "or set tts.command to a TTS program that is")
    assert (await watch.result("a1", log=missing_tts.log))["message"] == (
        "this speaker has no voice assistant: set asr.forward (home_assistant or command) in its config")
    missing_tts.signal(signal.SIGTERM)
    assert missing_tts.wait(STOP_BOUND_S) == 0

    script = "import sys; sys.stderr.write('audio open error: Device or resource busy'); sys.exit(1)"
    failing_player = make_agent(speaker_config(mosquitto.port, tmp_path / "played",
                                               player={"command": f"{sys.executable} -c \"{script}\" {{file}}"}))
    await wait_until(lambda: len([r for r in watch.on("availability") if r.payload == b"online"]) == 2,
                     "the second agent online", log=failing_player.log)
    watch.command({"id": "t2", "type": "tts", "text": "hello"})
    result = await watch.result("t2", log=failing_player.log)
    assert result["status"] == "error"
    assert result["message"].endswith("exited with 1: audio open error: Device or resource busy"), result


async def test_control_characters_in_a_text_are_an_error_result_and_the_agent_keeps_running(
        make_rig: Callable[..., Awaitable[Rig]], make_agent: MakeAgent,
        watch_factory: Callable[[str], Awaitable[SpeakerWatch]], tmp_path: Path) -> None:
    need("espeak-ng")
    rig = await make_rig()
    out = tmp_path / "played"
    script = "import sys; print('Heard ' + str(len(sys.argv[1])) + ' characters')"
    agent = make_agent(speaker_config(rig.broker.port, out, asr={
        "forward": "command", "command": f"{sys.executable} -c \"{script}\" {{text}}"}))
    await _speaker_online(rig.hub, agent)
    # The red team's case: a NUL in a tts text, through the webhook.
    nul = await _outcome(rig.hub, agent, await _trigger(rig.hub, _webhook(rig.hub), "tts", "Dinner\u0000 is ready"))
    assert nul == {**nul, "status": "error", "message": "text: has a control character (U+0000) at position 7; send "
                                                        "plain text (tabs and line breaks are fine)"}
    watch = await watch_factory(SPEAKER)
    for command_id, kind, text, code in [
            ("esc", "tts", "\x1b[2J cleared", "U+001B"), ("bell", "tts", "ring\x07", "U+0007"),
            ("c1", "tts", "next\x85line", "U+0085"), ("del", "tts", "rub\x7fout", "U+007F"),
            ("asr-nul", "asr", "lights\x00on", "U+0000")]:
        watch.command({"id": command_id, "type": kind, "text": text})
        result = await watch.result(command_id, log=agent.log)
        assert result["status"] == "error" and f"text: has a control character ({code})" in result["message"], result
    watch.command({"id": "line\nbreak", "type": "tts", "text": "hello"})
    assert (await watch.result("line\nbreak", log=agent.log))["message"].startswith("id: has a control character")
    assert _played_count(out) == 0  # nothing refused reached a program
    # Still running, and tabs and line breaks are text.
    watch.command({"id": "fine", "type": "tts", "text": "Two lines\nand a\ttab"})
    assert await watch.result("fine", log=agent.log) == {"id": "fine", "status": "done"}
    watch.command({"id": "asked", "type": "asr", "text": "lights on"})
    assert (await watch.result("asked", log=agent.log))["message"].endswith("answered: Heard 9 characters")
    assert agent.proc is not None and agent.proc.poll() is None, agent.log()
    assert "Traceback" not in agent.log()


def _played_count(out: Path) -> int:
    return len(list(out.iterdir())) if out.exists() else 0


@pytest.fixture
async def lan_audio_server(tmp_path: Path) -> AsyncIterator[AudioServer]:
    """The audio server on this machine's LAN address: what a NAS or media server is to the speaker."""
    need("sox")
    server = AudioServer(make_wav(tmp_path / "lan-chime.wav").read_bytes(), host=lan_address())
    await server.start()
    yield server
    await server.stop()


def _refused_urls(loopback: AudioServer, lan: AudioServer) -> list[tuple[str, str]]:
    """(url, what its error result says) for URLs the agent must refuse, by default settings."""
    port = loopback.url.rsplit(":", 1)[1]
    loop = ("a loopback address (this machine itself); set audio.allow_local: true in the speaker's config to play "
            "from this machine")
    return [
        ("file:///etc/passwd", "url: only http:// and https:// URLs are played, not file:"),
        (f"gopher://{lan.url.split('//')[1]}/1", "url: only http:// and https:// URLs are played, not gopher:"),
        (f"{lan.url}/chime\x00.wav", "url: has a control character (U+0000)"),
        (f"{lan.url}/chi\nme.wav", "url: has a control character (U+000A)"),
        (f"{loopback.url}/chime.wav", f"127.0.0.1 is {loop}"),
        (f"http://localhost:{port}/chime.wav", f"localhost resolves to 127.0.0.1, {loop}"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address (169.254.0.0/16 or "
                                                      "fe80::/10, where cloud metadata services answer); set "
                                                      "audio.allow_local: true"),
        (f"http://0.0.0.0:{port}/chime.wav", "0.0.0.0 is an unspecified address"),
    ]


async def test_audio_comes_only_from_http_servers_off_this_machine_checked_after_every_redirect(
        mosquitto: Mosquitto, make_agent: MakeAgent, watch_factory: Callable[[str], Awaitable[SpeakerWatch]],
        audio_server: AudioServer, lan_audio_server: AudioServer, tmp_path: Path) -> None:
    out = tmp_path / "played"
    watch = await watch_factory(SPEAKER)
    agent = make_agent(speaker_config(mosquitto.port, out))  # audio.allow_local: false, the default
    await watch.availability("online", log=agent.log)
    lan = lan_audio_server.url
    cases = [*_refused_urls(audio_server, lan_audio_server),
             (f"{lan}/go?to={audio_server.url}/chime.wav", "/go: not fetched (where it redirects): 127.0.0.1 is a "
                                                          "loopback address"),
             (f"{lan}/go?to=file:///etc/passwd", "/go redirects to a URL that is not http:// or https://, which is "
                                                 "never followed")]
    for index, (url, message) in enumerate(cases):
        watch.command({"id": f"bad-{index}", "type": "audio", "url": url})
        result = await watch.result(f"bad-{index}", log=agent.log)
        assert result["status"] == "error" and message in result["message"], (url, result)
    assert audio_server.requests == 0  # refused before connecting: the loopback server was never asked
    assert _played_count(out) == 0
    # A server on the LAN is what a speaker plays from.
    watch.command({"id": "lan", "type": "audio", "url": f"{lan}/chime.wav"})
    assert await watch.result("lan", log=agent.log) == {"id": "lan", "status": "done"}
    [played] = list(out.iterdir())
    assert played.read_bytes() == lan_audio_server.wav
    assert agent.proc is not None and agent.proc.poll() is None and "Traceback" not in agent.log()


async def test_a_url_player_gets_only_urls_the_agent_would_fetch_itself(
        mosquitto: Mosquitto, make_agent: MakeAgent, watch_factory: Callable[[str], Awaitable[SpeakerWatch]],
        audio_server: AudioServer, lan_audio_server: AudioServer, tmp_path: Path) -> None:
    handed = tmp_path / "handed"
    watch = await watch_factory(SPEAKER)
    agent = make_agent(speaker_config(mosquitto.port, tmp_path / "played",
                                      player={"url_command": url_recorder(handed)}))
    await watch.availability("online", log=agent.log)
    for index, (url, message) in enumerate(_refused_urls(audio_server, lan_audio_server)):
        watch.command({"id": f"bad-{index}", "type": "audio", "url": url})
        result = await watch.result(f"bad-{index}", log=agent.log)
        assert result["status"] == "error" and message in result["message"], (url, result)
        if "is a" in message or "resolves" in message:
            assert "not handed to player.url_command" in result["message"], result
    assert not handed.exists()  # the player never got one of them
    good = f"{lan_audio_server.url}/chime.wav"
    watch.command({"id": "lan", "type": "audio", "url": good})
    assert await watch.result("lan", log=agent.log) == {"id": "lan", "status": "done"}
    assert handed.read_text() == repr(good) + "\n"
    assert agent.proc is not None and agent.proc.poll() is None and "Traceback" not in agent.log()


def test_check_says_what_it_found_and_plays_the_test_sentence(mosquitto: Mosquitto, tmp_path: Path) -> None:
    need("espeak-ng", "sox")
    out = tmp_path / "played"
    good = SpeakerProcess(tmp_path / "good", speaker_config(mosquitto.port, out, volume={"command": "true {percent}"}))
    good.config_path.write_text(json.dumps(good.config))
    done = subprocess.run([sys.executable, "-m", "hubd", "speaker", "-c", str(good.config_path), "--check"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("tts:         espeak-ng -v en-us -w {wav} {text}  -> /")
    assert lines[2].startswith(f"player:      cp {{file}} {out}/  -> /") and lines[2].endswith("(player.command)")
    assert any(line.startswith("mixer:       true {percent}  -> /") for line in lines)
    assert any(line.startswith(f"mqtt:        127.0.0.1:{mosquitto.port}: connected") for line in lines)
    assert any(line.startswith("test:        said 'This is the speaker Kitchen Speaker. Can you hear me?'")
               for line in lines)
    assert lines[-1] == "ok"
    [played] = _played(out)
    stat = wav_stat(played)
    print(f"test sentence: {stat.length_s:.2f} s, RMS {stat.rms:.3f}")
    assert 1 <= stat.length_s <= 10 and stat.rms > 0.01

    bad = SpeakerProcess(tmp_path / "bad", speaker_config(free_port(), out, tts={"command": "no-such-tts {wav}"},
                                                          player={"command": "aplay-not-here {file}"}))
    bad.config_path.write_text(json.dumps(bad.config))
    done = subprocess.run([sys.executable, "-m", "hubd", "speaker", "-c", str(bad.config_path), "--check"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    print(done.stdout)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "tts:         no-such-tts {wav}  -> `no-such-tts` NOT INSTALLED (tts.command)" in done.stdout
    assert "player:      aplay-not-here {file}  -> `aplay-not-here` NOT INSTALLED (player.command)" in done.stdout
    assert "mqtt:        FAILED: cannot reach MQTT broker" in done.stdout
    assert done.stdout.splitlines()[-1].startswith("4 problems: tts: `no-such-tts` is not installed; player: ")


async def test_a_url_player_gets_where_redirects_lead_each_hop_checked_never_a_redirect_to_this_machine(
        mosquitto: Mosquitto, make_agent: MakeAgent, watch_factory: Callable[[str], Awaitable[SpeakerWatch]],
        tmp_path: Path) -> None:
    # Two servers: one on this machine's LAN address (a NAS, to the speaker), one on loopback. The URL player
    # only records what it gets, so the audio need not be real.
    loopback = AudioServer(b"RIFF-not-played")
    lan_server = AudioServer(b"RIFF-not-played", host=lan_address())
    await loopback.start()
    await lan_server.start()
    try:
        handed = tmp_path / "handed"
        watch = await watch_factory(SPEAKER)
        agent = make_agent(speaker_config(mosquitto.port, tmp_path / "played",
                                          player={"url_command": url_recorder(handed)}))
        await watch.availability("online", log=agent.log)
        lan, port = lan_server.url, loopback.url.rsplit(":", 1)[1]
        refused = [
            (f"{lan}/go?to={loopback.url}/chime.wav",
             "/go: not handed to player.url_command (where it redirects): 127.0.0.1 is a loopback address (this "
             "machine itself); set audio.allow_local: true"),
            (f"{lan}/go?to={lan}/go?to=http://localhost:{port}/chime.wav",
             "(where it redirects): localhost resolves to 127.0.0.1, a loopback address (this machine itself); set "
             "audio.allow_local: true"),
            (f"{lan}/go?to=file:///etc/passwd",
             "/go redirects to a URL that is never followed (file:///etc/passwd only http:// and https:// URLs"),
        ]
        for index, (url, message) in enumerate(refused):
            watch.command({"id": f"redirect-{index}", "type": "audio", "url": url})
            result = await watch.result(f"redirect-{index}", log=agent.log)
            assert result["status"] == "error" and message in result["message"], (url, result)
        assert loopback.requests == 0  # never asked: the agent connects only where the rule allows
        assert not handed.exists()  # and the player got none of them

        # A redirect within the rule: the player gets where it leads, not the redirect.
        final = f"{lan}/chime.wav"
        watch.command({"id": "via", "type": "audio", "url": f"{lan}/go?to={lan}/go?to={final}"})
        assert await watch.result("via", log=agent.log) == {"id": "via", "status": "done"}
        assert handed.read_text() == repr(final) + "\n"
        assert agent.proc is not None and agent.proc.poll() is None and "Traceback" not in agent.log()
    finally:
        await lan_server.stop()
        await loopback.stop()
