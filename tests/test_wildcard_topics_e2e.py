"""Wildcard state topics end to end (CONTRACT 6): a real mosquitto, a real hubd and the platform simulator. A Theengs
Gateway BLE thermometer announced with `stat_t` `+/+/BTtoMQTT/<MAC>` (tests/fixtures/homeassistant, its source in
the README there) reaches the platform, and what the gateway publishes on `home/TheengsGateway/BTtoMQTT/<MAC>` is
reported; a config whose state topic is `#` is refused and listed, with its topic, in `GET /api/devices` and on the
status page. Every wait is on a condition.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from homeassistant_helpers import fixture
from rig import Rig, announced, send, send_until_seen, settle, states_of, wait_change, wait_devices

MakeRig = Callable[..., Awaitable[Rig]]

THEENGS = "theengs_bluemaestro_BM_V23_F35285"
TEMPC = "F35285-F35285-tempc"  # the tempc entity, split off (the dew point `F35285-dp` comes first by object_id)
GATEWAY_TOPIC = "home/TheengsGateway/BTtoMQTT/F35285"  # Theengs Gateway's default publish topic for this MAC
ROOT = "homeassistant/sensor/everything/config"


async def test_a_theengs_ble_thermometer_with_a_wildcard_state_topic_reports_its_temperature(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    data = fixture(THEENGS)
    for config in data["configs"]:
        send(rig, config["topic"], config["payload"], retain=True)
    reading = json.loads(data["states"][0]["payload"])
    # Not retained, as the gateway publishes: sent until hubd (subscribed to the filter once the config came) shows it.
    await send_until_seen(rig, GATEWAY_TOPIC, reading, TEMPC,
                          lambda d: states_of(d).get("Temperature") == 24.1)
    await rig.bind()
    endpoints = await announced(rig, "F35285", TEMPC)
    assert {c["interface"] for c in endpoints[TEMPC]["capabilities"]} == {"Temperature"}

    send(rig, "office/SecondGateway/BTtoMQTT/F35285", {**reading, "tempc": 19.5})  # another gateway, same sensor
    await wait_change(rig, TEMPC, "Temperature", 19.5)


async def test_a_config_reading_the_whole_bus_is_refused_and_listed_with_its_topic(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    send(rig, ROOT, {"name": "Everything", "stat_t": "#", "dev_cla": "temperature", "unit_of_meas": "°C",
                     "uniq_id": "everything", "dev": {"ids": "everything", "name": "Everything Sensor"}}, retain=True)
    # A device that is read, published after it: once it is listed, the refused config was handled before it.
    send(rig, "homeassistant/sensor/ok/config", {"stat_t": "ok/t", "dev_cla": "temperature", "uniq_id": "ok",
                                                 "dev": {"ids": "ok", "name": "Cellar"}}, retain=True)
    await wait_devices(rig, "ok")

    _, body = await rig.hub.get("/api/devices")
    listed = [u for u in body["unexported"] if u["topic"] == ROOT]
    assert [(u["endpointId"], u["name"]) for u in listed] == [("everything", "Everything Sensor")]
    assert "no literal level" in listed[0]["entities"][0]
    assert "everything" not in {d["endpointId"] for d in body["devices"]}

    status, page = await rig.hub.get("/")
    assert status == 200
    shown: dict[str, Any] = json.loads(
        page.split('<script type="application/json" id="status-data">')[1].split("</script>")[0])
    assert [u["topic"] for u in shown["unexported"]] == [ROOT]
    assert any("no literal level" in p["reason"] for p in shown["problems"]["rejected"]), shown["problems"]


async def test_a_press_on_a_topic_a_filter_and_an_exact_subscription_both_match_rings_once(
        make_rig: MakeRig) -> None:
    """The broker delivers a message once to a session whose subscriptions overlap (MQTT 3.1.1, as hubd connects;
    mosquitto under MQTT 5 would send one copy per subscription, and each would ring)."""
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    send(rig, "homeassistant/event/bell/config",
         {"stat_t": "doorbell/+/action", "evt_typ": ["press"], "dev_cla": "doorbell", "uniq_id": "bell",
          "dev": {"ids": "bell", "name": "Front Bell"}}, retain=True)
    send(rig, "homeassistant/binary_sensor/bellseen/config",
         {"stat_t": "doorbell/front/action", "val_tpl": "{{ 'ON' if value_json.event_type == 'press' else 'OFF' }}",
          "uniq_id": "bellseen", "dev": {"ids": "bellseen", "name": "Bell Seen"}}, retain=True)
    await wait_devices(rig, "bell", "bellseen")
    await rig.bind()
    await announced(rig, "bell", "bellseen")

    await send_until_seen(rig, "doorbell/front/action", {"event_type": "press"}, "bellseen",
                          lambda d: states_of(d).get("Switch") == "On")
    await settle(rig)  # the presses of the messages sent until then, all delivered
    presses = len(rig.events("DoorbellPress", endpoint="bell"))
    send(rig, "doorbell/front/action", {"event_type": "press"})
    await rig.wait_events(presses + 1, "DoorbellPress", endpoint="bell")
    await settle(rig)
    assert len(rig.events("DoorbellPress", endpoint="bell")) == presses + 1
