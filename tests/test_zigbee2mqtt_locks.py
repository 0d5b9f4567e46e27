"""zigbee2mqtt locks tell the truth (natively): On only when fully locked; `lock_state` not_fully_locked, jammed or
any state not understood is Off, the lock unreachable and a problem naming it, until it says locked or unlocked.
The Danalock's exposes are zigbee-herdsman-converters' (tests/fixtures/zigbee2mqtt). Pure: no broker."""

from __future__ import annotations

import pytest
from zigbee2mqtt_helpers import announce, availability, entries, make, publish, rejected, states

from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect

LOCK = "0x000b57fffe0d4c01"
NAME = "Front door lock"


def _locked() -> Zigbee2MqttDialect:
    dialect = make()
    announce(dialect, entries("danalock_V3-BTZB_lock"))
    publish(dialect, "bridge/state", "online")
    assert states(publish(dialect, NAME, {"state": "LOCK", "lock_state": "locked"})) == {LOCK: {"Switch": "On"}}
    return dialect


@pytest.mark.parametrize("actual", ["not_fully_locked", "jammed", "motor_blocked", "unknown"])
def test_a_lock_not_fully_locked_is_off_unreachable_and_a_problem_naming_it(actual: str) -> None:
    dialect = _locked()

    found = publish(dialect, NAME, {"state": "LOCK", "lock_state": actual})

    assert states(found) == {LOCK: {"Switch": "Off"}}
    assert availability(found) == {LOCK: False}
    assert any(NAME in why and actual in why for why in rejected(found))


def test_a_lock_is_reachable_again_when_it_locks_and_its_state_alone_never_says_locked_over_lock_state() -> None:
    dialect = _locked()
    publish(dialect, NAME, {"state": "LOCK", "lock_state": "not_fully_locked"})

    again = publish(dialect, NAME, {"state": "LOCK", "lock_state": "locked"})
    assert states(again) == {LOCK: {"Switch": "On"}} and availability(again) == {LOCK: True}
    opened = publish(dialect, NAME, {"state": "LOCK", "lock_state": "unlocked"})
    assert states(opened) == {LOCK: {"Switch": "Off"}} and availability(opened) == {}


def test_a_faulted_lock_stays_unreachable_when_the_bridge_comes_back() -> None:
    dialect = _locked()
    publish(dialect, NAME, {"state": "UNLOCK", "lock_state": "not_fully_locked"})

    assert availability(publish(dialect, "bridge/state", "offline")) == {}
    assert availability(publish(dialect, "bridge/state", "online")) == {}  # still not fully locked
    assert availability(publish(dialect, NAME, {"state": "LOCK", "lock_state": "locked"})) == {LOCK: True}


def test_a_lock_without_lock_state_reports_its_state_and_a_state_it_does_not_declare_is_a_fault() -> None:
    device = entries("danalock_V3-BTZB_lock")
    lock = next(e for e in device[0]["definition"]["exposes"] if e.get("type") == "lock")
    lock["features"] = [f for f in lock["features"] if f["name"] != "lock_state"]
    dialect = make()
    announce(dialect, device)
    publish(dialect, "bridge/state", "online")

    assert states(publish(dialect, NAME, {"state": "LOCK"})) == {LOCK: {"Switch": "On"}}
    found = publish(dialect, NAME, {"state": "JAMMED"})
    assert states(found) == {LOCK: {"Switch": "Off"}} and availability(found) == {LOCK: False}
