"""The broker's subscriptions for hubd's session (hubd.mqtt.subscriptions), in-process with a stand-in client whose
SUBACKs the test releases: what the pump subscribes to while a reconnect resubscribes is kept, not forgotten; the
dialects' questions to single devices (hubd.mqtt.requests) go once subscribed, at a bounded rate, where the one
publish rule lets them."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from unit_helpers import eventually

from hubd.devices.model import Route
from hubd.dialects.base import ControlRequest, DeviceInput, Dialect, Outgoing, PublishRules
from hubd.dialects.topics import CommandTopics
from hubd.lifecycle import SystemClock
from hubd.metrics import Metrics
from hubd.mqtt.requests import DeviceRequests
from hubd.mqtt.subscriptions import Subscriptions


class Client:
    """Records SUBSCRIBE and UNSUBSCRIBE; the first SUBSCRIBE waits for `gate`."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()
        self.subscribed: list[str] = []
        self.log: list[tuple[str, str]] = []  # ("subscribe" | "publish", topic), in order
        self.published: list[tuple[float, str]] = []  # (when, topic) by `clock`
        self.clock = 0.0

    async def subscribe(self, filters: list[tuple[str, int]], timeout_s: float) -> None:
        if not self.subscribed and not self.gate.is_set():
            self.waiting.set()
            await self.gate.wait()
        self.subscribed += [topic for topic, _ in filters]
        self.log += [("subscribe", topic) for topic, _ in filters]

    async def unsubscribe(self, names: list[str], timeout_s: float) -> None:
        pass

    async def publish(self, topic: str, payload: bytes, **kwargs: Any) -> None:
        self.log.append(("publish", topic))
        self.published.append((self.clock, topic))


class OneTopic(Dialect):
    name = "test"

    def subscriptions(self) -> list[tuple[str, int]]:
        return [("devices/#", 1)]

    def claims(self, topic: str) -> bool:
        return False

    def decode(self, topic: str, payload: bytes, received_at: float, retained: bool) -> list[DeviceInput]:
        return []

    def encode_control(self, device_id: str, route: Route, request: ControlRequest) -> list[Outgoing]:
        return []


async def test_a_topic_subscribed_by_the_pump_during_a_reconnect_stays_counted() -> None:
    client, metrics = Client(), Metrics()
    subscriptions = Subscriptions(client, [OneTopic()], clock=SystemClock(), metrics=metrics)  # type: ignore[arg-type]
    connecting = asyncio.create_task(subscriptions.connected(session_present=True))
    await client.waiting.wait()  # the reconnect's SUBSCRIBE is out, its SUBACK not back
    client.gate.set()
    await subscriptions.subscribe_now([("lamp/state", 1)])  # the pump: a device's state topic, meanwhile
    await connecting
    assert set(client.subscribed) == {"devices/#", "lamp/state"}
    assert "hubd_mqtt_subscriptions 2\n" in metrics.render()  # both counted: lamp/state is dropped when its device goes


class Asking(OneTopic):
    """A dialect that asks each device named in `found` a question on `<device>/rpc` once its status is subscribed."""

    name = "asking"

    def __init__(self) -> None:
        self.found: list[str] = []
        self.subscribe: list[tuple[str, int]] = []

    def subscriptions(self) -> list[tuple[str, int]]:
        return [("+/online", 1)]

    def pending_subscriptions(self) -> list[tuple[str, int]]:
        added, self.subscribe = self.subscribe, []
        return added

    def requests(self) -> list[Outgoing]:
        found, self.found = self.found, []
        return [Outgoing(f"{device}/rpc", b"who are you?") for device in found]


class Reading(OneTopic):
    """A dialect whose devices are read from `reads` (the default guards: its subscriptions)."""

    name = "reading"

    def __init__(self, *reads: str) -> None:
        self.reads = list(reads)

    def subscriptions(self) -> list[tuple[str, int]]:
        return [(topic, 1) for topic in self.reads]


