"""A full disk is not a crash loop: hubd stays up, says so on /healthz, keeps serving what needs no write, loses
nothing, and recovers by itself once space returns.

hubd's database is on a small tmpfs of its own (`disk.py`; mounting needs root, the test is skipped otherwise),
filled to the last byte by a filler file while devices publish states through a real mosquitto, then freed.
Every state change is a ChangeReport; each device's values all differ, so the platform simulator's record
shows any loss, any duplicate (a resend with a new messageId would be one) and any reordering.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import paho.mqtt.client as paho
from disk import SmallDisk
from hubd_proc import HubdProcess
from paho.mqtt.enums import CallbackAPIVersion
from rig import CLIMATE, Rig, metric_at_least

from simulators.platform_directives import DirectiveClient

DEVICES = ("climate-1", "climate-2", "climate-3")
BEFORE = 10  # states per device while the disk has room
DURING = 40  # states per device published once it is full
DISK_BYTES = 16 << 20
PROBE_FAILURES = 3  # the outage lasts at least this many failed probe writes (backing off: a few seconds)
# Lines the whole outage may add to hubd's log (at DEBUG, with the HTTP checks below): it says what happened
# once, it does not log per message or per retry.
OUTAGE_LOG_LINES_MAX = 60


class Publisher:
    """One paho connection; each QoS 1 message is acknowledged by the broker before the next goes."""

    def __init__(self, port: int) -> None:
        self._client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"disk-full-{time.monotonic_ns()}")
        self._client.connect("127.0.0.1", port)
        self._client.loop_start()

    def states(self, values: Sequence[tuple[str, float]]) -> None:
        for device, value in values:
            info = self._client.publish(f"hubd/device/{device}/state", json.dumps({"Temperature": value}), qos=1)
            info.wait_for_publish(timeout=5)
            if not info.is_published():
                raise RuntimeError(f"the broker did not acknowledge {device}'s state")

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


def _values(start: int, count: int) -> list[tuple[str, float]]:
    """`count` states per device, interleaved; value i of a device is 10 + i/2 (never the same twice)."""
    return [(device, 10.0 + i / 2) for i in range(start, start + count) for device in DEVICES]


async def test_a_full_disk_holds_events_and_delivers_each_once_in_order_when_space_returns(
        make_rig: Callable[..., Any], tmp_path: Path) -> None:
    SmallDisk.skip_unless_root()
    with SmallDisk(tmp_path / "disk", DISK_BYTES) as disk:
        rig: Rig = await make_rig(hub_overrides={"storage": {"path": str(disk.path / "hubd.db")}})
        publisher = Publisher(rig.broker.port)
        client = DirectiveClient(rig.hub.url, token="")
        try:
            await _run(rig, disk, publisher, client)
        finally:
            await client.close()
            publisher.close()
            rig.hub.kill()  # before the tmpfs goes


async def _run(rig: Rig, disk: SmallDisk, publisher: Publisher, client: DirectiveClient) -> None:
    hub = rig.hub
    for device in DEVICES:
        rig.publish(device, "config", CLIMATE, retain=True)
    await hub.wait_for(lambda: _known(hub, len(DEVICES)), what="every device known")
    client.token = (await rig.bind()).user_token
    await rig.wait_events(1, "AddOrUpdateReport")
    await asyncio.to_thread(publisher.states, _values(0, BEFORE))
    await rig.wait_events(BEFORE * len(DEVICES), "ChangeReport")

    disk.fill()
    lines_before = len(hub.log().splitlines())
    await asyncio.to_thread(publisher.states, _values(BEFORE, DURING))
    status, body = await hub.wait_for(lambda: _storage_failing(hub), what="/healthz naming the full disk")
    assert status == 503 and body["status"] == "unavailable"
    assert "the disk is full" in body["checks"]["storage"]["detail"]
    assert any(line.startswith("storage: ") for line in body["not_ready"])
    await hub.wait_for(lambda: metric_at_least(hub, "hubd_storage_failures_total", 1 + PROBE_FAILURES),
                       timeout_s=30, what="probe writes failing while the disk stays full")
    assert hub.proc is not None and hub.proc.poll() is None, "hubd exited on a full disk"
    assert await hub.metric("hubd_storage_writable") == 0

    # Whatever needs no write still answers: the login page, the directives, the webhook, the local API.
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{hub.url}/oauth/authorize", params={"callbackURL": f"{rig.sim.url}/cb"}) as page:
            assert page.status == 200 and "<form" in await page.text()
        async with session.post(f"{hub.url}/trigger/with/{'x' * 43}", json={}) as hook:
            assert hook.status == 404 and "error" in await hook.json()
    discovered = await client.discover()
    assert discovered.name == "DiscoveryResponse" and len(discovered.endpoints) == len(DEVICES)
    state = await client.report_state("climate-1")
    assert state.name == "Response"
    status, devices = await hub.get("/api/devices")
    assert status == 200 and len(devices["devices"]) == len(DEVICES)
    # The status page names the problem: nothing is acknowledged, so the broker's queue limit decides what is kept.
    status, page = await hub.get("/api/status")
    [storage] = [p for p in page["problems"]["other"] if p["subject"] == "storage"]
    assert "the disk is full" in storage["problem"] and "max_queued_messages" in storage["problem"], storage
    outage_lines = hub.log().splitlines()[lines_before:]

    disk.free()
    freed_at = time.monotonic()
    await hub.wait_ready(timeout_s=60)
    healthy_after = time.monotonic() - freed_at
    total = (BEFORE + DURING) * len(DEVICES)
    reports = await rig.wait_events(total, "ChangeReport", timeout_s=60)
    delivered_after = time.monotonic() - freed_at

    assert len(reports) == total  # none lost, none twice
    assert len({r.message_id for r in reports}) == total
    for device in DEVICES:
        values = [s["value"] for r in reports if r.endpoint_ids == (device,)
                  for s in r.message["payload"]["change"]["states"]]
        assert values == [10.0 + i / 2 for i in range(BEFORE + DURING)], device  # in order, each once
    status, body = await hub.get("/healthz")
    assert status == 200 and body["checks"]["storage"] == {"ok": True, "detail": "writable"}
    status, page = await hub.get("/api/status")
    assert not [p for p in page["problems"]["other"] if p["subject"] == "storage"]
    assert "Traceback" not in hub.log()
    assert len(outage_lines) <= OUTAGE_LOG_LINES_MAX, "\n".join(outage_lines)
    warnings = [line for line in outage_lines if " WARNING " in line or " ERROR " in line]
    print(f"\ndisk full: {len(outage_lines)} log lines during the outage ({len(warnings)} warnings or errors); "
          f"/healthz 200 {healthy_after:.1f} s and every event delivered {delivered_after:.1f} s after the space "
          "came back")


async def test_hubd_started_on_a_full_disk_serves_says_so_and_delivers_what_it_held_once_space_returns(
        make_rig: Callable[..., Any], tmp_path: Path) -> None:
    SmallDisk.skip_unless_root()
    with SmallDisk(tmp_path / "disk", DISK_BYTES) as disk:
        rig: Rig = await make_rig(hub_overrides={"storage": {"path": str(disk.path / "hubd.db")}})
        publisher = Publisher(rig.broker.port)
        try:
            hub = rig.hub
            for device in DEVICES:
                rig.publish(device, "config", CLIMATE, retain=True)
            await hub.wait_for(lambda: _known(hub, len(DEVICES)), what="every device known")
            await rig.bind()
            await rig.wait_events(1, "AddOrUpdateReport")
            disk.fill()
            await asyncio.to_thread(publisher.states, _values(0, BEFORE))
            await hub.wait_for(lambda: _storage_failing(hub), what="/healthz naming the full disk")
            # systemd's watchdog, the OOM killer or a power cut: the held messages were never acknowledged.
            hub.kill()
            hub.start()
            status, body = await hub.wait_for(lambda: _storage_failing(hub, starting=True), timeout_s=30,
                                              what="the restarted hubd answering /healthz with the full disk")
            assert status == 503 and "the disk is full" in body["checks"]["storage"]["detail"]
            assert hub.proc is not None and hub.proc.poll() is None
            async with aiohttp.ClientSession() as session, session.get(
                    f"{hub.url}/oauth/authorize", params={"callbackURL": f"{rig.sim.url}/cb"}) as page:
                assert page.status == 200
            disk.free()
            await hub.wait_ready(timeout_s=60)
            reports = await rig.wait_events(BEFORE * len(DEVICES), "ChangeReport", timeout_s=60)
            assert len({r.message_id for r in reports}) == len(reports) == BEFORE * len(DEVICES)
            for device in DEVICES:
                values = [s["value"] for r in reports if r.endpoint_ids == (device,)
                          for s in r.message["payload"]["change"]["states"]]
                assert values == [10.0 + i / 2 for i in range(BEFORE)], device
            assert "Traceback" not in hub.log()
        finally:
            publisher.close()
            rig.hub.kill()


async def _known(hub: HubdProcess, count: int) -> bool:
    status, body = await hub.get("/api/devices")
    return status == 200 and len(body["devices"]) == count


async def _storage_failing(hub: HubdProcess, *, starting: bool = False) -> tuple[int, Any] | None:
    try:
        status, body = await hub.get("/healthz")
    except aiohttp.ClientConnectionError:
        if starting and hub.proc is not None and hub.proc.poll() is None:
            return None  # not listening yet
        raise
    storage = body.get("checks", {}).get("storage", {}) if isinstance(body, dict) else {}
    return (status, body) if storage.get("ok") is False else None
