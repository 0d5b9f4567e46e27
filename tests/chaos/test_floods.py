"""Floods: 50,000 refused device messages leave a few log lines (the status page and the metric count every
one), and a doorbell pressed 1,000 times in a fraction of a second sends 1,000 presses (every press counts) and
is shown as a problem."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mosquitto import publish_many
from rig import BELL, LAMP, Rig, invalid_total

REFUSED = 50_000


async def test_fifty_thousand_refused_messages_are_a_few_log_lines_and_all_counted(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"log": {"level": "info"}})
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    lines_before = rig.hub.log().count("\n")

    publish_many(rig.broker.port, [(f"hubd/device/ghost-{i}/state", '{"Switch": "On"}', False)
                                   for i in range(REFUSED)])
    await rig.hub.wait_for(lambda: invalid_total(rig.hub, REFUSED), timeout_s=120,
                           what="every refused message counted")
    rig.publish("lamp-1", "state", {"Switch": "On"})
    await rig.wait_events(1, "ChangeReport", endpoint="lamp-1")

    written = rig.hub.log().count("\n") - lines_before
    assert written < 200, f"{written} log lines for {REFUSED} refused messages"
    _, status = await rig.hub.get("/api/status")
    assert all("unknown device" in p["reason"] for p in status["problems"]["rejected"])


async def test_a_burst_of_presses_is_sent_press_by_press_and_shown_as_a_problem(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    await rig.bind_with_bell()
    presses = 1_000
    publish_many(rig.broker.port, [("hubd/device/bell-1/event", '{"name": "DoorbellPress"}', False)] * presses)

    await rig.wait_events(presses, "DoorbellPress", endpoint="bell-1")
    _, status = await rig.hub.get("/api/status")
    [burst] = [p for p in status["problems"]["other"] if p["subject"] == "bell-1"]
    assert "doorbell presses within" in burst["problem"] and burst["count"] >= 1
    assert BELL["displayName"] in burst["problem"]
