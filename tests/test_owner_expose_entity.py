"""Issue 35 item 5, an entity kept back by rule on a device that IS exported (CONTRACT sections 6 and 8), pure: a
rtl_433 door sensor with a thermometer (tests/fixtures/homeassistant/rtl_433_door_temperature.json, with its source)
exports its temperature, while its reed_open is `entity_category: diagnostic`. The contact is listed as the split-off
endpoint it would become, `<device id>-<object_id>`, with why; once that endpointId is in the dialect's selection it is
exported there alone as a read-only Switch (the device's own endpoint unchanged), after a restart too; out of the
selection again, only that split-off is gone. A restart button of an exported device is listed with the rule no owner
lifts. No broker."""

from __future__ import annotations

import homeassistant_helpers as ha

from hubd.dialects.base import MAINTENANCE_RULE, ConfigReceived, DeviceGone, Selection, StateReceived

DEVICE = "Generic-Door-1-4242"
CONTACT = f"{DEVICE}-{DEVICE}-reed_open"  # <device id>-<object_id>, the object_id of its discovery topic
REED_TOPIC = "rtl_433/rtl433/devices/Generic-Door/1/4242/reed_open"
TEMPERATURE_TOPIC = "rtl_433/rtl433/devices/Generic-Door/1/4242/temperature_C"


def test_the_diagnostic_contact_of_an_exported_thermometer_is_listed_as_its_own_exposable_split_off() -> None:
    dialect = ha.make()
    exported = ha.configs(ha.announce(dialect, "rtl_433_door_temperature"))
    assert list(exported) == [DEVICE]
    [kept] = dialect.unexported_devices()
    assert kept.endpoint_id == CONTACT and kept.exposable and kept.rule is None
    assert kept.reasons == (f"binary_sensor.{DEVICE}-reed_open: diagnostic entity (entity_category diagnostic): kept "
                            "back by rule; expose it if it is a real device function",)
    assert kept.topic == f"homeassistant/binary_sensor/{DEVICE}/{DEVICE}-reed_open/config"


def test_exposing_the_split_off_exports_only_the_contact_as_a_read_only_switch_beside_the_device() -> None:
    dialect = ha.make()
    device = ha.configs(ha.announce(dialect, "rtl_433_door_temperature"))[DEVICE]
    changed = dialect.reconfigure(Selection(exposed=frozenset({CONTACT})))
    found = ha.configs(changed)
    assert sorted(found) == [DEVICE, CONTACT]  # the device's own: its notes only (the contact's moved to its own)
    assert found[DEVICE].config.canonical() == device.config.canonical()
    assert found[DEVICE].route == device.route
    assert not any(isinstance(i, DeviceGone) for i in changed)
    [switch] = found[CONTACT].config.capabilities
    assert (switch.interface, switch.supportedOperations, switch.proactivelyReported) == ("Switch", (), True)
    assert dialect.unexported_devices() == []
    assert [c.interface for c in device.config.capabilities] == ["Temperature"]
    [opened] = [i for i in ha.publish(dialect, REED_TOPIC, "1") if isinstance(i, StateReceived)]
    assert opened.device_id == CONTACT and [(s.interface, s.value) for s in opened.samples] == [("Switch", "On")]
    [warm] = [i for i in ha.publish(dialect, TEMPERATURE_TOPIC, "21.4") if isinstance(i, StateReceived)]
    assert warm.device_id == DEVICE


def test_keeping_the_split_off_back_again_removes_only_it() -> None:
    dialect = ha.make()
    ha.announce(dialect, "rtl_433_door_temperature")
    dialect.reconfigure(Selection(exposed=frozenset({CONTACT})))
    again = dialect.reconfigure(Selection())
    assert [i for i in again if isinstance(i, DeviceGone)] == [DeviceGone(CONTACT)]
    assert [i.device_id for i in again if isinstance(i, ConfigReceived)] in ([], [DEVICE])
    assert DEVICE in dialect._book.endpoints
    assert [u.endpoint_id for u in dialect.unexported_devices()] == [CONTACT]


def test_an_exposed_split_off_stays_exported_after_a_restart_and_its_announcement_again() -> None:
    before = ha.make()
    ha.announce(before, "rtl_433_door_temperature")
    ha.configs(before.reconfigure(Selection(exposed=frozenset({CONTACT}))))
    routes = [(e.endpoint_id, e.route) for e in before._book.endpoints.values()]
    after = ha.make()
    after.reconfigure(Selection(exposed=frozenset({CONTACT})))  # the owner's exposure comes before the first message
    after.restore(routes)
    again = ha.announce(after, "rtl_433_door_temperature")
    assert not any(isinstance(i, DeviceGone) for i in again)
    assert sorted(after._book.endpoints) == [DEVICE, CONTACT]
    assert after.unexported_devices() == []
    [opened] = [i for i in ha.publish(after, REED_TOPIC, "1") if isinstance(i, StateReceived)]
    assert opened.device_id == CONTACT


def test_a_restart_button_of_an_exported_device_is_listed_with_the_rule_no_owner_lifts() -> None:
    dialect = ha.make()
    device = {"identifiers": ["gw-1"], "name": "Gateway"}
    ha.publish(dialect, "homeassistant/binary_sensor/gw-1/door/config",
               {"name": "Door", "state_topic": "gw/door", "device_class": "door", "unique_id": "gw-1-door",
                "device": device}, retained=True)
    ha.publish(dialect, "homeassistant/button/gw-1/restart/config",
               {"name": "Restart", "command_topic": "gw/restart", "entity_category": "config",
                "unique_id": "gw-1-restart", "device": device}, retained=True)
    [kept] = dialect.unexported_devices()
    assert kept.endpoint_id == "gw-1-restart" and not kept.exposable and kept.rule == MAINTENANCE_RULE
    assert not ha.configs(dialect.reconfigure(Selection(exposed=frozenset({"gw-1-restart"}))))
    assert sorted(dialect._book.endpoints) == ["gw-1"]
