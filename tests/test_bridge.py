"""MqttBridge against a real mosquitto (when the backoff starts afresh, the hint about a duplicate client
id), and against a broker that refuses or ignores the subscription or the `online` publish."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from mosquitto import MisbehavingBroker, Mosquitto
from unit_helpers import FakeClock

from hubd.config.model import Zigbee2MqttConfig
from hubd.dialects.base import Decoded, InputRejected
from hubd.dialects.native.dialect import NativeDialect
from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect
from hubd.lifecycle import Backoff, Health
from hubd.metrics import Metrics
from hubd.mqtt import bridge as bridge_module
from hubd.mqtt.bridge import STABLE_AFTER_S, MqttBridge
from hubd.mqtt.client import MqttClient

FAILURE_BOUND_S = 15.0  # turns a hang into a failure; no assertion depends on it


class RecordingBackoff(Backoff):
    """A real Backoff with short delays that records resets and each sleep."""

    def __init__(self) -> None:
        super().__init__(initial_s=0.05, cap_s=0.2)
        self.resets = 0
        self.sleeps = 0
        self.slept = asyncio.Event()

    def reset(self) -> None:
        self.resets += 1
        super().reset()

    async def sleep(self) -> None:
        self.sleeps += 1
        self.slept.set()
        await super().sleep()


@dataclass
class Sink:
    messages: list[Decoded] = field(default_factory=list)

    async def handle(self, batch: Sequence[Decoded], receipts: Sequence[Any] = ()) -> None:
        self.messages += batch


@dataclass
class Running:
    bridge: MqttBridge
    backoff: RecordingBackoff
    health: Health
    clock: FakeClock
    task: asyncio.Task[None]


@pytest.fixture
async def start_bridge() -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    tasks: list[asyncio.Task[None]] = []
    bridges: list[MqttBridge] = []

    async def start(client: MqttClient, *, wait_connected: bool = True) -> Running:
        backoff, health, clock = RecordingBackoff(), Health(), FakeClock()
        bridge = MqttBridge(client, base_topic="hubd", dialects=[NativeDialect("hubd")], sink=Sink(), health=health,
                            metrics=Metrics(), backoff=backoff, clock=clock)
        bridges.append(bridge)
        task = asyncio.create_task(bridge.run())
        tasks.append(task)
        if wait_connected:
            async with asyncio.timeout(FAILURE_BOUND_S):
                await health.wait_ready()
        return Running(bridge, backoff, health, clock, task)

    yield start
    for task in tasks:
        task.cancel()
    for bridge in bridges:
        await bridge.stop()


async def kick(mosquitto: Mosquitto, client_id: str) -> None:
    """Connect another client with the same client id: the broker drops the older connection (MQTT 3.1.1)."""
    twin = MqttClient(host=mosquitto.host, port=mosquitto.port, client_id=client_id, clean_session=False)
    await twin.connect()
    await twin.disconnect()


async def test_dropped_right_after_connecting_keeps_backing_off_and_says_why(
    mosquitto: Mosquitto, start_bridge: Callable[..., Awaitable[Running]], caplog: pytest.LogCaptureFixture
) -> None:
    client = MqttClient(host=mosquitto.host, port=mosquitto.port, client_id="dup-hub")
    running = await start_bridge(client)
    running.clock.now += STABLE_AFTER_S / 2  # up, but not for long
    with caplog.at_level(logging.WARNING, logger="hubd.mqtt.bridge"):
        await kick(mosquitto, "dup-hub")
        async with asyncio.timeout(FAILURE_BOUND_S):
            await running.backoff.slept.wait()
        # Once could be a broker restart: no hint yet.
        assert "another client" not in caplog.text
        async with asyncio.timeout(FAILURE_BOUND_S):
            await running.health.wait_ready()
        running.backoff.slept.clear()
        await kick(mosquitto, "dup-hub")  # again, with the broker up all along: a twin takes the session over
        async with asyncio.timeout(FAILURE_BOUND_S):
            await running.backoff.slept.wait()
    # Two daemons with one client id would take turns forever: the delay must keep growing.
    assert running.backoff.resets == 0
    assert "is another client connected with client id 'dup-hub'?" in caplog.text


async def test_a_broker_restart_soon_after_connecting_gives_no_duplicate_client_id_hint(
    make_mosquitto: Callable[..., Mosquitto], start_bridge: Callable[..., Awaitable[Running]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = make_mosquitto()
    client = MqttClient(host=broker.host, port=broker.port, client_id="restart-hub")
    running = await start_bridge(client)
    with caplog.at_level(logging.WARNING, logger="hubd.mqtt.bridge"):
        for _ in range(2):  # right after connecting, then again after a while up
            running.backoff.slept.clear()
            broker.restart()
            async with asyncio.timeout(FAILURE_BOUND_S):
                await running.backoff.slept.wait()
                await running.health.wait_ready()
            running.clock.now += STABLE_AFTER_S
    assert "another client" not in caplog.text
    assert caplog.text.count("MQTT connection lost or unavailable") >= 2


async def test_a_connection_that_stayed_up_starts_the_backoff_afresh(
    mosquitto: Mosquitto, start_bridge: Callable[..., Awaitable[Running]], caplog: pytest.LogCaptureFixture
) -> None:
    client = MqttClient(host=mosquitto.host, port=mosquitto.port, client_id="steady-hub")
    running = await start_bridge(client)
    running.clock.now += STABLE_AFTER_S
    with caplog.at_level(logging.WARNING, logger="hubd.mqtt.bridge"):
        await kick(mosquitto, "steady-hub")
        async with asyncio.timeout(FAILURE_BOUND_S):
            await running.backoff.slept.wait()
    assert running.backoff.resets == 1
    assert "another client" not in caplog.text
    # And it comes back.
    async with asyncio.timeout(FAILURE_BOUND_S):
        await running.health.wait_ready()


async def test_refused_credentials_are_retried_with_the_backoff(
    make_mosquitto: Callable[..., Mosquitto], start_bridge: Callable[..., Awaitable[Running]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = make_mosquitto(users={"hubd": "right"})
    client = MqttClient(host=broker.host, port=broker.port, client_id="hub", username="hubd", password="wrong")
    running = await start_bridge(client, wait_connected=False)
    async with asyncio.timeout(FAILURE_BOUND_S):
        while running.backoff.sleeps < 3:  # retried, each time after the (growing, capped) backoff
            await asyncio.sleep(0.01)
    assert not running.health.ready
    assert "check mqtt.username, mqtt.password" in caplog.text
    assert "wrong" not in caplog.text


@pytest.mark.parametrize(
    ("subscribe", "publish", "why"),
    [
        ("refuse", "ack", "refused the subscription"),  # SUBACK 0x80, as a broker's ACL answers
        ("ignore", "ack", "no SUBACK"),
        ("grant", "ignore", "no PUBACK"),  # the retained `online` is never confirmed
    ],
)
async def test_a_failed_announce_is_retried_not_fatal(
    subscribe: str, publish: str, why: str, start_bridge: Callable[..., Awaitable[Running]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session fails with the connection still up: it must be aborted (the broker then publishes the
    will) so that the next attempt can connect, instead of the run() loop dying on a leftover connection."""
    monkeypatch.setattr(bridge_module, "ANNOUNCE_TIMEOUT_S", 0.2)
    broker = MisbehavingBroker(subscribe=subscribe, publish=publish)  # type: ignore[arg-type]
    await broker.start()
    try:
        client = MqttClient(host=broker.host, port=broker.port, client_id="hub")
        running = await start_bridge(client, wait_connected=False)
        retried = asyncio.ensure_future(broker.wait_for(lambda b: b.connections >= 3, FAILURE_BOUND_S))
        done, _ = await asyncio.wait([retried, running.task], return_when=asyncio.FIRST_COMPLETED)
        assert running.task not in done, running.task.exception()
        retried.result()
        assert running.backoff.sleeps >= 2 and running.backoff.resets == 0
        assert not running.health.ready
        assert any(item.startswith("mqtt: ") and why in item for item in running.health.not_ready()), \
            running.health.not_ready()
        # Closed without DISCONNECT, so that a real broker publishes hubd's will (`offline`).
        await broker.wait_for(lambda b: b.aborts >= 2, FAILURE_BOUND_S)
        assert broker.disconnects == 0
    finally:
        await broker.stop()


