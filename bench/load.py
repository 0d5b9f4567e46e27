"""The device load: one paho client publishing for thousands of devices, with publish times per sequence number.

Every state publish carries `{"Temperature": SEQ}` with SEQ unique across the run, so every publish is a
change (a ChangeReport) and the receiver can match each receipt to its publish time by the value alone.
Publishes are QoS 1 with a bounded number outstanding (paho's message ids wrap at 65,535). The device-import
scenarios (bench.imports) pass a `StateShape` instead: the topic and payload of device `index` carrying SEQ in
their own dialect (a Home Assistant state topic, a zigbee2mqtt full state), still one unique SEQ per publish.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

MAX_OUTSTANDING = 10_000
# (device index, SEQ) -> (topic, payload): how one state publish looks in a dialect other than hubd's own.
StateShape = Callable[[int, int], tuple[str, bytes]]
SENSOR_CONFIG = {
    "displayName": "Bench Sensor",
    "displayType": "unknown",
    "recommendRoomName": "Lab",
    "capabilities": [
        {"interface": "Temperature", "supportedOperations": [], "proactivelyReported": True, "retrievable": True},
    ],
}


def device_id(index: int) -> str:
    """The endpointId of bench device `index`."""
    return f"bench-{index:05d}"


class Publisher:
    """A QoS 1 publisher on its own network thread; `publish` blocks while too many are unacknowledged."""

    def __init__(self, port: int, client_id: str) -> None:
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
        self._client.max_inflight_messages_set(1000)
        self._client.max_queued_messages_set(0)
        self._slots = threading.BoundedSemaphore(MAX_OUTSTANDING)
        self._connected = threading.Event()
        self._client.on_connect = lambda *_args: self._connected.set()
        self._client.on_publish = lambda *_args: self._slots.release()
        self._client.connect("127.0.0.1", port, keepalive=60)
        self._client.loop_start()
        if not self._connected.wait(10):
            raise RuntimeError(f"the bench publisher could not connect to the broker on port {port}")
        self.seq = 0
        self.sent_at: dict[int, float] = {}

    def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> None:
        self._slots.acquire()
        self._client.publish(topic, payload, qos=1, retain=retain)

    def configs(self, base: str, indexes: Iterable[int]) -> None:
        payload = json.dumps(SENSOR_CONFIG).encode()
        for i in indexes:
            self.publish(f"{base}/device/{device_id(i)}/config", payload, retain=True)

    def clear_retained(self, base: str, indexes: Iterable[int]) -> None:
        """Remove retained configs from the broker (an empty retained payload)."""
        for i in indexes:
            self.publish(f"{base}/device/{device_id(i)}/config", b"", retain=True)

    def state(self, base: str, index: int, shape: StateShape | None = None) -> int:
        """Publish the next sequence number as device `index`'s temperature; return the sequence number.

        Without `shape`, on hubd's own topics under `base`; with one, wherever and however it says."""
        self.seq += 1
        seq = self.seq
        if shape is None:
            topic = f"{base}/device/{device_id(index)}/state"
            payload = b'{"Temperature": %d}' % seq
        else:
            topic, payload = shape(index, seq)
        self._slots.acquire()
        self.sent_at[seq] = time.time()
        self._client.publish(topic, payload, qos=1)
        return seq

    def burst(self, base: str, devices: int, count: int, shape: StateShape | None = None) -> tuple[float, float]:
        """Publish `count` states round-robin over `devices` devices as fast as the broker takes them."""
        start = time.time()
        for n in range(count):
            self.state(base, n % devices, shape)
        return start, time.time()

    def paced(self, base: str, devices: int, rate: float, duration_s: float, shape: StateShape | None = None) -> int:
        """Publish at `rate` per second for `duration_s`, round-robin; return how many were published."""
        start = time.monotonic()
        total = int(rate * duration_s)
        n = 0
        while n < total:
            due = min(total, int((time.monotonic() - start) * rate) + 1)
            while n < due:
                self.state(base, n % devices, shape)
                n += 1
            next_at = start + n / rate
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        return n

    def wait_acked(self, timeout_s: float = 30.0) -> None:
        """Wait until the broker acknowledged every publish."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._slots._value >= MAX_OUTSTANDING:
                return
            time.sleep(0.01)
        raise RuntimeError("the broker did not acknowledge every publish in time")

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()
