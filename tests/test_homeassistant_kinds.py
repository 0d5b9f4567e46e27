"""The kinds the mapping table gained (robot vacuum, humidifier, water heater, valve) through Home Assistant MQTT
discovery: real discovery payloads (Valetudo's, Home Assistant's documented examples) in, the platform's display
type, capabilities, states and the commands each sends out. Pure: no broker."""

from __future__ import annotations

import pytest
from homeassistant_helpers import (
    NOW,
    announce,
    configs,
    make,
    operations,
    publish,
    raw,
    replay_states,
    request,
    restarted,
    states,
)

from hubd.dialects.base import AvailabilityReceived, CommandRefused, ConfigReceived, InputRejected, Outgoing
from hubd.dialects.homeassistant.dialect import HomeAssistantDialect

VACUUM = "GentleTimelyBadger"
VACUUM_STATE = "valetudo/GentleTimelyBadger/hass/GentleTimelyBadger_vacuum/state"
VACUUM_COMMAND = "valetudo/GentleTimelyBadger/hass/GentleTimelyBadger_vacuum/command"


def _device(name: str, device_id: str) -> tuple[HomeAssistantDialect, ConfigReceived]:
    dialect = make()
    return dialect, configs(announce(dialect, name))[device_id]


def _sent(outgoing: list[Outgoing]) -> list[tuple[str, str]]:
    return [(o.topic, o.payload.decode()) for o in outgoing]


def test_a_valetudo_robot_is_a_clean_bot_that_starts_docks_pauses_and_resumes() -> None:
    dialect, vacuum = _device("valetudo_vacuum_GentleTimelyBadger", VACUUM)

    assert vacuum.config.displayType == "cleanBot"
    assert vacuum.config.displayName == "Kitchen robot"
    assert operations(vacuum) == {"Switch": ("On", "Off"), "PlaybackControl": ("Play", "Pause")}
    sent = [_sent(dialect.encode_control(VACUUM, vacuum.route, request(i, op, op)))
            for i, op in (("Switch", "On"), ("Switch", "Off"), ("PlaybackControl", "Pause"),
                          ("PlaybackControl", "Play"))]
    assert sent == [[(VACUUM_COMMAND, "START")], [(VACUUM_COMMAND, "HOME")], [(VACUUM_COMMAND, "PAUSE")],
                    [(VACUUM_COMMAND, "START")]]


@pytest.mark.parametrize(("state", "expected"), [
    ("cleaning", {"Switch": "On", "PlaybackControl": "Play"}),
    ("paused", {"Switch": "On", "PlaybackControl": "Pause"}),
    ("returning", {"Switch": "Off"}),
    ("docked", {"Switch": "Off"}),
    ("idle", {"Switch": "Off"}),
])
def test_a_vacuums_state_is_on_while_it_has_a_cleaning_job(state: str, expected: dict[str, str]) -> None:
    dialect, _ = _device("valetudo_vacuum_GentleTimelyBadger", VACUUM)

    found = publish(dialect, VACUUM_STATE, {"state": state, "fan_speed": "max"})

    assert states(found) == {VACUUM: expected}


def test_a_vacuum_in_error_reports_nothing_and_an_unknown_state_is_refused() -> None:
    dialect, _ = _device("valetudo_vacuum_GentleTimelyBadger", VACUUM)

    assert publish(dialect, VACUUM_STATE, {"state": "error"}) == []
    refused = publish(dialect, VACUUM_STATE, {"state": "mopping the ceiling"})
    assert [type(i) for i in refused] == [InputRejected]


DEEP = '{"state": ' + "[" * 3_000 + "]" * 3_000 + "}"  # json.loads recurses: a RecursionError out of the dialect


def test_json_states_nested_too_deep_are_refused_by_name_never_a_failure_of_the_dialect() -> None:
    dialect, _ = _device("valetudo_vacuum_GentleTimelyBadger", VACUUM)
    refused = publish(dialect, VACUUM_STATE, DEEP)
    assert [type(i) for i in refused] == [InputRejected] and "is not the JSON state a vacuum sends" in \
        refused[0].reason  # type: ignore[attr-defined]
    light = {"name": None, "unique_id": "deep1", "schema": "json", "command_topic": "house/deep/set",
             "state_topic": "house/deep", "brightness": True, "device": {"identifiers": ["deep1"], "name": "Deep lamp"}}
    assert configs(publish(dialect, "homeassistant/light/deep1/config", light, retained=True))
    refused = publish(dialect, "house/deep", DEEP)
    assert [type(i) for i in refused] == [InputRejected] and "is not the JSON state of a json-schema light" in \
        refused[0].reason  # type: ignore[attr-defined]
    assert states(publish(dialect, "house/deep", {"state": "ON", "brightness": 255})) == \
        {"deep1": {"Switch": "On", "Brightness": 100}}