async def test_a_message_over_max_message_bytes_is_refused_unread_but_a_bridge_device_list_is_read(
    mosquitto: Mosquitto,
) -> None:
    """Every topic is bounded at mqtt.max_message_bytes before any dialect decodes it, but the large topics a
    dialect names (zigbee2mqtt's bridge/devices), which it bounds itself."""
    limit = 1000
    z2m = Zigbee2MqttDialect(Zigbee2MqttConfig(enabled=True), [])
    sink, health = Sink(), Health()
    client = MqttClient(host=mosquitto.host, port=mosquitto.port, client_id="bounded-hub", max_packet_bytes=1 << 20)
    bridge = MqttBridge(client, base_topic="hubd", dialects=[NativeDialect("hubd"), z2m], sink=sink, health=health,
                        metrics=Metrics(), max_message_bytes=limit)
    task = asyncio.create_task(bridge.run())
    device_list = json.dumps([{"ieee_address": f"0x{i:016x}", "friendly_name": f"lamp {i}", "type": "Router",
                               "supported": True, "interview_completed": True, "definition": None}
                              for i in range(40)]).encode()
    assert len(device_list) > limit
    publisher = MqttClient(host=mosquitto.host, port=mosquitto.port, client_id="publisher", clean_session=True)
    try:
        async with asyncio.timeout(FAILURE_BOUND_S):
            await health.wait_ready()
        await publisher.connect()
        await publisher.publish("hubd/device/lamp/state", b"{" + b" " * limit + b"}")  # limit + 2 bytes
        await publisher.publish("zigbee2mqtt/bridge/devices", device_list)
        await publisher.publish("hubd/device/lamp/state", b'{"on": true}' + b" " * (limit - 12))  # exactly limit
        async with asyncio.timeout(FAILURE_BOUND_S):
            while len(sink.messages) < 3:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await bridge.stop()
        await publisher.disconnect()
    too_large, listed, fits = sink.messages
    assert too_large.inputs == (InputRejected("other", f"a message of {limit + 2} bytes, over "
                                                       f"mqtt.max_message_bytes ({limit}): refused unread"),)
    assert listed.source == "zigbee2mqtt" and not any(isinstance(i, InputRejected) for i in listed.inputs)
    assert fits.source == "native" and "max_message_bytes" not in repr(fits.inputs)  # read by the dialect
