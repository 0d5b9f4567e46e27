"""Entities come and go by the ten thousand (a gateway announcing every sensor it hears): hubd unsubscribes the
topics of deleted ones, so the broker's subscriptions for hubd's session stay what its devices need, also across a
restart and a dialect turned off while hubd was down. Counted by the broker itself ($SYS/broker/subscriptions/count,
published every second by this test's mosquitto)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from mosquitto import Mosquitto, SysCounter, publish_many
from rig import Rig

WAVES, PER_WAVE = 5, 10_000  # 50,000 entities created and deleted
COUNT = "$SYS/broker/subscriptions/count"


@pytest.fixture
def mosquitto(make_mosquitto: Callable[..., Mosquitto]) -> Mosquitto:
    """This module's broker publishes its $SYS counters every second."""
    return make_mosquitto(sys_interval_s=1)


def config(i: int) -> tuple[str, str, bool]:
    body = {"name": f"Sensor {i}", "uniq_id": f"gw_{i}", "stat_t": f"gw/sensor_{i}/state", "dev_cla": "temperature",
            "unit_of_meas": "°C", "avty_t": f"gw/sensor_{i}/availability", "dev": {"ids": [f"gw-sensor-{i}"]}}
    return f"homeassistant/sensor/gw_{i}/temperature/config", json.dumps(body), True


def removal(i: int) -> tuple[str, str, bool]:
    return f"homeassistant/sensor/gw_{i}/temperature/config", "", True


async def gauge_is(rig: Rig, value: float) -> bool:
    return await rig.hub.metric("hubd_mqtt_subscriptions") == value


@pytest.mark.timeout(300)  # some 40 s here: 100,000 discovery messages through hubd
async def test_fifty_thousand_entities_created_and_deleted_leave_no_subscription_behind(
        make_rig: Callable[..., Any], mosquitto: Mosquitto) -> None:
    rig: Rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    counter = SysCounter(mosquitto.port, COUNT)
    try:
        base = await rig.hub.metric("hubd_mqtt_subscriptions")  # hubd's own topics and homeassistant/#
        assert await counter.settles_at(base + 1)  # and this test's own subscription to the count
        before = counter.values[-1]
        for wave in range(WAVES):
            ids = range(wave * PER_WAVE, (wave + 1) * PER_WAVE)
            publish_many(mosquitto.port, [config(i) for i in ids])
            await rig.hub.wait_for(lambda: gauge_is(rig, base + 2 * PER_WAVE), timeout_s=120,
                                   what=f"wave {wave}: every state and availability topic subscribed")
            publish_many(mosquitto.port, [removal(i) for i in ids])
            await rig.hub.wait_for(lambda: gauge_is(rig, base), timeout_s=120,
                                   what=f"wave {wave}: every deleted entity's topics unsubscribed")
        assert await counter.settles_at(before), f"the broker counts {counter.values[-1]}, not {before}"

        # Stopped with 100 entities, started again with discovery turned off: the kept session's topics go.
        publish_many(mosquitto.port, [config(i) for i in range(100)])
        await rig.hub.wait_for(lambda: gauge_is(rig, base + 200), what="100 entities subscribed")
        assert await counter.settles_at(before + 200)
        assert rig.hub.stop() == 0
        rig.hub.config["homeassistant"] = {"enabled": False}
        rig.hub.start()
        await rig.hub.wait_ready()
        # The broker holds hubd's own topics only: homeassistant/# is gone too.
        assert await counter.settles_at(before - 1), f"the broker counts {counter.values[-1]}"
        assert "unsubscribed from 201 topics no device uses any more" in rig.hub.log()
    finally:
        counter.close()
