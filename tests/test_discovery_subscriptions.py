"""How hubd subscribes to discovered devices' topics: a device reaches the platform only once hubd is subscribed to
its state topic (a state sent right after is never lost), and Home Assistant's birth message goes out once per
connection and at most once every 10 s while new devices appear (never once per device). Through mosquitto."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
from mosquitto import publish
from paho.mqtt.enums import CallbackAPIVersion
from rig import Rig


def sensor_config(i: int) -> str:
    return json.dumps({"name": "Temperature", "uniq_id": f"probe_{i}", "stat_t": f"probes/{i}/state",
                       "dev_cla": "temperature", "unit_of_meas": "°C",
                       "dev": {"ids": [f"probe-{i}"], "name": f"Probe {'ABCDEFGHIJKLMNOPQRSTUVWXYZ'[i % 26]}"}})


async def test_a_state_sent_as_soon_as_the_platform_has_the_device_is_never_lost(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    await rig.bind()
    for i in range(20):  # a race: run it enough times to lose one if hubd subscribed after reporting
        publish(rig.broker.port, f"homeassistant/sensor/probe_{i}/temperature/config", sensor_config(i), retain=True)
        await rig.wait_events(1, "AddOrUpdateReport", endpoint=f"probe-{i}")
        publish(rig.broker.port, f"probes/{i}/state", "21.5")  # not retained: lost if hubd is not subscribed yet
        await rig.wait_events(1, "ChangeReport", endpoint=f"probe-{i}")


class Births:
    """Counts hubd's birth messages on homeassistant/status."""

    def __init__(self, port: int) -> None:
        self.times: list[float] = []
        self._lock = threading.Lock()
        self._client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"births-{time.monotonic_ns()}")
        self._client.on_message = self._on_message
        self._client.connect("127.0.0.1", port)
        self._client.subscribe("homeassistant/status", 1)
        self._client.loop_start()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        if message.payload == b"online":
            with self._lock:
                self.times.append(time.monotonic())

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


async def test_the_birth_message_goes_out_at_most_every_ten_seconds_while_devices_appear(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}}, ready=False)
    births = Births(rig.broker.port)
    try:
        await rig.hub.wait_ready()
        await rig.hub.wait_for(_count(births, 1), what="the birth message of the connection")
        began = time.monotonic()
        for i in range(30):  # 30 new devices, one by one, each subscribed to on its own
            publish(rig.broker.port, f"homeassistant/sensor/probe_{i}/temperature/config", sensor_config(i),
                    retain=True)
            await rig.hub.wait_for(_metric_at_least(rig, "hubd_mqtt_subscriptions", 6 + i + 1),
                                   what=f"device {i} subscribed to")
        spent = time.monotonic() - began
        await rig.hub.wait_for(_count(births, 2), timeout_s=15, what="one birth message for the new devices")
        assert spent < 10, f"the 30 devices took {spent:.1f} s: too slow to tell 'once every 10 s' from 'per device'"
        # One for the connection and one for the 30 new devices: never one per device.
        await rig.hub.wait_for(_settled_for(births, 10.5), timeout_s=30, what="10 s without another birth")
        assert len(births.times) == 2, births.times
    finally:
        births.close()


def _count(births: Births, n: int) -> Callable[[], Any]:
    async def reached() -> bool:
        return len(births.times) >= n
    return reached


def _metric_at_least(rig: Rig, name: str, value: float) -> Callable[[], Any]:
    async def reached() -> bool:
        return await rig.hub.metric(name) >= value
    return reached


def _settled_for(births: Births, seconds: float) -> Callable[[], Any]:
    async def quiet() -> bool:
        return bool(births.times) and time.monotonic() - births.times[-1] >= seconds
    return quiet
