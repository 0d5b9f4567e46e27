"""The Shelly dialect's decoding, on real payloads (tests/fixtures/shelly): Gen2+ found on `<id>/online` and asked
over RPC, its answers made endpoints, its notifications and status topics read, its inputs as doorbells; Gen1 from
`shellies/announce` and its topics; bad messages refused with the field named; the device left to this import when
Home Assistant discovery announces it too."""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest
from shelly_helpers import (
    ASKED,
    REPLIES,
    TWO_PM,
    answer,
    asked,
    configs,
    discover,
    fixture,
    make,
    messages,
    presses,
    publish,
    rejected,
    states,
)

from hubd.config.model import ShellyConfig
from hubd.devices.model import Route
from hubd.dialects.base import Announced, AvailabilityReceived, DeviceGone, Selection
from hubd.dialects.shelly.dialect import ShellyDialect
from hubd.dialects.shelly.parts import Address, Component, address

TWO = fixture("ha_2pm_gen3")
COVER = fixture("ha_2pm_gen3_cover")
NOTES = fixture("asnowfix_notifications")["messages"]
PLUS1 = "shellyplus1-b8d61a85ed58"


def make_bounded(devices: int) -> ShellyDialect:
    """A dialect that imports at most `devices` devices."""
    return ShellyDialect(ShellyConfig(enabled=True), [], client_id="hubd", max_devices=devices)


def with_button(device: dict[str, Any]) -> dict[str, Any]:
    """The device with its input 0 set to a button (as the owner sets it in the device's settings)."""
    changed = copy.deepcopy(device)
    changed["config"]["input:0"]["type"] = "button"
    return changed


def as_plus1(device: dict[str, Any]) -> dict[str, Any]:
    """The 2PM's answers given the Plus 1 of the captured notifications (its id and MAC, a Plus 1's model)."""
    changed = copy.deepcopy(device)
    changed["shelly"].update(id=PLUS1, mac="B8D61A85ED58", model="SNSW-001X16EU", app="Plus1", name=None)
    changed["config"] = {k: v for k, v in changed["config"].items() if k != "switch:1"}
    changed["status"] = {k: v for k, v in changed["status"].items() if k != "switch:1"}
    return changed


def test_a_gen2_device_saying_online_is_asked_who_it_is_on_its_own_rpc_topic_with_hubds_src() -> None:
    dialect = make()
    assert dialect.claims(f"{TWO_PM}/online") and not dialect.claims("kitchen/online")
    assert publish(dialect, f"{TWO_PM}/online", "true", retained=True) == []
    assert dialect.pending_subscriptions() == [(f"{TWO_PM}/status/+", 1)]
    sent = dialect.requests()  # questions to the device, not announcements: sent once the batch is subscribed
    frames = [json.loads(m.payload) for m in sent]
    assert {m.topic for m in sent} == {f"{TWO_PM}/rpc"}
    assert [f["method"] for f in frames] == ["Shelly.GetDeviceInfo", "Shelly.GetConfig", "Shelly.GetStatus"]
    assert {f["src"] for f in frames} == {"hubd-hubd"}
    assert dialect.requests() == []  # asked once a connection
    assert publish(dialect, f"{TWO_PM}/online", "true", retained=True) == [] and dialect.requests() == []
    # The announcements are only what every Gen1 device on the bus hears, once a connection.
    assert [(m.topic, m.payload) for m in dialect.announcements()] == [("shellies/command", b"announce"),
                                                                      ("shellies/command", b"update")]
    assert dialect.announcements() == []
    assert (REPLIES, 1) in dialect.subscriptions()  # a new connection: Gen1 asked again
    assert [m.payload for m in dialect.announcements()] == [b"announce", b"update"]


def test_a_device_saying_its_config_changed_again_and_again_has_at_most_three_questions_out() -> None:
    dialect = make()
    discover(dialect, TWO)
    changed = {"src": TWO_PM, "method": "NotifyEvent",
               "params": {"events": [{"component": "sys", "event": "config_changed"}]}}
    publish(dialect, f"{TWO_PM}/events/rpc", changed)
    requests = asked(dialect)
    assert [f["method"] for _, f in requests] == list(ASKED)
    for _ in range(5):  # unanswered yet: the answers will say the new config
        publish(dialect, f"{TWO_PM}/events/rpc", changed)
        assert asked(dialect) == []
    answer(dialect, TWO, requests)
    publish(dialect, f"{TWO_PM}/events/rpc", changed)  # answered: a new change is asked about again
    assert len(asked(dialect)) == 3


