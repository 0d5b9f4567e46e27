"""Tasmota switch inputs (SetOption114) as sensors: a PIR or a door contact on a switch input in a sensor SwitchMode
is a read-only on/off sensor like any motion or contact sensor (CONTRACT section 6), split off `<MAC>-switch<n>`
beside a relay; push-button modes stay doorbell candidates. Real payloads: tests/fixtures/tasmota
(ha_binary_sensor_49A3BC, with its source). Pure: no broker."""

from __future__ import annotations

from typing import Any

from tasmota_helpers import BASIC, announce, basic_config, configs, make, messages, presses, publish, states

from hubd.dialects.base import StateReceived

SO114 = {**basic_config()["so"], "114": 1}
RESULT, SENSOR, STATUS10 = "tasmota_49A3BC/stat/RESULT", "tasmota_49A3BC/tele/SENSOR", "tasmota_49A3BC/stat/STATUS10"


def inputs(modes: list[int], names: list[str | None], **changes: Any) -> dict[str, Any]:
    """The Sonoff Basic of Home Assistant's tests with switch inputs in these modes and SwitchTexts."""
    return basic_config(swc=modes + [-1] * (8 - len(modes)), swn=names + [None] * (5 - len(names)), so=SO114,
                        **changes)


def test_a_switch_input_in_follow_mode_is_a_read_only_sensor_read_from_result_sensor_and_status10() -> None:
    dialect = make()
    fixture = messages("ha_binary_sensor_49A3BC")
    found = configs(announce(dialect, BASIC, fixture[0][1]))

    sensor = found[BASIC].config
    assert (sensor.displayName, sensor.displayType) == ("Test", "unknown")
    assert [(c.interface, c.supportedOperations, c.proactivelyReported, c.retrievable)
            for c in sensor.capabilities] == [("Switch", (), True, True)]
    read = [states(publish(dialect, topic, body)) for topic, body in fixture[2:]]
    assert read == [{BASIC: {"Switch": value}} for value in ("On", "Off") * 3]


def test_a_pir_beside_a_relay_splits_off_as_a_motion_sensor_named_by_its_switch_text() -> None:
    dialect = make()
    config = inputs([1], ["Motion"], dn="Hallway", rl=[1, 0, 0, 0, 0, 0, 0, 0])
    found = configs(announce(dialect, BASIC, config, sensors={"Time": "2021-01-01T00:00:00", "Motion": "OFF"}))

    assert sorted(found) == [BASIC, f"{BASIC}-switch1"]
    assert (found[BASIC].config.displayType, found[BASIC].config.displayName) == ("switch", "Hallway")
    motion = found[f"{BASIC}-switch1"].config
    assert (motion.displayName, motion.displayType) == ("Hallway Motion", "unknown")
    assert [(c.interface, c.supportedOperations) for c in motion.capabilities] == [("Switch", ())]
    notes = {n.name: (n.exported, n.reason) for item in found.values() for n in item.origin.entities}
    assert notes == {"relay.relay1": (True, ""), "binary_sensor.switch1": (True, "")}  # no "Motion" left out

    assert states(publish(dialect, RESULT, {"Motion": {"Action": "ON"}})) == {f"{BASIC}-switch1": {"Switch": "On"}}
    assert states(publish(dialect, SENSOR, {"Time": "2021-01-01T00:00:01", "Motion": "OFF"})) == \
        {f"{BASIC}-switch1": {"Switch": "Off"}}
    assert states(publish(dialect, RESULT, {"POWER": "ON"})) == {BASIC: {"Switch": "On"}}  # the relay's own


def test_a_push_on_pir_is_on_for_a_moment_and_its_pin_level_in_tele_sensor_is_not_its_state() -> None:
    dialect = make()
    announce(dialect, BASIC, inputs([13], [None], dn="Porch"))
    on = next(p for t, p in messages("docs_results") if "Switch1" in p)  # {"Switch1":{"Action":"ON"}}

    seen = [i for i in publish(dialect, RESULT, on) if isinstance(i, StateReceived)]
    assert [(i.device_id, [(s.interface, s.value) for s in i.samples]) for i in seen] == \
        [(BASIC, [("Switch", "On")]), (BASIC, [("Switch", "Off")])]
    assert publish(dialect, SENSOR, {"Switch1": "ON"}) == []
    assert publish(dialect, STATUS10, {"StatusSNS": {"Switch1": "ON"}}) == []


def test_the_kind_of_a_switch_input_and_a_split_ones_name_come_from_its_switch_text() -> None:
    config = inputs([2, 1, 15], ["Door_Contact", "Leak", None], dn="Utility", rl=[1, 0, 0, 0, 0, 0, 0, 0])
    found = configs(announce(make(), BASIC, config))

    assert {k: (v.config.displayName, v.config.displayType) for k, v in found.items()} == {
        BASIC: ("Utility", "switch"), f"{BASIC}-switch1": ("Utility Door Contact", "unknown"),
        f"{BASIC}-switch2": ("Utility Leak", "alarm"), f"{BASIC}-switch3": ("Utility Input Three", "unknown")}


def test_push_button_inputs_stay_doorbell_candidates_and_a_sensor_input_beside_them_stays_a_sensor() -> None:
    config = inputs([3, 1], ["Bell", "Motion"], dn="Front")
    dialect = make(doorbells=[("Front", "TOGGLE")])
    found = configs(announce(dialect, BASIC, config))

    assert sorted(found) == [BASIC]  # the bell and the PIR: one device, nothing of it repeats an interface
    assert [(c.interface, c.supportedOperations) for c in found[BASIC].config.capabilities] == [("Switch", ())]
    assert presses(publish(dialect, RESULT, {"Bell": {"Action": "TOGGLE"}})) == [BASIC]
    assert presses(publish(dialect, RESULT, {"Motion": {"Action": "ON"}})) == []
    assert states(publish(dialect, RESULT, {"Motion": {"Action": "ON"}})) == {BASIC: {"Switch": "On"}}
    assert dialect.doorbell_events(BASIC) == ("OFF", "ON", "TOGGLE", "HOLD")

    plain = configs(announce(make(), BASIC, config))
    assert [n.reason for n in plain[BASIC].origin.entities if n.name == "switch1"] == \
        ["Bell's actions are a DoorbellPress when the device is declared in doorbells"]


def test_a_follow_switch_declared_as_the_doorbell_rings_when_the_device_has_no_other_input() -> None:
    dialect = make(doorbells=[("Gate", "ON")])
    found = configs(announce(dialect, BASIC, inputs([1], [None], dn="Gate")))

    assert found[BASIC].config.capabilities == ()
    assert presses(publish(dialect, RESULT, {"Switch1": {"Action": "ON"}})) == [BASIC]


def test_a_switch_input_is_restored_from_its_route_and_reads_states_before_its_config_comes_again() -> None:
    config = inputs([1], ["Motion"], dn="Hallway", rl=[1, 0, 0, 0, 0, 0, 0, 0])
    routes = [(item.device_id, item.route) for item in configs(announce(make(), BASIC, config)).values()]
    again = make()
    again.restore(routes)

    assert states(publish(again, RESULT, {"Motion": {"Action": "ON"}})) == {f"{BASIC}-switch1": {"Switch": "On"}}
