"""One thing, one endpoint: a group or device announced twice under different components (zigbee2mqtt's discovery
of a group as a light and as a switch; a thermostat's own `state` switch beside its climate) is one endpoint, the
richer component's; parts that only share a topic (a relay's second gang) stay their own. Discovery (zigbee2mqtt's own
test payloads, tests/fixtures/homeassistant) and the native zigbee2mqtt import. Pure: no broker."""

from __future__ import annotations

import copy
from typing import Any

import homeassistant_helpers as ha
import zigbee2mqtt_helpers as z2m

GROUP = "zigbee2mqtt_1221051039810110150109113116116_9"
BOSCH_RM = "zigbee2mqtt_0x18fc2600000d7ae3"
BOSCH_TRV = "0x18fc2600000d7ae2"


def _notes(config: Any) -> dict[str, tuple[bool, str]]:
    return {n.name: (n.exported, n.reason) for n in config.origin.entities}


def test_a_zigbee2mqtt_group_announced_as_a_light_and_a_switch_is_one_light() -> None:
    dialect = ha.make()
    found = ha.configs(ha.announce(dialect, "z2m_group_light_and_switch"))

    assert list(found) == [GROUP]
    assert found[GROUP].config.displayType == "light"
    exported, why = _notes(found[GROUP])["switch.switch"]
    assert not exported and "light.light" in why
    assert ha.states(ha.replay_states(dialect, "z2m_group_light_and_switch")) == \
        {GROUP: {"Switch": "On", "Brightness": 100, "ColorTemperature": 41}}


def test_a_switch_first_then_its_light_still_makes_one_endpoint_whatever_the_order() -> None:
    configs = ha.fixture("z2m_group_light_and_switch")["configs"]
    dialect = ha.make()
    inputs = []
    for config in reversed(configs):
        inputs += dialect.decode(config["topic"], ha.raw(config["payload"]), ha.NOW, True)

    assert sorted(ha.configs(inputs)) == [GROUP]
    assert ha.configs(inputs)[GROUP].config.displayType == "light"


def test_a_thermostats_own_state_switch_is_its_switch_not_a_second_endpoint() -> None:
    dialect = ha.make()
    inputs = ha.announce(dialect, "z2m_thermostat_BTH-RM230Z")
    switch = {"availability": [{"topic": "zigbee2mqtt/bridge/state", "value_template": "{{ value_json.state }}"}],
              "command_topic": "zigbee2mqtt/bosch_rm230z/set", "name": None, "payload_off": "OFF", "payload_on": "ON",
              "state_topic": "zigbee2mqtt/bosch_rm230z", "value_template": "{{ value_json.state }}",
              "unique_id": "0x18fc2600000d7ae3_switch_zigbee2mqtt", "origin": {"name": "Zigbee2MQTT"},
              "device": ha.fixture("z2m_thermostat_BTH-RM230Z")["configs"][0]["payload"]["device"]}
    inputs += dialect.decode("homeassistant/switch/0x18fc2600000d7ae3/switch/config", ha.raw(switch), ha.NOW, True)

    found = ha.configs(inputs)
    assert sorted(found) == [BOSCH_RM, f"{BOSCH_RM}-current_temperature"]
    assert found[BOSCH_RM].config.displayType == "thermostat"
    assert not _notes(found[BOSCH_RM])["switch.switch"][0]


def test_a_switch_that_reads_another_property_of_the_same_topic_stays_its_own_endpoint() -> None:
    dialect = ha.make()
    configs = copy.deepcopy(ha.fixture("z2m_group_light_and_switch")["configs"])
    configs[1]["payload"]["value_template"] = "{{ value_json.state_l2 }}"  # a second gang, not the light's state
    inputs = []
    for config in configs:
        inputs += dialect.decode(config["topic"], ha.raw(config["payload"]), ha.NOW, True)

    assert sorted(ha.configs(inputs)) == [GROUP, f"{GROUP}-switch"]


def _trv_with_state_switch(modes: list[str] | None = None) -> list[dict[str, Any]]:
    """The Bosch TRV's exposes with zigbee-herdsman-converters' `e.switch()` (a binary `state`, ON/OFF) beside its
    climate, as a thermostat with its own on/off announces it."""
    device = z2m.entries("bosch_BTH-RA_trv")
    exposes = device[0]["definition"]["exposes"]
    exposes.append({"type": "switch", "features": [
        {"name": "state", "label": "State", "access": 7, "type": "binary", "property": "state",
         "value_on": "ON", "value_off": "OFF", "description": "On/off state of the switch"}]})
    if modes is not None:
        climate = next(e for e in exposes if e["type"] == "climate")
        mode = next(f for f in climate["features"] if f["name"] == "system_mode")
        mode["values"] = modes
    return device


def test_a_native_thermostats_state_switch_merges_into_its_off_mode_switch() -> None:
    found = z2m.configs(z2m.announce(z2m.make(), _trv_with_state_switch(modes=["off", "heat"])))

    assert sorted(found) == [BOSCH_TRV, f"{BOSCH_TRV}-local_temperature"]
    assert found[BOSCH_TRV].config.displayType == "thermostat"
    assert z2m.operations(found[BOSCH_TRV])["Switch"] == ("On", "Off")
    exported, why = _notes(found[BOSCH_TRV])["switch.state"]
    assert not exported and "one endpoint" in why


def test_a_native_thermostat_without_an_off_mode_is_switched_by_its_state() -> None:
    dialect = z2m.make()
    found = z2m.configs(z2m.announce(dialect, _trv_with_state_switch()))  # its system_mode: heat only

    assert sorted(found) == [BOSCH_TRV, f"{BOSCH_TRV}-local_temperature"]
    assert z2m.operations(found[BOSCH_TRV])["Switch"] == ("On", "Off") and _notes(found[BOSCH_TRV])["switch.state"][0]
    z2m.publish(dialect, "bridge/state", "online")
    assert z2m.states(z2m.publish(dialect, "bosch_radiator", {"state": "OFF", "system_mode": "heat"}))[BOSCH_TRV][
        "Switch"] == "Off"