def test_a_vacuum_that_cannot_pause_has_no_playback_control_and_docks_by_stop_without_return_home() -> None:
    dialect = make()
    config = {"name": "Roomba", "unique_id": "roomba1", "command_topic": "roomba/command",
              "state_topic": "roomba/state", "supported_features": ["start", "stop", "status"]}
    vacuum = configs(dialect.decode("homeassistant/vacuum/roomba1/config", raw(config), NOW, True))["roomba1"]

    assert operations(vacuum) == {"Switch": ("On", "Off")}
    assert _sent(dialect.encode_control("roomba1", vacuum.route, request("Switch", "Off", "Off"))) == \
        [("roomba/command", "stop")]
    with pytest.raises(CommandRefused):
        dialect.encode_control("roomba1", vacuum.route, request("PlaybackControl", "Pause", "Pause"))


def test_a_humidifier_sets_its_target_humidity_and_turns_on_and_off() -> None:
    dialect, humidifier = _device("ha_docs_humidifier", "bedroom_humidifier")

    assert humidifier.config.displayType == "humidifier"
    assert operations(humidifier) == {"Switch": ("On", "Off"), "Humidity": ("Set", "Adjust")}
    assert states(replay_states(dialect, "ha_docs_humidifier")) == \
        {"bedroom_humidifier": {"Switch": "On", "Humidity": 55}}
    route = humidifier.route
    assert _sent(dialect.encode_control("bedroom_humidifier", route, request("Humidity", "Set", 45))) == \
        [("bedroom_humidifier/humidity/set", "45")]
    assert _sent(dialect.encode_control("bedroom_humidifier", route, request("Switch", "Off", "Off"))) == \
        [("bedroom_humidifier/on/set", "false")]
    with pytest.raises(CommandRefused, match=r"30\.\.80"):
        dialect.encode_control("bedroom_humidifier", route, request("Humidity", "Set", 95))
    assert _sent(dialect.encode_control("bedroom_humidifier", route, request("Humidity", "Adjust", 95, 20))) == \
        [("bedroom_humidifier/humidity/set", "80")]  # an Adjust stops at the limit


def test_a_dehumidifier_is_its_own_display_type() -> None:
    dialect = make()
    config = {"name": "Cellar", "unique_id": "dh1", "device_class": "dehumidifier", "command_topic": "dh/set",
              "state_topic": "dh/state", "target_humidity_command_topic": "dh/target/set"}
    found = configs(dialect.decode("homeassistant/humidifier/dh1/config", raw(config), NOW, True))["dh1"]

    assert found.config.displayType == "dehumidifier"
    assert operations(found) == {"Switch": ("On", "Off"), "Humidity": ("Set", "Adjust")}


def test_a_water_heater_sets_its_target_and_turns_off_and_on_by_its_mode_template() -> None:
    dialect, heater = _device("ha_docs_water_heater", "basement_boiler")

    assert heater.config.displayType == "waterHeater"
    assert operations(heater) == {"Switch": ("On", "Off"), "Temperature": ("Set", "Adjust")}
    assert states(replay_states(dialect, "ha_docs_water_heater")) == \
        {"basement_boiler": {"Switch": "On", "Temperature": 55}}
    assert states(publish(dialect, "basement/boiler/mode", "off")) == {"basement_boiler": {"Switch": "Off"}}
    route = heater.route
    assert _sent(dialect.encode_control("basement_boiler", route, request("Temperature", "Set", 60))) == \
        [("basement/boiler/temperature/set", "60")]
    assert _sent(dialect.encode_control("basement_boiler", route, request("Switch", "Off", "Off"))) == \
        [("basement/boiler/mode/set", "off")]
    assert _sent(dialect.encode_control("basement_boiler", route, request("Switch", "On", "On"))) == \
        [("basement/boiler/mode/set", "on")]  # its template: any mode but off is "on"


