"""The zigbee2mqtt dialect over time: availability (the bridge's and each device's), renames, removals,
include/exclude, a restart before bridge/devices, and doorbells (tests/fixtures/zigbee2mqtt). Pure: no broker."""

from __future__ import annotations

import json
from typing import Any

from zigbee2mqtt_helpers import (
    announce,
    availability,
    configs,
    entries,
    fixture,
    gone,
    make,
    presses,
    publish,
    rejected,
    replay_states,
    states,
    unexported,
)

from hubd.dialects.base import AvailabilityReceived, ConfigReceived

WEATHER = "0x0017880104e45522"
BUTTON = "0x0017880104e45520"
BULB = "0x000b57fffec6a5b2"
PLUG = "0x0017880104e45524"
ZIGFRED = "0xf4ce368a38be56a1"
CONTACT = "0x00158d00091e7bd6"
LEAK = "0x00158d00094d5a84"
DOUBLE = "0xcc86ecfffe4e9d25"
OFFICE_SWITCH = "0x00158d00033e8db4"


def suite() -> list[dict[str, Any]]:
    return entries("z2m_2.12.1_testsuite")


# Availability.


def test_the_bridge_going_offline_makes_every_device_unavailable_and_back_online_available() -> None:
    dialect = make()
    announce(dialect, entries("aqara_MCCGQ11LM_contact", "moes_MS-104BZ_dual_switch"))

    offline = publish(dialect, "bridge/state", {"state": "offline"}, retained=True)
    online = publish(dialect, "bridge/state", "online", retained=True)

    endpoints = {CONTACT, DOUBLE, f"{DOUBLE}-state_l2"}
    assert availability(offline) == dict.fromkeys(endpoints, False)
    assert availability(online) == dict.fromkeys(endpoints, True)
    assert publish(dialect, "bridge/state", "online", retained=True) == []


def test_a_device_that_said_offline_stays_offline_when_the_bridge_comes_back() -> None:
    dialect = make()
    announce(dialect, entries("aqara_MCCGQ11LM_contact", "aqara_SJCGQ11LM_leak"))
    publish(dialect, "bridge/state", "online")
    assert availability(publish(dialect, "Leak sensor/availability", {"state": "offline"})) == {LEAK: False}

    publish(dialect, "bridge/state", "offline")
    back = publish(dialect, "bridge/state", {"state": "online"})

    assert availability(back) == {CONTACT: True}
    assert availability(publish(dialect, "Leak sensor/availability", "online")) == {LEAK: True}


def test_a_device_announced_while_the_bridge_is_offline_is_announced_unavailable() -> None:
    dialect = make()
    publish(dialect, "bridge/state", "offline", retained=True)

    inputs = announce(dialect, entries("aqara_MCCGQ11LM_contact"))

    assert [type(i) for i in inputs] == [ConfigReceived, AvailabilityReceived]
    assert availability(inputs) == {CONTACT: False}


def test_retained_availability_and_states_that_arrive_before_the_first_list_are_read_with_it() -> None:
    dialect = make(doorbells=[{"device": "button", "event": "single"}])
    publish(dialect, "bridge/state", {"state": "online"}, retained=True)
    assert publish(dialect, "weather_sensor/availability", {"state": "offline"}, retained=True) == []
    assert publish(dialect, "weather_sensor", {"temperature": 18, "humidity": 50}, retained=True) == []
    assert publish(dialect, "button", {"action": "single"}, retained=True) == []

    inputs = announce(dialect, suite())

    assert availability(inputs)[WEATHER] is False and availability(inputs)[BULB] is True
    assert states(inputs)[WEATHER] == {"Temperature": 18, "Humidity": 50}
    assert presses(inputs) == []  # a retained action is a replay, not a press
    assert publish(dialect, "unknown_group", {"state": "ON"}) == []  # once listed, nothing more is kept


def test_an_availability_that_is_neither_online_nor_offline_is_rejected() -> None:
    dialect = make()
    announce(dialect, entries("aqara_MCCGQ11LM_contact"))

    assert "online/offline" in rejected(publish(dialect, "Contact sensor/availability", "maybe"))[0]
    assert rejected(publish(dialect, "bridge/state", {"state": 1}))
    assert publish(dialect, "Contact sensor/availability", "") == []


# Renames, removals, include/exclude, restarts.


def test_a_rename_keeps_the_endpoint_and_follows_the_new_topic() -> None:
    dialect = make()
    devices = entries("aqara_MCCGQ11LM_contact")
    announce(dialect, devices)
    devices[0]["friendly_name"] = "hall/front door"

    inputs = announce(dialect, devices)

    assert list(configs(inputs)) == [CONTACT] and gone(inputs) == []
    assert configs(inputs)[CONTACT].config.displayName == "hall/front door"
    assert json.loads(configs(inputs)[CONTACT].route.address)["name"] == "hall/front door"
    assert states(publish(dialect, "hall/front door", {"contact": False})) == {CONTACT: {"Switch": "On"}}
    assert publish(dialect, "Contact sensor", {"contact": True}) == []