def test_a_2pm_gen3s_answers_make_the_device_and_its_second_switch_named_by_the_owner() -> None:
    inputs = discover(make(), TWO)
    found = configs(inputs)
    assert set(found) == {TWO_PM, f"{TWO_PM}-switch-1"}
    own, second = found[TWO_PM], found[f"{TWO_PM}-switch-1"]
    assert (own.config.displayName, own.config.displayType) == ("Test Name", "switch")
    assert second.config.displayName == "Test Name Two"
    assert {c.interface for c in own.config.capabilities} == {"Switch"}
    assert own.config.additionalInfo["model"] == "S3SW-002P16EU"
    assert states(inputs) == {TWO_PM: {"Switch": "Off"}, f"{TWO_PM}-switch-1": {"Switch": "Off"}}
    assert AvailabilityReceived(TWO_PM, True) in inputs
    assert any(n.name == "input:0" and not n.exported for n in own.origin.entities)


def test_the_answers_may_come_in_any_order() -> None:
    dialect = make()
    publish(dialect, f"{TWO_PM}/online", "true")
    inputs = answer(dialect, TWO, asked(dialect), order=("Shelly.GetStatus", "Shelly.GetConfig",
                                                          "Shelly.GetDeviceInfo"))
    assert set(configs(inputs)) == {TWO_PM, f"{TWO_PM}-switch-1"}


def test_a_device_without_a_name_is_named_after_its_model_never_its_id() -> None:
    unnamed = copy.deepcopy(TWO)
    unnamed["shelly"]["name"] = None
    found = configs(discover(make(), unnamed))
    assert found[TWO_PM].config.displayName == "Shelly Two PM Gen Three"
    assert "named after its model" in found[TWO_PM].origin.naming
    assert found[f"{TWO_PM}-switch-1"].config.displayName == "Shelly Two PM Gen Three Two"


def test_a_switch_with_its_own_name_names_its_endpoint() -> None:
    named = copy.deepcopy(TWO)
    named["config"]["switch:1"]["name"] = "Porch light 2"
    found = configs(discover(make(), named))
    assert found[f"{TWO_PM}-switch-1"].config.displayName == "Porch light Two"


def test_a_captured_notify_status_reports_the_switch_that_changed() -> None:
    dialect = make()
    discover(dialect, as_plus1(TWO))
    topic, payload = NOTES[0]["topic"], json.dumps(NOTES[0]["payload"])
    assert states(publish(dialect, topic, payload)) == {PLUS1: {"Switch": "On"}}


def test_a_notify_status_of_a_switchs_temperature_alone_reports_nothing() -> None:
    dialect = make()
    pro3 = "shellypro3-a0dd6ca1c588"
    device = copy.deepcopy(TWO)
    device["shelly"].update(id=pro3)
    discover(dialect, device)
    assert publish(dialect, NOTES[2]["topic"], json.dumps(NOTES[2]["payload"])) == []


def test_an_input_press_rings_only_when_the_device_is_declared_a_doorbell_and_only_its_event() -> None:
    plain = make()
    discover(plain, with_button(as_plus1(TWO)))
    assert plain.doorbell_events(PLUS1) == ("single_push", "double_push", "triple_push", "long_push", "btn_down",
                                            "btn_up")
    press = json.dumps(NOTES[1]["payload"])
    assert presses(publish(plain, NOTES[1]["topic"], press)) == []

    bell = make(doorbells=[(PLUS1, "single_push")])
    discover(bell, with_button(as_plus1(TWO)))
    assert presses(publish(bell, NOTES[1]["topic"], press)) == [PLUS1]
    assert presses(publish(bell, NOTES[1]["topic"], press, retained=True)) == []
    long = press.replace("single_push", "long_push")
    assert presses(publish(bell, NOTES[1]["topic"], long)) == []


def test_a_custom_prefix_is_found_by_a_notification_whose_src_is_a_shelly_id() -> None:
    dialect = make()
    assert dialect.claims("garage/events/rpc") and not dialect.claims("garage/status/switch:0")
    publish(dialect, "garage/events/rpc", json.dumps(NOTES[0]["payload"]))
    assert {t for t, _ in asked(dialect)} == {"garage/rpc"}
    assert not make().claims("garage/online")


