"""The event journal (hubd/outbox/journal.py) and what feeds it: the outbox sender, the registry, the webhook's counts.

In-process: the journal alone, the sender with the fake platform of tests/outbox_helpers.py, the registry with
a sink that stores nothing. Waits are on conditions (`eventually`), never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from outbox_helpers import FakeTokens, Posted, SenderRig, change, endpoint, press, running_sender
from unit_helpers import NOW, device_message, eventually

from hubd.cloud import messages
from hubd.devices.changes import Change
from hubd.dialects.base import Decoded
from hubd.errors import CloudRejected, CloudUnavailable
from hubd.metrics import Metrics
from hubd.outbox.decide import discovery_events
from hubd.outbox.journal import EventJournal, EventRef, describe
from hubd.registry import DeviceRegistry
from hubd.store.devices import DeviceRows
from hubd.webhook.limits import CallLimiter

LAMP_CONFIG = {"displayName": "Desk Lamp", "displayType": "light",
               "capabilities": [{"interface": "Switch", "supportedOperations": ["On", "Off"],
                                 "proactivelyReported": True, "retrievable": True}]}


def ref(row_id: int, user: str = "alice", name: str = "DoorbellPress", endpoints: tuple[str, ...] = ("bell",),
        created_at: float = NOW) -> EventRef:
    return EventRef(row_id, user, name, f"m-{row_id}", endpoints, created_at)


# --- the journal alone -------------------------------------------------------------------------------------


def test_only_the_latest_events_are_kept_newest_first() -> None:
    journal = EventJournal(max_events=3)
    for row_id in range(1, 6):
        journal.queued(ref(row_id), NOW)
    assert [e["messageId"] for e in journal.events()] == ["m-5", "m-4", "m-3"]
    # A delivery of an event no longer in the journal is recorded anew, as the latest.
    journal.delivered(ref(1), 1, NOW + 1)
    assert [(e["messageId"], e["status"]) for e in journal.events()] == [
        ("m-1", "delivered"), ("m-5", "waiting"), ("m-4", "waiting")]
    assert [e["messageId"] for e in journal.events(limit=1)] == ["m-1"]


def test_an_event_goes_waiting_retrying_delivered_and_its_latency_counts_from_the_outbox_write() -> None:
    journal = EventJournal()
    event = ref(7, created_at=NOW)
    journal.queued(event, NOW + 0.01)
    [waiting] = journal.events()
    assert (waiting["status"], waiting["attempts"], waiting["latencyMs"]) == ("waiting", 0, None)

    journal.failed(event, 1, "platform answered 503", NOW + 0.1, retry_at=NOW + 1.1)
    [retrying] = journal.events()
    assert retrying["status"] == "retrying" and retrying["error"] == "platform answered 503"
    assert (retrying["attempts"], retrying["retryAt"], retrying["latencyMs"]) == (1, NOW + 1.1, None)

    journal.delivered(event, 2, NOW + 1.25)
    [done] = journal.events()
    assert (done["status"], done["attempts"], done["error"], done["retryAt"]) == ("delivered", 2, None, None)
    assert done["latencyMs"] == 1250 and done["deliveredAt"] == NOW + 1.25
    assert journal.user("alice") == {"lastDeliveredAt": NOW + 1.25,
                                     "lastDeliveryError": {"error": "platform answered 503", "at": NOW + 0.1}}
    assert journal.user("bob") == {"lastDeliveredAt": None, "lastDeliveryError": None}


def test_a_dead_letter_and_repeated_failures_are_one_problem_each_counted() -> None:
    journal = EventJournal()
    for row_id in (1, 2):
        journal.failed(ref(row_id), 1, "platform answered 503", NOW + row_id, retry_at=NOW + 10)
    journal.failed(ref(3), 1, "HTTP 400: bad cause", NOW + 3, retry_at=None)
    assert journal.events()[0]["status"] == "dead"
    failures = journal.failed_deliveries()
    assert [(f["error"], f["count"], f["firstSeen"], f["lastSeen"], f["messageId"]) for f in failures] == [
        ("HTTP 400: bad cause", 1, NOW + 3, NOW + 3, "m-3"),
        ("platform answered 503", 2, NOW + 1, NOW + 2, "m-2")]


def test_held_events_are_not_failures() -> None:
    journal = EventJournal()
    journal.held(ref(1), "kept until the user links again", NOW)
    assert journal.events()[0]["status"] == "held"
    assert journal.failed_deliveries() == [] and journal.user("alice")["lastDeliveryError"] is None


def test_refused_messages_are_deduplicated_by_topic_and_reason_and_bounded() -> None:
    journal = EventJournal(max_problems=2)
    for at in (1.0, 2.0, 3.0):
        journal.rejected("hubd/device/a/state", "not JSON", at)
    journal.rejected("hubd/device/a/state", "too deep", 4.0)
    assert [(p["reason"], p["count"], p["firstSeen"], p["lastSeen"]) for p in journal.rejected_messages()] == [
        ("too deep", 1, 4.0, 4.0), ("not JSON", 3, 1.0, 3.0)]
    journal.rejected("hubd/device/a/state", "not JSON", 5.0)  # the most recent again: the other is now the oldest
    journal.rejected("hubd/device/b/state", "not JSON", 6.0)
    assert [(p["topic"], p["reason"], p["count"]) for p in journal.rejected_messages()] == [
        ("hubd/device/b/state", "not JSON", 1), ("hubd/device/a/state", "not JSON", 4)]
    journal.rejected("t", "x" * 5000, 7.0)
    assert len(journal.rejected_messages()[0]["reason"]) == 300


def test_descriptions_show_the_endpoint_and_states_never_the_header() -> None:
    state = {"interface": "Switch", "value": "On", "timeOfSample": "2024-01-01T00:00:00.000Z"}
    body = messages.change_report("Service", "m-1", "lamp", {}, [state], [state], "PHYSICAL_INTERACTION")
    text = messages.with_token_json(json.dumps(body, separators=(",", ":")), "secret-token")
    assert describe("ChangeReport", ("lamp",), text) == "lamp (Switch=On)"
    response = messages.async_response("Service", "m-2", "correlation-secret", "lamp", {}, [
        {"interface": "Brightness", "value": 40}])
    assert describe("Response", ("lamp",), json.dumps(response)) == "lamp (Brightness=40)"
    assert describe("AddOrUpdateReport", tuple(f"d{i}" for i in range(7)), None) == "d0, d1, d2 and 4 more"
    assert describe("ChangeReport", ("lamp",), "not json") == "lamp"

    journal = EventJournal()
    event = ref(1, name="ChangeReport", endpoints=("lamp",))
    journal.queued(event, NOW)
    assert journal.events()[0]["detail"] == "lamp"  # no body yet
    journal.sending(event, text, NOW)
    journal.delivered(event, 1, NOW)
    [shown] = journal.events()
    assert shown["detail"] == "lamp (Switch=On)" and "secret" not in json.dumps(shown)


# --- the outbox sender reports to it ------------------------------------------------------------------------


@pytest.fixture
def journal() -> EventJournal:
    return EventJournal()


@pytest.fixture
async def sender(tmp_path: Path, journal: EventJournal) -> AsyncIterator[SenderRig]:
    """The outbox sender (tests/outbox_helpers.py) reporting to `journal`."""
    async with running_sender(tmp_path, observer=journal) as rig:
        yield rig


def statuses(journal: EventJournal) -> dict[str, str]:
    return {e["endpoints"][0]: e["status"] for e in journal.events()}


async def test_the_sender_reports_waiting_retrying_delivered_and_dead_letters(
        sender: SenderRig, journal: EventJournal) -> None:
    failures = [CloudUnavailable("platform answered 503")]

    async def platform(post: Posted) -> None:
        if post.endpoints == ("ghost",):
            raise CloudRejected(422, '{"error": "endpoint unknown"}')
        if post.endpoints == ("lamp",) and failures:
            raise failures.pop()

    sender.api.behaviour["alice"] = platform
    await sender.queue("alice", change("lamp", "On"), press("ghost"))
    # Alice has no token yet: both are waiting.
    await eventually(lambda: statuses(journal) == {"lamp": "waiting", "ghost": "waiting"}, "two waiting")
    sender.tokens.tokens["alice"] = "alice:1"
    sender.wakeup.set()
    await eventually(lambda: statuses(journal) == {"lamp": "retrying", "ghost": "dead"}, "a retry, a dead one")
    sender.clock.now += 120
    sender.wakeup.set()
    await eventually(lambda: statuses(journal)["lamp"] == "delivered", "the lamp delivered")
    ghost, lamp = journal.events()  # newest first: the press was written after the change
    assert (lamp["attempts"], lamp["latencyMs"], lamp["error"]) == (2, 120_000, None)
    assert (lamp["detail"], ghost["detail"]) == ("lamp (Switch=On)", "ghost")
    assert (ghost["attempts"], ghost["error"]) == (1, 'HTTP 422: {"error": "endpoint unknown"}')
    assert sorted((f["name"], f["count"]) for f in journal.failed_deliveries()) == [
        ("ChangeReport", 1), ("DoorbellPress", 1)]


async def test_a_batch_refused_as_a_whole_is_held_and_its_pieces_delivered(
        sender: SenderRig, journal: EventJournal) -> None:
    async def platform(post: Posted) -> None:
        if len(post.endpoints) > 1:
            raise CloudRejected(400, '{"error": "one endpoint is bad"}')

    sender.api.behaviour["alice"] = platform
    sender.tokens.tokens["alice"] = "alice:1"
    await sender.queue("alice", *discovery_events("Service", [endpoint("a"), endpoint("b")]))
    await sender.close_windows(1)
    await eventually(lambda: len(sender.api.accepted) == 2, "both pieces")
    await eventually(lambda: [e["status"] for e in journal.events()] == ["delivered", "delivered", "held"],
                     "the pieces delivered, the batch held")
    assert "resent as 2 messages" in journal.events()[2]["error"]


async def test_reports_of_one_window_are_one_event_with_every_endpoint(
        sender: SenderRig, journal: EventJournal) -> None:
    sender.tokens.tokens["alice"] = "alice:1"
    for device in ("a", "b", "c"):  # three commits, one window
        await sender.queue("alice", *discovery_events("Service", [endpoint(device)]))
    await eventually(lambda: len(journal.events()) == 3, "three reports waiting")
    await sender.close_windows(3)
    await eventually(lambda: [e["status"] for e in journal.events()] == ["delivered"], "one event, delivered")
    [event] = journal.events()
    [post] = sender.api.accepted
    assert (event["endpoints"], event["detail"], event["messageId"]) == (["a", "b", "c"], "a, b, c", post.message_id)


@pytest.mark.parametrize("quiet", [False, True])
async def test_one_events_line_per_delivered_event_unless_log_events_is_off(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, quiet: bool) -> None:
    async with running_sender(tmp_path, tokens=FakeTokens(tokens={"alice": "alice:1"}), log_events=not quiet) as rig:
        with caplog.at_level(logging.INFO, logger="hubd.events"):
            await rig.queue("alice", change("lamp", "On"))
            await eventually(lambda: len(rig.api.accepted) == 1 and rig.sender.depth() == 0, "the event delivered")
    lines = [r.getMessage() for r in caplog.records if r.name == "hubd.events"]
    if quiet:
        assert lines == []
    else:
        message_id = rig.api.accepted[0].message_id
        assert lines == [f"delivered ChangeReport {message_id} for user alice: lamp (Switch=On) in 0 ms"]
        assert "alice:1" not in lines[0]


# --- the registry reports to it, and keeps a device's last message time --------------------------------------


class NoSink:
    async def commit(self, changes: Sequence[Change], rows: DeviceRows, receipts: Sequence[Any] = ()) -> None:
        """Nothing to persist."""


def test_the_registry_reports_refused_messages_and_keeps_when_a_device_was_last_heard() -> None:
    journal = EventJournal()
    registry = DeviceRegistry(None, NoSink(), Metrics(), rejections=journal)  # type: ignore[arg-type]

    async def scenario() -> None:
        await registry.handle([device_message("config", "lamp", json.dumps(LAMP_CONFIG).encode(), 100.0)])
        lamp = registry.get("lamp")
        assert lamp is not None and lamp.last_seen == 100.0
        await registry.handle([device_message("state", "lamp", b'{"Switch": "On"}', 101.0)])
        assert lamp.last_seen == 101.0
        # The broker's will says nothing of the device having been heard; a retained replay neither.
        await registry.handle([device_message("availability", "lamp", b"offline", 102.0)])
        retained = device_message("state", "lamp", b'{"Switch": "Off"}', 103.0)
        await registry.handle([Decoded(retained.topic, 103.0, True, retained.inputs)])
        assert lamp.last_seen == 101.0 and lamp.online is False
        await registry.handle([device_message("state", "lamp", b'{"Volume": 3}', 104.0),
                               device_message("state", "lamp", b'{"Volume": 3}', 105.0),
                               device_message("state", "ghost", b'{"Switch": "On"}', 106.0)])
        assert lamp.last_seen == 105.0  # a refused message was still heard from the device

    asyncio.run(scenario())
    refused = journal.rejected_messages()
    assert [(p["topic"], p["count"]) for p in refused] == [("hubd/device/ghost/state", 1),
                                                            ("hubd/device/lamp/state", 2)]
    assert "unknown device 'ghost'" in refused[0]["reason"] and "'Volume'" in refused[1]["reason"]


# --- the webhook's counts, as the status page reads them ------------------------------------------------------


def test_the_limiter_tells_calls_in_the_last_minute_and_day_without_changing_them() -> None:
    limiter = CallLimiter(per_minute=5, per_day=100)
    key = (1, "hash")
    assert limiter.usage(key, NOW) is None
    limiter.load(key, [(int(NOW) - 3600, 4)], NOW)
    for offset in (0.0, 0.5, 10.0):
        assert limiter.admit(key, NOW + offset) is None
    assert limiter.usage(key, NOW + 10) == (3, 7, int(NOW) + 10)
    assert limiter.usage(key, NOW + 65) == (1, 7, int(NOW) + 10)  # the first two left the minute
    assert limiter.usage(key, NOW + 86400 - 3600 + 1) == (0, 3, int(NOW) + 10)  # the loaded four left the day
    assert limiter.usage(key, NOW + 10) == (3, 7, int(NOW) + 10)  # nothing was dropped by asking
