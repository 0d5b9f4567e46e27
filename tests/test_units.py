"""Pure pieces: the refresh schedule, the reporter's decisions, device payload parsing."""

from __future__ import annotations

import re

import pytest

from hubd.cloud.client import failure_sign
from hubd.cloud.tokens import refresh_at
from hubd.errors import DeviceMessageInvalid
from hubd.mqtt import codec
from hubd.mqtt.codec import StateSample
from hubd.registry import DeviceAnnounced, DeviceRemoved, DoorbellPressed, StatesChanged
from hubd.reporter import DISCOVERY_BATCH, decide
from hubd.store.grants import Grant


def grant(lifetime_s: float) -> Grant:
    return Grant("u", None, "a", "r", 1000.0 + lifetime_s, 1000.0, "active", False, None)


@pytest.mark.parametrize(("lifetime", "after"), [
    (3600, 2880),          # 80 % of an hour
    (1000, 700),           # 5 minutes before expiry comes first
    (3, 2.4),              # very short: still 80 %, never a tight loop
    (30 * 86400, 12 * 3600),  # long-lived: at least every 12 hours
    (1, 1.0),              # never sooner than 1 s
])
def test_refresh_schedule(lifetime: float, after: float) -> None:
    assert refresh_at(grant(lifetime)) - 1000.0 == pytest.approx(after)


def test_failure_report_sign_matches_protocol_test_vector() -> None:
    assert failure_sign("2erf3gfeg3gt", "SplxlOBeZQQYbYS6WxSbIA", "the_client_secret") == (
        "189e55722f1d6cfe09bd6637f098356b329262d96a126e6aff2f46542d36dd90")


def _endpoint(device_id: str) -> dict[str, object]:
    return {"endpointId": device_id, "displayName": "X", "displayType": "light", "additionalInfo": {},
            "capabilities": [], "states": []}


def test_decide_batches_announcements_and_keeps_order() -> None:
    sample = StateSample("Switch", "On", "2024-01-01T00:00:00.000Z")
    quiet = StateSample("Brightness", 5, "2024-01-01T00:00:00.000Z")
    changes = [
        DeviceAnnounced(None, _endpoint("a")),  # type: ignore[arg-type]
        DeviceAnnounced(None, _endpoint("b")),  # type: ignore[arg-type]
        StatesChanged("a", (sample,), ({"interface": "Switch", "value": "On"},), {}, frozenset({"Switch"}),
                      "PHYSICAL_INTERACTION"),
        StatesChanged("a", (quiet,), (), {}, frozenset({"Switch"}), "PHYSICAL_INTERACTION"),  # not proactive
        DoorbellPressed("c", "2024-01-01T00:00:00.000Z"),
        DoorbellPressed("c", "2024-01-01T00:00:00.000Z"),
        DeviceRemoved("b"),
    ]
    events = decide(changes, "Service")
    assert [e.name for e in events] == ["AddOrUpdateReport", "ChangeReport", "DoorbellPress", "DoorbellPress",
                                        "DeleteReport"]
    assert events[0].lanes == ("a", "b")
    assert events[1].body["payload"]["change"]["states"] == [
        {"interface": "Switch", "value": "On", "timeOfSample": "2024-01-01T00:00:00.000Z"}]


def test_decide_splits_big_discovery_batches() -> None:
    changes = [DeviceAnnounced(None, _endpoint(f"d{i}")) for i in range(DISCOVERY_BATCH + 5)]  # type: ignore[arg-type]
    events = decide(changes, "Service")
    assert [len(e.lanes) for e in events] == [DISCOVERY_BATCH, 5]


def test_state_payload_forms() -> None:
    mapped = codec.parse_state(b'{"Switch": "On", "Temperature": 21.5}', 0.0)
    assert [(s.interface, s.value) for s in mapped.samples] == [("Switch", "On"), ("Temperature", 21.5)]
    assert mapped.samples[0].time_of_sample == "1970-01-01T00:00:00.000Z"
    listed = codec.parse_state(
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
        codec.parse_state(payload, 0.0)


def test_config_validation_names_the_field() -> None:
    with pytest.raises(DeviceMessageInvalid, match="displayType"):
        codec.parse_config(b'{"displayName": "Lamp", "displayType": "toaster"}')
    with pytest.raises(DeviceMessageInvalid, match=re.escape("capabilities.0.interface")):
        codec.parse_config(b'{"displayName": "Lamp", "displayType": "light", "capabilities": [{}]}')
    assert codec.parse_config(b"") is None
    config = codec.parse_config(b'{"displayName": "Lamp", "displayType": "light", "capabilities": '
                                b'[{"interface": "Service.Switch", "isProactivelyReported": true}]}')
    assert config is not None and config.capabilities[0].interface == "Switch"
    assert config.capabilities[0].proactivelyReported
