"""The MQTT bridge component: keeps the broker session, feeds device messages downstream, publishes.

Upstream flow: broker -> `MqttClient.next_batch` -> `MessageSink.handle` (which persists what the
messages cause) -> manual PUBACK. Acking only after the sink returns is what makes "nothing the
broker handed over is lost" true across a SIGKILL: unacked QoS 1 messages are redelivered.
Downstream: `publish()` for set/command messages, waiting briefly for a connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Protocol

from hubd.errors import MqttRejected, MqttUnavailable
from hubd.events import DeviceMessage
from hubd.lifecycle import Backoff, Health
from hubd.metrics import Metrics
from hubd.mqtt import topics
from hubd.mqtt.client import Message, MqttClient

log = logging.getLogger(__name__)

BATCH_MAX = 500
PUBLISH_WAIT_S = 5.0
REJECTED_RETRY_S = 30.0  # bad credentials will not fix themselves quickly; do not hammer the broker


class MessageSink(Protocol):
    """The next stage: takes a batch of device messages and returns once their effects are durable."""

    async def handle(self, messages: Sequence[DeviceMessage]) -> None:
        """Process (and persist the effects of) a batch, in order."""


class MqttBridge:
    """Owns the broker connection: reconnects with backoff, re-subscribes, publishes birth and will."""

    name = "mqtt"

    def __init__(self, client: MqttClient, *, base_topic: str, sink: MessageSink, health: Health,
                 metrics: Metrics, backoff: Backoff | None = None) -> None:
        self._client = client
        self._base = base_topic
        self._sink = sink
        self._health = health
        self._backoff = backoff or Backoff(initial_s=0.5, cap_s=30.0)
        self._connected = asyncio.Event()
        self._received = metrics.counter("hubd_mqtt_messages_total", "MQTT messages received, by kind", "kind")
        self._ignored = metrics.counter("hubd_mqtt_ignored_total", "MQTT messages on topics hubd does not use")
        self._connects = metrics.counter("hubd_mqtt_connects_total", "successful connections to the broker")
        health.require("mqtt", "not connected yet")

    async def start(self) -> None:
        """Nothing to acquire: connecting is part of run(), so a broker that is down delays readiness."""

    async def run(self) -> None:
        """Connect, subscribe, announce, pump messages; on loss back off and do it all again."""
        while True:
            try:
                await self._session()
            except MqttRejected as err:
                self._lost(f"broker refused us: {err}")
                log.error("MQTT broker refused the connection: %s (check mqtt.username/password)", err)
                await asyncio.sleep(REJECTED_RETRY_S)
                continue
            except MqttUnavailable as err:
                self._lost(str(err))
                log.warning("MQTT connection lost or unavailable: %s", err)
            await self._backoff.sleep()

    async def stop(self) -> None:
        """Say `offline` ourselves (a clean DISCONNECT suppresses the will), then disconnect."""
        if self._client.connected:
            try:
                await self._client.publish(topics.status_topic(self._base), b"offline", qos=1, retain=True,
                                           timeout_s=1.0)
            except MqttUnavailable as err:
                log.debug("could not publish offline status: %s", err)
        await self._client.disconnect()
        self._connected.clear()

    @property
    def connected(self) -> bool:
        """True while the session is up."""
        return self._connected.is_set()

    async def publish(self, device_id: str, suffix: str, payload: bytes) -> None:
        """Publish QoS 1 to `B/device/ID/suffix`; waits up to PUBLISH_WAIT_S for a connection."""
        try:
            async with asyncio.timeout(PUBLISH_WAIT_S):
                await self._connected.wait()
        except TimeoutError as err:
            raise MqttUnavailable("not connected to the MQTT broker") from err
        await self._client.publish(topics.device_topic(self._base, device_id, suffix), payload, qos=1)

    async def _session(self) -> None:
        session_present = await self._client.connect()
        await self._client.subscribe(topics.subscriptions(self._base))
        await self._client.publish(topics.status_topic(self._base), b"online", qos=1, retain=True)
        self._connects.inc()
        self._backoff.reset()
        self._connected.set()
        self._health.set("mqtt", True, "connected")
        log.info("MQTT connected (session present: %s), subscribed under %s/device/+", session_present,
                 self._base)
        while True:
            batch = await self._client.next_batch(BATCH_MAX)
            await self._sink.handle(self._decode(batch))
            self._client.ack(batch)

    def _decode(self, batch: Sequence[Message]) -> list[DeviceMessage]:
        now = time.time()
        out: list[DeviceMessage] = []
        for message in batch:
            parsed = topics.parse(self._base, message.topic)
            if parsed is None:
                self._ignored.inc()
                continue
            device_id, kind = parsed
            self._received.inc(label=kind)
            out.append(DeviceMessage(kind=kind, device_id=device_id, payload=message.payload,
                                     topic=message.topic, received_at=now, retained=message.retain))
        return out

    def _lost(self, detail: str) -> None:
        self._connected.clear()
        self._health.set("mqtt", False, detail)
