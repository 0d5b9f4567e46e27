"""A message that kills hubd while it reads it does not kill it at every start (the in-flight record,
hubd/mqtt/inflight.py): after the first death with it alone in flight, hubd acknowledges it unread, lists it under
the status page's problems, and goes on; a retained one is set aside again at every later start, counted once.

The poison is a zigbee2mqtt device list of 2,000 bulbs (8 MB, within hubd's limits: reading it takes about a second
and some 20 MB more than receiving it). hubd dies while reading it, in one test by SIGKILL, sent as soon as the
in-flight record names the message (as systemd's watchdog or a crash would), in the other by the kernel's OOM killer
in a memory cgroup limited, once hubd has begun to read the list, to a little more than it holds then (a Raspberry Pi
whose memory runs out). The test starts hubd again, as systemd's Restart=on-failure does: once is enough.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mosquitto import publish
from rig import LAMP, Rig, metric_at_least
from zigbee2mqtt_helpers import entries

BRIDGE_DEVICES = "zigbee2mqtt/bridge/devices"
SET_ASIDE = "hubd_mqtt_set_aside_total"


def device_list(count: int = 2000) -> bytes:
    bulb = entries("philips_9290012573A_colour_bulb")[0]
    out = []
    for i in range(count):
        entry = copy.deepcopy(bulb)
        entry["ieee_address"], entry["friendly_name"] = f"0x{i:016x}", f"bulb_{i}"
        out.append(entry)
    return json.dumps(out, separators=(",", ":")).encode()


def inflight(rig: Rig) -> bytes:
    path = rig.hub.workdir / "hubd.db.inflight"
    return path.read_bytes() if path.exists() else b""


async def reading(rig: Rig, topic: str, before: bytes, timeout_s: float = 30.0) -> bytes:
    """Until the in-flight record names `topic` anew (not as `before`, what the last run left): this hubd is
    reading that message now. The record then."""
    deadline = time.monotonic() + timeout_s
    while topic.encode() not in (now := inflight(rig)) or now == before:
        assert rig.hub.proc is not None and rig.hub.proc.poll() is None, rig.hub.log()[-3000:]
        assert time.monotonic() < deadline, f"hubd never read {topic}:\n{rig.hub.log()[-3000:]}"
        await asyncio.sleep(0.002)
    return now


async def died(rig: Rig, timeout_s: float = 60.0) -> int:
    """Until the hubd process ends by itself; its exit status."""
    assert rig.hub.proc is not None
    deadline = time.monotonic() + timeout_s
    while rig.hub.proc.poll() is None:
        assert time.monotonic() < deadline, f"hubd did not die:\n{rig.hub.log()[-3000:]}"
        await asyncio.sleep(0.02)
    return rig.hub.wait()


def set_aside_logged(rig: Rig) -> int:
    return rig.hub.log().count("hubd stopped once while reading this message alone")


async def logged_more(rig: Rig, before: int) -> bool:
    return set_aside_logged(rig) > before


async def set_aside_and_working(rig: Rig, endpoint_state: str) -> None:
    """hubd is ready, lists the device list under problems as set aside, and still reports a lamp's change."""
    await rig.hub.wait_ready(timeout_s=30)
    # Set aside each time the broker delivers it (the redelivery of the unacknowledged one, the retained copy).
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, SET_ASIDE, 1), what="the poison set aside", timeout_s=30)
    _, status = await rig.hub.get("/api/status")
    problems = [p for p in status["problems"]["rejected"] if p["topic"] == BRIDGE_DEVICES]
    assert problems and "set aside unread" in json.dumps(problems), status["problems"]
    rig.publish("lamp-1", "state", {"Switch": endpoint_state})
    reports = await rig.wait_events(1 + (endpoint_state == "Off"), "ChangeReport", endpoint="lamp-1")
    assert reports[-1].message["payload"]["change"]["states"][0]["value"] == endpoint_state


async def test_one_sigkill_on_a_message_alone_sets_it_aside_and_hubd_runs(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}})
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")

    publish(rig.broker.port, BRIDGE_DEVICES, device_list(), retain=True)
    await reading(rig, BRIDGE_DEVICES, b"")  # killed while reading it, alone
    rig.hub.kill()
    rig.hub.start()

    await set_aside_and_working(rig, "On")
    log = rig.hub.log()
    assert "hubd stopped once while reading this message alone" in log and "Traceback" not in log
    record = json.loads(inflight(rig))
    assert record["inflight"] == [] and record["suspects"][0][0] == BRIDGE_DEVICES  # kept: it is retained
    assert await rig.hub.metric(SET_ASIDE) == 1

    # Retained, it comes again at the next start: set aside again, unread, and counted no more.
    before = set_aside_logged(rig)
    assert rig.hub.stop() == 0
    rig.hub.start()
    await set_aside_and_working(rig, "Off")
    await rig.hub.wait_for(lambda: logged_more(rig, before), what="the retained copy set aside again")
    assert await rig.hub.metric(SET_ASIDE) == 1


def _memory_cgroup() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.pi import find_memory_cgroup

    plan = find_memory_cgroup()
    if isinstance(plan, str):
        pytest.skip(f"no memory cgroup to make here: {plan}")
    return plan


async def test_one_oom_kill_on_a_message_alone_sets_it_aside(make_rig: Callable[..., Any]) -> None:
    from bench.pi import MemoryCgroup

    plan = _memory_cgroup()
    cgroup = MemoryCgroup(plan, f"hubd-test-oom-{time.monotonic_ns()}", 4096)
    cgroup.create()
    try:
        rig: Rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}}, ready=False,
                                  start=lambda hub: _start_in(hub, cgroup))
        await rig.hub.wait_ready()
        rig.publish("lamp-1", "config", LAMP, retain=True)
        await rig.bind()
        await rig.wait_events(1, "AddOrUpdateReport")

        publish(rig.broker.port, BRIDGE_DEVICES, device_list(), retain=True)
        # Once hubd has received the list and begun to read it, a limit a little above what it holds then: reading
        # the rest takes some 20 MB more than that, which does not fit. (A limit set before the list arrives
        # depends on how much reclaimable page cache hubd holds at that moment, and sometimes lets it read the
        # whole list.)
        await reading(rig, BRIDGE_DEVICES, b"")
        (cgroup.path / plan.limit_file).write_text(str(_unreclaimable(cgroup.path, plan.version) + 8 * 1024 * 1024))
        assert await died(rig) == -9, rig.hub.log()[-3000:]  # SIGKILL: the OOM killer
        rig.hub.start()
        assert cgroup.oom_kills() == 1
        await set_aside_and_working(rig, "On")
    finally:
        for rig_proc in [p for p in [getattr(locals().get("rig"), "hub", None)] if p is not None]:
            rig_proc.kill()
        cgroup.remove()


def _start_in(hub: Any, cgroup: Any) -> None:
    hub.prefix = tuple(cgroup.join_prefix())
    hub.start()


def _unreclaimable(path: Path, version: int) -> int:
    """What the cgroup holds now less its page cache (mapped files, such as Python's own libraries, count as held)."""
    usage = int((path / ("memory.usage_in_bytes" if version == 1 else "memory.current")).read_text())
    stat = dict(line.split() for line in (path / "memory.stat").read_text().splitlines())
    cache, mapped = ("cache", "mapped_file") if version == 1 else ("file", "file_mapped")
    return usage - int(stat.get(cache, 0)) + int(stat.get(mapped, 0))
