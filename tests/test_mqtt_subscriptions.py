"""The broker's subscriptions for hubd's session (hubd.mqtt.subscriptions), in-process with a stand-in client whose
SUBACKs the test releases: what the pump subscribes to while a reconnect resubscribes is kept, not forgotten."""

from __future__ import annotations

import asyncio
from typing import Any

from hubd.devices.model import Route
from hubd.dialects.base import ControlRequest, DeviceInput, Dialect, Outgoing
from hubd.lifecycle import SystemClock
from hubd.metrics import Metrics
from hubd.mqtt.subscriptions import Subscriptions


class Client:
    """Records SUBSCRIBE and UNSUBSCRIBE; the first SUBSCRIBE waits for `gate`."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()
        self.subscribed: list[str] = []

    async def subscribe(self, filters: list[tuple[str, int]], timeout_s: float) -> None:
        if not self.subscribed and not self.gate.is_set():
            self.waiting.set()
            await self.gate.wait()
        self.subscribed += [topic for topic, _ in filters]

    async def unsubscribe(self, names: list[str], timeout_s: float) -> None:
        pass

    async def publish(self, *args: Any, **kwargs: Any) -> None:
        pass


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
