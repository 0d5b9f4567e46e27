"""One device's MQTT session for the Home Assistant discovery simulators: DiscoveryDevice, Message, Received.

Owns the session every discovery device (simulators.discovery_esphome, simulators.discovery_zigbee2mqtt)
and the zigbee2mqtt bridge (simulators.zigbee2mqtt_bridge) builds on: its own paho client (loop_start; its
callbacks only hand over to the event loop, as in simulators.device_fleet), a last will, its retained
announcement (discovery configs, availability, state) published on every connect, its subscriptions, what
it received, and a graceful stop or a power cut. A device kind defines what it announces and how it
reacts. Must not import hubd.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from simulators.device_fleet import (
    KEEPALIVE_S,
    PUBLISH_TIMEOUT_S,
    RECONNECT_MAX_DELAY_S,
    RECONNECT_MIN_DELAY_S,
    START_TIMEOUT_S,
    BrokerRefused,
    DeviceStopped,
    tcp_nodelay,
)

log = logging.getLogger(__name__)

DISCOVERY_PREFIX = "homeassistant"


@dataclass(frozen=True, slots=True)
class Message:
    """One MQTT message a device publishes."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False


@dataclass(frozen=True, slots=True)
class Received:
    """A message a device received on a topic it listens to."""

    topic: str
    payload: bytes

    def json(self) -> Any:
        """The payload as JSON (ValueError if it is not)."""
        return json.loads(self.payload)


