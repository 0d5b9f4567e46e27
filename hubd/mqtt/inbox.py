"""Received MQTT messages: the `Message` type and the inbox they wait in for `MqttClient.next_batch()`.

One inbox per client, across its connections. Bounded for QoS 0 (the oldest is dropped, counted, and the
first drop logged once through the client's logger); QoS>=1 messages are never dropped: the broker's
in-flight window bounds them, as they are acked only once the caller persisted what they caused. Bounded in
bytes too, for every QoS: once its payloads reach `max_bytes` the connection stops reading (`full`), and
`on_room` is called when taking brought them under it again, so what waits here (20 messages of 16 MiB in the
broker's window) never outgrows the memory hubd has: the rest waits in the broker. No I/O, no paho.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Message:
    """One PUBLISH received from the broker."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    mid: int
    # Which connection delivered it and where in that connection's receive order: ack() needs both.
    _conn: int = field(default=0, repr=False, compare=False)
    _seq: int = field(default=0, repr=False, compare=False)
    dup: bool = False  # the broker sends it again (MQTT DUP): a crash may have come after it was handled
    received_at: float = field(default=0.0, repr=False, compare=False)  # time.monotonic() when it arrived


class Inbox:
    """Received messages waiting for next_batch(): bounded for QoS 0, never dropping QoS>=1.

    QoS>=1 deliveries are bounded by the broker's in-flight window (mosquitto max_inflight_messages,
    default 20) because we ack only after the caller persisted them; QoS 0 has no such bound.
    """

    def __init__(self, max_messages: int, log: logging.Logger, max_bytes: int | None = None) -> None:
        self._log = log
        self._items: collections.deque[Message] = collections.deque()
        self._max = max_messages
        self._max_bytes = max_bytes
        self._bytes = 0  # the queued payloads'
        self.on_room: Callable[[], None] | None = None  # the connection's: read again
        self._qos0_queued = 0
        self._event = asyncio.Event()
        self.dropped_qos0 = 0

    def put(self, msg: Message) -> None:
        """Queue a received message (making room, for QoS 0, when full) and wake next_batch()."""
        if len(self._items) >= self._max and not self._make_room(msg):
            return
        self._items.append(msg)
        self._bytes += len(msg.payload)
        if msg.qos == 0:
            self._qos0_queued += 1
        self._event.set()

    @property
    def full(self) -> bool:
        """The queued payloads reached max_bytes: read no more until on_room is called."""
        return self._max_bytes is not None and self._bytes >= self._max_bytes

    def take(self, max_messages: int) -> list[Message]:
        """Up to max_messages of the oldest queued messages, removed from the inbox."""
        n = min(max_messages, len(self._items))
        batch = [self._items.popleft() for _ in range(n)]
        self._qos0_queued -= sum(1 for m in batch if m.qos == 0)
        was_full = self.full
        self._bytes -= sum(len(m.payload) for m in batch)
        if was_full and not self.full and self.on_room is not None:
            self.on_room()
        return batch

    async def wait(self) -> None:
        """Until a message is put or wake() is called."""
        self._event.clear()
        await self._event.wait()

    def wake(self) -> None:
        """Wake wait() without a message (a connection ended)."""
        self._event.set()

    def _make_room(self, incoming: Message) -> bool:
        """Drop the oldest queued QoS 0 message (or the incoming one); False if `incoming` was dropped."""
        if self.dropped_qos0 == 0:
            self._log.warning("MQTT inbox full (%d messages): dropping the oldest QoS 0 messages", self._max)
        if self._qos0_queued:
            for i, queued in enumerate(self._items):
                if queued.qos == 0:
                    del self._items[i]
                    self._bytes -= len(queued.payload)
                    self._qos0_queued -= 1
                    self.dropped_qos0 += 1
                    return True
        if incoming.qos == 0:
            self.dropped_qos0 += 1
            return False
        return True  # only QoS>=1 queued: keep it beyond the bound rather than lose it