def test_a_gen2_device_whose_prefix_is_under_shellies_is_found_by_its_notifications() -> None:
    dialect = make()
    captured = messages("plus1pm_shellies_prefix")
    assert publish(dialect, *captured[0]) == [] and publish(dialect, *captured[1]) == []
    requests = asked(dialect)
    assert {t for t, _ in requests} == {"shellies/plus1pm/rpc"}
    device = copy.deepcopy(as_plus1(TWO))
    device["shelly"].update(id="shellyplus1pm-4417939341dc", model="SNSW-001P16EU", app="Plus1PM")
    found = configs(answer(dialect, device, requests))
    assert found["shellyplus1pm-4417939341dc"].config.displayName == "Shelly Plus One PM"
    inputs = [i for topic, payload in captured[2:] for i in publish(dialect, topic, payload)]
    assert [s for i in inputs for s in states([i]).values()] == [{"Switch": "Off"}, {"Switch": "On"}, {"Switch": "On"}]
    assert inputs[-1] == AvailabilityReceived("shellyplus1pm-4417939341dc", False) and rejected(inputs) == []
    assert dialect.owns_command_topic("shellies/plus1pm/rpc")


def test_a_bus_naming_ever_new_shelly_ids_gets_at_most_max_devices_questions() -> None:
    dialect = make_bounded(2)
    for n in range(5):
        publish(dialect, f"shellyplus1-00000000000{n}/online", "true")
    assert len({t for t, _ in asked(dialect)}) == 2
    assert len(dialect.pending_subscriptions()) == 2


def test_fake_ids_answering_errors_connection_after_connection_leave_at_most_max_devices_listed_and_one_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    # Each connection asks anew (up to max devices); what answered an error is listed left out. Without a bound the
    # list (the status and devices pages) grew by max devices a reconnection, and each fake id past the cap logged
    # a line of its own.
    dialect = make_bounded(3)
    for connection in range(4):
        dialect.subscriptions()
        with caplog.at_level(logging.WARNING, logger="hubd.dialects.shelly.dialect"):
            caplog.clear()
            for n in range(10):
                publish(dialect, f"shellyplus1-{connection:02x}00000000{n:02x}/online", "true")
            assert len([r for r in caplog.records if "not asked" in r.getMessage()]) == 1
        for topic, frame in asked(dialect):
            error = {"id": frame["id"], "src": topic.removesuffix("/rpc"), "error": {"code": -1, "message": "no"}}
            publish(dialect, REPLIES, error)
        assert len(dialect.unexported_devices()) <= 3
    assert {u.endpoint_id[-4:] for u in dialect.unexported_devices()} == {"0000", "0001", "0002"}  # the last asked
    assert any(u.endpoint_id.startswith("shellyplus1-03") for u in dialect.unexported_devices())


def test_a_flood_of_notifications_at_a_prefix_hubd_may_not_ask_logs_one_line_a_connection(
        caplog: pytest.LogCaptureFixture) -> None:
    # `hubd/rpc` is under hubd's own topics, `hubd-hubd/rpc` its reply topic: hubd never asks there, and said so once
    # per message.
    dialect = make()
    notify = {"src": TWO_PM, "method": "NotifyStatus", "params": {"switch:0": {"output": True}}}
    for _ in range(2):
        dialect.subscriptions()
        with caplog.at_level(logging.WARNING, logger="hubd.dialects.shelly.dialect"):
            caplog.clear()
            for _ in range(500):
                assert publish(dialect, "hubd-hubd/events/rpc", notify) == []
                assert publish(dialect, "hubd/events/rpc", notify) == []
            said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2 and all("not asked who it is" in line for line in said), said
        assert asked(dialect) == []


def test_a_cover_without_position_control_opens_closes_and_stops() -> None:
    found = configs(discover(make(), COVER))
    cover = found[TWO_PM]
    assert cover.config.displayType == "curtain"
    assert {c.interface for c in cover.config.capabilities} == {"Switch", "MotionSwitch"}