class DiscoveryDevice:
    """One device's own MQTT session: announces itself on every connect, reacts to what it listens to."""

    def __init__(self, host: str, port: int, *, client_id: str, will: Message, username: str | None = None,
                 password: str | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.received: list[Received] = []
        self.announced = 0  # how often it announced itself (once per connection)
        self.running = False
        self._will = will
        self._credentials = (username, password)
        self._changed = asyncio.Condition()
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started: asyncio.Future[None] | None = None

    def discovery(self) -> dict[str, dict[str, Any]]:
        """The discovery configs it publishes at start (retained), by topic."""
        return {m.topic: json.loads(m.payload) for m in self._announcement() if "/config" in m.topic}

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Connect; returns once its configs, availability and state are on the broker."""
        if self.running:
            return
        self._loop = asyncio.get_running_loop()
        self._started = self._loop.create_future()
        self._client = self._make_client()
        self.running = True
        self._client.loop_start()
        try:
            async with asyncio.timeout(timeout_s):
                await self._started
        except (TimeoutError, BrokerRefused):
            await self.kill()
            raise

    async def stop(self) -> None:
        """Graceful: what the producer publishes when it shuts down (its `offline`), then DISCONNECT."""
        if not self.running:
            return
        if self._client.is_connected():
            try:
                for message in self._farewell():
                    await self._publish(message)
            except (TimeoutError, DeviceStopped) as err:
                log.warning("%s: offline not sent: %s", self.client_id, err)
        await self._shut_down(graceful=True)

    async def kill(self) -> None:
        """Drop the connection without DISCONNECT, as a power cut would; the broker publishes the will."""
        if self.running:
            await self._shut_down(graceful=False)

    async def wait_until(self, check: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Wait until check() is true; re-evaluated after each message it handled and each announcement."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(check)

    # What a device kind defines.

    def _announcement(self) -> list[Message]:
        """What it publishes on every connect: discovery configs, availability, state."""
        raise NotImplementedError

    def _farewell(self) -> list[Message]:
        return []

    def _subscriptions(self) -> list[str]:
        return []

    async def _handle(self, message: Received) -> None:
        """React to a message on one of its subscriptions."""

    # The session.

    async def _publish(self, message: Message) -> None:
        """Publish; waits for the PUBACK (QoS 1) or until paho wrote it (QoS 0)."""
        if not self.running:
            raise DeviceStopped(f"{self.client_id} is not running")
        info = self._client.publish(message.topic, message.payload, qos=message.qos, retain=message.retain)
        if info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN and message.qos == 0:
            return  # lost, as a real device's QoS 0 message is while it is offline
        if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
            raise DeviceStopped(f"{self.client_id}: publish failed: {mqtt.error_string(info.rc)}")
        await self._wait_ack(info.mid)

    async def _wait_ack(self, mid: int) -> None:
        assert self._loop is not None
        # Safe against an ack that beat us here: it reaches the loop only via call_soon_threadsafe.
        fut: asyncio.Future[None] = self._loop.create_future()
        self._acks[mid] = fut
        async with asyncio.timeout(PUBLISH_TIMEOUT_S):
            await fut

    def _make_client(self) -> Any:
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=self.client_id, clean_session=True)
        if self._credentials[0] is not None:
            client.username_pw_set(*self._credentials)
        client.will_set(self._will.topic, self._will.payload, qos=self._will.qos, retain=self._will.retain)
        client.reconnect_delay_set(RECONNECT_MIN_DELAY_S, RECONNECT_MAX_DELAY_S)  # type: ignore[arg-type]
        client.on_socket_open = tcp_nodelay
        client.on_connect = lambda _c, _u, _f, reason, _p: self._to_loop(self._connected, reason)
        client.on_disconnect = lambda *_args: self._to_loop(self._cancel_announce)
        client.on_message = lambda _c, _u, msg: self._to_loop(self._arrived, Received(msg.topic, bytes(msg.payload)))
        client.on_publish = lambda _c, _u, mid, _r, _p: self._to_loop(self._acked, mid)
        client.on_subscribe = lambda _c, _u, mid, _r, _p: self._to_loop(self._acked, mid)
        client.on_unsubscribe = lambda _c, _u, mid, _r, _p: self._to_loop(self._acked, mid)
        client.connect_async(self.host, self.port, KEEPALIVE_S)
        return client

    def _to_loop(self, func: Callable[..., None], *args: Any) -> None:
        # paho's thread: hand over only. A callback can still fire while the loop shuts down.
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(func, *args)

    def _connected(self, reason: Any) -> None:
        if reason.is_failure:
            if self._started is not None and not self._started.done():
                self._started.set_exception(BrokerRefused(f"broker refused {self.client_id}: {reason}"))
            return
        if self.running:
            self._spawn(self._announce(), "announce")

    def _cancel_announce(self) -> None:
        for task in self._tasks:
            if task.get_name().endswith("announce"):
                task.cancel()

    def _arrived(self, message: Received) -> None:
        # Some brokers (amqtt) hand a new subscriber every retained message, whatever its filter.
        if self.running and any(mqtt.topic_matches_sub(sub, message.topic) for sub in self._subscriptions()):
            self._spawn(self._take(message), "message")

    def _acked(self, mid: int) -> None:
        fut = self._acks.pop(mid, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _spawn(self, coro: Any, what: str) -> None:
        task = asyncio.create_task(coro, name=f"sim-{self.client_id}-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _announce(self) -> None:
        """On every (re)connect: subscribe (the session is clean), then announce."""
        try:
            topics = self._subscriptions()
            if topics:
                rc, mid = self._client.subscribe([(t, 1) for t in topics])
                if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                    raise DeviceStopped(f"subscribe failed: {mqtt.error_string(rc)}")
                await self._wait_ack(mid)
            for message in self._announcement():
                await self._publish(message)
            # The broker handles one client's packets in order: its UNSUBACK (of a topic never subscribed,
            # which changes nothing) means every QoS 0 message before it is on the broker.
            _rc, mid = self._client.unsubscribe(self._will.topic)
            await self._wait_ack(mid)
        except (TimeoutError, DeviceStopped) as err:
            log.warning("%s: announcing failed (the next connect tries again): %s", self.client_id, err)
            return
        self.announced += 1
        if self._started is not None and not self._started.done():
            self._started.set_result(None)
        log.info("%s announced itself", self.client_id)
        await self._notify()

    async def _take(self, message: Received) -> None:
        self.received.append(message)
        try:
            await self._handle(message)
        except (TimeoutError, DeviceStopped) as err:
            log.warning("%s: could not answer %s: %s", self.client_id, message.topic, err)
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _shut_down(self, *, graceful: bool) -> None:
        self.running = False
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if not graceful:
            sock = self._client.socket()
            # No DISCONNECT gets out after this; the disconnect() below only stops paho's reconnecting.
            if isinstance(sock, socket.socket):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._client.disconnect()
        await asyncio.to_thread(self._client.loop_stop)
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(DeviceStopped(f"{self.client_id} stopped"))
        self._acks.clear()
        if self._started is not None and not self._started.done():
            self._started.cancel()


__all__ = ["DISCOVERY_PREFIX", "DiscoveryDevice", "Message", "Received"]
