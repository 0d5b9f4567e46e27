"""Refused device messages are logged without a flood (hubd.failures.RefusalLog): once per topic and reason per
minute, at most 60 lines a minute in all, and the rest summed up once their minute is over, also when no other
refusal comes."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from unit_helpers import eventually

from hubd.failures import REFUSAL_WINDOW_S, REFUSALS_PER_MINUTE, RefusalLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_the_same_topic_and_reason_is_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    refusals = RefusalLog(logging.getLogger("test.refusals"), clock=clock)
    with caplog.at_level(logging.WARNING):
        for _ in range(1000):
            refusals.refused("hubd/device/x/state", "unknown device 'x'")
        refusals.refused("hubd/device/x/state", "another reason")
        assert _lines(caplog) == ["ignored message on hubd/device/x/state: unknown device 'x'",
                                  "ignored message on hubd/device/x/state: another reason"]
        clock.now += 61
        refusals.refused("hubd/device/x/state", "unknown device 'x'")
    lines = _lines(caplog)
    assert len(lines) == 4
    assert lines[2] == ("999 more refused device messages on 1 topic(s) not logged one by one (most on "
                        "hubd/device/x/state (999)); the status page's Problems counts them all")
    assert lines[3] == "ignored message on hubd/device/x/state: unknown device 'x'"


def test_fifty_thousand_refusals_on_as_many_topics_are_a_few_lines(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    refusals = RefusalLog(logging.getLogger("test.refusals"), clock=clock)
    with caplog.at_level(logging.WARNING):
        for i in range(50_000):
            refusals.refused(f"hubd/device/d{i}/state", f"unknown device 'd{i}'")
            clock.now += 0.0001  # 5 s in all
        refusals.flush()
    lines = _lines(caplog)
    assert len(lines) == REFUSALS_PER_MINUTE + 1
    assert lines[-1].startswith(f"{50_000 - REFUSALS_PER_MINUTE} more refused device messages on "
                                f"{50_000 - REFUSALS_PER_MINUTE} topic(s)")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        refusals.flush()  # nothing left out since: nothing to say
    assert _lines(caplog) == []


async def test_what_was_left_out_is_summed_up_once_its_minute_is_over_without_another_refusal(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    refusals = RefusalLog(logging.getLogger("test.refusals"), clock=clock)
    runs = asyncio.create_task(refusals.run())
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                refusals.refused("hubd/device/x/state", "unknown device 'x'")
            clock.now += REFUSAL_WINDOW_S  # the minute is over; no further refusal comes
            await eventually(lambda: len(_lines(caplog)) == 2, "the summary")
        assert _lines(caplog)[1].startswith("2 more refused device messages on 1 topic(s) not logged one by one")
    finally:
        runs.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runs
