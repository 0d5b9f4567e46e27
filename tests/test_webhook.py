"""The webhook end to end: hubd as a subprocess, a real broker, simulated speakers, the webhook over HTTP.

Which speakers got a command is read from the broker itself: an observer subscribed to every
command topic sees each publish, and a final `isAll` marker command proves the earlier ones have
all arrived (one publisher, one subscriber: MQTT keeps their order).
"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hubd_proc import REPO, HubdProcess
from mosquitto import Mosquitto, publish
from mqtt_observer import Observer
from rig import Rig as SharedRig

from simulators.device_fleet import DeviceFleet
from simulators.device_models import Light
from simulators.speaker import SimSpeaker

WAIT_S = 15.0
SPEAKERS = {  # endpointId: (sn, room, tags)
    "spk-lr1": ("SN-LR1", "Living Room", ["announce", "downstairs"]),
    "spk-lr2": ("SN-LR2", "Living Room", ["music"]),
    "spk-bed": ("SN-BED", "Bedroom", ["announce", "kids"]),
    "spk-kit": ("SN-KIT", "Kitchen", ["announce"]),
}
ALL = sorted(SPEAKERS)


def tts(devices: dict[str, Any], text: str = "hello") -> dict[str, Any]:
    return {"type": "tts", "devices": devices, "data": {"text": text}}


class CommandWatch(Observer):
    """Every message on hubd/device/+/command (tests/mqtt_observer.py)."""

    def __init__(self, port: int) -> None:
        super().__init__("127.0.0.1", port, subscribe="hubd/device/+/command")

    def targets(self, command_id: str) -> list[str]:
        """The endpointIds that got the command `command_id`."""
        return sorted(m.topic.split("/")[2] for m in self.seen.items if m.json().get("id") == command_id)


@dataclass
class Rig:
    broker: Mosquitto
    hub: HubdProcess
    fleet: DeviceFleet
    watch: CommandWatch
    tokens: dict[str, str] = field(default_factory=dict)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hubd", "webhook", "-c", str(self.hub.config_path), *args],
                              cwd=REPO, capture_output=True, text=True, timeout=30, check=False)

    def create(self, *args: str) -> dict[str, Any]:
        done = self.cli("create", *args)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    async def call(self, token: str, body: Any = None, *, data: bytes | None = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        return await self.hub.post(f"/trigger/with/{token}", body, data=data, headers=headers)

    async def delivered(self, token: str, command_id: str) -> list[str]:
        """The speakers that got `command_id`, once a marker sent after it reached every online speaker."""
        status, marker, _ = await self.call(token, tts({"isAll": True}, "marker"))
        assert status == 200, marker
        online = [d["endpointId"] for d in marker["devices"]]
        deadline = time.monotonic() + WAIT_S
        while self.watch.targets(marker["id"]) != online:
            assert time.monotonic() < deadline, f"marker reached {self.watch.targets(marker['id'])} of {online}"
            await asyncio.sleep(0.02)
        return self.watch.targets(command_id)

    def listed(self) -> dict[int, dict[str, Any]]:
        """`hubd webhook list --json` by id."""
        done = self.cli("list", "--json")
        assert done.returncode == 0, done.stderr
        return {item["id"]: item for item in map(json.loads, done.stdout.splitlines())}

    async def wait_counted(self, webhook_id: int, calls: int) -> None:
        """Until the database holds `calls` calls of the last day for this webhook (hubd saves them every second)."""
        async def saved() -> bool:
            return bool(self.listed()[webhook_id]["callsLastDay"] == calls)
        await self.hub.wait_for(saved, WAIT_S, f"{calls} calls of webhook {webhook_id} saved")

    async def results(self, command_id: str, count: int) -> dict[str, Any]:
        """GET /api/commands/<id> once `count` targets have a final status."""
        async def final() -> dict[str, Any] | None:
            status, body = await self.hub.get(f"/api/commands/{command_id}")
            assert status == 200, body
            done = [t for t in body["targets"] if t["status"] in ("done", "error")]
            return dict(body) if len(done) >= count else None
        return dict(await self.hub.wait_for(final, WAIT_S, f"results of {command_id}"))


MakeRig = Callable[..., Awaitable[Rig]]


@pytest.fixture
async def make_webhook_rig(make_rig: Callable[..., Awaitable[SharedRig]]) -> AsyncIterator[MakeRig]:
    """`await make_webhook_rig(**webhook_limits)`: the shared rig with the speakers and a light, and a watch on
    every command topic."""
    watches: list[CommandWatch] = []

    async def make(**webhook: int) -> Rig:
        speakers = [SimSpeaker(eid, sn=sn, room=room, tags=tags) for eid, (sn, room, tags) in SPEAKERS.items()]
        base = await make_rig(hub_overrides={"webhook": {"per_minute": 1000, "per_day": 10000, **webhook}},
                              devices=[*speakers, Light("light-lr", room="Living Room")])
        assert base.fleet is not None
        watch = CommandWatch(base.broker.port)
        watches.append(watch)
        await watch.start()
        return Rig(base.broker, base.hub, base.fleet, watch)

    yield make
    for watch in watches:
        await watch.stop()


async def test_selection_examples_of_spec_4_6_reach_exactly_the_right_speakers(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    token = rig.create("--name", "ha")["token"]
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({"sn": "SN-BED"}, ["spk-bed"]),                                   # sn
        ({"sn": "SN-LR2", "roomName": "Living Room"}, ["spk-lr2"]),       # sn + roomName
        ({"tag": "announce", "roomName": "living room"}, ["spk-lr1"]),    # tag + roomName (case ignored)
        ({"tag": "announce"}, ["spk-bed", "spk-kit", "spk-lr1"]),         # tag
        ({"isAll": True}, ALL),                                           # isAll: speakers only, not the light
        ({"isAll": True, "roomName": "Living Room"}, ["spk-lr1", "spk-lr2"]),
    ]
    for devices, expected in cases:
        status, body, _ = await rig.call(token, tts(devices, f"to {devices}"))
        assert status == 200, (devices, body)
        assert body["type"] == "tts"
        assert sorted(d["endpointId"] for d in body["devices"]) == expected, devices
        assert body["skipped"] == []
        assert {d["sn"] for d in body["devices"]} == {SPEAKERS[e][0] for e in expected}
        assert await rig.delivered(token, body["id"]) == expected, devices
        # Each speaker carried it out and said so; the API shows it.
        shown = await rig.results(body["id"], len(expected))
        assert shown["data"] == {"text": f"to {devices}"}
        assert shown["webhook"] == "ha"
        assert {t["endpointId"]: t["status"] for t in shown["targets"]} == dict.fromkeys(expected, "done")
    for eid in ("spk-lr1", "spk-lr2"):
        speaker: SimSpeaker = rig.fleet.device(eid)  # type: ignore[assignment]
        assert len([c for c in speaker.commands if c.text == f"to {cases[-1][0]}"]) == 1
    assert await rig.hub.metric("hubd_webhook_commands_total", 'type="tts"') >= len(cases)


async def test_audio_and_asr_commands_carry_url_and_text(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    token = rig.create()["token"]
    status, body, _ = await rig.call(token, {"type": "audio", "devices": {"sn": "SN-KIT"},
                                             "data": {"url": "https://example.com/chime.mp3"}})
    assert status == 200, body
    speaker: SimSpeaker = rig.fleet.device("spk-kit")  # type: ignore[assignment]
    got = await speaker.wait_for_command(lambda c: c.id == body["id"], WAIT_S)
    assert json.loads(got.raw) == {"id": body["id"], "type": "audio", "url": "https://example.com/chime.mp3"}
    status, body, _ = await rig.call(token, {"type": "asr", "devices": {"tag": "kids"},
                                             "data": {"text": "turn on the night light"}})
    assert status == 200, body
    speaker = rig.fleet.device("spk-bed")  # type: ignore[assignment]
    got = await speaker.wait_for_command(lambda c: c.id == body["id"], WAIT_S)
    assert json.loads(got.raw) == {"id": body["id"], "type": "asr", "text": "turn on the night light"}


async def test_every_bad_request_is_a_422_naming_the_field(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    token = rig.create()["token"]
    bad: list[tuple[bytes | dict[str, Any], str, str]] = [
        (b"{oops", "(body)", "not valid JSON"),
        (b"[]", "(body)", "must be a JSON object"),
        ({"type": 1, "devices": {"isAll": True}, "data": {"text": "x"}}, "type", "must be a string"),
        ({"devices": {"isAll": True}, "data": {"text": "x"}}, "type", "missing"),
        ({"type": "tts", "data": {"text": "x"}}, "devices", "missing"),
        ({"type": "tts", "devices": {"isAll": True}}, "data", "missing"),
        ({"type": "beep", "devices": {"isAll": True}, "data": {"text": "x"}}, "type", "unknown type"),
        (tts({"isAll": True}, "   "), "data.text", "is empty"),
        (tts({"isAll": True}, "x" * 1001), "data.text", "at most 1000"),
        ({"type": "audio", "devices": {"isAll": True}, "data": {"url": "file:///etc/passwd"}}, "data.url",
         "not an http"),
        (tts({}), "devices", "selects nothing"),
        (tts({"roomName": "Garage"}), "devices", "rooms: Bedroom, Kitchen, Living Room"),
        (tts({"sn": "SN-BED", "roomName": "Kitchen"}), "devices", "tags: announce, downstairs, kids, music"),
        (b"x" * 20000, "(body)", "more than the 16384 bytes"),
        (b"", "(body)", "no default action"),
        (b'{"type": "tts", "devices": {"isAll": true}, "data": {"text": "hi \\ud800"}}', "data.text",
         "unpaired surrogate"),
        (b"[" * 2000 + b"]" * 2000, "(body)", "nests arrays or objects more than 32 levels deep"),
        (b'{"type": "tts", "devices": ' + b'{"a": ' * 2000 + b"1" + b"}" * 2001, "(body)", "more than 32 levels"),
        (b'{"type": "tts", "devices": {"isAll": true}, "data": {"text": ' + b"9" * 5000 + b"}}", "(body)",
         "a number of more than 4300 digits"),
    ]
    for body, path, words in bad:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        status, answer, _ = await rig.call(token, data=raw, headers={"Content-Type": "application/json"})
        assert status == 422, (body, answer)
        assert words in answer["error"], (words, answer)
        assert any(d["path"] == path and words in d["message"] for d in answer["details"]), (path, answer)
    # A body larger than hubd's whole request limit is still the webhook's 422, not a bare 413.
    status, answer, _ = await rig.call(token, data=b"x" * 200_000)
    assert status == 422, answer
    assert "more than the 16384 bytes" in answer["error"]
    # Nothing reached any speaker, and each bad call counted towards the limits (saved within a second).
    assert rig.watch.seen.items == []
    await rig.wait_counted(1, len(bad) + 1)


async def test_a_call_without_body_runs_the_default_action(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    action = json.dumps(tts({"tag": "kids"}, "Someone is at the door"))
    hook = rig.create("--name", "doorbell", "--default-action", action)
    assert hook["defaultAction"] == json.loads(action)
    status, body, _ = await rig.call(hook["token"])
    assert status == 200, body
    assert [d["endpointId"] for d in body["devices"]] == ["spk-bed"]
    speaker: SimSpeaker = rig.fleet.device("spk-bed")  # type: ignore[assignment]
    assert (await speaker.wait_for_command(lambda c: c.id == body["id"], WAIT_S)).text == "Someone is at the door"
    # A body, when given, wins over the default.
    status, body, _ = await rig.call(hook["token"], tts({"sn": "SN-KIT"}))
    assert [d["endpointId"] for d in body["devices"]] == ["spk-kit"]
    # A default action is checked like a body when the webhook is made.
    done = rig.cli("create", "--default-action", json.dumps(tts({"isAll": True}, "")))
    assert done.returncode == 1
    assert "--default-action: data.text: is empty" in done.stderr


async def test_unknown_revoked_and_rotated_out_tokens_get_404(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    hook = rig.create("--name", "kitchen")
    assert hook["url"] == f"{rig.hub.url}/trigger/with/{hook['token']}"
    assert hook["token"].startswith("whk_")
    body = tts({"isAll": True})
    for unknown in ("whk_" + "A" * 43, "nonsense"):
        status, answer, _ = await rig.call(unknown, body)
        assert status == 404, answer
        assert "unknown webhook token" in answer["error"]

    rotated = json.loads(rig.cli("rotate", str(hook["id"])).stdout)
    assert (rotated["id"], rotated["name"]) == (hook["id"], "kitchen")
    assert rotated["token"] != hook["token"]
    status, answer, _ = await rig.call(hook["token"], body)
    assert status == 404, answer
    assert "this webhook URL was replaced on" in answer["error"]
    assert "hubd webhook rotate" in answer["error"]
    assert (await rig.call(rotated["token"], body))[0] == 200

    done = rig.cli("revoke", "kitchen")
    assert done.returncode == 0, done.stderr
    for old in (rotated["token"], hook["token"]):
        status, answer, _ = await rig.call(old, body)
        assert status == 404, answer
        assert "this webhook was revoked on" in answer["error"]
    for action in ("revoke", "rotate"):
        done = rig.cli(action, str(hook["id"]))
        assert done.returncode == 1
        assert f"webhook {hook['id']} (kitchen) is revoked already" in done.stderr
        other = rig.cli(action, "\u00b2")  # a digit to str.isdigit, no id: looked for as a name, never a traceback
        assert other.returncode == 1 and "Traceback" not in other.stderr, other.stderr
    table = rig.cli("list").stdout
    assert "kitchen" in table
    assert "revoked" in table
    # The database holds no token, only hashes.
    raw = Path(rig.hub.config["storage"]["path"]).read_bytes()
    assert hook["token"].encode() not in raw
    assert rotated["token"].encode() not in raw
    assert hook["token"] not in rig.hub.log()


async def guess_until_refused(rig: Rig, first: int = 0) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Unknown tokens until one is refused with 429 (the waits double: within 30 at any speed); its answer."""
    for i in range(first, first + 30):
        status, answer, headers = await rig.call(f"whk_{i:043d}", tts({"isAll": True}))
        if status == 429:
            return status, answer, headers
        assert status == 404, answer
    raise AssertionError("30 unknown tokens and never a 429")


