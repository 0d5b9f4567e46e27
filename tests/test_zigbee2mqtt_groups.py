"""zigbee2mqtt groups natively (issue 33 item 6): `<base>/bridge/groups` (1.x and 2.x shapes, real payloads in
tests/fixtures/zigbee2mqtt/z2m_groups_living_room.json) as one endpoint per group, `<base>-group-<id>`, with its
members' common capabilities; commands on the group's `/set`, state from its own topic; members stay their own.
Pure: no broker."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from zigbee2mqtt_helpers import (
    announce,
    configs,
    control,
    entries,
    fixture,
    gone,
    make,
    operations,
    publish,
    rejected,
    replay_states,
    states,
    unexported,
)

from hubd.devices.model import Route
from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect

FIXTURE = "z2m_groups_living_room"
BULB = "0x000b57fffec6a5b2"  # IKEA LED1545G12: dimmable, colour temperature
HUE_GO = "0x000b57fffec6a5b4"  # Philips Hue Go: dimmable, colour temperature, colour
GROUP = "zigbee2mqtt-group-1"


def groups() -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = copy.deepcopy(fixture(FIXTURE)["groups"])
    return listed


def living_room() -> Zigbee2MqttDialect:
    dialect = make()
    announce(dialect, entries(FIXTURE))
    publish(dialect, "bridge/groups", groups(), retained=True)
    return dialect


def test_a_group_of_bulbs_is_one_light_endpoint_with_the_capabilities_all_its_bulbs_have() -> None:
    dialect = make()
    announce(dialect, entries(FIXTURE))
    found = configs(publish(dialect, "bridge/groups", groups(), retained=True))
    assert set(found) == {GROUP}
    group = found[GROUP]
    assert group.config.displayType == "light"
    assert group.config.displayName == "Living room"
    # The Hue Go has Color, the IKEA bulb has not: the group has what both have.
    assert set(operations(group)) == {"Switch", "Brightness", "ColorTemperature"}


def test_a_group_that_arrives_before_the_device_list_is_built_when_the_devices_come() -> None:
    dialect = make()
    assert configs(publish(dialect, "bridge/groups", groups(), retained=True)) == {}
    found = configs(announce(dialect, entries(FIXTURE)))
    assert {BULB, HUE_GO, GROUP} <= set(found)


def test_the_members_stay_their_own_endpoints() -> None:
    dialect = make()
    found = configs(announce(dialect, entries(FIXTURE)))
    assert {BULB, HUE_GO} <= set(found)
    later = publish(dialect, "bridge/groups", groups(), retained=True)
    assert gone(later) == []
    assert dialect.doorbell_events(BULB) == ()


def test_groups_without_members_or_imported_members_are_listed_as_not_exported_with_why() -> None:
    dialect = living_room()
    left_out = unexported(dialect)
    assert left_out["group_2"] == ("a group without members",)
    assert left_out["switch_group"] == ("none of its members is imported by hubd",)
    assert {u.endpoint_id for u in dialect.unexported_devices() if u.name == "group_2"} == {"zigbee2mqtt-group-2"}


def test_a_group_entry_of_zigbee2mqtt_1x_with_a_number_for_its_name_is_a_problem_and_the_rest_is_read() -> None:
    dialect = make()
    announce(dialect, entries(FIXTURE))
    inputs = publish(dialect, "bridge/groups", groups(), retained=True)
    assert any("group 99: friendly_name 99" in r for r in rejected(inputs))
    assert GROUP in configs(inputs)


def test_a_group_with_a_member_that_is_no_light_has_nothing_in_common_and_says_so() -> None:
    dialect = make()
    listed = [*entries(FIXTURE), *entries("aqara_MCCGQ11LM_contact")]
    contact = listed[-1]["ieee_address"]
    announce(dialect, listed)
    mixed = groups()
    mixed[0]["members"].append({"endpoint": 1, "ieee_address": contact})
    assert GROUP not in configs(publish(dialect, "bridge/groups", mixed, retained=True))
    assert "no capability in common" in unexported(dialect)["Living room"][0]


def test_the_group_state_topic_reports_the_group_endpoint_and_not_its_members() -> None:
    dialect = living_room()
    found = states(replay_states(dialect, FIXTURE))
    assert found[GROUP]["Switch"] == "On"
    assert found[GROUP]["Brightness"] == 100
    assert BULB not in found and HUE_GO not in found


def test_a_group_command_goes_to_the_group_set_topic() -> None:
    dialect = living_room()
    item = _config()
    assert control(dialect, item, "Switch", "On", "On") == [("zigbee2mqtt/Living room/set", {"state": "ON"})]
    assert control(dialect, item, "Brightness", "Set", 50) == \
        [("zigbee2mqtt/Living room/set", {"brightness": 127})]


def test_a_renamed_group_keeps_its_endpoint_and_commands_follow_the_new_name() -> None:
    dialect = living_room()
    item = _config()
    renamed = groups()
    renamed[0]["friendly_name"] = "Lounge"
    found = configs(publish(dialect, "bridge/groups", renamed, retained=True))
    assert found[GROUP].config.displayName == "Lounge"
    assert control(dialect, item, "Switch", "Off", "Off") == [("zigbee2mqtt/Lounge/set", {"state": "OFF"})]
    assert states(publish(dialect, "Lounge", {"state": "ON"}))[GROUP]["Switch"] == "On"


def test_a_member_removed_changes_the_group_capabilities_and_a_deleted_group_is_gone() -> None:
    dialect = living_room()
    only_hue = groups()
    only_hue[0]["members"] = [{"endpoint": 11, "ieee_address": HUE_GO}]
    found = configs(publish(dialect, "bridge/groups", only_hue, retained=True))
    assert "Color" in operations(found[GROUP])
    inputs = publish(dialect, "bridge/groups", groups()[1:], retained=True)
    assert gone(inputs) == [GROUP]
    assert dialect.guards("zigbee2mqtt/Living room") is None


def test_include_and_exclude_apply_to_a_group_friendly_name() -> None:
    dialect = make(exclude=["Living*"])
    announce(dialect, entries(FIXTURE))
    assert GROUP not in configs(publish(dialect, "bridge/groups", groups(), retained=True))
    assert unexported(dialect)["Living room"] == ("left out by zigbee2mqtt.include/exclude",)


def test_a_group_kept_from_the_last_run_reads_its_state_and_is_not_dropped_by_the_device_list_alone() -> None:
    kept = _config()
    dialect = make()
    dialect.restore([(GROUP, kept.route)])
    assert states(publish(dialect, "Living room", {"state": "ON"}))[GROUP]["Switch"] == "On"
    assert GROUP not in gone(announce(dialect, entries(FIXTURE)))
    assert gone(publish(dialect, "bridge/groups", [], retained=True)) == [GROUP]


def test_the_group_state_topic_is_guarded_and_its_set_topic_is_the_dialects_own() -> None:
    dialect = living_room()
    assert dialect.guards("zigbee2mqtt/Living room") is not None
    assert dialect.guards("zigbee2mqtt/Living room/set") is None
    assert dialect.owns_command_topic("zigbee2mqtt/Living room/set")


def _config() -> Any:
    """The group's config as a dialect announces it (its route is what hubd keeps and commands with)."""
    fresh = make()
    announce(fresh, entries(FIXTURE))
    item = configs(publish(fresh, "bridge/groups", groups(), retained=True))[GROUP]
    assert isinstance(item.route, Route)
    return item


def test_a_group_list_past_the_limit_or_not_json_changes_nothing_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    dialect = living_room()
    assert rejected(publish(dialect, "bridge/groups", "[{not json", retained=True))[0].startswith(
        "zigbee2mqtt/bridge/groups: not the JSON group list")
    monkeypatch.setattr(dialect, "_max_list_bytes", 100)  # zigbee2mqtt.max_devices_bytes, below its floor
    inputs = publish(dialect, "bridge/groups", groups()[1:], retained=True)
    assert gone(inputs) == [] and "hubd reads at most 100" in rejected(inputs)[0]
    assert states(publish(dialect, "Living room", {"state": "ON"}))[GROUP]["Switch"] == "On"
