"""The largest messages hubd accepts are read within the unit's MemoryMax (192M), and larger ones are refused
without being read, in a real hubd in a 192 MiB memory cgroup (bench/pi.py's) against a real mosquitto.

The largest accepted: a zigbee2mqtt bridge/devices of exactly zigbee2mqtt.max_devices_bytes (16 MiB) holding 2,000
devices (the cap) of the largest real entries in tests/fixtures; a message of exactly mqtt.max_message_bytes
(1 MiB) on an ordinary topic. One byte more: refused unread and listed under problems. `[{},{},...]` of 16 MiB
(5.6 million entries, which json.loads would build whole): refused at the 2,001st. A retained message larger than
all of hubd's memory (200 MiB): mosquitto never sends it (MQTT 5 Maximum Packet Size). hubd stays up throughout.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from mosquitto import publish_many
from paho.mqtt.enums import CallbackAPIVersion
from rig import Rig, invalid_total, metric_at_least
from zigbee2mqtt_helpers import FIXTURES, fixture

MIB = 1024 * 1024
MEMORY_MAX_MIB = 192  # systemd/hubd.service
DEVICES_BYTES = 16 * MIB  # zigbee2mqtt.max_devices_bytes' default
MESSAGE_BYTES = MIB  # mqtt.max_message_bytes' default
MAX_DEVICES = 2000
BRIDGE_DEVICES = "zigbee2mqtt/bridge/devices"


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def full_device_list(size: int = DEVICES_BYTES, count: int = MAX_DEVICES) -> bytes:
    """`count` devices cycled from the real entries of 6 KiB or more (zigbee2mqtt publishes compact JSON), each with
    an ieee_address and friendly_name of its own, padded with whitespace to exactly `size` bytes."""
    pool = [e for path in sorted(FIXTURES.glob("*.json")) for e in fixture(path.stem).get("devices", [])
            if e.get("type") != "Coordinator" and len(_compact(e)) >= 6000]
    assert len(pool) >= 5, "the fixtures' largest real entries"
    parts = []
    for i in range(count):
        entry = copy.deepcopy(pool[i % len(pool)])
        entry["ieee_address"], entry["friendly_name"] = f"0x{i:016x}", f"device_{i:04d}"
        parts.append(_compact(entry))
    listed = b"[" + b",".join(parts) + b"]"
    assert len(listed) <= size, f"{count} entries take {len(listed)} bytes"
    return listed[:-1] + b" " * (size - len(listed)) + b"]"


def empty_objects(size: int = DEVICES_BYTES) -> bytes:
    """`[{},{},...]` of exactly `size` bytes."""
    count = (size - 2) // 3
    return b"[" + b",".join([b"{}"] * count) + b" " * ((size - 2) - (3 * count - 1)) + b"]"


def publish(port: int, topic: str, payload: bytes, *, retain: bool = False) -> None:
    """One QoS 1 message, waiting for its PUBACK (a large one takes a while on two shared cores)."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"test-pub-{time.monotonic_ns()}")
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        info = client.publish(topic, payload, qos=1, retain=retain)
        info.wait_for_publish(timeout=120)
        assert info.is_published(), f"publish to {topic} was not acknowledged"
    finally:
        client.disconnect()
        client.loop_stop()


async def invalid_count(rig: Rig) -> int:
    """hubd_device_messages_invalid_total, all kinds."""
    _, text = await rig.hub.get("/metrics")
    return int(sum(float(line.split()[-1]) for line in str(text).splitlines()
                   if line.startswith("hubd_device_messages_invalid_total")))


async def refused(rig: Rig, count: int, topic: str, text: str) -> dict[str, Any]:
    """Once hubd has refused `count` device messages in all, the problem /api/status lists for `topic` whose reason
    holds `text` (asked once: the status of 2,000 devices is 6 MB of JSON)."""
    await rig.hub.wait_for(lambda: invalid_total(rig.hub, count), timeout_s=60, what=f"{count} messages refused")
    _, status = await rig.hub.get("/api/status")
    found = [p for p in status["problems"]["rejected"] if p["topic"] == topic and text in p["reason"]]
    assert found, (text, status["problems"]["rejected"])
    return found[0]


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")


@dataclass
class Limited:
    """hubd (zigbee2mqtt on) in a memory cgroup of the unit's MemoryMax."""

    rig: Rig
    cgroup: Any
    pid: int


@pytest.fixture
async def limited(make_rig: Callable[..., Any]) -> AsyncIterator[Limited]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.pi import MemoryCgroup, find_memory_cgroup

    plan = find_memory_cgroup()
    if isinstance(plan, str):
        pytest.skip(f"no memory cgroup to make here: {plan}")
    cgroup = MemoryCgroup(plan, f"hubd-test-size-{time.monotonic_ns()}", MEMORY_MAX_MIB)
    cgroup.create()
    rig: Rig | None = None
    try:
        def start_in_cgroup(hub: Any) -> None:
            hub.prefix = tuple(cgroup.join_prefix())
            hub.start()

        rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}}, ready=False, start=start_in_cgroup)
        await rig.hub.wait_ready()
        assert rig.hub.proc is not None
        yield Limited(rig, cgroup, rig.hub.proc.pid)
        assert rig.hub.proc.poll() is None and cgroup.oom_kills() in (0, None), rig.hub.log()[-3000:]
        status, health = await rig.hub.get("/healthz")
        assert status == 200, health
    finally:
        if rig is not None:
            rig.hub.kill()
        cgroup.remove()


