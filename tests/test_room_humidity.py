"""A climate's room humidity joins its room temperature on the split-off read-only endpoint (CONTRACT section 6),
by both imports alike: ESPHome's abbreviated `curr_hum_t` through Home Assistant discovery
(tests/fixtures/homeassistant/esphome_livingroom_climate), zigbee2mqtt's own `current_humidity_topic`
(z2m_thermostat_BTH-RM230Z) and zigbee2mqtt's native Bosch BTH-RM230Z with its `humidity` beside
`local_temperature` (tests/fixtures/zigbee2mqtt/bosch_BTH-RM230Z_thermostat). Pure: no broker."""

from __future__ import annotations

import homeassistant_helpers as ha
import zigbee2mqtt_helpers as z2m

from hubd.dialects.base import ConfigReceived, DeviceInput


def interfaces(inputs: list[DeviceInput]) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    return {i.device_id: [(c.interface, c.supportedOperations) for c in i.config.capabilities]
            for i in inputs if isinstance(i, ConfigReceived)}


def test_an_esphome_thermostats_abbreviated_room_humidity_joins_its_room_temperature() -> None:
    dialect = ha.make()
    found = interfaces(ha.announce(dialect, "esphome_livingroom_climate"))

    assert found == {"a4cf12aa0b1c": [("Mode", ("Heat",)), ("Switch", ("On", "Off")),
                                      ("Temperature", ("Set", "Adjust"))],
                     "a4cf12aa0b1c-current_temperature": [("Humidity", ()), ("Temperature", ())]}
    assert ha.states(ha.replay_states(dialect, "esphome_livingroom_climate")) == {
        "a4cf12aa0b1c": {"Mode": "Heat", "Switch": "On", "Temperature": 20},
        "a4cf12aa0b1c-current_temperature": {"Temperature": 21.5, "Humidity": 48}}


def test_zigbee2mqtts_discovery_of_a_thermostat_with_humidity_splits_both_readings_off_together() -> None:
    found = interfaces(ha.announce(ha.make(), "z2m_thermostat_BTH-RM230Z"))

    room = [device_id for device_id, caps in found.items() if ("Humidity", ()) in caps]
    assert room == ["zigbee2mqtt_0x18fc2600000d7ae3-current_temperature"]
    assert found[room[0]] == [("Humidity", ()), ("Temperature", ())]


def test_zigbee2mqtts_native_thermostat_reports_its_humidity_on_its_room_temperatures_endpoint() -> None:
    dialect = z2m.make()
    found = interfaces(z2m.announce(dialect, z2m.entries("bosch_BTH-RM230Z_thermostat")))

    assert found == {"0x18fc2600000d7ae3": [("Mode", ("Cool", "Heat")), ("Switch", ("On", "Off")),
                                            ("Temperature", ("Set", "Adjust"))],
                     "0x18fc2600000d7ae3-local_temperature": [("Humidity", ()), ("Temperature", ())]}
    state = z2m.fixture("bosch_BTH-RM230Z_thermostat")["states"][0]["payload"]
    assert z2m.states(z2m.publish(dialect, "bosch_rm230z", state)) == {
        "0x18fc2600000d7ae3": {"Temperature": 20.5, "Mode": "Heat", "Switch": "On"},
        "0x18fc2600000d7ae3-local_temperature": {"Temperature": 21.5, "Humidity": 48}}


def test_a_humidity_sensor_without_a_thermostat_stays_on_its_device() -> None:
    found = interfaces(z2m.announce(z2m.make(), z2m.entries("aqara_WSDCGQ11LM_temperature")))

    assert list(found) == ["0x00158d00040726f1"]
    assert ("Humidity", ()) in found["0x00158d00040726f1"]


def test_a_thermostats_humidity_without_a_room_temperature_still_splits_off_the_thermostat() -> None:
    entry = z2m.entries("bosch_BTH-RM230Z_thermostat")[0]
    climate = next(e for e in entry["definition"]["exposes"] if e.get("type") == "climate")
    climate["features"] = [f for f in climate["features"] if f["name"] != "local_temperature"]
    found = interfaces(z2m.announce(z2m.make(), [entry]))

    assert found["0x18fc2600000d7ae3-humidity"] == [("Humidity", ())]
    assert ("Humidity", ()) not in found["0x18fc2600000d7ae3"]
