"""Issue 35 item 5, the owner exposes what hubd keeps back by rule (CONTRACT sections 6 and 8), pure: a real
rtl_433 door contact whose contact_open is a diagnostic entity (tests/fixtures/homeassistant, with its source) is
listed as kept back with the rule and may be exposed; once its endpointId is in the dialect's selection the dialect
itself exports it as a read-only Switch, after a restart too; a restart button is kept back by a rule no owner lifts.
No broker."""

from __future__ import annotations

import homeassistant_helpers as ha

from hubd.devices.overrides import Override
from hubd.dialects.base import MAINTENANCE_RULE, DeviceGone, Selection, StateReceived
from hubd.owner.edits import parse_edit

CONTACT = "Honeywell-Security-8-702442"
RESTART = "20500de464ec"
CONTACT_TOPIC = "rtl_433/rtl433/devices/Honeywell-Security/8/702442/contact_open"


def test_a_diagnostic_door_contact_is_listed_as_kept_back_by_rule_and_exposable() -> None:
    dialect = ha.make()
    assert ha.announce(dialect, "rtl_433_honeywell_door_contact") == []
    [kept] = dialect.unexported_devices()
    assert kept.endpoint_id == CONTACT and kept.exposable and kept.rule is None
    contact = next(r for r in kept.reasons if "contact_open" in r)
    assert "diagnostic entity (entity_category diagnostic): kept back by rule; expose it if it is a real device " \
           "function" in contact


def test_exposing_the_contact_makes_the_dialect_export_a_read_only_switch_that_reports_its_state() -> None:
    dialect = ha.make()
    ha.announce(dialect, "rtl_433_honeywell_door_contact")
    found = ha.configs(dialect.reconfigure(Selection(exposed=frozenset({CONTACT}))))
    [switch] = found[CONTACT].config.capabilities
    assert (switch.interface, switch.supportedOperations, switch.proactivelyReported) == ("Switch", (), True)
    assert dialect.unexported_devices() == []
    notes = {n.name: n for n in found[CONTACT].origin.entities}
    assert notes[f"binary_sensor.{CONTACT}-contact_open"].exported
    assert "exposed by the owner" in notes[f"binary_sensor.{CONTACT}-contact_open"].reason
    assert not notes[f"sensor.{CONTACT}-B"].exported  # a battery level has no platform interface: still kept back
    [opened] = [i for i in ha.publish(dialect, CONTACT_TOPIC, "1") if isinstance(i, StateReceived)]
    assert [(s.interface, s.value) for s in opened.samples] == [("Switch", "On")]
    [closed] = [i for i in ha.publish(dialect, CONTACT_TOPIC, "0") if isinstance(i, StateReceived)]
    assert [(s.interface, s.value) for s in closed.samples] == [("Switch", "Off")]


def test_keeping_it_back_again_removes_the_device() -> None:
    dialect = ha.make()
    ha.announce(dialect, "rtl_433_honeywell_door_contact")
    dialect.reconfigure(Selection(exposed=frozenset({CONTACT})))
    assert DeviceGone(CONTACT) in dialect.reconfigure(Selection())
    assert [u.endpoint_id for u in dialect.unexported_devices()] == [CONTACT]


def test_an_exposed_contact_stays_exported_after_a_restart_and_its_announcement_again() -> None:
    before = ha.make()
    ha.announce(before, "rtl_433_honeywell_door_contact")
    exported = ha.configs(before.reconfigure(Selection(exposed=frozenset({CONTACT}))))[CONTACT]
    after = ha.make()
    after.reconfigure(Selection(exposed=frozenset({CONTACT})))  # the owner's exposure comes before the first message
    after.restore([(CONTACT, exported.route)])
    again = ha.announce(after, "rtl_433_honeywell_door_contact")
    assert not any(isinstance(i, DeviceGone) for i in again)
    assert after.unexported_devices() == []
    [opened] = [i for i in ha.publish(after, CONTACT_TOPIC, "1") if isinstance(i, StateReceived)]
    assert opened.device_id == CONTACT


def test_a_restart_button_is_kept_back_by_a_rule_no_owner_lifts() -> None:
    dialect = ha.make()
    ha.announce(dialect, "esphome_garagedoor1_restart_button")
    [kept] = dialect.unexported_devices()
    assert kept.endpoint_id == RESTART and not kept.exposable and kept.rule == MAINTENANCE_RULE
    assert "never exported, so that no voice command restarts or erases it" in kept.reasons[0]
    assert not ha.configs(dialect.reconfigure(Selection(exposed=frozenset({RESTART}))))
    assert [u.endpoint_id for u in dialect.unexported_devices()] == [RESTART]


def test_a_config_switch_named_for_a_restart_is_never_exposable() -> None:
    dialect = ha.make()
    device = {"identifiers": ["gw-1"], "name": "Gateway"}
    ha.publish(dialect, "homeassistant/switch/gw-1/restart/config",
               {"name": "Restart gateway", "command_topic": "gw/restart", "state_topic": "gw/restart/state",
                "entity_category": "config", "unique_id": "gw-1-restart", "device": device}, retained=True)
    [kept] = dialect.unexported_devices()
    assert not kept.exposable and kept.rule == MAINTENANCE_RULE
    assert not ha.configs(dialect.reconfigure(Selection(exposed=frozenset({"gw-1"}))))


def test_exposed_true_exposes_what_is_kept_back_only_where_it_is_and_false_keeps_it_back() -> None:
    expose, keep = parse_edit({"exposed": True}), parse_edit({"exposed": False})
    assert expose.selects and keep.selects and not parse_edit({"name": "Lamp"}).selects
    assert expose.apply(Override(), kept_back=True) == Override(revealed=True)
    assert expose.apply(Override()) == Override()  # an exported device: only shown again, nothing else exported
    assert expose.apply(Override(revealed=True)) == Override(revealed=True)
    assert keep.apply(Override(revealed=True)) == Override(hidden=True)
    assert not Override(revealed=True).empty
