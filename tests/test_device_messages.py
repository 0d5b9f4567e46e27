"""What devices send, in-process: state and config payloads parsed, names made speakable, values and configs
conformed to what the platform accepts, and failures counted."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import zigbee2mqtt_helpers as zigbee2mqtt
from unit_helpers import device_message

from hubd.cloud import messages
from hubd.devices import conformance
from hubd.devices.changes import Change, StatesChanged
from hubd.devices.model import StateValue
from hubd.dialects.base import Decoded
from hubd.dialects.native import codec as native_codec
from hubd.errors import DeviceMessageInvalid
from hubd.metrics import Metrics
from hubd.outbox.decide import decide
from hubd.outbox.writer import OutboxWriter
from hubd.registry import DeviceRegistry
from hubd.spoken import spoken
from hubd.store.db import Database
from hubd.store.devices import DeviceRows
from hubd.store.receipts import Receipt
from simulators.platform_validate import validate_event


def test_a_state_is_a_flat_object_or_a_list_with_times_of_sample() -> None:
    mapped = native_codec.parse_state(b'{"Switch": "On", "Temperature": 21.5}', 0.0)
    assert [(s.interface, s.value) for s in mapped.samples] == [("Switch", "On"), ("Temperature", 21.5)]
    assert mapped.samples[0].time_of_sample == "1970-01-01T00:00:00.000Z"
    listed = native_codec.parse_state(
        b'{"states": [{"interface": "Switch", "value": "Off", "timeOfSample": "20240131T120000Z"}],'
        b' "cause": "PHYSICAL_INTERACTION"}', 0.0)
    assert listed.samples[0].time_of_sample == "2024-01-31T12:00:00.000Z"


@pytest.mark.parametrize(("payload", "reason"), [
    (b"nope", "not JSON"),
    (b"[1]", "must be a JSON object"),
    (b'{"Switch": true}', "string or a number"),
    (b'{"Switch": null}', "string or a number"),
    (b'{"states": [{"interface": "Switch"}]}', re.escape("states[0].value: missing")),
    (b'{"states": [{"interface": "Switch", "value": 1, "timeOfSample": "yesterday"}]}', "not ISO 8601"),
    (b"{}", "no states"),
    (b"{" + b" " * 70000 + b"}", "the limit is"),
])
def test_bad_state_payloads_say_why(payload: bytes, reason: str) -> None:
    with pytest.raises(DeviceMessageInvalid, match=reason):
        native_codec.parse_state(payload, 0.0)


def test_config_validation_names_the_field() -> None:
    with pytest.raises(DeviceMessageInvalid, match="displayType"):
        native_codec.parse_config(b'{"displayName": "Lamp", "displayType": "toaster"}')
    with pytest.raises(DeviceMessageInvalid, match=re.escape("capabilities.0.interface")):
        native_codec.parse_config(b'{"displayName": "Lamp", "displayType": "light", "capabilities": [{}]}')
    assert native_codec.parse_config(b"") is None
    config = native_codec.parse_config(b'{"displayName": "Lamp", "displayType": "light", "capabilities": '
                                b'[{"interface": "Service.Switch", "isProactivelyReported": true}]}')
    assert config is not None and config.capabilities[0].interface == "Switch"
    assert config.capabilities[0].proactivelyReported


@pytest.mark.parametrize(("name", "expected"), [
    ("Lamp 2", "Lamp Two"),
    ("Bedroom2", "Bedroom Two"),
    ("2nd Floor", "Second Floor"),
    ("Room 101", "Room One Hundred One"),
    ("Lamp 007", "Lamp Zero Zero Seven"),
    ("Zone 3.5", "Zone Three Point Five"),
    ("Hall (Upstairs)", "Hall Upstairs"),
    ("Anna's Lamp", "Annas Lamp"),
    ("Living-room/Kitchen", "Living room Kitchen"),
    ("台灯", "台灯"),
    ("Ｌａｍｐ２", "Ｌａｍｐ Two"),
    ("Desk Lamp", "Desk Lamp"),
    # PROTOCOL.md 8's room names pass unchanged; numbers in a Chinese name are Chinese and join it.
    ("客厅", "客厅"), ("卧室", "卧室"), ("厨房", "厨房"), ("阳台", "阳台"), ("办公室", "办公室"),
    ("二〇二四", "二〇二四"),
    ("卧室2", "卧室二"),
    ("2号灯", "二号灯"),
    ("１２楼", "十二楼"),
    ("1.5楼", "一点五楼"),
    ("第3排", "第三排"),
    ("3rd 卧室", "第三 卧室"),
    ("客厅101", "客厅一百零一"),
    ("灯007", "灯零零七"),
    ("ランプ2", "ランプ二"),
    # Letter-form numerals are numbers: Ⅰ号灯 and Ⅱ号灯 stay two names.
    ("Ⅰ号灯", "一号灯"),
    ("Ⅱ号灯", "二号灯"),
    ("Lamp Ⅻ", "Lamp Twelve"),
    ("Lamp ①", "Lamp One"),
    ("Lamp ½", "Lamp One Half"),
    # A mark whose letter was dropped goes with it; marks on kept letters stay.
    ("❤️ Lamp", "Lamp"),
    ("1️⃣ Lamp", "One Lamp"),
    ("Cafe\u0301 2", "Cafe\u0301 Two"),
])
def test_names_are_made_speakable_and_pass_the_platforms_checks(name: str, expected: str) -> None:
    assert spoken(name) == expected
    # What hubd sends passes the platform's own checks.
    endpoint = {"endpointId": "x", "displayName": expected, "displayType": "light", "recommendRoomName": expected,
                "additionalInfo": {}, "capabilities": [], "states": []}
    body = messages.with_token(messages.add_or_update_report("Service", "m", [endpoint]), "t")
    validate_event(body)


def test_conform_config_renames_and_canonicalises() -> None:
    config = native_codec.parse_config(json.dumps({
        "displayName": "Lamp 2", "displayType": "light", "recommendRoomName": "###",
        "capabilities": [{"interface": "switch", "supportedOperations": ["on", "Off", "On"]},
                         {"interface": "Brand.Brightness", "supportedOperations": ["Set"]}]}).encode(), "Brand")
    assert config is not None
    conformed, renamed = conformance.conform_config(config)
    assert (conformed.displayName, conformed.recommendRoomName) == ("Lamp Two", None)
    assert [(c.interface, c.supportedOperations) for c in conformed.capabilities] == [
        ("Switch", ("On", "Off")), ("Brightness", ("Set",))]
    assert [(r.field, r.old, r.new) for r in renamed] == [("displayName", "Lamp 2", "Lamp Two"),
                                                          ("recommendRoomName", "###", None)]
    same, nothing = conformance.conform_config(conformed)
    assert same is conformed and nothing == []


@pytest.mark.parametrize(("capabilities", "reason"), [
    ([{"interface": "Battery"}], "interface 'Battery' is not one the platform knows; use one of Brightness"),
    ([{"interface": "Switch", "supportedOperations": ["Toggle"]}], "Switch has no operation 'Toggle'; it has Off, On"),
    ([{"interface": "Switch"}, {"interface": "switch"}], "interface twice"),
])
def test_conform_config_refuses_what_the_platform_does_not_know(capabilities: list[object], reason: str) -> None:
    config = native_codec.parse_config(json.dumps({"displayName": "Lamp", "displayType": "light",
                                            "capabilities": capabilities}).encode())
    assert config is not None
    with pytest.raises(DeviceMessageInvalid, match=re.escape(reason)):
        conformance.conform_config(config)


def test_a_name_with_nothing_speakable_is_refused() -> None:
    config = native_codec.parse_config(b'{"displayName": "#1", "displayType": "light"}')
    assert config is not None
    assert conformance.conform_config(config)[0].displayName == "One"
    config = native_codec.parse_config(b'{"displayName": "!!", "displayType": "light"}')
    assert config is not None
    with pytest.raises(DeviceMessageInvalid, match="displayName: '!!' has nothing the platform can speak"):
        conformance.conform_config(config)


@pytest.mark.parametrize(("interface", "value", "expected"), [
    ("Switch", "on", "On"), ("Switch", " OFF ", "Off"), ("Mode", "cool", "Cool"), ("PlaybackMode", "repeatone",
                                                                                   "RepeatOne"),
    ("Brightness", 40.5, 40.5), ("Brightness", 0, 0), ("Color", 255.0, 255), ("Temperature", -40, -40),
    ("Media.TVChannel", {"name": "News", "code": "N1"}, {"name": "News", "code": "N1"}),
])
def test_state_values_are_normalised(interface: str, value: StateValue, expected: StateValue) -> None:
    assert conformance.conform_value(interface, value) == expected
    assert type(conformance.conform_value(interface, value)) is type(expected)


@pytest.mark.parametrize(("interface", "value", "reason"), [
    ("Switch", "open", "Switch: 'open' is not a Switch value; use one of Off, On"),
    ("Switch", {"on": True}, "Switch: an object is not a Switch value"),
    ("Switch", 1, "Switch: 1 is not a Switch value"),
    ("Brightness", 150, "Brightness: 150 is outside its range 0 to 100"),
    ("Brightness", "50", "Brightness: must be a number"),
    ("Color", 0x1000000, "outside its range"),
    ("Color", 1.5, "Color: must be a whole number"),
    ("Media.Music", {"name": "x", "year": "1999"}, "unknown keys ['year']"),
    ("Media.Music", "a song", "must be an object"),
    ("Battery", 80, "Battery: not an interface the platform knows"),
])
def test_bad_state_values_say_why(interface: str, value: StateValue, reason: str) -> None:
    with pytest.raises(DeviceMessageInvalid, match=re.escape(reason)):
        conformance.conform_value(interface, value)


def test_config_checks_the_platforms_limits() -> None:
    with pytest.raises(DeviceMessageInvalid, match="at most 999 characters"):
        native_codec.parse_config(json.dumps({"displayName": "Lamp", "displayType": "light",
                                       "additionalInfo": {"k": "x" * 1000}}).encode())
    with pytest.raises(DeviceMessageInvalid, match="non-empty"):
        native_codec.parse_config(b'{"displayName": "Lamp", "displayType": "light", "additionalInfo": {"": "x"}}')
    config = native_codec.parse_config(b'{"displayName": "Lamp", "displayType": "light", "recommendHomeName": " "}')
    assert config is not None and config.recommendHomeName is None


async def test_a_state_may_name_its_interface_with_the_brand_prefix_as_a_config_may(tmp_path: Path) -> None:
    db = Database(tmp_path / "hubd.db", synchronous="normal")
    await db.start()
    try:
        metrics = Metrics()
        registry = DeviceRegistry(db, OutboxWriter(db, namespace="Brand", metrics=metrics), metrics, namespace="Brand")
        await registry.start()
        config = {"displayName": "Lamp", "displayType": "light",
                  "capabilities": [{"interface": "Brand.Switch", "supportedOperations": ["On", "Off"]}]}
        await registry.handle([
            device_message("config", "lamp", json.dumps(config).encode(), base="b", namespace="Brand"),
            device_message("state", "lamp", b'{"Brand.Switch": "on"}', base="b", namespace="Brand"),
            device_message("state", "lamp", b'{"Service.switch": "off"}', base="b", namespace="Brand")])
        assert metrics.counter("hubd_device_messages_invalid_total", "", "kind").get("state") == 0
        device = registry.get("lamp")
        assert device is not None and device.states["Switch"].value == "Off"
    finally:
        await db.stop()


def test_unexpected_failures_are_counted_and_traced_once_per_exception_type(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from hubd.failures import MessageFailures

    metrics = Metrics()
    failures = MessageFailures(metrics)
    log = logging.getLogger("hubd.test")
    with caplog.at_level(logging.ERROR, logger="hubd.test"):
        for topic in ("a/1", "a/2"):
            failures.record(log, topic, "hubd", KeyError("x"))
        failures.record(log, "a/3", "the zigbee2mqtt dialect", ValueError("y"))
    assert [bool(r.exc_info) for r in caplog.records] == [True, False, True]
    assert "ignored message on a/2: hubd failed on it (KeyError" in caplog.records[1].getMessage()
    counter = metrics.counter("hubd_device_messages_failed_total", "", "error")
    assert (counter.get("KeyError"), counter.get("ValueError")) == (2, 1)


class _Recorded:
    """A ChangeSink that keeps the changes of each commit."""

    def __init__(self) -> None:
        self.commits: list[list[Change]] = []

    async def commit(self, changes: Sequence[Change], rows: DeviceRows, receipts: Sequence[Receipt] = ()) -> None:
        self.commits.append(list(changes))


async def test_the_registry_is_the_one_filter_of_unchanged_values_for_a_dialect_that_republishes_everything(
        tmp_path: Path) -> None:
    # zigbee2mqtt republishes a device's whole state on every report; its dialect reports every exported value.
    dialect = zigbee2mqtt.make()
    name = "Living Room temperature, humidity and pressure sensor"
    full = zigbee2mqtt.fixture("aqara_WSDCGQ11LM_temperature")["states"][0]["payload"]

    def decoded(rest: str, payload: Any, *, retained: bool = False) -> Decoded:
        topic = f"{zigbee2mqtt.BASE}/{rest}"
        inputs = dialect.decode(topic, zigbee2mqtt.raw(payload), 0.0, retained)
        return Decoded(topic, 0.0, retained, tuple(inputs), "zigbee2mqtt")

    db = Database(tmp_path / "hubd.db", synchronous="normal")
    await db.start()
    try:
        sink = _Recorded()
        registry = DeviceRegistry(db, sink, Metrics())
        await registry.start()
        await registry.handle([decoded("bridge/devices", zigbee2mqtt.entries("aqara_WSDCGQ11LM_temperature"),
                                       retained=True), decoded(name, full)])
        sink.commits.clear()
        await registry.handle([decoded(name, {**full, "linkquality": 60, "battery": 99})])
        assert sink.commits == []  # nothing changed: nothing committed, nothing reported
        await registry.handle([decoded(name, {**full, "temperature": 21.3})])
        [changes] = sink.commits
        assert [[(s.interface, s.value) for s in c.changed] for c in changes if isinstance(c, StatesChanged)] == \
            [[("Temperature", 21.3)]]
        assert [e.name for e in decide(changes, "Service")] == ["ChangeReport"]
    finally:
        await db.stop()