async def test_a_question_goes_once_the_subscriptions_of_its_batch_are_made_and_not_before_the_connections() -> None:
    client, asking = Client(), Asking()
    subscriptions = Subscriptions(client, [asking], clock=SystemClock(), metrics=Metrics())  # type: ignore[arg-type]
    subscriptions.new_session()
    sender = asyncio.create_task(subscriptions.ask())
    try:
        connecting = asyncio.create_task(subscriptions.connected(session_present=False))
        await client.waiting.wait()  # the connection's SUBSCRIBE is out, its SUBACK not back
        asking.found, asking.subscribe = ["porch"], [("porch/status/+", 1)]  # the pump found a device meanwhile
        added, _, requests = subscriptions.changes()
        client.gate.set()
        await subscriptions.subscribe_now(added, requests)
        await connecting
        await eventually(lambda: ("publish", "porch/rpc") in client.log, "the question to porch")
        assert client.log.index(("subscribe", "+/online")) < client.log.index(("publish", "porch/rpc"))
        assert client.log.index(("subscribe", "porch/status/+")) < client.log.index(("publish", "porch/rpc"))

        asking.found, asking.subscribe = ["garage"], [("garage/status/+", 1)]  # later: subscribed from run()
        runner = asyncio.create_task(subscriptions.run())
        changes = subscriptions.changes()
        subscriptions.later(changes.added, changes.removed, changes.requests)
        await eventually(lambda: ("publish", "garage/rpc") in client.log, "the question to garage")
        assert client.log.index(("subscribe", "garage/status/+")) < client.log.index(("publish", "garage/rpc"))
        runner.cancel()
    finally:
        sender.cancel()


async def test_questions_go_at_most_per_s_a_second_after_a_burst_the_rest_waiting_in_order() -> None:
    client = Client()
    now = [0.0]

    async def sleep(seconds: float) -> None:  # the test's time: the bound, never the machine's speed
        now[0] += seconds
        client.clock = now[0]
        await asyncio.sleep(0)

    requests = DeviceRequests(client, CommandTopics(PublishRules()), metrics=Metrics(),  # type: ignore[arg-type]
                              per_s=20, burst=10, monotonic=lambda: now[0], sleep=sleep)
    flood = [("asking", Outgoing(f"shellyplus1-{n:012x}/rpc", b"?")) for n in range(200)]
    requests.open()
    requests.add(flood)
    sender = asyncio.create_task(requests.run())
    try:
        await eventually(lambda: len(client.published) == 200, "every question sent")
    finally:
        sender.cancel()
    assert [topic for _, topic in client.published] == [m.topic for _, m in flood]  # in order, none lost
    times = [when for when, _ in client.published]
    assert times[:10] == [0.0] * 10  # the burst
    for start in times:  # any second: at most the burst and a second's worth
        assert sum(1 for t in times if start <= t < start + 1.0) <= 10 + 20
    assert times[-1] == pytest.approx((200 - 10) / 20)


async def test_past_max_waiting_questions_are_dropped_and_counted() -> None:
    client, metrics = Client(), Metrics()
    requests = DeviceRequests(client, CommandTopics(PublishRules()), metrics=metrics,  # type: ignore[arg-type]
                              max_waiting=5)
    requests.add(("asking", Outgoing(f"d{n}/rpc", b"?")) for n in range(8))
    assert requests.waiting == 5
    assert 'hubd_mqtt_requests_dropped_total{reason="full"} 3' in metrics.render()
    requests.new_session()  # a new connection: the dialects ask again
    assert requests.waiting == 0


async def test_a_question_to_a_topic_another_device_reads_from_is_refused_logged_and_dropped(
        caplog: pytest.LogCaptureFixture) -> None:
    client, metrics, reader = Client(), Metrics(), Reading("garage/rpc")
    asking = Asking()
    requests = DeviceRequests(client, CommandTopics(PublishRules(), [asking, reader]),  # type: ignore[arg-type]
                              metrics=metrics)
    requests.add([("asking", Outgoing("garage/rpc", b"?")), ("asking", Outgoing("porch/rpc", b"?")),
                  ("asking", Outgoing("hubd/status", b"?")), ("asking", Outgoing("attic/rpc", b"?"))])
    reader.reads.append("attic/rpc")  # read from since it was asked: the rule is asked again before it goes
    requests.open()
    sender = asyncio.create_task(requests.run())
    try:
        with caplog.at_level(logging.WARNING, logger="hubd.mqtt.requests"):
            await eventually(lambda: requests.waiting == 0, "every question handled")
    finally:
        sender.cancel()
    assert [topic for _, topic in client.published] == ["porch/rpc"]
    assert 'hubd_mqtt_requests_dropped_total{reason="refused"} 3' in metrics.render()
    assert "hubd_mqtt_requests_total 1" in metrics.render()
    refused = [r.getMessage() for r in caplog.records if "refused a question" in r.getMessage()]
    assert len(refused) == 3 and "where reading devices are read from (garage/rpc)" in refused[0]
    assert "under hubd's own topics" in refused[1]
