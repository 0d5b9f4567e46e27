"""Configs arriving within 100 ms of each other go out in one AddOrUpdateReport per user (real broker, platform
simulator, hubd process), in order with the devices' other events."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mosquitto import publish_many
from rig import LAMP, Rig

from simulators.platform_records import EventRecord


def _message(device: str, suffix: str, payload: object, *, retain: bool = False) -> tuple[str, str, bool]:
    return f"hubd/device/{device}/{suffix}", json.dumps(payload), retain


async def _reports_of(rig: Rig, user: str, ids: list[str]) -> list[EventRecord]:
    """Wait until the user's AddOrUpdateReports have carried every one of `ids`; those reports."""
    async def carried() -> list[EventRecord] | None:
        reports = [r for r in rig.events("AddOrUpdateReport", user_id=user) if set(ids) & set(r.endpoint_ids)]
        return reports if set(ids) <= {e for r in reports for e in r.endpoint_ids} else None
    found: list[EventRecord] = await rig.hub.wait_for(carried, what=f"AddOrUpdateReports of {ids} for {user}")
    return found


async def test_three_configs_published_back_to_back_reach_the_platform_in_one_message(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind("alice")
    await rig.bind("bob")
    # 50 rounds: a race between the configs' commits and the sender shows up in some of them.
    for round_ in range(50):
        ids = [f"lamp-{round_}-{letter}" for letter in "abc"]
        publish_many(rig.broker.port, [_message(device, "config", LAMP, retain=True) for device in ids])
        for user in ("alice", "bob"):
            reports = await _reports_of(rig, user, ids)
            assert [sorted(r.endpoint_ids) for r in reports] == [ids], (round_, user, reports)
    assert not rig.sim.rejections, rig.sim.rejections


async def test_a_new_devices_report_precedes_its_first_change_and_deletions_share_a_message_too(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind()
    for round_ in range(10):
        ids = [f"lamp-{round_}-{letter}" for letter in "ab"]
        publish_many(rig.broker.port, [message for device in ids for message in (
            _message(device, "config", LAMP, retain=True), _message(device, "state", {"Switch": "On"}))])
        for device in ids:
            await rig.wait_events(1, "ChangeReport", endpoint=device)
        events = [e for e in rig.sim.events if set(ids) & set(e.endpoint_ids)]
        assert [e.endpoint_ids for e in events if e.name == "AddOrUpdateReport"] == [tuple(ids)], events
        assert events[0].name == "AddOrUpdateReport"  # before either device's change
    gone = [f"lamp-{round_}-a" for round_ in range(10)]
    publish_many(rig.broker.port, [(f"hubd/device/{device}/config", "", True) for device in gone])
    [deleted] = await rig.wait_events(1, "DeleteReport")
    assert sorted(deleted.endpoint_ids) == sorted(gone)
    assert not rig.sim.rejections, rig.sim.rejections  # the platform knew each endpoint before its change
