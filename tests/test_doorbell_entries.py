"""Issue 33 item 7: a `doorbells` entry that cannot ring is named, never silently ignored (CONTRACT 6): one whose
event the device it names never announces (a trigger *type* or a Tasmota trigger word where the device announces
something else, an action value not in its exposes), with the events it does announce; one that names no device
at all, once the devices are known. Every dialect's real payloads; one shared check (hubd.dialects.doorbells).
Pure: no broker."""

from __future__ import annotations

import logging

import homeassistant_helpers as ha
import pytest
import tasmota_helpers as tasmota
import zigbee2mqtt_helpers as z2m

from hubd.dialects.base import Dialect, Selection
from hubd.dialects.doorbells import DoorbellCheck, findings


def said(*dialects: Dialect, known: bool = True) -> list[str]:
    return findings([(d.name, d.doorbell_report()) for d in dialects], devices_known=known)


def test_zigbee2mqtt_an_action_value_the_button_never_sends_is_named_with_the_values_it_does_send() -> None:
    dialect = z2m.make(doorbells=[{"device": "button", "event": "button_short_release"}])
    z2m.announce(dialect, z2m.entries("aqara_WXKG11LM_button"))
    assert said(dialect) == [
        "doorbells entry {device: 'button', event: 'button_short_release'}: zigbee2mqtt device 'button' never "
        "announces 'button_short_release', so it never rings; it announces 'single', 'double', 'triple', "
        "'quadruple', 'hold', 'release'"]


def test_zigbee2mqtt_an_action_it_sends_is_no_problem_whatever_its_case() -> None:
    dialect = z2m.make(doorbells=[{"device": "button", "event": "SINGLE"}])
    z2m.announce(dialect, z2m.entries("aqara_WXKG11LM_button"))
    assert said(dialect) == []


def test_zigbee2mqtt_a_declared_device_without_any_action_announces_no_press() -> None:
    dialect = z2m.make(doorbells=[{"device": "bulb", "event": "single"}])
    z2m.announce(dialect, z2m.entries("ikea_LED1545G12_bulb"))
    assert said(dialect) == ["doorbells entry {device: 'bulb', event: 'single'}: zigbee2mqtt device 'bulb' never "
                             "announces 'single', so it never rings; it announces no press at all"]


def test_home_assistant_a_trigger_type_where_the_device_announces_a_subtype_is_named() -> None:
    dialect = ha.make(doorbells=[{"device": "FB6A07", "event": "button_short_release"}])
    ha.announce(dialect, "tasmota_button_FB6A07")
    found = said(dialect)
    assert len(found) == 1
    assert "homeassistant device 'FB6A07' never announces 'button_short_release'" in found[0]
    assert "'button_1'" in found[0] and '\'{"TRIG":"SINGLE"}\'' in found[0]


def test_home_assistant_a_subtype_or_an_event_type_it_announces_is_no_problem() -> None:
    dialect = ha.make(doorbells=[{"device": "FB6A07", "event": "button_1"}, {"device": "button", "event": "single"}])
    ha.announce(dialect, "tasmota_button_FB6A07", "z2m_remote_WXKG11LM")
    assert said(dialect) == []


def test_tasmota_a_trigger_word_of_buttons_on_a_device_of_switches_is_named_with_its_switch_actions() -> None:
    dialect = tasmota.make(doorbells=[("Gate", "SINGLE")])
    switch = tasmota.basic_config(dn="Gate", rl=[1], swc=[3, -1], swn=[None, None],
                                  so={**tasmota.basic_config()["so"], "114": 1})
    tasmota.announce(dialect, tasmota.BASIC, switch)
    assert said(dialect) == ["doorbells entry {device: 'Gate', event: 'SINGLE'}: tasmota device 'Gate' never "
                             "announces 'SINGLE', so it never rings; it announces 'OFF', 'ON', 'TOGGLE', 'HOLD'"]


def test_an_entry_that_names_no_device_of_any_dialect_is_named_once_the_devices_are_known() -> None:
    doorbells = [{"device": "button", "event": "single"}, {"device": "Front gate*", "event": "single"}]
    zigbee = z2m.make(doorbells=doorbells)
    z2m.announce(zigbee, z2m.entries("aqara_WXKG11LM_button"))
    discovery = ha.make(doorbells=doorbells)
    ha.announce(discovery, "tasmota_button_FB6A07")
    assert said(zigbee, discovery, known=False) == []
    # `button` names zigbee2mqtt's device only: no dialect's device is named `Front gate*`.
    assert said(zigbee, discovery) == ["doorbells entry {device: 'Front gate*', event: 'single'} names no device "
                                       "hubd knows (by name, identifier or endpointId), so it never rings"]


def test_a_new_selection_forgets_what_the_old_one_matched() -> None:
    dialect = z2m.make(doorbells=[{"device": "button", "event": "press"}])
    z2m.announce(dialect, z2m.entries("aqara_WXKG11LM_button"))
    assert len(said(dialect)) == 1
    dialect.reconfigure(Selection(doorbells=(("button", "single"),)))
    assert said(dialect) == []


class Journal:
    def __init__(self) -> None:
        self.notices: list[tuple[str, str]] = []

    def noticed(self, subject: str, problem: str, at: float) -> None:
        self.notices.append((subject, problem))


def test_the_check_logs_and_lists_each_problem_once_and_again_after_a_reload(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    dialect = z2m.make(doorbells=[{"device": "button", "event": "press"}, {"device": "Front gate", "event": "x"}])
    journal = Journal()
    check = DoorbellCheck([dialect], journal, clock=lambda: now[0], known_after_s=10.0)
    z2m.announce(dialect, z2m.entries("aqara_WXKG11LM_button"))
    with caplog.at_level(logging.WARNING, logger="hubd.dialects.doorbells"):
        first = check.check()
        assert len(first) == 1 and "never announces 'press'" in first[0]
        assert check.check() == []  # said once
        now[0] = 11.0  # the devices are known: the entry naming none is said too
        assert [p for p in check.check()] == [
            "doorbells entry {device: 'Front gate', event: 'x'} names no device hubd knows (by name, identifier or "
            "endpointId), so it never rings"]
        check.say_again()  # SIGHUP
    assert [s for s, _ in journal.notices] == ["doorbells"] * 4
    assert [r.getMessage() for r in caplog.records] == [p for _, p in journal.notices]


def test_a_renamed_zigbee2mqtt_button_is_named_by_its_new_name_only() -> None:
    dialect = z2m.make(doorbells=[{"device": "*button*", "event": "press"}])
    listed = z2m.entries("aqara_WXKG11LM_button")
    z2m.announce(dialect, listed)
    z2m.announce(dialect, [{**listed[0], "friendly_name": "Porch button"}])
    found = said(dialect)
    assert len(found) == 1 and "zigbee2mqtt device 'Porch button'" in found[0]