def test_availability_follows_online() -> None:
    dialect = make()
    discover(dialect, TWO)
    gone = publish(dialect, f"{TWO_PM}/online", "false")
    assert gone == [AvailabilityReceived(TWO_PM, False), AvailabilityReceived(f"{TWO_PM}-switch-1", False)]
    assert rejected(publish(dialect, f"{TWO_PM}/online", "maybe")) == \
        [f"{TWO_PM}/online: 'maybe' is neither 'true' nor 'false'"]


def test_status_topics_of_a_restored_plus_ht_report_temperature_and_humidity() -> None:
    dialect = make()
    prefix = "shellyht-livingroom"
    where = Address("shellyplusht-aabbccddeeff", 2, prefix, (Component("temperature", 0, "temperature"),
                                                               Component("humidity", 0, "humidity")))
    dialect.restore([("shellyplusht-aabbccddeeff", Route("shelly", address(where)))])
    inputs = [i for topic, payload in messages("jhnul_plus_ht_status") for i in publish(dialect, topic, payload)]
    assert states(inputs) == {"shellyplusht-aabbccddeeff": {"Temperature": 20.1, "Humidity": 57}}
    assert (f"{prefix}/status/+", 1) in dialect.subscriptions()


def test_a_gen1_shelly_1_is_imported_from_its_announcement_and_relay_topic() -> None:
    dialect = make()
    inputs = [i for topic, payload in messages("gen1_messages")[:7] for i in publish(dialect, topic, payload)]
    found = configs(inputs)
    assert set(found) == {"shelly1"}
    assert (found["shelly1"].config.displayName, found["shelly1"].config.displayType) == ("Shelly One", "switch")
    assert [s for i in inputs if not isinstance(i, type(found["shelly1"])) for s in states([i]).values()] == \
        [{"Switch": "Off"}, {"Switch": "On"}]
    assert inputs[-1] == AvailabilityReceived("shelly1", False)


def test_a_gen1_input_event_rings_once_per_event_count() -> None:
    dialect = make(doorbells=[("shelly1", "S")])
    for topic, payload in messages("gen1_messages")[:6]:
        publish(dialect, topic, payload)
    topic, press = messages("gen1_messages")[7]
    assert presses(publish(dialect, topic, press)) == ["shelly1"]
    assert presses(publish(dialect, topic, press)) == []  # the same count again: the device's periodic update
    assert dialect.doorbell_events("shelly1") == ("S", "SS", "SSS", "L", "SL", "LS")


def test_a_gen1_h_and_t_reports_temperature_and_humidity_and_not_its_battery() -> None:
    dialect = make()
    inputs = [i for topic, payload in messages("gen1_messages")[8:12] for i in publish(dialect, topic, payload)]
    found = configs(inputs)
    assert found["shellyht-123456"].config.displayName == "Shelly H and T"
    assert states(inputs) == {"shellyht-123456": {"Temperature": 29.6, "Humidity": 40}}


def test_bad_messages_are_refused_naming_the_field() -> None:
    dialect = make()
    assert rejected(publish(dialect, "shellies/announce", {"id": "shelly1-ABCDEF", "model": "SHSW-1"})) == \
        ["shellies/announce: mac is None, not a text; a Gen1 announcement has id, model and mac"]
    discover(dialect, TWO)
    bad = {"src": TWO_PM, "method": "NotifyStatus", "params": {"switch:0": {"output": "yes"}}}
    assert rejected(publish(dialect, f"{TWO_PM}/events/rpc", bad)) == \
        [f"{TWO_PM}/events/rpc: switch:0.output is 'yes', not true or false"]
    assert rejected(publish(dialect, f"{TWO_PM}/events/rpc", "[1")) == \
        [f"{TWO_PM}/events/rpc: not JSON: Expecting ',' delimiter: line 1 column 3 (char 2)"]
    assert publish(dialect, "shellies/shellyswitch-559F55/relay/power", "0.00") == []  # a Shelly 2's, no component


