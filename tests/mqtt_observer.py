"""A plain paho client that records what a broker forwards, for the simulators' tests: they check what the
simulators publish with a client that shares no code with hubd or the simulators.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
from mosquitto import Mosquitto
from paho.mqtt.enums import CallbackAPIVersion

from simulators.device_fleet import tcp_nodelay
from simulators.sim_device import Recorder

WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class Seen:
    """One message the observer received."""

    seq: int
    topic: str
    payload: bytes
    retain: bool
    qos: int

    def json(self) -> Any:
        return json.loads(self.payload)


class Observer:
    """Subscribed to `subscribe` (QoS 1), recording every message in arrival order; `base` is the topic root of
    hubd's own devices (`<base>/device/<id>/<suffix>`)."""

    def __init__(self, host: str, port: int, *, subscribe: str = "#", base: str = "hubd") -> None:
        self.base = base
        self.seen: Recorder[Seen] = Recorder()
        self.subscribed: Recorder[int] = Recorder()
        self._filter = subscribe
        self._seq = itertools.count()
        self._loop = asyncio.get_running_loop()
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"obs-{uuid.uuid4().hex[:8]}")
        self._client.on_socket_open = tcp_nodelay
        self._client.on_connect = self._on_connect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_message = self._on_message
        self._client.reconnect_delay_set(0.1, 1)  # type: ignore[arg-type]  # floats work
        self._client.connect_async(host, port)

    async def start(self) -> None:
        """Connect; returns once subscribed."""
        self._client.loop_start()
        await self.subscribed.wait_for(timeout_s=WAIT_S)

    async def stop(self) -> None:
        self._client.disconnect()
        await asyncio.to_thread(self._client.loop_stop)

    def mark(self) -> int:
        """The sequence number the next message will get: wait for messages from here on."""
        return len(self.seen.items)

    def since(self, mark: int) -> list[Seen]:
        return self.seen.items[mark:]

    async def next(self, topic: str, *, device: str | None = None, after: int = 0,
                   pred: Callable[[Seen], bool] | None = None) -> Seen:
        """The first message on `topic` (with `device`: on <base>/device/<device>/<topic>) since `after`, matching
        `pred`."""
        if device is not None:
            topic = f"{self.base}/device/{device}/{topic}"
        return await self.seen.wait_for(
            lambda m: m.seq >= after and m.topic == topic and (pred is None or pred(m)), WAIT_S)

    async def publish(self, topic: str, payload: bytes | str, *, retain: bool = False) -> None:
        """One QoS 1 publish, acknowledged by the broker."""
        info = self._client.publish(topic, payload, qos=1, retain=retain)
        await asyncio.to_thread(info.wait_for_publish, WAIT_S)
        assert info.is_published()

    async def send_set(self, device: str, body: dict[str, object]) -> Seen:
        """Publish a set directive to one of hubd's devices and return the device's state answer."""
        mark = self.mark()
        await self.publish(f"{self.base}/device/{device}/set", json.dumps(body))
        return await self.next("state", device=device, after=mark)

    def _on_connect(self, client: mqtt.Client, *_: Any) -> None:
        client.subscribe(self._filter, 1)

    def _on_subscribe(self, *_: Any) -> None:
        self._loop.call_soon_threadsafe(self.subscribed.add, 1)

    def _on_message(self, _c: mqtt.Client, _u: Any, m: mqtt.MQTTMessage) -> None:
        seen = (m.topic, bytes(m.payload), bool(m.retain), m.qos)
        self._loop.call_soon_threadsafe(lambda: self.seen.add(Seen(next(self._seq), *seen)))


async def retained(broker: Mosquitto) -> list[Seen]:
    """Every retained message on the broker, as a new subscriber gets them."""
    late = Observer(broker.host, broker.port)
    await late.start()
    try:
        # The broker sends the retained messages right after the SUBACK; a published marker comes after them.
        marker = f"test/marker/{uuid.uuid4().hex}"
        await late.publish(marker, b"")
        await late.next(marker)
        return [m for m in late.seen.items if m.retain]
    finally:
        await late.stop()