def test_a_device_that_left_the_list_is_gone_with_its_split_endpoints() -> None:
    dialect = make()
    announce(dialect, entries("moes_MS-104BZ_dual_switch", "aqara_MCCGQ11LM_contact"))

    inputs = announce(dialect, entries("aqara_MCCGQ11LM_contact"))

    assert gone(inputs) == [DOUBLE, f"{DOUBLE}-state_l2"]
    assert configs(inputs) == {}
    assert publish(dialect, "Moes switch double", {"state_l1": "ON"}) == []


def test_an_unchanged_list_announces_nothing_again() -> None:
    dialect = make()
    announce(dialect, suite())

    assert announce(dialect, suite()) == []


def test_include_and_exclude_glob_over_friendly_name_and_ieee_address_and_exclude_wins() -> None:
    dialect = make(include=["*sensor*", "0x0017880104e4552*"], exclude=["weather*"])

    found = configs(announce(dialect, suite()))

    assert sorted(found) == [PLUG]  # weather_sensor: included by name and by address, but excluded
    assert unexported(dialect)["weather_sensor"][0] == "left out by zigbee2mqtt.include/exclude"
    assert sorted(configs(announce(make(include=["POWER_*"]), suite()))) == [PLUG]  # case does not matter


def test_kept_routes_read_states_and_presses_before_the_list_arrives_and_the_list_decides_what_is_left() -> None:
    before = make(doorbells=[{"device": "button", "event": "single"}])
    routes = [(c.device_id, c.route) for c in configs(announce(before, suite())).values()]
    after = make(doorbells=[{"device": "button", "event": "single"}])
    after.restore(routes)

    assert states(publish(after, "weather_sensor", {"temperature": 19.5, "battery": 80})) == \
        {WEATHER: {"Temperature": 19.5}}
    assert presses(publish(after, "button", {"action": "single"})) == [BUTTON]
    assert states(publish(after, "zigfred_plus", {"state_l2": "ON"})) == {f"{ZIGFRED}-state_l2": {"Switch": "On"}}
    inputs = announce(after, [d for d in suite() if d["friendly_name"] != "zigfred_plus"])
    assert sorted(gone(inputs)) == sorted([ZIGFRED, *(f"{ZIGFRED}-state_l{n}" for n in range(2, 8))])
    assert WEATHER in configs(inputs)  # announced again: the registry keeps it when unchanged


# Doorbells.


def test_two_identical_presses_in_a_row_are_two_doorbell_presses() -> None:
    dialect = make(doorbells=[{"device": "button", "event": "single"}])
    button = configs(announce(dialect, entries("aqara_WXKG11LM_button")))[BUTTON]
    assert button.config.capabilities == ()
    assert any(n.exported and "DoorbellPress" in n.reason for n in button.origin.entities)

    first, second = (publish(dialect, "button", fixture("aqara_WXKG11LM_button")["states"][0]["payload"])
                     for _ in range(2))

    assert presses(first) == presses(second) == [BUTTON]


def test_an_empty_action_and_a_retained_replay_never_press() -> None:
    dialect = make(doorbells=[{"device": "button", "event": "single"}])
    announce(dialect, entries("aqara_WXKG11LM_button"))
    _, pressed, cleared = (s["payload"] for s in fixture("aqara_WXKG11LM_button")["states"])

    assert presses(publish(dialect, "button", pressed)) == [BUTTON]
    assert publish(dialect, "button", cleared) == []
    assert publish(dialect, "button", pressed, retained=True) == []


def test_a_doorbell_glob_matches_the_ieee_address_and_other_actions_do_not_press() -> None:
    dialect = make(doorbells=[{"device": "0x00158d00033e8db*", "event": "SINGLE"}])
    announce(dialect, entries("xiaomi_WXKG01LM_button"))

    assert presses(replay_states(dialect, "xiaomi_WXKG01LM_button")) == [OFFICE_SWITCH]
    assert publish(dialect, "Office Desk Switch", {"action": "double"}) == []


def test_a_doorbell_whose_event_the_button_never_sends_is_noted_not_imported() -> None:
    dialect = make(doorbells=[{"device": "Office Desk Switch", "event": "ring"}])

    assert configs(announce(dialect, entries("xiaomi_WXKG01LM_button"))) == {}
    assert "'ring'" in unexported(dialect)["Office Desk Switch"][0]
