"""MQTT devices become platform events for every bound user (real broker, platform simulator, hubd process)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from hubd_proc import HubdProcess
from mosquitto import publish
from rig import BELL, CLIMATE, LAMP, Rig, invalid_total, metric_at_least


async def test_grant_then_every_message_kind(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("lamp-1", "config", LAMP, retain=True)
    rig.publish("climate-1", "config", CLIMATE, retain=True)
    rig.publish("lamp-1", "state", {"Switch": "Off", "Brightness": 40})
    await rig.hub.wait_for(lambda: _device_count(rig.hub, 2), what="two devices")

    await rig.bind()
    # The new grant gets every current device, with current states.
    [added] = await rig.wait_events(1, "AddOrUpdateReport")
    endpoints = {e["endpointId"]: e for e in added.message["payload"]["endpoints"]}
    assert set(endpoints) == {"lamp-1", "climate-1"}
    lamp = endpoints["lamp-1"]
    assert lamp["displayName"] == "Desk Lamp" and lamp["recommendRoomName"] == "Office"
    assert lamp["additionalInfo"] == {"gateway": "attic"}
    assert {s["interface"]: s["value"] for s in lamp["states"]} == {"Switch": "Off", "Brightness": 40}
    assert added.message["header"]["namespace"] == "Service.Discovery"
    assert added.message["header"]["payloadVersion"] == "v1"

    # ChangeReport: only what changed in payload.change.states, everything in endpoint.states.
    rig.publish("lamp-1", "state", {"Switch": "On", "Brightness": 40})
    [change] = await rig.wait_events(1, "ChangeReport")
    body = change.message
    assert body["header"]["namespace"] == "Service"
    assert body["payload"]["change"]["cause"] == {"type": "PHYSICAL_INTERACTION"}
    assert [(s["interface"], s["value"]) for s in body["payload"]["change"]["states"]] == [("Switch", "On")]
    assert {s["interface"]: s["value"] for s in body["endpoint"]["states"]} == {"Switch": "On", "Brightness": 40}
    assert body["endpoint"]["additionalInfo"] == {"gateway": "attic"}
    stamp = body["payload"]["change"]["states"][0]["timeOfSample"]
    assert len(stamp) == 24 and stamp.endswith("Z") and stamp[19] == "."

    # A device timestamp in the list form is kept (normalised to UTC with milliseconds).
    rig.publish("climate-1", "state", {"states": [
        {"interface": "Temperature", "value": 21.5, "timeOfSample": "2026-01-02T03:04:05.6+01:00"}]})
    [climate] = await rig.wait_events(1, "ChangeReport", endpoint="climate-1")
    assert climate.message["payload"]["change"]["states"] == [
        {"interface": "Temperature", "value": 21.5, "timeOfSample": "2026-01-02T02:04:05.600Z"}]

    # Unchanged values and non-proactive interfaces send nothing.
    rig.publish("lamp-1", "state", {"Switch": "On"})
    rig.publish("lamp-1", "state", {"Brightness": 80})
    rig.publish("lamp-1", "state", {"Switch": "Off"})
    # A last change on the same device proves the ones before it were handled: a device's events go in order.
    rig.publish("lamp-1", "state", {"Switch": "On"})
    lamp_changes = await rig.wait_events(3, "ChangeReport", endpoint="lamp-1")
    assert [c.message["payload"]["change"]["states"][0]["value"] for c in lamp_changes] == ["On", "Off", "On"]
    assert len(rig.events("ChangeReport", endpoint="lamp-1")) == 3
    assert {s["interface"]: s["value"] for s in lamp_changes[1].message["endpoint"]["states"]}["Brightness"] == 80

    # A changed description: AddOrUpdateReport; an empty config: DeleteReport.
    rig.publish("lamp-1", "config", {**LAMP, "displayName": "Reading Lamp"}, retain=True)
    updates = await rig.wait_events(2, "AddOrUpdateReport")
    assert updates[1].message["payload"]["endpoints"][0]["displayName"] == "Reading Lamp"
    rig.publish("climate-1", "config", b"", retain=True)
    [deleted] = await rig.wait_events(1, "DeleteReport")
    assert deleted.message["payload"] == {"endpoints": [{"endpointId": "climate-1"}]}
    assert deleted.message["header"]["namespace"] == "Service.Discovery"
    assert not rig.sim.rejections, rig.sim.rejections


async def test_configs_arriving_together_are_batched_and_restart_resends_nothing(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind()
    # Retained configs published while hubd is down reach it together when it subscribes again.
    assert rig.hub.stop() == 0
    for i in range(5):
        rig.publish(f"sensor-{i}", "config", CLIMATE, retain=True)
    rig.hub.start()
    await rig.hub.wait_ready()
    [batch] = await rig.wait_events(1, "AddOrUpdateReport")
    assert sorted(e["endpointId"] for e in batch.message["payload"]["endpoints"]) == [f"sensor-{i}" for i in range(5)]
    # A restart replays the retained configs: nothing changed, nothing is sent.
    assert rig.hub.stop() == 0
    rig.hub.start()
    await rig.hub.wait_ready()
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, 'hubd_mqtt_messages_total{kind="config"}', 5),
                           what="retained configs replayed")
    # A changed config after the replayed ones: its report comes after anything the replay might have sent.
    rig.publish("sensor-0", "config", {**CLIMATE, "displayName": "Sensor Zero"}, retain=True)
    reports = await rig.wait_events(2, "AddOrUpdateReport")
    assert [e["endpointId"] for e in reports[1].message["payload"]["endpoints"]] == ["sensor-0"]
    assert len(rig.events("AddOrUpdateReport")) == 2


async def test_every_doorbell_press_is_sent(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind_with_bell()
    for _ in range(5):
        rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    await rig.wait_events(5, "DoorbellPress")
    rig.publish("bell-1", "event", {"name": "DoorbellPress"})  # the last: every press before it was handled
    presses = (await rig.wait_events(6, "DoorbellPress"))[:5]
    assert len(rig.events("DoorbellPress")) == 6
    for press in presses:
        payload = press.message["payload"]
        assert payload["endpointId"] == "bell-1" and payload["cause"] == {"type": "PHYSICAL_INTERACTION"}
        assert press.message["header"]["namespace"] == "Service.EventSource"
    assert len({p.message_id for p in rig.events("DoorbellPress")}) == 6
    # Each press was timed from MQTT to its commit, to its POST, and through the POST (/metrics).
    for stage in ("mqtt_to_commit", "commit_to_post", "post"):
        name = f'hubd_event_stage_seconds_count{{stage="{stage}"}}'
        await rig.hub.wait_for(lambda n=name: metric_at_least(rig.hub, n, 6), what=f"six presses timed in {stage}")


async def test_every_bound_user_gets_events_with_their_own_token(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("bell-1", "config", BELL, retain=True)
    await rig.bind("alice")
    await rig.bind("bob")
    await rig.wait_events(1, "AddOrUpdateReport", user_id="alice")
    await rig.wait_events(1, "AddOrUpdateReport", user_id="bob")
    rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    await rig.wait_events(1, "DoorbellPress", user_id="alice")
    await rig.wait_events(1, "DoorbellPress", user_id="bob")


async def test_short_lived_tokens_are_refreshed_before_they_expire(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(access_ttl_s=3)
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")

    def refreshes() -> int:
        return len([r for r in rig.sim.token_requests if r.grant_type == "refresh_token" and r.status == 200])

    # Events before, between and after two refreshes (3 s tokens): each is sent with a token still valid.
    for i in range(3):
        rig.publish("lamp-1", "state", {"Switch": "On" if i % 2 == 0 else "Off"})
        await rig.wait_events(i + 1, "ChangeReport")
        if i < 2:
            seen = refreshes()
            await rig.sim.wait_until(lambda seen=seen: refreshes() > seen, timeout_s=15)  # type: ignore[misc]
    assert refreshes() >= 2, rig.sim.token_requests
    assert rig.sim.expired_token_hits == 0
    assert not rig.sim.rejections


async def test_401_refreshes_and_resends_the_same_message(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind_with_bell()
    rig.sim.expire_tokens("user-1")
    rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    [press] = await rig.wait_events(1, "DoorbellPress")
    [rejected] = [r for r in rig.sim.rejections if r.status == 401]
    assert rejected.message_id == press.message_id
    assert any(r.grant_type == "refresh_token" and r.status == 200 for r in rig.sim.token_requests)


async def test_dead_refresh_sends_one_failure_report_and_keeps_events(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    rig.sim.revoke_refresh("user-1")
    rig.sim.expire_tokens("user-1")
    for value in ("On", "Off", "On"):
        rig.publish("lamp-1", "state", {"Switch": value})
    await rig.sim.wait_until(lambda: len(rig.sim.failure_reports) >= 1, timeout_s=15)
    # One more event after the grant ended: kept too, and no second failure report for it.
    rig.publish("lamp-1", "state", {"Switch": "Off"})
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_outbox_depth", 4), what="four events kept")
    assert len(rig.sim.failure_reports) == 1
    assert rig.sim.failure_reports[0].user_id == "user-1"
    assert not rig.events("ChangeReport")
    assert "invalid_grant" in rig.hub.log()
    assert await rig.hub.metric("hubd_outbox_depth") == 4
    _, users = await rig.hub.get("/api/users")
    assert users["users"][0]["userId"] == "user-1" and users["users"][0]["status"] == "needs_rebind"
    assert users["users"][0]["pendingEvents"] == 4
    # A new grant (the platform forgets what the user knew) gets the devices first, then the kept events in order.
    await rig.bind()
    changes = await rig.wait_events(4, "ChangeReport")
    assert [c.message["payload"]["change"]["states"][0]["value"] for c in changes] == ["On", "Off", "On", "Off"]
    names = [e.name for e in rig.events()]
    assert names == ["AddOrUpdateReport", "AddOrUpdateReport", *["ChangeReport"] * 4]
    assert not [r for r in rig.sim.rejections if r.status in (400, 422)], rig.sim.rejections
    assert await rig.hub.metric("hubd_events_dead_lettered_total") == 0


async def test_platform_outage_delivers_everything_in_order_per_device(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    devices = ["lamp-1", "lamp-2", "lamp-3"]
    for device in devices:
        rig.publish(device, "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    rig.sim.set_outage(True)
    for i in range(10):
        for device in devices:
            rig.publish(device, "state", {"Brightness": 0, "Switch": "On" if i % 2 == 0 else "Off"})
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_outbox_depth", 30), what="30 queued events")
    # The outage lasts until each device's lane has backed off more than once (1 s, then 2 s, ...).
    await rig.hub.wait_for(lambda: metric_at_least(
        rig.hub, 'hubd_event_send_failures_total{reason="unavailable"}', 3 * len(devices)), timeout_s=30,
        what="every lane retried three times")
    rig.sim.set_outage(False)
    for device in devices:
        reports = await rig.wait_events(10, "ChangeReport", endpoint=device, timeout_s=90)
        values = [r.message["payload"]["change"]["states"][0]["value"] for r in reports]
        assert values == ["On", "Off"] * 5, (device, values)
    assert not rig.sim.duplicates


async def test_sigkill_during_outage_loses_nothing(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    rig.sim.set_outage(True)
    for i in range(6):
        rig.publish("lamp-1", "state", {"Switch": "On" if i % 2 == 0 else "Off"})
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_outbox_depth", 6), what="6 queued events")
    rig.hub.kill()
    rig.publish("lamp-1", "state", {"Switch": "On"})  # while hubd is down
    rig.sim.set_outage(False)
    rig.hub.start()
    await rig.hub.wait_ready()
    reports = await rig.wait_events(7, "ChangeReport", timeout_s=60)
    values = [r.message["payload"]["change"]["states"][0]["value"] for r in reports]
    assert values == ["On", "Off", "On", "Off", "On", "Off", "On"]


async def test_broker_restart_and_garbage_leave_hubd_healthy(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    garbage: list[tuple[str, str, bytes | str]] = [
        ("lamp-1", "state", b"not json"),
        ("lamp-1", "state", '{"Switch": true}'),
        ("lamp-1", "state", '{"NoSuchInterface": 1}'),
        ("lamp-1", "state", "[1, 2]"),
        ("lamp-1", "state", b"\xff\xfe"),
        ("ghost-1", "state", '{"Switch": "On"}'),
        ("lamp-1", "event", '{"name": "Explosion"}'),
        ("lamp-1", "availability", "maybe"),
        ("bad-1", "config", '{"displayName": "X", "displayType": "toaster"}'),
        ("lamp-1", "state", b"{" + b" " * (1024 * 1024) + b"}"),
    ]
    for device, suffix, payload in garbage:
        publish(rig.broker.port, f"hubd/device/{device}/{suffix}", payload)
    await rig.hub.wait_for(lambda: invalid_total(rig.hub, len(garbage)), what="every bad payload counted")
    assert "ghost-1" in rig.hub.log() and "not JSON" in rig.hub.log()
    status, _ = await rig.hub.get("/healthz")
    assert status == 200

    rig.broker.restart()
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_mqtt_connects_total", 2), timeout_s=40,
                           what="reconnect")
    rig.publish("lamp-1", "state", {"Switch": "On"})
    await rig.wait_events(1, "ChangeReport")
    assert not rig.sim.rejections


async def test_one_users_outage_or_dead_grant_leaves_the_others_alone(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("bell-1", "config", BELL, retain=True)
    for user in ("alice", "bob", "carol"):
        await rig.bind(user)
        await rig.wait_events(1, "AddOrUpdateReport", user_id=user)
    rig.sim.set_outage(True, "alice")  # alice's side of the platform is down
    rig.sim.revoke_user("bob")  # bob unbound: 403, and his refresh fails for good
    for _ in range(5):
        rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    carol = await rig.wait_events(5, "DoorbellPress", user_id="carol")
    assert len({p.message_id for p in carol}) == 5
    assert not rig.events("DoorbellPress", user_id="alice")  # still in her outage
    await rig.sim.wait_until(lambda: len(rig.sim.failure_reports) == 1, timeout_s=15)
    assert rig.sim.failure_reports[0].user_id == "bob"
    rig.sim.set_outage(False, "alice")
    alice = await rig.wait_events(5, "DoorbellPress", user_id="alice", timeout_s=90)
    assert len({p.message_id for p in alice}) == 5
    _, users = await rig.hub.get("/api/users")
    by_user = {u["userId"]: u for u in users["users"]}
    assert by_user["bob"]["status"] == "needs_rebind" and by_user["bob"]["pendingEvents"] == 5
    assert by_user["alice"]["pendingEvents"] == 0 and by_user["carol"]["pendingEvents"] == 0


async def test_good_and_bad_devices_together(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind()
    # Published while hubd is down, the configs reach it together: one batch.
    assert rig.hub.stop() == 0
    rig.publish("lamp-2", "config", {**LAMP, "displayName": "Lamp 2", "recommendRoomName": "Office #1"}, retain=True)
    rig.publish("hall-1", "config", {**LAMP, "displayName": "Hall Light (Main)"}, retain=True)
    rig.publish("battery-1", "config", {**CLIMATE, "capabilities": [
        {"interface": "Battery", "supportedOperations": [], "proactivelyReported": True, "retrievable": True}]},
        retain=True)
    rig.publish("fan-1", "config", {**LAMP, "capabilities": [
        {"interface": "Switch", "supportedOperations": ["On", "Off", "Toggle"], "proactivelyReported": True,
         "retrievable": True}]}, retain=True)
    rig.hub.start()
    await rig.hub.wait_ready()
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="lamp-2")
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="hall-1")
    names = {e["endpointId"]: (e["displayName"], e.get("recommendRoomName"))
             for added in rig.events("AddOrUpdateReport") for e in added.message["payload"]["endpoints"]}
    assert names == {"lamp-2": ("Lamp Two", "Office One"), "hall-1": ("Hall Light Main", "Office")}

    rig.publish("lamp-2", "state", {"Switch": "on", "Brightness": 40})  # a lower-case enum value: normalised
    rig.publish("lamp-2", "state", {"Switch": "Off", "Brightness": 150})  # out of range: refused whole
    rig.publish("lamp-2", "state", {"Switch": {"on": True}})  # an object for Switch: refused
    rig.publish("hall-1", "state", {"Switch": "On"})
    rig.publish("lamp-2", "state", {"Switch": "Off"})
    lamp = await rig.wait_events(2, "ChangeReport", endpoint="lamp-2")
    assert [c.message["payload"]["change"]["states"][0]["value"] for c in lamp] == ["On", "Off"]
    await rig.wait_events(1, "ChangeReport", endpoint="hall-1")
    await rig.hub.wait_for(lambda: invalid_total(rig.hub, 4), what="two configs and two states refused")
    log = rig.hub.log()
    assert "hubd/device/battery-1/config: capabilities: interface 'Battery' is not one the platform knows; " \
           "use one of Brightness" in log
    assert "hubd/device/fan-1/config: capabilities: Switch has no operation 'Toggle'; it has Off, On" in log
    assert "hubd/device/lamp-2/state: Brightness: 150 is outside its range 0 to 100" in log
    assert "hubd/device/lamp-2/state: Switch: an object is not a Switch value; use one of Off, On" in log
    assert "hubd/device/lamp-2/config: the platform refuses digits and punctuation in names, " \
           "so displayName 'Lamp 2' is sent as 'Lamp Two'; recommendRoomName 'Office #1' is sent as 'Office One'" \
           in log
    assert not rig.sim.rejections, rig.sim.rejections
    assert await rig.hub.metric("hubd_events_dead_lettered_total") == 0


async def test_a_refused_event_is_dead_lettered_with_the_answer_and_a_404_is_retried(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind_with_bell()
    rig.sim.fail_events(404, 422, 400)  # a proxy's 404 (retried), then the platform's verdicts (final)
    for _ in range(3):
        rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    await rig.wait_events(1, "DoorbellPress", timeout_s=30)
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_events_dead_lettered_total", 2), what="2 dead")
    with sqlite3.connect(rig.hub.workdir / "hubd.db") as db:
        dead = db.execute("SELECT name, http_status, response, attempts FROM dead_letters ORDER BY id").fetchall()
    assert [(d[0], d[1], d[3]) for d in dead] == [("DoorbellPress", 422, 2), ("DoorbellPress", 400, 1)]
    assert all(json.loads(d[2]) == {"error": "simulated failure (scripted)"} for d in dead)
    assert "platform.base_url" in rig.hub.log()  # the 404's retry says where to look


async def test_403_again_after_a_refresh_ends_the_grant_once_and_keeps_the_events(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind_with_bell()
    rig.sim.fail_events(403, 403)
    rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    await rig.sim.wait_until(lambda: len(rig.sim.failure_reports) == 1, timeout_s=15)
    # The first 403 refreshed the token (once); the resend with the new token got 403 again.
    refreshes = [r for r in rig.sim.token_requests if r.grant_type == "refresh_token"]
    assert [r.status for r in refreshes] == [200]
    forbidden = [r for r in rig.sim.rejections if r.status == 403]
    assert len(forbidden) == 2 and forbidden[0].message_id == forbidden[1].message_id
    rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_outbox_depth", 2), what="both presses kept")
    _, users = await rig.hub.get("/api/users")
    assert users["users"][0]["status"] == "needs_rebind" and users["users"][0]["pendingEvents"] == 2
    # Kept (depth 2, above) rather than sent: the second press was stored after the grant ended.
    assert len(rig.sim.failure_reports) == 1 and not rig.events("DoorbellPress")
    assert "event API refused the token after a refresh" in rig.hub.log()


async def test_platform_tokens_never_reach_the_log(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(access_ttl_s=3)  # hubd logs at debug level in these tests
    bound = await rig.bind_with_bell()
    rig.sim.expire_tokens("user-1")  # the 401 path too
    rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    await rig.wait_events(1, "DoorbellPress")
    await rig.sim.wait_until(lambda: len(rig.sim.tokens_issued) >= 3, timeout_s=15)  # and a scheduled refresh
    assert rig.hub.stop() == 0
    log = rig.hub.log()
    assert "DEBUG" in log
    secrets = [t.access_token for t in rig.sim.tokens_issued] + [t.refresh_token for t in rig.sim.tokens_issued]
    secrets += ["sim-secret", bound.user_token]
    assert [s for s in secrets if s in log] == []


async def test_grants_list_and_remove(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind("alice")
    await rig.bind("bob")
    rig.sim.set_outage(True)
    rig.publish("bell-1", "config", BELL, retain=True)
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_outbox_depth", 2), what="queued for both")
    listed = _hubd("grants", "-c", str(rig.hub.config_path), "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:2] == ["USER", "STATE"]
    assert [line.split()[:2] for line in lines[1:]] == [["alice", "active"], ["bob", "active"]]
    secrets = [t.access_token for t in rig.sim.tokens_issued] + [t.refresh_token for t in rig.sim.tokens_issued]
    assert not [s for s in secrets if s in listed.stdout]
    removed = _hubd("grants", "-c", str(rig.hub.config_path), "remove", "bob")
    assert removed.returncode == 0 and "removed the grant of 'bob' and 1 undelivered event" in removed.stdout
    assert _hubd("grants", "-c", str(rig.hub.config_path), "remove", "bob").returncode == 1
    rig.sim.set_outage(False)
    await rig.wait_events(1, "AddOrUpdateReport", user_id="alice", endpoint="bell-1")
    listed = _hubd("grants", "-c", str(rig.hub.config_path), "list")
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["alice"]


def _hubd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hubd", *args], capture_output=True, text=True, timeout=30)


async def _device_count(hub: HubdProcess, count: int) -> bool:
    _, body = await hub.get("/api/devices")
    return len(body["devices"]) >= count


