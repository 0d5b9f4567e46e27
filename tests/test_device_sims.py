"""The device and speaker simulators against a real mosquitto (tests/mosquitto.py), observed with plain paho."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mosquitto import Mosquitto, free_port
from mqtt_observer import WAIT_S, Observer, Seen

from simulators.device_fleet import BrokerRefused, DeviceFleet
from simulators.device_models import (
    AirConditioner,
    ClimateSensor,
    ContactSensor,
    Curtain,
    Doorbell,
    Light,
    MotionSensor,
)
from simulators.devices import make_demo_devices, make_device
from simulators.sim_device import InterfaceSpec, SetDirective, SetRejected, SimDevice
from simulators.speaker import SimSpeaker

UTC_MS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
REPO = Path(__file__).resolve().parent.parent


Run = Callable[..., Awaitable[tuple[DeviceFleet, Observer]]]


@pytest.fixture
async def run(mosquitto: Mosquitto) -> AsyncIterator[Run]:
    """run(*devices): a started fleet on the test broker and an observer that started after it."""
    fleets: list[DeviceFleet] = []
    observers: list[Observer] = []

    async def start(*devices: SimDevice, **kwargs: Any) -> tuple[DeviceFleet, Observer]:
        fleet = DeviceFleet(host=mosquitto.host, port=mosquitto.port, devices=list(devices), **kwargs)
        fleets.append(fleet)
        base = fleet.broker.base_topic
        observer = Observer(mosquitto.host, mosquitto.port, subscribe=f"{base}/#", base=base)
        observers.append(observer)
        await fleet.start()
        await observer.start()
        # Retained messages arrive after the SUBACK; let them in, so later marks only see new messages.
        for device in devices:
            await observer.next("config", device=device.endpoint_id)
            await observer.next("availability", device=device.endpoint_id)
        return fleet, observer

    yield start
    for fleet in fleets:
        await fleet.stop()
    for observer in observers:
        await observer.stop()


# Pure model rules (no broker).


def test_interface_rules() -> None:
    percent = InterfaceSpec("Brightness", ("Set", "Adjust", "SetMax", "SetMin"))
    rng = random.Random(1)

    def resolve(op: str, current: object = 50, **kw: Any) -> object:
        return percent.resolve(SetDirective("x", "Brightness", op, **kw), current, rng)

    assert resolve("Adjust") == 60  # PROTOCOL.md 6: default step 10
    assert resolve("Adjust", delta=-80) == 0
    assert resolve("Set", value=42) == 42
    assert resolve("SetMin") == 0
    with pytest.raises(SetRejected):
        resolve("Set")
    with pytest.raises(SetRejected):
        resolve("Set", value="bright")
    switch = InterfaceSpec("Switch", ("On", "Off"), enum_values=("On", "Off"))
    with pytest.raises(SetRejected):
        switch.resolve(SetDirective("x", "Switch", "On", value="Maybe"), "Off", rng)


def test_display_names_have_no_digits_and_ids_are_unique() -> None:
    devices = make_demo_devices("demo")
    assert len({d.endpoint_id for d in devices}) == len(devices)
    assert {d.kind for d in devices} == {
        "climate",
        "contact",
        "motion",
        "light",
        "curtain",
        "ac",
        "doorbell",
        "speaker",
    }
    for device in devices:
        assert not re.search(r"\d", device.display_name), device.display_name
        assert not re.search(r"\d", device.room), device.room
        assert all(isinstance(v, str) for v in device.additional_info.values())
    speakers = [d for d in devices if isinstance(d, SimSpeaker)]
    assert sorted((s.room, tuple(s.tags)) for s in speakers) == [("Bedroom", ("kids",)), ("Living Room", ("announce",))]
    with pytest.raises(ValueError, match="cannot be used in a topic"):
        make_device("light", "bad/id")
    with pytest.raises(ValueError, match="unknown device kind"):
        make_device("toaster", "t")


# Announcing, availability, the will.


async def test_start_publishes_retained_config_and_online(run: Run) -> None:
    light = Light("light-a", room="Kitchen")
    speaker = SimSpeaker("spk-a", room="Living Room", tags=["announce"])
    climate = ClimateSensor("climate-a")
    _, obs = await run(light, speaker, climate)

    config = await obs.next("config", device="light-a")
    assert config.retain
    body = config.json()
    assert body["displayName"] == "Kitchen Light"
    assert body["displayType"] == "light"
    assert body["recommendRoomName"] == "Kitchen"
    assert {c["interface"]: c["supportedOperations"] for c in body["capabilities"]} == {
        "Switch": ["On", "Off"],
        "Brightness": ["Set", "Adjust", "SetMax", "SetMin"],
        "Color": ["Set", "SetRandom"],
        "ColorTemperature": ["Set", "Adjust", "SetMax", "SetMin"],
    }
    assert all(c["proactivelyReported"] and c["retrievable"] for c in body["capabilities"])
    online = await obs.next("availability", device="light-a")
    assert (online.payload, online.retain) == (b"online", True)

    spk = (await obs.next("config", device="spk-a")).json()
    assert (spk["displayType"], spk["sn"], spk["tags"]) == ("speaker", "spk-a", ["announce"])
    assert spk["capabilities"][0]["interface"] == "Volume"
    sensor = (await obs.next("config", device="climate-a")).json()
    assert sensor["displayType"] == "unknown"
    assert [(c["interface"], c["supportedOperations"]) for c in sensor["capabilities"]] == [
        ("Temperature", []),
        ("Humidity", []),
    ]


async def retained(broker: Mosquitto, device: str, suffix: str) -> Seen:
    """What a new subscriber gets as the retained message of B/device/<device>/<suffix>."""
    late = Observer(broker.host, broker.port, subscribe="hubd/#", base="hubd")
    await late.start()
    try:
        got = await late.next(suffix, device=device)
    finally:
        await late.stop()
    assert got.retain
    return got


async def test_graceful_stop_publishes_offline(run: Run, mosquitto: Mosquitto) -> None:
    fleet, obs = await run(Light("light-b"))
    mark = obs.mark()
    await fleet.stop()
    offline = await obs.next("availability", device="light-b", after=mark)
    assert offline.payload == b"offline"
    assert (await retained(mosquitto, "light-b", "availability")).payload == b"offline"


async def test_kill_makes_the_broker_publish_the_will(run: Run, mosquitto: Mosquitto) -> None:
    fleet, obs = await run(Light("light-c"), Doorbell("bell-c"))
    mark = obs.mark()
    await fleet.kill("light-c")
    offline = await obs.next("availability", device="light-c", after=mark)
    assert offline.payload == b"offline"
    assert (await retained(mosquitto, "light-c", "availability")).payload == b"offline"
    assert "Client sim-light-c closed its connection." in mosquitto.log_tail(100)  # no DISCONNECT sent
    await fleet.press("bell-c")  # the others carry on
    mark = obs.mark()
    await fleet.revive("light-c")
    assert (await obs.next("availability", device="light-c", after=mark)).payload == b"online"


async def test_reconnects_and_announces_again_after_a_broker_restart(run: Run, mosquitto: Mosquitto) -> None:
    _, obs = await run(Light("light-r"))
    await obs.next("availability", device="light-r")
    # Clear the retained `online`, so only a new announcement can bring it back.
    await obs.publish("hubd/device/light-r/availability", b"", retain=True)
    mark = obs.mark()
    await asyncio.to_thread(mosquitto.restart)
    online = await obs.next("availability", device="light-r", after=mark, pred=lambda m: m.payload == b"online")
    assert online.payload == b"online"
    assert (await obs.next("config", device="light-r", after=mark)).json()["displayType"] == "light"


async def test_start_fails_when_no_broker_listens() -> None:
    fleet = DeviceFleet(host="127.0.0.1", port=free_port(), devices=[Light("nobody")])
    with pytest.raises(TimeoutError, match="nobody"):
        await fleet.start(timeout_s=0.5)


async def test_broker_login(make_mosquitto: Callable[..., Mosquitto]) -> None:
    broker = make_mosquitto(users={"sim": "secret"})
    fleet = DeviceFleet(host=broker.host, port=broker.port, devices=[Light("login")], username="sim", password="secret")
    await fleet.start()
    await fleet.stop()
    wrong = DeviceFleet(host=broker.host, port=broker.port, devices=[Light("login")], username="sim", password="wrong")
    with pytest.raises(BrokerRefused, match=r"[Nn]ot authori[sz]ed"):
        await wrong.start()


async def test_remove_deletes_the_config(run: Run) -> None:
    fleet, obs = await run(Light("light-d"))
    await obs.next("config", device="light-d")
    mark = obs.mark()
    await fleet.remove("light-d")
    deleted = await obs.next("config", device="light-d", after=mark)
    assert deleted.payload == b""
    assert [d.endpoint_id for d in fleet.devices] == []


# State and events.


async def test_state_in_map_and_list_form(run: Run) -> None:
    fleet, obs = await run(ClimateSensor("climate-s"), MotionSensor("motion-s"))
    mark = obs.mark()
    await fleet.publish_state("climate-s", {"Temperature": 21.4, "Humidity": 45})
    got = await obs.next("state", device="climate-s", after=mark)
    assert got.json() == {"Temperature": 21.4, "Humidity": 45}
    assert (got.retain, got.qos) == (False, 1)
    assert fleet.device("climate-s").state() == {"Temperature": 21.4, "Humidity": 45}

    await fleet.publish_state("motion-s", {"Switch": "On"}, cause="PHYSICAL_INTERACTION", list_form=True)
    body = (await obs.next("state", device="motion-s", after=mark)).json()
    assert body["cause"] == "PHYSICAL_INTERACTION"
    [sample] = body["states"]
    assert (sample["interface"], sample["value"]) == ("Switch", "On")
    assert UTC_MS_RE.match(sample["timeOfSample"])


async def test_motion_goes_back_off_after_its_hold_time(run: Run) -> None:
    fleet, obs = await run(MotionSensor("motion-h", hold_s=0.2))
    loop = asyncio.get_running_loop()
    mark = obs.mark()
    on_at = loop.time()
    await fleet.publish_state("motion-h", {"Switch": "On"}, list_form=True)
    off = await obs.next("state", device="motion-h", after=mark, pred=lambda m: m.json()["states"][0]["value"] == "Off")
    assert loop.time() - on_at >= 0.2
    assert off.json()["cause"] == "PHYSICAL_INTERACTION"


async def test_doorbell_press(run: Run) -> None:
    fleet, obs = await run(Doorbell("bell"))
    mark = obs.mark()
    await fleet.press("bell")
    event = await obs.next("event", device="bell", after=mark)
    body = event.json()
    assert body["name"] == "DoorbellPress"
    assert UTC_MS_RE.match(body["timestamp"])
    assert (event.retain, event.qos) == (False, 1)


async def test_only_doorbells_press(run: Run) -> None:
    fleet, _ = await run(Light("not-a-bell"))
    with pytest.raises(TypeError, match="not a doorbell"):
        await fleet.press("not-a-bell")
    with pytest.raises(KeyError):
        await fleet.press("nobody")


async def test_random_mode_drifts_the_climate_sensor_and_opens_doors(run: Run) -> None:
    fleet, obs = await run(ClimateSensor("climate-w", temperature=21.0, humidity=45, seed=7),
                           ContactSensor("door-w", change_probability=1.0))
    mark = obs.mark()
    task = asyncio.create_task(fleet.run_random(0.05))
    try:
        first = await obs.next("state", device="climate-w", after=mark)
        second = await obs.next("state", device="climate-w", after=first.seq + 1)
        door = await obs.next("state", device="door-w", after=mark)
    finally:
        task.cancel()
    t1, t2 = first.json(), second.json()
    assert 0.1 <= abs(t1["Temperature"] - 21.0) <= 0.5
    assert 0.1 <= abs(t2["Temperature"] - t1["Temperature"]) <= 0.51
    assert abs(t2["Humidity"] - 45) <= 4
    assert door.json()["cause"] == "PHYSICAL_INTERACTION"
    assert door.json()["states"][0]["value"] == "On"  # it starts closed


async def test_stop_while_the_broker_is_down_is_quick(run: Run, mosquitto: Mosquitto) -> None:
    fleet, _ = await run(Light("light-q"))
    await asyncio.to_thread(mosquitto.kill)
    async with asyncio.timeout(1):  # no waiting for a PUBACK of `offline` that cannot come
        await fleet.stop()


# Set directives.


async def test_light_set(run: Run) -> None:
    fleet, obs = await run(Light("light-s"))
    state = (await obs.send_set("light-s", {"id": "1", "interface": "Switch", "operation": "On"})).json()
    assert state == {"Switch": "On", "Brightness": 80, "Color": 0xFFFFFF, "ColorTemperature": 50}
    assert (
        await obs.send_set("light-s", {"id": "2", "interface": "Brightness", "operation": "Set", "value": 30})
    ).json()["Brightness"] == 30
    assert (
        await obs.send_set("light-s", {"id": "3", "interface": "Brightness", "operation": "Adjust", "delta": 90})
    ).json()["Brightness"] == 100
    assert (
        await obs.send_set("light-s", {"id": "4", "interface": "Brightness", "operation": "Adjust", "delta": -500})
    ).json()["Brightness"] == 0
    assert (await obs.send_set("light-s", {"id": "5", "interface": "Brightness", "operation": "SetMax"})).json()[
        "Brightness"
    ] == 100
    # Unchanged value: answered all the same, so hubd can confirm.
    again = (await obs.send_set("light-s", {"id": "6", "interface": "Brightness", "operation": "SetMax"})).json()
    assert again["Brightness"] == 100
    color = (await obs.send_set("light-s", {"id": "7", "interface": "Color", "operation": "SetRandom"})).json()
    assert isinstance(color["Color"], int)
    assert 0 <= color["Color"] <= 0xFFFFFF
    assert [d.id for d in fleet.device("light-s").sets.items] == ["1", "2", "3", "4", "5", "6", "7"]


async def test_unknown_or_malformed_set_answers_the_unchanged_state(run: Run) -> None:
    _, obs = await run(Light("light-u"))
    before = {"Switch": "Off", "Brightness": 80, "Color": 0xFFFFFF, "ColorTemperature": 50}
    assert (
        await obs.send_set("light-u", {"id": "1", "interface": "Volume", "operation": "Set", "value": 3})
    ).json() == before
    assert (await obs.send_set("light-u", {"id": "2", "interface": "Switch", "operation": "Toggle"})).json() == before
    mark = obs.mark()
    await obs.publish("hubd/device/light-u/set", b"not json")
    assert (await obs.next("state", device="light-u", after=mark)).json() == before


async def test_curtain_set(run: Run) -> None:
    _, obs = await run(Curtain("curtain-s"))
    state = (
        await obs.send_set("curtain-s", {"id": "1", "interface": "Position", "operation": "Set", "value": 40})
    ).json()
    assert state == {"Position": 40, "MotionSwitch": "Off", "Switch": "On"}
    assert (
        await obs.send_set("curtain-s", {"id": "2", "interface": "Position", "operation": "Adjust", "delta": -10})
    ).json()["Position"] == 30
    assert (await obs.send_set("curtain-s", {"id": "3", "interface": "Switch", "operation": "On"})).json()[
        "Position"
    ] == 100
    closed = (await obs.send_set("curtain-s", {"id": "4", "interface": "Switch", "operation": "Off"})).json()
    assert closed == {"Position": 0, "MotionSwitch": "Off", "Switch": "Off"}


async def test_curtain_takes_time_to_move_and_can_be_stopped(run: Run) -> None:
    _, obs = await run(Curtain("curtain-t", travel_s=0.6))
    moving = (await obs.send_set("curtain-t", {"id": "1", "interface": "Switch", "operation": "On"})).json()
    assert moving == {"Position": 0, "MotionSwitch": "On", "Switch": "On"}
    mark = obs.mark()
    arrived = await obs.next("state", device="curtain-t", after=mark, pred=lambda m: m.json()["MotionSwitch"] == "Off")
    assert arrived.json() == {"Position": 100, "MotionSwitch": "Off", "Switch": "On"}

    await obs.send_set("curtain-t", {"id": "2", "interface": "Position", "operation": "Set", "value": 0})
    stopped = (await obs.send_set("curtain-t", {"id": "3", "interface": "MotionSwitch", "operation": "Off"})).json()
    assert stopped["MotionSwitch"] == "Off"
    assert 0 < stopped["Position"] <= 100


@pytest.mark.parametrize("travel_s", [0.0, 0.6])
async def test_curtain_told_to_move_at_its_end_stop_reports_the_motor_start_and_stop(run: Run,
                                                                                   travel_s: float) -> None:
    # Without the start, hubd could never see MotionSwitch.On obeyed at the end stop.
    _, obs = await run(Curtain("curtain-e", travel_s=travel_s, position=100))
    started = (await obs.send_set("curtain-e", {"id": "1", "interface": "MotionSwitch", "operation": "On"})).json()
    assert started == {"Position": 100, "MotionSwitch": "On", "Switch": "On"}
    mark = obs.mark()
    stopped = await obs.next("state", device="curtain-e", after=mark, pred=lambda m: m.json()["MotionSwitch"] == "Off")
    assert stopped.json() == {"Position": 100, "MotionSwitch": "Off", "Switch": "On"}


def test_curtain_end_stop_run_is_short_and_can_be_stopped() -> None:
    curtain = Curtain("curtain-u", position=0)
    curtain.apply_set(SetDirective("1", "MotionSwitch", "On"), 10.0)
    assert curtain.state() == {"Position": 0, "MotionSwitch": "On", "Switch": "Off"}
    assert curtain.next_deadline(10.0) == 10.5
    assert curtain.advance(10.2) is None  # still running into the stop: nothing new to say
    report = curtain.advance(10.5)
    assert report is not None and report.payload() == {"Position": 0, "MotionSwitch": "Off", "Switch": "Off"}
    curtain.apply_set(SetDirective("2", "MotionSwitch", "On"), 20.0)
    curtain.apply_set(SetDirective("3", "MotionSwitch", "Off"), 20.1)
    assert curtain.state() == {"Position": 0, "MotionSwitch": "Off", "Switch": "Off"}
    assert curtain.next_deadline(20.1) is None


async def test_ac_set(run: Run) -> None:
    _, obs = await run(AirConditioner("ac-s"))
    info = (await obs.next("config", device="ac-s")).json()["additionalInfo"]
    assert (info["minTemperature"], info["maxTemperature"]) == ("16", "30")
    assert (await obs.send_set("ac-s", {"id": "1", "interface": "Mode", "operation": "Cool"})).json()["Mode"] == "Cool"
    assert (await obs.send_set("ac-s", {"id": "2", "interface": "Temperature", "operation": "SetMax"})).json()[
        "Temperature"
    ] == 30
    assert (
        await obs.send_set("ac-s", {"id": "3", "interface": "Temperature", "operation": "Adjust", "delta": -20})
    ).json()["Temperature"] == 16
    state = (await obs.send_set("ac-s", {"id": "4", "interface": "FanSpeed", "operation": "SetHigh"})).json()
    assert state == {"Switch": "Off", "Mode": "Cool", "Temperature": 16, "FanSpeed": 100}


async def test_slow_device_answers_after_its_delay(run: Run) -> None:
    _, obs = await run(Light("light-slow", delay_s=0.5))
    loop = asyncio.get_running_loop()
    sent_at = loop.time()
    state = await obs.send_set("light-slow", {"id": "1", "interface": "Switch", "operation": "On"})
    assert loop.time() - sent_at >= 0.5
    assert state.json()["Switch"] == "On"


# The speaker.


async def test_speaker_runs_tts_and_answers(run: Run, tmp_path: Path) -> None:
    speaker = SimSpeaker("spk-t", room="Living Room", out_dir=tmp_path)
    _, obs = await run(speaker)
    mark = obs.mark()
    await obs.publish("hubd/device/spk-t/command", json.dumps({"id": "c1", "type": "tts", "text": "Dinner is ready"}))
    result = await obs.next("command/result", device="spk-t", after=mark)
    assert result.json() == {"id": "c1", "status": "done"}
    assert result.qos == 1
    got = await speaker.wait_for_command(lambda c: c.id == "c1")
    assert (got.type, got.text, got.status) == ("tts", "Dinner is ready", "done")
    if shutil.which("espeak-ng"):
        assert got.wav_path is not None
        assert got.wav_path.read_bytes()[:4] == b"RIFF"


async def test_speaker_tts_through_espeak(run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in espeak-ng, so the subprocess path is tested where espeak-ng is not installed.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "espeak-ng"
    fake.write_text('#!/bin/sh\n[ "$(cat)" = "slow" ] && exec sleep 30\nprintf RIFFfake > "$2"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    speaker = SimSpeaker("spk-e", room="Bedroom", out_dir=tmp_path / "out", tts_timeout_s=0.5)
    _, obs = await run(speaker)

    mark = obs.mark()
    await obs.publish("hubd/device/spk-e/command", json.dumps({"id": "e1", "type": "tts", "text": "Hello"}))
    assert (await obs.next("command/result", device="spk-e", after=mark)).json()["status"] == "done"
    done = await speaker.wait_for_command(lambda c: c.id == "e1")
    assert done.wav_path is not None
    assert done.wav_path.parent == tmp_path / "out"
    assert done.wav_path.read_bytes() == b"RIFFfake"

    await obs.publish("hubd/device/spk-e/command", json.dumps({"id": "e2", "type": "tts", "text": "slow"}))
    timed_out = (
        await obs.next("command/result", device="spk-e", after=mark, pred=lambda m: m.json()["id"] == "e2")
    ).json()
    assert timed_out["status"] == "error"
    assert "longer than" in timed_out["message"]


async def test_speaker_answers_malformed_commands_with_errors(run: Run) -> None:
    speaker = SimSpeaker("spk-m", room="Bedroom", tags=["kids"])
    _, obs = await run(speaker)
    mark = obs.mark()
    topic = "hubd/device/spk-m/command"
    await obs.publish(topic, b"not json")
    for body in (
        {"id": "m1", "type": "sing"},
        {"id": "m2", "type": "tts"},
        {"id": "m3", "type": "audio", "url": "ftp://example.com/a.mp3"},
        {"type": "tts", "text": "no id"},
        {"id": "m4", "type": "asr", "text": "turn on the light"},
        {"id": "m5", "type": "audio", "url": "https://example.com/a.mp3"},
    ):
        await obs.publish(topic, json.dumps(body))
    # Commands run in order, so once m5 is answered every other answer is in.
    await obs.next("command/result", device="spk-m", after=mark, pred=lambda m: m.json()["id"] == "m5")
    answers = [m.json() for m in obs.seen.items if m.seq >= mark and m.topic.endswith("spk-m/command/result")]
    results = {a["id"]: a for a in answers}
    assert len(answers) == 5  # nothing for the two without an id
    assert {k: v["status"] for k, v in results.items()} == {
        "m1": "error",
        "m2": "error",
        "m3": "error",
        "m4": "done",
        "m5": "done",
    }
    assert "type" in results["m1"]["message"]
    assert "text" in results["m2"]["message"]
    assert "url" in results["m3"]["message"]
    await speaker.wait_for_command(lambda c: c.id == "m5")
    assert len(speaker.commands) == 7
    assert [c.status for c in speaker.commands[:2]] == ["error", "error"]


async def test_speaker_volume_set(run: Run) -> None:
    _, obs = await run(SimSpeaker("spk-v", room="Bedroom"))
    assert (await obs.send_set("spk-v", {"id": "1", "interface": "Volume", "operation": "SetMax"})).json() == {
        "Volume": 100
    }


# Command lines.


async def test_devices_command_line(mosquitto: Mosquitto) -> None:
    obs = Observer(mosquitto.host, mosquitto.port, subscribe="cli/#", base="cli")
    await obs.start()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "simulators",
        "devices",
        "--port",
        str(mosquitto.port),
        "--base-topic",
        "cli",
        "--kind",
        "light",
        "--kind",
        "light",
        "--kind",
        "doorbell",
        "--slow",
        "cli-light-2=0.2",
        "--id-prefix",
        "cli",
        "--interval-s",
        "0",
        cwd=REPO,
        stderr=subprocess.PIPE,
    )
    try:
        second = (await obs.next("config", device="cli-light-2")).json()
        assert second["displayName"] == "Kitchen Light Two"
        await obs.next("availability", device="cli-doorbell-1", pred=lambda m: m.payload == b"online")
        # Each device has its own connection: light 2's boot-time state may come after the doorbell is online.
        await obs.next("state", device="cli-light-2")
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        answer = await obs.send_set("cli-light-2", {"id": "1", "interface": "Switch", "operation": "On"})
        assert answer.json()["Switch"] == "On"
        assert loop.time() - sent_at >= 0.2
        mark = obs.mark()
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT_S):
            assert await proc.wait() == 0
        offline = await obs.next("availability", device="cli-light-1", after=mark)
        assert offline.payload == b"offline"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await obs.stop()


async def test_speaker_command_line(mosquitto: Mosquitto, tmp_path: Path) -> None:
    obs = Observer(mosquitto.host, mosquitto.port, subscribe="hubd/#", base="hubd")
    await obs.start()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "simulators",
        "speaker",
        "--port",
        str(mosquitto.port),
        "--sn",
        "SN-ONE",
        "--room",
        "Study",
        "--tag",
        "announce",
        "--tag",
        "office",
        "--out-dir",
        str(tmp_path),
        cwd=REPO,
        stderr=subprocess.PIPE,
    )
    try:
        config = (await obs.next("config", device="SN-ONE")).json()
        assert (config["sn"], config["tags"], config["recommendRoomName"]) == (
            "SN-ONE",
            ["announce", "office"],
            "Study",
        )
        mark = obs.mark()
        await obs.publish("hubd/device/SN-ONE/command", json.dumps({"id": "x", "type": "asr", "text": "hi"}))
        assert (await obs.next("command/result", device="SN-ONE", after=mark)).json()["status"] == "done"
        proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(WAIT_S):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await obs.stop()
