"""What an owner can follow: one debug line per device message (topic, device by name and id, what changed or why
nothing did) and per command published; refused webhook calls and speakers' failed commands logged once each and
listed under the status page's problems. Through mosquitto and a real hubd."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rig import LAMP, Rig

SPEAKER = {"displayName": "Kitchen Speaker", "displayType": "speaker", "sn": "SN-1", "tags": ["announce"],
           "capabilities": []}


async def _other_problems(rig: Rig) -> list[dict[str, Any]]:
    _, status = await rig.hub.get("/api/status")
    return list(status["problems"]["other"])


async def test_each_device_message_and_command_is_one_debug_line_naming_the_device(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()  # the rig runs hubd at debug
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    rig.publish("lamp-1", "state", {"Switch": "On"})
    rig.publish("lamp-1", "state", {"Switch": "On"})
    rig.publish("ghost", "state", {"Switch": "On"})
    await rig.wait_events(1, "ChangeReport", endpoint="lamp-1")

    async def traced() -> bool:
        log = rig.hub.log()
        return "MQTT hubd/device/ghost/state (native): refused: unknown device 'ghost'" in log
    await rig.hub.wait_for(traced, what="the refused message traced")
    log = rig.hub.log()
    assert "MQTT hubd/device/lamp-1/config (native): Desk Lamp (lamp-1) announced (light, Switch, Brightness)" in log
    assert "MQTT hubd/device/lamp-1/state (native): Desk Lamp (lamp-1): Switch=On" in log
    assert "MQTT hubd/device/lamp-1/state (native): nothing changed" in log


async def test_refused_webhook_calls_are_logged_once_and_listed(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    for _ in range(5):
        status, _, _ = await rig.hub.post("/trigger/with/whk_" + "a" * 43, {"type": "tts"})
        assert status == 404

    async def listed() -> list[dict[str, Any]]:
        return [p for p in await _other_problems(rig) if p["subject"].startswith("unknown tokens from")]
    [problem] = await rig.hub.wait_for(listed, what="the unknown token listed")
    assert problem["count"] == 5 and "404: unknown webhook token" in problem["problem"]
    assert rig.hub.log().count("refused: 404: unknown webhook token") == 1  # one line a minute, not five


async def test_a_speakers_failed_command_is_logged_and_listed(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("spk-1", "config", SPEAKER, retain=True)
    await rig.hub.wait_for(lambda: _known(rig, "spk-1"), what="the speaker known")
    for _ in range(3):
        rig.publish("spk-1", "command/result", {"id": "c-1", "status": "error",
                                                "message": "audio URL answered 404 Not Found"})

    async def listed() -> list[dict[str, Any]]:
        return [p for p in await _other_problems(rig) if p["subject"] == "Kitchen Speaker (spk-1)"]
    [problem] = await rig.hub.wait_for(listed, what="the failed command listed")
    assert problem["problem"] == "command c-1 failed: audio URL answered 404 Not Found"

    async def all_three() -> bool:
        return any(p["count"] == 3 for p in await listed())
    await rig.hub.wait_for(all_three, what="all three counted")
    assert rig.hub.log().count("Kitchen Speaker (spk-1): command c-1 failed: audio URL answered 404") == 1


async def _known(rig: Rig, device_id: str) -> bool:
    _, body = await rig.hub.get("/api/devices")
    return any(d["endpointId"] == device_id for d in body["devices"])


async def test_a_retried_event_is_named_by_event_messageid_and_device_in_the_log(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    rig.sim.fail_events(503)  # the next event: a 503, then delivered
    rig.publish("lamp-1", "state", {"Switch": "On"})
    [change] = await rig.wait_events(1, "ChangeReport", endpoint="lamp-1")
    message_id = change.message["header"]["messageId"]

    async def delivered() -> bool:
        return f"delivered ChangeReport {message_id}" in rig.hub.log()
    await rig.hub.wait_for(delivered, what="the delivery logged")
    log = rig.hub.log()
    assert f"delivery of ChangeReport {message_id}: Desk Lamp (lamp-1) for user user-1 failed (attempt 1), " \
           "retrying in" in log, log[-3000:]
    assert f"delivered ChangeReport {message_id} for user user-1: Desk Lamp (lamp-1) (Switch=On) in" in log
    assert "outbox row" not in log