def test_a_water_heater_with_a_power_topic_turns_off_by_it_and_reads_json_modes_by_its_value_template() -> None:
    dialect = make()
    config = {"name": "Boiler", "unique_id": "boiler2", "modes": ["off", "eco", "performance"],
              "mode_command_topic": "boiler2/mode/set", "mode_state_topic": "boiler2/mode",
              "value_template": "{{ value_json }}", "power_command_topic": "boiler2/power/set"}
    heater = configs(dialect.decode("homeassistant/water_heater/boiler2/config", raw(config), NOW, True))["boiler2"]

    assert states(publish(dialect, "boiler2/mode", '"off"')) == {"boiler2": {"Switch": "Off"}}
    assert _sent(dialect.encode_control("boiler2", heater.route, request("Switch", "On", "On"))) == \
        [("boiler2/power/set", "ON")]


def test_a_fahrenheit_water_heater_without_a_power_topic_turns_off_by_its_off_mode() -> None:
    dialect = make()
    config = {"name": "Tank", "unique_id": "tank1", "temperature_unit": "F", "precision": 1,
              "temperature_command_topic": "tank/target/set", "temperature_state_topic": "tank/target",
              "mode_command_topic": "tank/mode/set", "mode_state_topic": "tank/mode", "modes": ["off", "eco"]}
    heater = configs(dialect.decode("homeassistant/water_heater/tank1/config", raw(config), NOW, True))["tank1"]

    assert states(publish(dialect, "tank/target", "122")) == {"tank1": {"Temperature": 50}}
    assert _sent(dialect.encode_control("tank1", heater.route, request("Temperature", "Set", 50))) == \
        [("tank/target/set", "122")]
    assert _sent(dialect.encode_control("tank1", heater.route, request("Switch", "Off", "Off"))) == \
        [("tank/mode/set", "off")]
    assert _sent(dialect.encode_control("tank1", heater.route, request("Switch", "On", "On"))) == \
        [("tank/mode/set", "eco")]


def test_a_valve_is_a_switch_that_opens_and_closes() -> None:
    dialect, valve = _device("ha_docs_valve", "heater_valve")

    assert valve.config.displayType == "switch"
    assert operations(valve) == {"Switch": ("On", "Off")}
    assert states(replay_states(dialect, "ha_docs_valve"))["heater_valve"] == {"Switch": "On"}
    assert states(publish(dialect, "heater/valve/state", {"x": "closing"})) == {"heater_valve": {"Switch": "Off"}}
    assert dialect.encode_control("heater_valve", valve.route, request("Switch", "Off", "Off")) == \
        [Outgoing("heater/valve/set", b'{"x": CLOSE }', 0, True)]  # its command_template, as Home Assistant sends


def test_a_valve_that_reports_its_position_is_positioned_and_opened_by_position() -> None:
    dialect, valve = _device("ha_docs_valve", "heater2_valve")

    assert operations(valve) == {"Switch": ("On", "Off"), "Position": ("Set", "Adjust")}
    assert states(publish(dialect, "heater2/valve/state", {"x": 0})) == \
        {"heater2_valve": {"Position": 0, "Switch": "Off"}}
    assert states(publish(dialect, "heater2/valve/state", {"x": 40})) == \
        {"heater2_valve": {"Position": 40, "Switch": "On"}}
    route = valve.route
    assert _sent(dialect.encode_control("heater2_valve", route, request("Position", "Set", 30))) == \
        [("heater2/valve/set", '{"x": 30 }')]
    assert _sent(dialect.encode_control("heater2_valve", route, request("Switch", "On", "On"))) == \
        [("heater2/valve/set", '{"x": 100 }')]


@pytest.mark.parametrize("name", ["valetudo_vacuum_GentleTimelyBadger", "ha_docs_humidifier", "esphome_garden_valve",
                                  "ha_docs_water_heater", "ha_docs_valve"])
def test_the_new_kinds_command_the_same_after_a_restart(name: str) -> None:
    dialect = make()
    found = announce(dialect, name)
    again = restarted(found)

    for device_id, config in configs(found).items():
        switch = request("Switch", "On", "On")
        assert again.encode_control(device_id, config.route, switch) == \
            dialect.encode_control(device_id, config.route, switch)


# Locks tell the truth: On only when fully locked.

LOCK = "20500de464ec"
LOCK_STATE = "garagedoor1/lock/garage_door_lock/state"


def _availability(inputs: list[object]) -> list[bool]:
    return [i.online for i in inputs if isinstance(i, AvailabilityReceived)]