async def test_unknown_tokens_from_one_address_are_refused_but_never_the_right_one(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    token = rig.create()["token"]
    for i in range(10):
        assert (await rig.call(f"whk_{i:043d}", tts({"isAll": True})))[0] == 404
    _, answer, headers = await guess_until_refused(rig, 10)
    assert "too many unknown webhook tokens from 127.0.0.1" in answer["error"]
    assert 1 <= int(headers["Retry-After"]) <= 900
    status, answer, _ = await rig.call(token, tts({"sn": "SN-KIT"}))
    assert status == 200, answer
    assert await rig.delivered(token, answer["id"]) == ["spk-kit"]


async def test_minute_limit_and_retry_after(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig(per_minute=3)
    token = rig.create()["token"]
    first = time.time()
    statuses = [(await rig.call(token, tts({"sn": "SN-KIT"})))[0] for _ in range(2)]
    statuses.append((await rig.call(token, data=b"not json"))[0])  # a bad call counts too
    assert statuses == [200, 200, 422]
    status, answer, headers = await rig.call(token, tts({"sn": "SN-KIT"}))
    assert status == 429, answer
    retry = int(headers["Retry-After"])
    expected = first + 60 - time.time()
    assert expected - 2 <= retry <= expected + 2, (retry, expected)
    assert "webhook.per_minute is 3" in answer["error"]
    assert answer["details"][0]["path"] == "(limit)"
    # Another token has its own counters.
    other = rig.create()["token"]
    assert (await rig.call(other, tts({"sn": "SN-KIT"})))[0] == 200
    # Rotating starts the counters again.
    rotated = json.loads(rig.cli("rotate", "1").stdout)["token"]
    assert (await rig.call(rotated, tts({"sn": "SN-KIT"})))[0] == 200


async def test_refused_calls_count_and_the_day_survives_a_crash_and_a_restart(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig(per_minute=2, per_day=4)
    hook = rig.create()
    token = hook["token"]
    first = time.time()
    for _ in range(2):
        assert (await rig.call(token, tts({"sn": "SN-KIT"})))[0] == 200
    status, answer, _ = await rig.call(token, tts({"sn": "SN-KIT"}))
    assert status == 429, answer
    assert "webhook.per_minute is 2" in answer["error"]
    # That refused call counted: one more fills the day, and then the day decides.
    status, answer, _ = await rig.call(token, tts({"sn": "SN-KIT"}))
    assert status == 429, answer
    assert "webhook.per_day is 4" in answer["error"]
    status, answer, headers = await rig.call(token, tts({"sn": "SN-KIT"}))
    assert status == 429, answer
    expected = first + 86400 - time.time()
    assert expected - 2 <= int(headers["Retry-After"]) <= expected + 2
    assert "stop calling" in answer["error"]
    await rig.wait_counted(hook["id"], 5)

    # A crash after the counts were saved forgets none of them.
    rig.hub.kill()
    rig.hub.start()
    await rig.hub.wait_ready()
    status, answer, headers = await rig.call(token, tts({"sn": "SN-KIT"}))
    assert status == 429, answer
    expected = first + 86400 - time.time()
    assert expected - 2 <= int(headers["Retry-After"]) <= expected + 2
    assert "in the last 24 hours" in answer["error"]
    # A stop saves what was not saved yet.
    assert rig.hub.stop() == 0
    assert rig.listed()[hook["id"]]["callsLastDay"] == 6


async def test_a_flood_of_refused_calls_is_saved_per_second(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig(per_minute=1, per_day=1000)
    hook = rig.create()
    url = f"{rig.hub.url}/trigger/with/{hook['token']}"
    body = json.dumps(tts({"sn": "SN-KIT"})).encode()
    started = time.time()
    async with aiohttp.ClientSession() as session:
        async def call() -> int:
            async with session.post(url, data=body) as response:
                await response.read()
                return response.status
        statuses = [await call() for _ in range(300)]
    seconds = math.floor(time.time()) - math.floor(started) + 1
    assert statuses.count(200) == 1
    assert statuses.count(429) == 299
    await rig.wait_counted(hook["id"], 300)
    rows = sqlite3.connect(rig.hub.config["storage"]["path"]).execute(
        "SELECT count(*) FROM webhook_call_counts WHERE token_id = ?", (hook["id"],)).fetchone()[0]
    assert rows <= seconds  # one row per second, not one per call


async def test_offline_speakers_are_skipped_and_named(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    token = rig.create()["token"]
    await rig.fleet.kill("spk-kit")  # its will says offline

    async def offline() -> bool:
        _, body = await rig.hub.get("/api/devices")
        return any(d["endpointId"] == "spk-kit" and d["online"] is False for d in body["devices"])
    await rig.hub.wait_for(offline, WAIT_S, "spk-kit offline")

    status, body, _ = await rig.call(token, tts({"tag": "announce"}))
    assert status == 200, body
    assert sorted(d["endpointId"] for d in body["devices"]) == ["spk-bed", "spk-lr1"]
    assert body["skipped"] == [{"endpointId": "spk-kit", "sn": "SN-KIT", "reason": "offline"}]
    assert await rig.delivered(token, body["id"]) == ["spk-bed", "spk-lr1"]
    shown = await rig.results(body["id"], 2)
    assert {t["endpointId"]: t["status"] for t in shown["targets"]} == {
        "spk-bed": "done", "spk-lr1": "done", "spk-kit": "offline"}
    # Only offline speakers: nothing is sent, and the answer says why.
    status, body, _ = await rig.call(token, tts({"sn": "SN-KIT"}))
    assert status == 503, body
    assert "offline (SN-KIT)" in body["error"]


async def test_results_are_recorded_only_from_the_targeted_speaker(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    token = rig.create()["token"]
    status, body, _ = await rig.call(token, tts({"sn": "SN-LR2"}))
    assert status == 200, body
    await rig.results(body["id"], 1)
    # A speaker that was not asked cannot write a result; the targeted one may report an error later.
    publish(rig.broker.port, "hubd/device/spk-bed/command/result",
            json.dumps({"id": body["id"], "status": "error", "message": "not me"}))
    publish(rig.broker.port, "hubd/device/spk-lr2/command/result",
            json.dumps({"id": body["id"], "status": "error", "message": "speaker muted"}))

    async def updated() -> dict[str, Any] | None:
        _, shown = await rig.hub.get(f"/api/commands/{body['id']}")
        return dict(shown) if shown["targets"][0]["status"] == "error" else None
    shown = await rig.hub.wait_for(updated, WAIT_S, "the error result")
    assert [(t["endpointId"], t["message"]) for t in shown["targets"]] == [("spk-lr2", "speaker muted")]
    assert (await rig.hub.get("/api/commands/nope"))[0] == 404


async def test_broker_down_is_a_503_and_nothing_is_claimed(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    token = rig.create()["token"]
    rig.broker.stop()

    async def disconnected() -> bool:
        status, _ = await rig.hub.get("/healthz")
        return status == 503
    await rig.hub.wait_for(disconnected, WAIT_S, "hubd to notice the broker is gone")
    status, body, _ = await rig.call(token, tts({"isAll": True}))
    assert status == 503, body
    assert "not connected to the MQTT broker" in body["error"]
    rig.broker.start()
    await rig.hub.wait_ready(30)
    status, body, _ = await rig.call(token, tts({"isAll": True}))
    assert status == 200, body


async def test_stale_urls_do_not_lock_the_address_out(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    stale = rig.create("--name", "old-automation")
    other = rig.create("--name", "doorbell")
    rig.cli("rotate", str(stale["id"]))
    revoked = rig.create("--name", "gone")
    rig.cli("revoke", "gone")
    for _ in range(15):  # an automation nobody updated keeps calling
        for token in (stale["token"], revoked["token"]):
            status, answer, _ = await rig.call(token, tts({"isAll": True}))
            assert status == 404, answer
    status, answer, _ = await rig.call(other["token"], tts({"sn": "SN-KIT"}))
    assert status == 200, answer
    assert await rig.hub.metric("hubd_webhook_calls_total", 'outcome="retired_token"') == 30
    # Made-up tokens still count as guesses, and the right token still works after them.
    await guess_until_refused(rig)
    assert (await rig.call(other["token"], tts({"sn": "SN-KIT"})))[0] == 200


async def test_no_token_reaches_the_log_even_when_things_fail(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    hook = rig.create()
    token = hook["token"]
    db_path = rig.hub.config["storage"]["path"]
    # Hold the database's write lock: hubd's writes wait for it (busy_timeout) and then fail.
    lock = sqlite3.connect(db_path, isolation_level=None, timeout=30)
    lock.execute("BEGIN IMMEDIATE")
    try:
        # A bad body is answered at once; its count cannot be saved and waits in memory.
        status, answer, _ = await rig.call(token, data=b"not json")
        assert status == 422, answer
        # A good one cannot write its command: a 500 in the webhook's error shape, naming no file.
        status, answer, _ = await rig.call(token, tts({"sn": "SN-KIT"}))
        assert status == 500, answer
        assert set(answer) == {"error", "details"}
        assert "database failed" in answer["error"]
        assert db_path not in json.dumps(answer)

        async def save_failed() -> bool:  # the save of the 422's count waits in line behind the command
            return "could not save the call counts" in rig.hub.log()
        await rig.hub.wait_for(save_failed, WAIT_S, "the failed save of the counts")
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    # Requests aiohttp cannot parse: it logs the raw request line.
    for line in (f"POST /trigger/with/{token} HTTP/9.Z", f"POST /trigger/with/{token[:20]}\x7f{token[20:]} HTTP/1.1"):
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.hub.http_port)
        writer.write(line.encode("latin-1") + b"\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.0 400")
        writer.close()
    # hubd goes on, and saves the counts it kept once the database is free again.
    assert (await rig.call(token, tts({"sn": "SN-KIT"})))[0] == 200
    await rig.wait_counted(hook["id"], 3)

    async def logged() -> bool:
        return rig.hub.log().count("Error handling request") == 2
    await rig.hub.wait_for(logged, WAIT_S, "aiohttp's two error records")
    log = rig.hub.log()
    assert token not in log
    assert token[4:20] not in log and token[20:] not in log  # nor any piece of it
    assert "POST /trigger/with/<redacted> failed: " in log  # the 500, by the route's pattern
    assert "b'POST /trigger/with/<redacted> HTTP/9.Z'" in log
    assert "b'POST /trigger/with/<redacted> HTTP/1.1'" in log


async def test_http_errors_on_other_routes_are_json_too(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    status, body = await rig.hub.get("/no/such/page")
    assert status == 404
    assert body == {"error": "nothing here: GET /no/such/page; see docs/http.md for hubd's routes", "details": []}
    status, body, headers = await rig.hub.post("/healthz", {})
    assert (status, body["details"]) == (405, [])
    assert "POST is not allowed here; use GET" in body["error"]
    assert "GET" in headers["Allow"]
    status, body = await rig.hub.get("/trigger/with/whk_x")
    assert status == 405
    assert "use POST" in body["error"]
    status, body, _ = await rig.hub.post("/oauth/authorize", data=b"x" * 70000,
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 413
    assert body == {"error": "request bodies are limited to 65536 bytes (http.max_body_bytes)", "details": []}


async def test_names_that_read_as_ids_or_are_shared_get_a_clear_message(make_webhook_rig: MakeRig) -> None:
    rig = await make_webhook_rig()
    done = rig.cli("create", "--name", "42")
    assert done.returncode == 1
    assert "--name: '42' is all digits" in done.stderr
    first, second = rig.create()["id"], rig.create()["id"]  # both named "webhook"
    done = rig.cli("revoke", "webhook")
    assert done.returncode == 1
    assert f"2 live webhooks are named 'webhook' (ids {first}, {second}); give the id instead" in done.stderr
    assert rig.cli("revoke", str(first)).returncode == 0
    done = rig.cli("rotate", "webhook")  # now only one live webhook has that name
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == second
    done = rig.cli("revoke", "nope")
    assert done.returncode == 1
    assert "no live webhook 'nope' (by id or name)" in done.stderr


async def test_the_speaker_answers_a_command_it_cannot_speak(tmp_path: Path) -> None:
    speaker = SimSpeaker("spk-u", room="Bedroom", out_dir=tmp_path)
    for command_type, key in (("tts", "text"), ("asr", "text"), ("audio", "url")):
        value = "https://example.com/\ud800" if key == "url" else "hi \ud800"
        payload = json.dumps({"id": "u1", "type": command_type, key: value}).encode()  # JSON keeps the lone escape
        result = await speaker.handle_command(payload)
        assert result is not None
        assert (result["id"], result["status"]) == ("u1", "error")
        assert f"{key}: has an unpaired surrogate" in str(result["message"])
