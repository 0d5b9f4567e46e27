"""Issue 4: MQTT devices become platform events for every bound user (real broker, simulator, hubd process)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import platform_config
from hubd_proc import HubdProcess
from mosquitto import Mosquitto, publish

from simulators.platform import BindResult, EventRecord, PlatformSimulator, bind_user

LAMP = {
    "displayName": "Desk Lamp", "displayType": "light", "recommendRoomName": "Office",
    "additionalInfo": {"gateway": "attic"},
    "capabilities": [
        {"interface": "Switch", "supportedOperations": ["On", "Off"], "proactivelyReported": True, "retrievable": True},
        {"interface": "Brightness", "supportedOperations": ["Set", "Adjust"], "proactivelyReported": False,
         "retrievable": True},
    ],
}
CLIMATE = {
    "displayName": "Hall Sensor", "displayType": "unknown",
    "capabilities": [
        {"interface": "Temperature", "supportedOperations": [], "proactivelyReported": True, "retrievable": True},
        {"interface": "Humidity", "supportedOperations": [], "proactivelyReported": True, "retrievable": True},
    ],
}
BELL = {"displayName": "Front Door Bell", "displayType": "unknown", "capabilities": []}


@dataclass
class Rig:
    """A broker, the platform simulator and a hubd process wired together."""

    broker: Mosquitto
    sim: PlatformSimulator
    hub: HubdProcess

    def publish(self, device: str, suffix: str, payload: object, *, retain: bool = False) -> None:
        data = payload if isinstance(payload, bytes | str) else json.dumps(payload)
        publish(self.broker.port, f"hubd/device/{device}/{suffix}", data, retain=retain)

    async def bind(self, user_id: str = "user-1") -> BindResult:
        result = await bind_user(hub_url=self.hub.url, vendor_path="/vendor", sim=self.sim, username="demo",
                                 password="demo", user_id=user_id)
        assert result.ok, result.reply
        return result

    def events(self, name: str | None = None, user_id: str | None = None,
               endpoint: str | None = None) -> list[EventRecord]:
        return [e for e in self.sim.events if (name is None or e.name == name)
                and (user_id is None or e.user_id == user_id) and (endpoint is None or endpoint in e.endpoint_ids)]

    async def wait_events(self, count: int, name: str | None = None, user_id: str | None = None,
                          endpoint: str | None = None, timeout_s: float = 15.0) -> list[EventRecord]:
        deadline = time.monotonic() + timeout_s
        while len(found := self.events(name, user_id, endpoint)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {count} {name} events, got {len(found)}; rejections: "
                                     f"{self.sim.rejections[-5:]}\n{self.hub.log()[-3000:]}")
            await asyncio.sleep(0.05)
        return found


@pytest.fixture
async def make_rig(tmp_path: Path, mosquitto: Mosquitto) -> AsyncIterator[Callable[..., Any]]:
    rigs: list[Rig] = []
    sims: list[PlatformSimulator] = []

    async def make(*, access_ttl_s: int = 3600, hub_overrides: dict[str, Any] | None = None) -> Rig:
        sim = PlatformSimulator(client_id="sim-client", client_secret="sim-secret", access_ttl_s=access_ttl_s)
        await sim.start()
        sims.append(sim)
        overrides = platform_config(sim)
        for key, value in (hub_overrides or {}).items():
            overrides[key] = {**overrides.get(key, {}), **value}  # type: ignore[dict-item]
        hub = HubdProcess(tmp_path / f"hub{len(rigs)}", mqtt_port=mosquitto.port, overrides=overrides)
        hub.start()
        await hub.wait_ready()
        rig = Rig(mosquitto, sim, hub)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.hub.kill()
    for sim in sims:
        await sim.stop()


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
    await rig.wait_events(2, "ChangeReport", endpoint="lamp-1")
    await asyncio.sleep(0.3)
    lamp_changes = rig.events("ChangeReport", endpoint="lamp-1")
    assert len(lamp_changes) == 2
    assert lamp_changes[1].message["payload"]["change"]["states"][0]["value"] == "Off"
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
    await rig.hub.wait_for(lambda: _metric_at_least(rig.hub, 'hubd_mqtt_messages_total{kind="config"}', 5),
                           what="retained configs replayed")
    await asyncio.sleep(0.5)
    assert len(rig.events("AddOrUpdateReport")) == 1


async def test_every_doorbell_press_is_sent(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("bell-1", "config", BELL, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    for _ in range(5):
        rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    presses = await rig.wait_events(5, "DoorbellPress")
    await asyncio.sleep(0.3)
    assert len(rig.events("DoorbellPress")) == 5
    for press in presses:
        payload = press.message["payload"]
        assert payload["endpointId"] == "bell-1" and payload["cause"] == {"type": "PHYSICAL_INTERACTION"}
        assert press.message["header"]["namespace"] == "Service.EventSource"
    assert len({p.message_id for p in presses}) == 5


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
    for i in range(16):
        rig.publish("lamp-1", "state", {"Switch": "On" if i % 2 == 0 else "Off"})
        await asyncio.sleep(0.5)
    await rig.wait_events(16, "ChangeReport")
    refreshes = [r for r in rig.sim.token_requests if r.grant_type == "refresh_token" and r.status == 200]
    assert len(refreshes) >= 2, rig.sim.token_requests
    assert rig.sim.expired_token_hits == 0
    assert not rig.sim.rejections


async def test_401_refreshes_and_resends_the_same_message(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("bell-1", "config", BELL, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    rig.sim.expire_tokens("user-1")
    rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    [press] = await rig.wait_events(1, "DoorbellPress")
    [rejected] = [r for r in rig.sim.rejections if r.status == 401]
    assert rejected.message_id == press.message_id
    assert any(r.grant_type == "refresh_token" and r.status == 200 for r in rig.sim.token_requests)


async def test_dead_refresh_sends_one_failure_report_and_keeps_events(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("bell-1", "config", BELL, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    rig.sim.revoke_refresh("user-1")
    rig.sim.expire_tokens("user-1")
    for _ in range(3):
        rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    await rig.sim.wait_until(lambda: len(rig.sim.failure_reports) >= 1, timeout_s=15)
    await asyncio.sleep(1.0)
    assert len(rig.sim.failure_reports) == 1
    assert rig.sim.failure_reports[0].user_id == "user-1"
    assert not rig.events("DoorbellPress")
    assert "invalid_grant" in rig.hub.log()
    assert await rig.hub.metric("hubd_outbox_depth") == 3
    _, users = await rig.hub.get("/api/users")
    assert users["users"][0]["userId"] == "user-1" and users["users"][0]["status"] == "needs_rebind"
    assert users["users"][0]["pendingEvents"] == 3
    # A new grant brings the kept events out, in order, after the devices.
    await rig.bind()
    presses = await rig.wait_events(3, "DoorbellPress")
    assert len(presses) == 3


async def test_platform_outage_delivers_everything_in_order_per_device(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    devices = ["lamp-1", "lamp-2", "lamp-3"]
    for device in devices:
        rig.publish(device, "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    rig.sim.set_outage(True)
    outage_started = time.monotonic()
    for i in range(10):
        for device in devices:
            rig.publish(device, "state", {"Brightness": 0, "Switch": "On" if i % 2 == 0 else "Off"})
    await rig.hub.wait_for(lambda: _metric_at_least(rig.hub, "hubd_outbox_depth", 30), what="30 queued events")
    await asyncio.sleep(max(0.0, 10.0 - (time.monotonic() - outage_started)))
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
    await rig.hub.wait_for(lambda: _metric_at_least(rig.hub, "hubd_outbox_depth", 6), what="6 queued events")
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
    await rig.hub.wait_for(lambda: _invalid_total(rig.hub, len(garbage)), what="every bad payload counted")
    assert "ghost-1" in rig.hub.log() and "not JSON" in rig.hub.log()
    status, _ = await rig.hub.get("/healthz")
    assert status == 200

    rig.broker.restart()
    await rig.hub.wait_for(lambda: _metric_at_least(rig.hub, "hubd_mqtt_connects_total", 2), timeout_s=40,
                           what="reconnect")
    rig.publish("lamp-1", "state", {"Switch": "On"})
    await rig.wait_events(1, "ChangeReport")
    assert not rig.sim.rejections


async def _device_count(hub: HubdProcess, count: int) -> bool:
    _, body = await hub.get("/api/devices")
    return len(body["devices"]) >= count


async def _metric_at_least(hub: HubdProcess, name: str, value: float) -> bool:
    if "{" in name:
        base, labels = name.split("{", 1)
        return await hub.metric(base, labels.rstrip("}")) >= value
    return await hub.metric(name) >= value


async def _invalid_total(hub: HubdProcess, count: int) -> bool:
    _, text = await hub.get("/metrics")
    total = sum(float(line.split()[-1]) for line in str(text).splitlines()
                if line.startswith("hubd_device_messages_invalid_total"))
    return total >= count
