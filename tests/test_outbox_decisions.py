"""The outbox's pure decisions (`hubd.outbox.decide`): which platform events a batch of registry changes
becomes, in what order, on which lanes."""

from __future__ import annotations

from hubd.devices.changes import Change, DeviceAnnounced, DeviceRemoved, DoorbellPressed, StatesChanged
from hubd.devices.model import StateSample
from hubd.events import BARRIER_LANE
from hubd.outbox.decide import DISCOVERY_BATCH, decide, discovery_events


def _endpoint(device_id: str) -> dict[str, object]:
    return {"endpointId": device_id, "displayName": "X", "displayType": "light", "additionalInfo": {},
            "capabilities": [], "states": []}


def test_changes_become_batched_announcements_and_reports_in_order() -> None:
    sample = StateSample("Switch", "On", "2024-01-01T00:00:00.000Z")
    quiet = StateSample("Brightness", 5, "2024-01-01T00:00:00.000Z")
    changes: list[Change] = [
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


def test_a_big_discovery_is_split_into_batches() -> None:
    changes = [DeviceAnnounced(None, _endpoint(f"d{i}")) for i in range(DISCOVERY_BATCH + 5)]  # type: ignore[arg-type]
    events = decide(changes, "Service")
    assert [len(e.lanes) for e in events] == [DISCOVERY_BATCH, 5]


def test_discovery_events_for_a_new_grant_are_barriers() -> None:
    endpoints = [_endpoint(f"d{i}") for i in range(DISCOVERY_BATCH + 1)]
    events = discovery_events("Service", endpoints, barrier=True)
    assert [e.lanes[0] for e in events] == [BARRIER_LANE, BARRIER_LANE]
    assert events[1].lanes == (BARRIER_LANE, f"d{DISCOVERY_BATCH}")
    assert all(e.lanes[0] != BARRIER_LANE for e in discovery_events("Service", endpoints))
