"""Issue 5 end to end: hubd as a subprocess, a real broker, simulated speakers, the webhook over HTTP.

Which speakers got a command is read from the broker itself: an observer subscribed to every
command topic sees each publish, and a final `isAll` marker command proves the earlier ones have
all arrived (one publisher, one subscriber: MQTT keeps their order).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from hubd_proc import REPO, HubdProcess
from mosquitto import Mosquitto, publish
from paho.mqtt.enums import CallbackAPIVersion

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


class CommandWatch:
    """Every message on hubd/device/+/command, as (endpointId, payload)."""

    def __init__(self, port: int) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self._port = port
        self._subscribed = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"watch-{time.monotonic_ns()}")
        self._client.on_connect = lambda c, *_: c.subscribe("hubd/device/+/command", 1)
        self._client.on_subscribe = lambda *_: self._loop.call_soon_threadsafe(self._subscribed.set)
        self._client.on_message = self._on_message

    def _on_message(self, _c: mqtt.Client, _u: Any, m: mqtt.MQTTMessage) -> None:
        item = (m.topic.split("/")[2], json.loads(m.payload))
        self._loop.call_soon_threadsafe(self.seen.append, item)

    async def start(self) -> None:
        self._client.connect("127.0.0.1", self._port)
        self._client.loop_start()
        async with asyncio.timeout(WAIT_S):
            await self._subscribed.wait()

    def stop(self) -> None:
        self._client.loop_stop()
        self._client.disconnect()

    def targets(self, command_id: str) -> list[str]:
        return sorted(e for e, p in self.seen if p.get("id") == command_id)


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
async def make_rig(tmp_path: Path, mosquitto: Mosquitto) -> AsyncIterator[MakeRig]:
    rigs: list[Rig] = []

    async def make(**webhook: int) -> Rig:
        speakers = [SimSpeaker(eid, sn=sn, room=room, tags=tags) for eid, (sn, room, tags) in SPEAKERS.items()]
        fleet = DeviceFleet(host=mosquitto.host, port=mosquitto.port,
                            devices=[*speakers, Light("light-lr", room="Living Room")])
        await fleet.start()
        hub = HubdProcess(tmp_path / f"hub{len(rigs)}", mqtt_port=mosquitto.port,
                          overrides={"webhook": {"per_minute": 1000, "per_day": 10000, **webhook}})
        watch = CommandWatch(mosquitto.port)
        rig = Rig(mosquitto, hub, fleet, watch)
        rigs.append(rig)
        await watch.start()
        hub.start()
        await hub.wait_ready()

        async def all_online() -> bool:
            _, body = await hub.get("/api/devices")
            return len([d for d in body["devices"] if d["online"]]) == len(SPEAKERS) + 1
        await hub.wait_for(all_online, WAIT_S, "every device online in hubd")
        return rig

    yield make
    for rig in rigs:
        rig.hub.stop()
        rig.watch.stop()
        await rig.fleet.stop()


async def test_selection_examples_of_spec_4_6_reach_exactly_the_right_speakers(make_rig: MakeRig) -> None:
    rig = await make_rig()
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


async def test_audio_and_asr_commands_carry_url_and_text(make_rig: MakeRig) -> None:
    rig = await make_rig()
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


async def test_every_bad_request_is_a_422_naming_the_field(make_rig: MakeRig) -> None:
    rig = await make_rig()
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
    # Nothing reached any speaker, and each bad call counted towards the limits.
    assert rig.watch.seen == []
    listed = rig.cli("list", "--json")
    assert json.loads(listed.stdout.splitlines()[0])["callsLastDay"] == len(bad) + 1


async def test_a_call_without_body_runs_the_default_action(make_rig: MakeRig) -> None:
    rig = await make_rig()
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


async def test_unknown_revoked_and_rotated_out_tokens_get_404(make_rig: MakeRig) -> None:
    rig = await make_rig()
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
    assert (await rig.call(hook["token"], body))[0] == 404
    assert (await rig.call(rotated["token"], body))[0] == 200

    done = rig.cli("revoke", "kitchen")
    assert done.returncode == 0, done.stderr
    assert (await rig.call(rotated["token"], body))[0] == 404
    assert rig.cli("revoke", str(hook["id"])).returncode == 1
    assert rig.cli("rotate", str(hook["id"])).returncode == 1
    table = rig.cli("list").stdout
    assert "kitchen" in table
    assert "revoked" in table
    # The database holds no token, only hashes.
    raw = Path(rig.hub.config["storage"]["path"]).read_bytes()
    assert hook["token"].encode() not in raw
    assert rotated["token"].encode() not in raw
    assert hook["token"] not in rig.hub.log()


async def test_many_unknown_tokens_from_one_address_are_refused(make_rig: MakeRig) -> None:
    rig = await make_rig()
    token = rig.create()["token"]
    for i in range(10):
        assert (await rig.call(f"whk_{i:043d}", tts({"isAll": True})))[0] == 404
    status, answer, headers = await rig.call(token, tts({"isAll": True}))
    assert status == 429, answer
    assert "too many unknown webhook tokens" in answer["error"]
    assert 800 < int(headers["Retry-After"]) <= 900
    assert rig.watch.seen == []


async def test_minute_limit_and_retry_after(make_rig: MakeRig) -> None:
    rig = await make_rig(per_minute=3)
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


async def test_day_limit_survives_a_restart(make_rig: MakeRig) -> None:
    rig = await make_rig(per_minute=10, per_day=3)
    token = rig.create()["token"]
    first = time.time()
    for _ in range(3):
        assert (await rig.call(token, tts({"sn": "SN-KIT"})))[0] == 200
    status, answer, headers = await rig.call(token, tts({"sn": "SN-KIT"}))
    assert status == 429, answer
    assert "webhook.per_day is 3" in answer["error"]
    assert rig.hub.stop() == 0
    rig.hub.start()
    await rig.hub.wait_ready()
    status, answer, headers = await rig.call(token, tts({"sn": "SN-KIT"}))
    assert status == 429, answer
    expected = first + 86400 - time.time()
    assert expected - 2 <= int(headers["Retry-After"]) <= expected + 2
    assert "in the last 24 hours" in answer["error"]


async def test_offline_speakers_are_skipped_and_named(make_rig: MakeRig) -> None:
    rig = await make_rig()
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


async def test_results_are_recorded_only_from_the_targeted_speaker(make_rig: MakeRig) -> None:
    rig = await make_rig()
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


async def test_broker_down_is_a_503_and_nothing_is_claimed(make_rig: MakeRig) -> None:
    rig = await make_rig()
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
