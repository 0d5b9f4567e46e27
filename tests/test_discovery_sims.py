"""The Home Assistant discovery simulators (simulators.discovery_*) against a real mosquitto, observed
with plain paho: their configs are the real producers' (tests/fixtures/homeassistant), retained where those
retain them; the light obeys zigbee2mqtt commands; a button press is zigbee2mqtt's messages, in its order.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from homeassistant_helpers import fixture, make, presses
from mosquitto import Mosquitto
from mqtt_observer import WAIT_S, Observer, retained

from hubd.dialects.base import ConfigReceived, StateReceived
from simulators.discovery_demo import make_demo_discovery_devices
from simulators.discovery_esphome import EspHomeClimateSensor
from simulators.discovery_session import DiscoveryDevice
from simulators.discovery_zigbee2mqtt import Zigbee2MqttButton, Zigbee2MqttLight

ESP_MAC = "20500de464ec"


Run = Callable[..., Any]


@pytest.fixture
async def run(mosquitto: Mosquitto) -> AsyncIterator[Run]:
    """run(*devices): start them on the test broker, then an observer, which gets the retained messages
    (with early=True the observer starts first and sees everything the devices publish, live)."""
    devices: list[DiscoveryDevice] = []
    observers: list[Observer] = []

    async def start(*started: DiscoveryDevice, early: bool = False) -> Observer:
        observer = Observer(mosquitto.host, mosquitto.port)
        observers.append(observer)
        if early:
            await observer.start()
        devices.extend(started)
        for device in started:
            await device.start()
        if not early:
            await observer.start()
        return observer

    yield start
    for device in devices:
        await device.stop()
    for observer in observers:
        await observer.stop()


def garage_board(broker: Mosquitto) -> EspHomeClimateSensor:
    """The board of the ESPHome fixture, named as it is there."""
    return EspHomeClimateSensor(broker.host, broker.port, node="garagedoor1", friendly_name="GarageDoor1",
                                mac=ESP_MAC, temperature_name="Garage Temperature",
                                humidity_name="Garage Humidity", temperature_c=21.5, humidity=48.25)


async def test_an_esphome_board_retains_the_configs_a_real_board_publishes(run: Run, mosquitto: Mosquitto) -> None:
    board = garage_board(mosquitto)
    obs = await run(board)

    for config in fixture("esphome_garagedoor1_sht3x")["configs"][:2]:  # its temperature and humidity
        got = await obs.next(config["topic"])
        assert (got.payload.decode(), got.retain) == (config["payload"], True)
    status = await obs.next("garagedoor1/status")
    assert (status.payload, status.retain) == (b"online", True)
    temperature = await obs.next("garagedoor1/sensor/garage_temperature/state")
    assert (temperature.payload, temperature.retain) == (b"21.5", True)
    assert (await obs.next(board.humidity_topic)).payload == b"48.2"  # one decimal, as the sensor's accuracy

    mark = obs.mark()
    await board.set_temperature(22.0)
    assert (await obs.next(board.temperature_topic, after=mark)).payload == b"22.0"
    await board.stop()
    assert (await obs.next("garagedoor1/status", after=mark)).payload == b"offline"
    assert board.received == []


async def test_a_killed_esphome_board_is_marked_offline_by_its_will(run: Run, mosquitto: Mosquitto) -> None:
    board = EspHomeClimateSensor(mosquitto.host, mosquitto.port)
    obs = await run(board)
    await obs.next(board.status_topic)

    mark = obs.mark()
    await board.kill()
    offline = await obs.next("porch-climate/status", after=mark)
    assert offline.payload == b"offline"
    await board.start()  # a fresh session announces itself again
    assert (await obs.next(board.status_topic, after=mark, pred=lambda m: m.payload == b"online")).payload


async def test_a_zigbee2mqtt_light_announces_itself_as_zigbee2mqtt_does(run: Run, mosquitto: Mosquitto) -> None:
    light = Zigbee2MqttLight(mosquitto.host, mosquitto.port)  # the fixture's bulb: "bulb", 0x000b57fffec6a5b2
    obs = await run(light, early=True)

    config = fixture("z2m_light_LED1545G12")["configs"][0]
    await obs.next("zigbee2mqtt/bulb")
    assert [(m.topic, m.qos) for m in obs.seen.items] == [
        ("zigbee2mqtt/bridge/state", 1), (config["topic"], 1), ("zigbee2mqtt/bulb", 0)]
    assert obs.seen.items[1].json() == config["payload"]
    assert obs.seen.items[2].json() == json.loads(fixture("z2m_light_LED1545G12")["states"][0]["payload"])
    assert light.discovery() == {config["topic"]: config["payload"]}
    # Configs and the bridge state are retained, the device state is not (zigbee2mqtt's defaults).
    assert {m.topic: m.json() for m in await retained(mosquitto)} == {
        "zigbee2mqtt/bridge/state": {"state": "online"}, config["topic"]: config["payload"]}


async def test_a_zigbee2mqtt_light_obeys_its_set_topic_and_publishes_its_whole_state(
        run: Run, mosquitto: Mosquitto) -> None:
    light = Zigbee2MqttLight(mosquitto.host, mosquitto.port, on=False)
    obs = await run(light)

    async def command(payload: str, topic: str = "zigbee2mqtt/bulb/set") -> dict[str, Any]:
        mark, count = obs.mark(), len(light.received)
        await obs.publish(topic, payload)
        await light.wait_until(lambda: len(light.received) > count, WAIT_S)
        answer: dict[str, Any] = (await obs.next("zigbee2mqtt/bulb", after=mark)).json()
        assert answer == {**light.state, "linkquality": 87}
        return answer

    # What Home Assistant's JSON-schema light sends.
    assert await command('{"state":"ON","brightness":200,"color_temp":300}') == {
        "brightness": 200, "color_mode": "color_temp", "color_temp": 300, "linkquality": 87, "state": "ON"}
    assert light.received[-1].json() == {"state": "ON", "brightness": 200, "color_temp": 300}
    assert light.received[-1].topic == light.command_topic
    assert (await command("OFF"))["state"] == "OFF"  # not JSON: the state
    assert (await command('{"state":"TOGGLE"}'))["state"] == "ON"
    assert (await command("40", "zigbee2mqtt/bulb/set/brightness"))["brightness"] == 40
    assert (await command('{"color_temp":"warmest"}'))["color_temp"] == 454  # clamped to the bulb's range
    assert (await command('{"color_temp":100}'))["color_temp"] == 250
    assert (await command('{"brightness":999}'))["brightness"] == 254
    off = await command('{"brightness":0}')
    assert (off["state"], off["brightness"]) == ("OFF", 254)
    assert (await command("", "zigbee2mqtt/bulb/get"))["state"] == "OFF"
    assert [r.topic for r in light.received].count("zigbee2mqtt/bulb/set") == 7


async def test_a_button_press_publishes_what_zigbee2mqtt_publishes_in_its_order(
        run: Run, mosquitto: Mosquitto) -> None:
    button = Zigbee2MqttButton(mosquitto.host, mosquitto.port)  # the fixture's button, legacy action sensor on
    obs = await run(button)
    trigger, event = fixture("z2m_remote_WXKG11LM")["configs"]
    got = await obs.next(event["topic"])
    assert (got.json(), got.retain) == (event["payload"], True)
    assert (await obs.next("homeassistant/sensor/0x0017880104e45520/action/config")).retain
    assert (await obs.next("homeassistant/sensor/0x0017880104e45520/battery/config")).json()["device_class"] == \
        "battery"

    mark = obs.mark()
    await button.press("single")
    await obs.next("zigbee2mqtt/button/action", after=mark)
    sequence = [m for m in obs.since(mark) if m.topic != "zigbee2mqtt/bridge/state"]
    assert [(m.topic, m.retain) for m in sequence] == [
        ("zigbee2mqtt/button", False), ("zigbee2mqtt/button", False), (trigger["topic"], False),
        ("zigbee2mqtt/button/action", False)]
    assert sequence[0].json() == {"action": "single", "battery": 100, "device_temperature": 24,
                                  "linkquality": 87, "power_outage_count": 3, "voltage": 3005}
    assert sequence[1].json()["action"] == ""
    assert sequence[2].json() == trigger["payload"]
    assert sequence[3].payload == b"single"

    # The trigger is discovered once per action; it stays retained.
    mark = obs.mark()
    await button.press("single")
    await button.press("double")
    await obs.next("zigbee2mqtt/button/action", after=mark, pred=lambda m: m.payload == b"double")
    configs = [m.topic for m in obs.since(mark) if m.topic.endswith("/config")]
    assert configs == ["homeassistant/device_automation/0x0017880104e45520/action_double/config"]
    assert button.presses == ["single", "single", "double"]
    assert trigger["topic"] in {m.topic for m in await retained(mosquitto)}
    with pytest.raises(ValueError, match="does not send"):
        await button.press("shake")


async def test_a_button_with_zigbee2mqtt_2_defaults_sends_no_empty_action(run: Run, mosquitto: Mosquitto) -> None:
    button = Zigbee2MqttButton(mosquitto.host, mosquitto.port, legacy_action_sensor=False)
    obs = await run(button)
    assert "homeassistant/sensor/0x0017880104e45520/action/config" not in button.discovery()

    mark = obs.mark()
    await button.press()
    await obs.next("zigbee2mqtt/button/action", after=mark)
    states = [m.json() for m in obs.since(mark) if m.topic == "zigbee2mqtt/button"]
    assert [s["action"] for s in states] == ["single"]


async def test_stopping_or_losing_zigbee2mqtt_marks_its_bridge_offline(run: Run, mosquitto: Mosquitto) -> None:
    light = Zigbee2MqttLight(mosquitto.host, mosquitto.port)
    button = Zigbee2MqttButton(mosquitto.host, mosquitto.port, base_topic="z2m-two")
    obs = await run(light, button)
    await obs.next("z2m-two/bridge/state")

    mark = obs.mark()
    await light.stop()
    assert (await obs.next("zigbee2mqtt/bridge/state", after=mark)).json() == {"state": "offline"}
    await button.kill()
    assert (await obs.next("z2m-two/bridge/state", after=mark)).json() == {"state": "offline"}  # the will
    bridges = {m.topic: m.json() for m in await retained(mosquitto) if m.topic.endswith("/bridge/state")}
    assert bridges == {"zigbee2mqtt/bridge/state": {"state": "offline"}, "z2m-two/bridge/state": {"state": "offline"}}


async def test_devices_announce_again_after_the_broker_lost_everything(run: Run, mosquitto: Mosquitto) -> None:
    light = Zigbee2MqttLight(mosquitto.host, mosquitto.port)
    await run(light)
    mosquitto.restart(keep_state=False)  # no retained message survives

    await light.wait_until(lambda: light.announced == 2, WAIT_S)  # paho reconnected; it announced again
    assert "homeassistant/light/0x000b57fffec6a5b2/light/config" in {m.topic for m in await retained(mosquitto)}


async def test_hubd_imports_what_the_simulators_publish(run: Run, mosquitto: Mosquitto) -> None:
    """The messages on the wire, fed to hubd's discovery dialect: three devices, a reading, one press."""
    board, light, button = make_demo_discovery_devices(mosquitto.host, mosquitto.port)
    obs = await run(board, light, button, early=True)
    assert "action" not in (await obs.next(button.state_topic)).json()  # the cached state holds no action
    mark = obs.mark()
    await board.set_temperature(23.5)
    await button.press()
    await obs.next(button.action_topic, after=mark)

    dialect = make(doorbells=[{"device": "Front Door Button", "event": "single"}])
    inputs = [i for m in obs.seen.items if dialect.claims(m.topic)
              for i in dialect.decode(m.topic, m.payload, 1_700_000_000.0 + m.seq, m.retain)]
    configs = {i.device_id: i.config for i in inputs if isinstance(i, ConfigReceived)}
    assert sorted(configs) == ["a4cf12f3c2d1", "zigbee2mqtt_0x000b57fffec6a5b2", "zigbee2mqtt_0x0017880104e45520"]
    assert configs["a4cf12f3c2d1"].displayName == "Porch Climate"
    assert configs["zigbee2mqtt_0x000b57fffec6a5b2"].displayType == "light"
    temperatures = [s.value for i in inputs if isinstance(i, StateReceived) and i.device_id == "a4cf12f3c2d1"
                    for s in i.samples if s.interface == "Temperature"]
    assert temperatures[-1] == 23.5
    assert presses(inputs) == ["zigbee2mqtt_0x0017880104e45520"]  # one press, one DoorbellPress
