"""kill -9 under load, at several points: every event a device published reaches the platform once, in order.

Devices keep publishing through a real mosquitto while hubd is killed and started again three times.
Delivery is at least once with a stable messageId: a resend after a kill is the same message (the
simulator counts those in `duplicates`), never the same change again under a new messageId. A kill that lands while
one message is read alone costs that message: hubd cannot tell it from a poison, so it is set aside (the in-flight
record, hubd/mqtt/inflight.py), listed under problems; at most one per kill.
"""

from __future__ import annotations

import asyncio
import json
import threading
import zlib
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
from rig import CLIMATE, Rig

DEVICES = ("probe-1", "probe-2", "probe-3")
PER_DEVICE = 120
KILL_AFTER = (0.25, 0.5, 0.75)  # of all publishes


class Publisher:
    """Devices publishing QoS 1 states from a thread of their own, paced, while the test kills hubd."""

    def __init__(self, port: int) -> None:
        self.sent = 0
        self._client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="chaos-devices")
        self._client.connect("127.0.0.1", port)
        self._client.loop_start()
        self._thread = threading.Thread(target=self._publish_all, name="chaos-devices", daemon=True)
        self._stop = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.loop_stop()
        self._client.disconnect()

    @staticmethod
    def value(device: int, i: int) -> float:
        return round(device * 100 + i / 10, 1)  # unique per device and step, and in order

    @staticmethod
    def payload(device: int, i: int) -> bytes:
        return f'{{"Temperature": {Publisher.value(device, i)}}}'.encode()

    def _publish_all(self) -> None:
        for i in range(PER_DEVICE):
            for d, device in enumerate(DEVICES):
                if self._stop.is_set():
                    return
                info = self._client.publish(f"hubd/device/{device}/state", self.payload(d, i), qos=1)
                info.wait_for_publish(10)
                self.sent += 1
            self._stop.wait(0.004)


async def test_sigkill_at_three_points_under_load_repeats_nothing_and_loses_only_what_it_sets_aside(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    for device in DEVICES:
        rig.publish(device, "config", CLIMATE, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    total = PER_DEVICE * len(DEVICES)
    publisher = Publisher(rig.broker.port)
    publisher.start()
    try:
        for share in KILL_AFTER:
            async with asyncio.timeout(60):
                while publisher.sent < total * share:
                    await asyncio.sleep(0.01)
            rig.hub.kill()
            rig.hub.start()
            await rig.hub.wait_ready()
        # Each device's last state comes after the kills (and after whatever was set aside before it).
        for d, device in enumerate(DEVICES):
            last = Publisher.value(d, PER_DEVICE - 1)
            await rig.hub.wait_for(lambda device=device, last=last: _reported(rig, device, last), timeout_s=90,
                                   what=f"{device}'s last state reported")
        set_aside = _set_aside(rig)
        assert len(set_aside) <= len(KILL_AFTER)
        for d, device in enumerate(DEVICES):
            expected = [Publisher.value(d, i) for i in range(PER_DEVICE)
                        if (f"hubd/device/{device}/state", *_crc_and_length(Publisher.payload(d, i))) not in set_aside]
            values = _values(rig, device)
            # The same change twice would come under a new messageId here: every one once, in order, but for the
            # messages set aside.
            assert values == expected, (device, values[:20])
    finally:
        publisher.stop()
    status, _ = await rig.hub.get("/healthz")
    assert status == 200
    assert "Traceback" not in rig.hub.log()


def _crc_and_length(payload: bytes) -> tuple[int, int]:
    return zlib.crc32(payload), len(payload)


def _values(rig: Rig, device: str) -> list[float]:
    return [r.message["payload"]["change"]["states"][0]["value"] for r in rig.events("ChangeReport", endpoint=device)]


async def _reported(rig: Rig, device: str, value: float) -> bool:
    return value in _values(rig, device)


def _set_aside(rig: Rig) -> set[tuple[str, int, int]]:
    """The messages the in-flight record counts as set aside: a kill found each alone in flight, uncommitted."""
    path = rig.hub.workdir / "hubd.db.inflight"
    text = path.read_text() if path.exists() else ""
    return {(t, crc, length) for t, crc, length in json.loads(text)["counted"]} if text else set()
