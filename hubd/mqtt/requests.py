"""The dialects' questions to single devices (`Dialect.requests`): sent as soon as the topics their answers come on
are subscribed, each checked against the one publish rule, at a bounded rate.

A question reaches one device (a Shelly found on `<prefix>/online` is asked `Shelly.GetDeviceInfo`, `GetConfig`
and `GetStatus` on its `<prefix>/rpc`), so unlike the announcements (Home Assistant's birth message makes every
discovery device on the bus announce itself again: at most once every 10 s, `hubd.mqtt.subscriptions`) it waits
for nothing but the subscriptions of the batch that found the device: `Subscriptions` hands it here once they are
made, and a new device appears within a round trip. But whoever may publish on the bus can make a dialect ask (a
flood of fake `<shelly-id>/online` topics), so what goes out is bounded here, whatever the dialects ask:

- at most REQUESTS_PER_S questions a second, REQUESTS_BURST at once (a token bucket); the rest wait, in order.
  Each question makes a device answer, and hubd reads every answer (a Shelly's GetConfig and GetStatus are a few
  kilobytes each): 50 a second is about 17 Shelly devices found a second, a house's worth within seconds, while a
  flood of 2,000 fake ids (the Shelly dialect asks no more) is two minutes of a trickle to the broker, not 6,000
  publishes at once;
- one at a time, each awaiting its PUBACK: a question takes one of the client's QoS 1 publish slots at most, so a
  device command never waits behind a burst of questions;
- at most MAX_WAITING waiting; more are dropped (counted, logged throttled);
- each checked against `hubd.dialects.topics.CommandTopics.refusal`, like a device command
  (`hubd.dialects.commands`), just before it goes (a topic may be read from since it was asked): a refused question
  is logged (throttled, `hubd.failures.RefusalLog`), counted and dropped, and costs no token;
- none before the connection's own subscriptions are made (`open`); a new connection drops what the last one did
  not send (`new_session`: the dialects ask again on every connection).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

from hubd.dialects.base import Outgoing
from hubd.dialects.topics import CommandTopics
from hubd.failures import RefusalLog
from hubd.metrics import Metrics
from hubd.mqtt.client import MqttClient

log = logging.getLogger(__name__)

REQUESTS_PER_S = 50.0
REQUESTS_BURST = 50
MAX_WAITING = 10_000


class DeviceRequests:
    """The questions waiting to go, the token bucket that paces them, and the rule each is asked."""

    def __init__(self, client: MqttClient, topics: CommandTopics, *, metrics: Metrics, timeout_s: float = 10.0,
                 per_s: float = REQUESTS_PER_S, burst: int = REQUESTS_BURST, max_waiting: int = MAX_WAITING,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._client = client
        self._topics = topics
        self._timeout_s = timeout_s
        self._per_s = per_s
        self._burst = float(burst)
        self._max_waiting = max_waiting
        self._monotonic = monotonic
        self._sleep = sleep
        self._tokens = float(burst)
        self._stamp = monotonic()
        self._waiting: deque[tuple[str, Outgoing]] = deque()  # (the asking dialect, the question), in order
        self._open = asyncio.Event()  # set once the connection's own subscriptions are made
        self._added = asyncio.Event()
        self._refusals = RefusalLog(log, what="refused device questions", line="refused a question on %s: %s%s")
        self._sent = metrics.counter("hubd_mqtt_requests_total",
                                     "questions hubd sent single devices (a Shelly's GetDeviceInfo, ...)")
        self._dropped = metrics.counter("hubd_mqtt_requests_dropped_total",
                                        "questions to single devices not sent, by reason (refused, full)", "reason")

    @property
    def waiting(self) -> int:
        """Questions waiting to go."""
        return len(self._waiting)

    def new_session(self) -> None:
        """A new connection: what the last one did not send is dropped (the dialects ask again), and nothing goes
        before `open`."""
        self._waiting.clear()
        self._open.clear()

    def open(self) -> None:
        """The connection's own subscriptions are made: questions may go."""
        self._open.set()

    def add(self, questions: Iterable[tuple[str, Outgoing]]) -> None:
        """Questions (the asking dialect's name, the publish) whose answers' topics are subscribed, to send in
        order; past MAX_WAITING waiting, dropped."""
        for dialect, message in questions:
            if len(self._waiting) >= self._max_waiting:
                self._dropped.inc(label="full")
                self._refusals.refused(message.topic, f"{dialect}: more than {self._max_waiting} questions to "
                                                      "devices waiting", "; asked again on the next connection")
                continue
            self._waiting.append((dialect, message))
        if self._waiting:
            self._added.set()

    async def run(self) -> None:
        """Send what waits, once open, at most `per_s` a second; raises MqttUnavailable when a publish fails (the
        session's end, as for the announcements)."""
        while True:
            await self._open.wait()
            if not self._waiting:
                self._added.clear()
                await self._added.wait()
                continue
            dialect, message = self._waiting[0]
            why = self._topics.refusal(message.topic, None, dialect)
            if why is not None:
                self._waiting.popleft()
                self._dropped.inc(label="refused")
                self._refusals.refused(message.topic, f"{dialect}: {why}",
                                       "; hubd asks a device only on its own command topics")
                continue
            wait = self._take_token()
            if wait > 0:
                await self._sleep(wait)
                continue  # asked again: the rule may say otherwise now
            self._waiting.popleft()
            await self._client.publish(message.topic, message.payload, qos=message.qos, retain=message.retain,
                                       timeout_s=self._timeout_s)
            self._sent.inc()

    def _take_token(self) -> float:
        """0 and one token taken, or how long until there is one."""
        now = self._monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._per_s)
        self._stamp = now
        if self._tokens >= 1.0 - 1e-9:  # a token's worth, but for the float's rounding (which would never end)
            self._tokens = max(0.0, self._tokens - 1.0)
            return 0.0
        return (1.0 - self._tokens) / self._per_s