@pytest.mark.parametrize("state", ["JAMMED", "UNKNOWN", "None", "half-way"])
def test_a_lock_that_is_not_known_to_be_locked_is_off_unreachable_and_a_problem(state: str) -> None:
    dialect = make()
    announce(dialect, "esphome_garagedoor1_lock")
    replay_states(dialect, "esphome_garagedoor1_lock")  # online, unlocked, then locked

    found = publish(dialect, LOCK_STATE, state)

    assert states(found) == {LOCK: {"Switch": "Off"}}
    assert _availability(found) == [False]
    problems = [i.reason for i in found if isinstance(i, InputRejected)]
    assert len(problems) == 1 and "lock.garage_door_lock" in problems[0] and repr(state) in problems[0]


def test_a_lock_is_reachable_again_once_it_reports_locked_or_unlocked_and_stays_down_while_offline() -> None:
    dialect = make()
    announce(dialect, "esphome_garagedoor1_lock")
    replay_states(dialect, "esphome_garagedoor1_lock")
    publish(dialect, LOCK_STATE, "JAMMED")

    again = publish(dialect, LOCK_STATE, "LOCKED")
    assert states(again) == {LOCK: {"Switch": "On"}} and _availability(again) == [True]

    assert _availability(publish(dialect, "garagedoor1/status", "offline")) == [False]
    publish(dialect, LOCK_STATE, "JAMMED")
    assert _availability(publish(dialect, LOCK_STATE, "UNLOCKED")) == []  # still offline: its availability says so
    assert _availability(publish(dialect, "garagedoor1/status", "online")) == [True]


@pytest.mark.parametrize(("state", "switch"), [("LOCKING", "Off"), ("UNLOCKING", "Off"), ("OPEN", "Off"),
                                               ("OPENING", "Off"), ("UNLOCKED", "Off"), ("LOCKED", "On")])
def test_a_lock_is_on_only_when_locked(state: str, switch: str) -> None:
    dialect = make()
    announce(dialect, "esphome_garagedoor1_lock")
    replay_states(dialect, "esphome_garagedoor1_lock")

    found = publish(dialect, LOCK_STATE, state)

    assert states(found) == {LOCK: {"Switch": switch}}
    assert _availability(found) == [] and not [i for i in found if isinstance(i, InputRejected)]


def test_a_lock_without_availability_is_unreachable_while_jammed_and_reachable_after() -> None:
    dialect = make()
    config = {"name": "Back door", "unique_id": "backdoor", "state_topic": "backdoor/state",
              "command_topic": "backdoor/set", "state_jammed": "MOTOR_BLOCKED"}
    dialect.decode("homeassistant/lock/backdoor/config", raw(config), NOW, True)
    assert states(publish(dialect, "backdoor/state", "LOCKED")) == {"backdoor": {"Switch": "On"}}

    blocked = publish(dialect, "backdoor/state", "MOTOR_BLOCKED")
    assert _availability(blocked) == [False] and "jammed" in str(blocked[0])
    assert _availability(publish(dialect, "backdoor/state", "LOCKED")) == [True]


def test_a_lock_without_availability_jammed_before_a_restart_is_reachable_once_it_reports_locked() -> None:
    dialect = make()
    config = {"name": "Back door", "unique_id": "backdoor", "state_topic": "backdoor/state",
              "command_topic": "backdoor/set"}
    inputs = dialect.decode("homeassistant/lock/backdoor/config", raw(config), NOW, True)
    assert _availability(publish(dialect, "backdoor/state", "JAMMED")) == [False]

    again = restarted(inputs)  # the registry still has it offline
    assert _availability(publish(again, "backdoor/state", "LOCKED")) == [True]


def test_an_esphome_valve_reads_and_sets_its_position_on_its_own_topics() -> None:
    dialect, valve = _device("esphome_garden_valve", "246f28a1b2c4")

    assert valve.config.displayType == "switch"
    assert operations(valve) == {"Switch": ("On", "Off"), "Position": ("Set", "Adjust")}
    assert states(replay_states(dialect, "esphome_garden_valve")) == {"246f28a1b2c4": {"Position": 35, "Switch": "On"}}
    assert states(publish(dialect, "garden/valve/irrigation_valve/state", "unknown")) == {}
    route = valve.route
    assert _sent(dialect.encode_control("246f28a1b2c4", route, request("Position", "Set", 50))) == \
        [("garden/valve/irrigation_valve/position/command", "50")]
    assert _sent(dialect.encode_control("246f28a1b2c4", route, request("Switch", "Off", "Off"))) == \
        [("garden/valve/irrigation_valve/command", "CLOSE")]