async def test_the_largest_accepted_messages_fit_in_memorymax_and_larger_ones_are_refused_unread(
    limited: Limited
) -> None:
    rig, cgroup, pid = limited.rig, limited.cgroup, limited.pid
    port = rig.broker.port
    ready_rss = peak_rss_mib(pid)

    # The largest device list hubd reads, read whole: 2,000 devices.
    await asyncio.to_thread(publish, port, BRIDGE_DEVICES, full_device_list(), retain=True)
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_devices", MAX_DEVICES), timeout_s=120,
                           what="2,000 devices imported")
    listed_rss = peak_rss_mib(pid)
    refusals = await invalid_count(rig)  # the entries' own problems, if any

    # 16 MiB of `{}`: refused at the 2,001st entry; the 2,000 devices stay.
    await asyncio.to_thread(publish, port, BRIDGE_DEVICES, empty_objects(), retain=True)
    await refused(rig, refusals + 1, BRIDGE_DEVICES, f"more than {MAX_DEVICES} devices")
    # One byte over zigbee2mqtt.max_devices_bytes: refused unread.
    await asyncio.to_thread(publish, port, BRIDGE_DEVICES, full_device_list(DEVICES_BYTES + 1), retain=True)
    await refused(rig, refusals + 2, BRIDGE_DEVICES, f"{DEVICES_BYTES + 1} bytes; hubd reads at most")

    # An ordinary topic: exactly mqtt.max_message_bytes reaches its dialect (which wants no more than a small
    # JSON object there); one byte more is refused before any dialect reads it.
    state = "hubd/device/lamp-1/state"
    await asyncio.to_thread(publish, port, state, b"{" + b" " * (MESSAGE_BYTES - 2) + b"}")
    problem = await refused(rig, refusals + 3, state, f"payload is {MESSAGE_BYTES} bytes")
    assert "max_message_bytes" not in problem["reason"]
    await asyncio.to_thread(publish, port, state, b"{" + b" " * (MESSAGE_BYTES - 1) + b"}")
    await refused(rig, refusals + 4, state, f"a message of {MESSAGE_BYTES + 1} bytes, over mqtt.max_message_bytes "
                                            f"({MESSAGE_BYTES}): refused unread")

    # Larger than all the memory hubd has, retained: the broker never sends it; what comes after it is read.
    await asyncio.to_thread(publish, port, "hubd/device/lamp-2/state", b"x" * (200 * MIB), retain=True)
    await asyncio.to_thread(publish, port, "hubd/device/lamp-3/state", b"{" + b" " * MESSAGE_BYTES + b"}")
    await refused(rig, refusals + 5, "hubd/device/lamp-3/state", f"a message of {MESSAGE_BYTES + 2} bytes")
    assert "Dropping too large outgoing PUBLISH" in rig.broker.log_tail()
    assert await invalid_count(rig) == refusals + 5  # the 200 MiB one: never seen

    assert await metric_at_least(rig.hub, "hubd_mqtt_too_large_total", 2)
    assert await metric_at_least(rig.hub, "hubd_devices", MAX_DEVICES)  # the refused lists changed nothing
    print(f"\npeak RSS (VmHWM) of hubd in a {MEMORY_MAX_MIB} MiB cgroup: {ready_rss:.1f} MiB ready, "
          f"{listed_rss:.1f} MiB with the 16 MiB list of 2,000 devices read, {peak_rss_mib(pid):.1f} MiB at the "
          f"end; the cgroup's peak charge {cgroup.peak_mib()} MiB")


async def test_a_burst_of_large_messages_waits_in_the_broker_not_in_hubd(limited: Limited) -> None:
    """The 16 MiB device list, then twelve 10 MiB messages at once (120 MiB: more than hubd has left while it reads
    the list), each within the connection's Maximum Packet Size and refused by the bridge. While hubd stores the
    2,000 devices the loop reads on, but its inbox takes 8 MiB at most before the connection stops reading: the
    rest waits in the broker."""
    rig, count = limited.rig, 12
    payload = b"{" + b" " * (10 * MIB - 2) + b"}"
    burst = [(f"hubd/device/lamp-{i}/state", payload, False) for i in range(count)]
    await asyncio.to_thread(publish_many, rig.broker.port, [(BRIDGE_DEVICES, full_device_list(), True), *burst])
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_mqtt_too_large_total", count), timeout_s=120,
                           what=f"{count} large messages refused")
    assert await metric_at_least(rig.hub, "hubd_devices", MAX_DEVICES)
    print(f"\npeak RSS (VmHWM) after the list and {count} messages of 10 MiB at once: "
          f"{peak_rss_mib(limited.pid):.1f} MiB")
