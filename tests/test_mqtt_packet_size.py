"""MqttClient over MQTT 5 with a Maximum Packet Size, against a real mosquitto (tests/mosquitto.py).

hubd asks the broker never to send it a packet larger than it can afford (hubd.app.max_packet_bytes); the
session, the acks, the will and retained messages must work as they do over MQTT 3.1.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from mosquitto import Mosquitto
from pydantic import ValidationError

from hubd.app import max_packet_bytes
from hubd.config.model import HubdConfig
from hubd.mqtt import client as client_module
from hubd.mqtt.client import PACKET_HEADROOM_BYTES, MqttClient, Will
from hubd.mqtt.inbox import Message

RECEIVE_TIMEOUT_S = 10.0
MAX_PACKET = 4096


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    return f"test/{request.node.name}"


@pytest.fixture
async def clients(mosquitto: Mosquitto) -> AsyncIterator[Callable[..., MqttClient]]:
    """MqttClients on the `mosquitto` broker; all are disconnected at teardown."""
    made: list[MqttClient] = []

    def make(client_id: str, **kwargs: object) -> MqttClient:
        client = MqttClient(host=mosquitto.host, port=mosquitto.port, client_id=client_id, **kwargs)  # type: ignore[arg-type]
        made.append(client)
        return client

    yield make
    for client in made:
        await client.disconnect()


async def receive_until(client: MqttClient, last_payload: bytes) -> list[Message]:
    """Messages up to and including the one carrying `last_payload`, acked."""
    got: list[Message] = []
    async with asyncio.timeout(RECEIVE_TIMEOUT_S):
        while not got or got[-1].payload != last_payload:
            batch = await client.next_batch(max_messages=1)
            client.ack(batch)
            got += batch
    return got


async def test_the_broker_never_sends_a_message_larger_than_the_maximum_packet_size(
    clients: Callable[..., MqttClient], prefix: str, mosquitto: Mosquitto
) -> None:
    """Retained, live and queued-while-away: each too-large one is dropped, the ones after it come, and the
    connection stays up (MQTT 5 3.1.2.11.4: the server discards it and does not disconnect)."""
    big, fits = b"x" * (MAX_PACKET + 1), b"f" * (MAX_PACKET - len(prefix) - 64)
    pub = clients("publisher", clean_session=True)
    await pub.connect()
    await pub.publish(f"{prefix}/retained/big", big, retain=True)
    await pub.publish(f"{prefix}/retained/fits", fits, retain=True)
    hub = clients("hub", max_packet_bytes=MAX_PACKET)
    await hub.connect()
    await hub.subscribe([(f"{prefix}/#", 1)])
    got = await receive_until(hub, fits)
    assert [(m.topic, m.retain) for m in got] == [(f"{prefix}/retained/fits", True)]

    await pub.publish(f"{prefix}/live/big", big)
    await pub.publish(f"{prefix}/live/after", b"after")
    assert [m.topic for m in await receive_until(hub, b"after")] == [f"{prefix}/live/after"]
    assert hub.connected

    await hub.disconnect()
    await pub.publish(f"{prefix}/away/big", big)
    await pub.publish(f"{prefix}/away/after", b"back")
    assert await hub.connect() is True  # the session was kept: MQTT 5's session expiry is "never"
    assert [m.topic for m in await receive_until(hub, b"back")] == [f"{prefix}/away/after"]
    assert "Dropping too large outgoing PUBLISH for hub" in mosquitto.log_tail()


async def test_an_mqtt5_session_keeps_what_came_while_away_and_a_clean_one_does_not(
    clients: Callable[..., MqttClient], prefix: str
) -> None:
    pub = clients("publisher", clean_session=True)
    await pub.connect()
    kept = clients("kept", clean_session=False, max_packet_bytes=MAX_PACKET)
    clean = clients("clean", clean_session=True, max_packet_bytes=MAX_PACKET)
    for client in (kept, clean):
        assert await client.connect() is False
        await client.subscribe([(f"{prefix}/#", 1)])
        await client.disconnect()
    await pub.publish(f"{prefix}/while-away", b"queued")

    assert await kept.connect() is True
    [msg] = await receive_until(kept, b"queued")
    assert (msg.qos, msg.retain) == (1, False)
    assert await clean.connect() is False
    await clean.subscribe([(f"{prefix}/#", 1)])
    await pub.publish(f"{prefix}/marker", b"marker")
    assert [m.payload for m in await receive_until(clean, b"marker")] == [b"marker"]


async def test_an_unacked_mqtt5_message_comes_again_and_the_will_is_published(
    clients: Callable[..., MqttClient], prefix: str
) -> None:
    watcher = clients("watcher", clean_session=True)
    await watcher.connect()
    await watcher.subscribe([(f"{prefix}/status", 1)])
    hub = clients("hub", clean_session=False, max_packet_bytes=MAX_PACKET,
                  will=Will(f"{prefix}/status", b"offline", qos=1, retain=True))
    await hub.connect()
    await hub.subscribe([(f"{prefix}/in", 1)])
    pub = clients("publisher", clean_session=True)
    await pub.connect()
    await pub.publish(f"{prefix}/in", b"once")
    async with asyncio.timeout(RECEIVE_TIMEOUT_S):
        [first] = await hub.next_batch()
    hub.abort("test: dies before its ack")  # no DISCONNECT: the will goes out
    [will] = await receive_until(watcher, b"offline")
    assert (will.topic, will.retain) == (f"{prefix}/status", False)  # retained, but live to a subscriber

    await hub.connect()
    [again] = await receive_until(hub, b"once")
    assert (first.payload, again.dup) == (b"once", True)


@pytest.mark.parametrize(("section", "expected"), [
    ({}, (1 << 20) + PACKET_HEADROOM_BYTES),
    ({"mqtt": {"max_message_bytes": 65536}}, 65536 + PACKET_HEADROOM_BYTES),
    ({"zigbee2mqtt": {"enabled": True}}, (1 << 24) + PACKET_HEADROOM_BYTES),
    ({"zigbee2mqtt": {"enabled": True, "max_devices_bytes": 1 << 20}, "mqtt": {"max_message_bytes": 2 << 20}},
     (2 << 20) + PACKET_HEADROOM_BYTES),
    ({"mqtt": {"embedded": True}, "zigbee2mqtt": {"enabled": True}}, None),  # amqtt: MQTT 3.1.1 only
])
def test_the_connection_asks_for_the_largest_message_any_topic_takes(
    section: dict[str, Any], expected: int | None
) -> None:
    assert max_packet_bytes(HubdConfig.model_validate(section)) == expected


@pytest.mark.parametrize("section", [{"mqtt": {"max_message_bytes": 65535}}, {"mqtt": {"max_message_bytes": 1 << 25}},
                                     {"zigbee2mqtt": {"max_devices_bytes": (1 << 24) + 1}}])
def test_check_config_refuses_limits_out_of_range(section: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        HubdConfig.model_validate(section)


async def test_a_full_inbox_stops_reading_until_the_caller_takes_and_then_reads_on_in_order(
    clients: Callable[..., MqttClient], prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past INBOX_MAX_BYTES of payloads waiting, the rest waits in the broker, not in hubd's memory."""
    monkeypatch.setattr(client_module, "INBOX_MAX_BYTES", 10_000)
    hub = clients("hub", max_packet_bytes=MAX_PACKET)
    await hub.connect()
    await hub.subscribe([(f"{prefix}/#", 1)])
    pub = clients("publisher", clean_session=True)
    await pub.connect()
    for i in range(8):
        await pub.publish(f"{prefix}/{i}", bytes([48 + i]) * 4000)
    conn, inbox = hub._conn, hub._inbox
    assert conn is not None
    async with asyncio.timeout(RECEIVE_TIMEOUT_S):
        while not conn._paused:
            await asyncio.sleep(0.01)
    assert len(inbox._items) == 3  # 12,000 bytes: full at the third
    got: list[Message] = []
    async with asyncio.timeout(RECEIVE_TIMEOUT_S):
        while len(got) < 8:
            batch = await hub.next_batch(max_messages=1)
            hub.ack(batch)
            got += batch
    assert [m.topic for m in got] == [f"{prefix}/{i}" for i in range(8)]