def test_component_numbers_that_are_not_ascii_digits_are_no_components_and_never_fail_the_dialect() -> None:
    # `"²".isdigit()` is true, but int("²") raises; "١" (Arabic-Indic one) and "01" would alias component 1.
    dialect = make()
    for topic, payload in messages("gen1_messages")[:7]:
        publish(dialect, topic, payload)
    for number in ("²", "١", "01", "٠"):
        for sub in ("", "/status"):
            assert publish(dialect, f"shellies/shelly1/color/{number}{sub}", "on") == []
            assert publish(dialect, f"shellies/shelly1/relay/{number}{sub}", "on") == []
    hostile = copy.deepcopy(TWO)
    for key in ("switch:²", "switch:١", "switch:01", "light:٣"):
        hostile["config"][key] = {"id": 1, "name": "alias"}
        hostile["status"][key] = {"id": 1, "output": True}
    found = configs(discover(dialect, hostile))
    assert set(found) == {TWO_PM, f"{TWO_PM}-switch-1"}  # the device as it is, no component of the odd keys
    assert found[f"{TWO_PM}-switch-1"].config.displayName == configs(discover(make(), TWO))[
        f"{TWO_PM}-switch-1"].config.displayName


def test_an_rpc_error_leaves_the_device_out_with_the_reason() -> None:
    dialect = make()
    publish(dialect, f"{TWO_PM}/online", "true")
    request = asked(dialect)[0][1]
    refused = publish(dialect, REPLIES, {"id": request["id"], "src": TWO_PM, "dst": "hubd-hubd",
                                         "error": {"code": 401, "message": "unauthorized"}})
    assert "unauthorized" in rejected(refused)[0]
    assert [u.reasons for u in dialect.unexported_devices()] == \
        [("Shelly.GetDeviceInfo answered an error: unauthorized",)]


def test_exclude_drops_the_device_and_lists_it_left_out() -> None:
    dialect = make()
    discover(dialect, TWO)
    gone = dialect.reconfigure(Selection(exclude=("Test*",)))
    assert gone == [DeviceGone(TWO_PM), DeviceGone(f"{TWO_PM}-switch-1")]
    assert [(u.endpoint_id, u.reasons) for u in dialect.unexported_devices()] == \
        [(TWO_PM, ("left out by shelly.include/exclude",))]
    assert set(configs(dialect.reconfigure(Selection()))) == {TWO_PM, f"{TWO_PM}-switch-1"}


def test_a_gen1_device_left_out_leaves_its_topics_to_home_assistant_discovery() -> None:
    dialect = make(exclude=["shelly1"])
    for topic, payload in messages("gen1_messages")[:3]:
        publish(dialect, topic, payload)
    assert not dialect.claims("shellies/shelly1/relay/0") and dialect.claims("shellies/shelly1/announce")
    assert dialect.claims("shellies/shellyht-123456/sensor/temperature")
    assert configs(dialect.reconfigure(Selection())) == {}  # its relay unheard: it comes with its next update
    assert set(configs(publish(dialect, *messages("gen1_messages")[2]))) == {"shelly1"}


def test_a_device_home_assistant_discovery_announces_too_is_left_to_this_import() -> None:
    dialect = make()
    script = fixture("script_discovery_plus1")["configs"][0]["payload"]
    announced = Announced("", (script["device"]["ids"],), (), (script["~"],))
    assert not dialect.imports_natively(announced)
    before = dialect.native_generation()
    discover(dialect, as_plus1(TWO))
    assert dialect.imports_natively(announced) and dialect.native_generation() != before
    by_mac = Announced("", ("B8D61A85ED58",), (), ())
    assert dialect.imports_natively(by_mac)


def test_no_command_goes_where_shelly_devices_are_read_from() -> None:
    dialect = make()
    discover(dialect, TWO)
    assert dialect.guards(f"{TWO_PM}/status/switch:0") is not None
    assert dialect.guards(f"{TWO_PM}/online") is not None and dialect.guards("shellies/shelly1/relay/0") is not None
    assert dialect.guards("hubd-hubd/rpc") is not None  # hubd's own answers
    assert dialect.guards(f"{TWO_PM}/rpc") is None and dialect.guards("shellies/shelly1/relay/0/command") is None
    assert len({t for t, _ in asked(dialect)}) == 0  # asking about topics asks no device again


def test_only_its_own_devices_command_topics_are_owned() -> None:
    dialect = make()
    discover(dialect, TWO)
    for topic, payload in messages("gen1_messages")[:3]:
        publish(dialect, topic, payload)
    assert dialect.owns_command_topic(f"{TWO_PM}/rpc")
    assert dialect.owns_command_topic("shellies/shelly1/relay/0/command")
    assert not dialect.owns_command_topic("shellyplus1-000000000000/rpc")
    assert not dialect.owns_command_topic("shellies/command")
