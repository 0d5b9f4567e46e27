"""The in-flight record (hubd.mqtt.inflight): what hubd was reading when it died becomes a suspect, read alone
next time; one it died on twice while alone in flight is set aside, also when it comes again (retained), until its
content changes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hubd.mqtt.inflight import InflightRecord, mark


@dataclass(frozen=True)
class Msg:
    topic: str
    payload: bytes


A, B, C = Msg("z/a", b"1"), Msg("z/b", b"poison"), Msg("z/c", b"3")


def _start(path: Path) -> InflightRecord:
    record = InflightRecord(path)
    record.load()
    return record


def _die_reading(record: InflightRecord, messages: list[Msg]) -> list[tuple[tuple[Msg, ...], int]]:
    """Plan a batch and begin each step until the one holding B: hubd dies there (nothing ends)."""
    steps = []
    for step in record.plan(messages):
        steps.append((step.messages, step.deaths))
        record.begin(step)
        if B in step.messages:
            return steps
        record.end(step)
    raise AssertionError("B was never read")


def test_nothing_in_flight_after_a_clean_batch_leaves_an_empty_record(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    record = _start(path)
    [step] = record.plan([A, B])
    record.begin(step)
    assert b"z/b" in path.read_bytes()
    record.end(step)
    assert path.read_bytes() == b""
    assert _start(path).suspects == {}


def test_a_message_hubd_dies_on_is_read_alone_then_set_aside_after_two_deaths_alone(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    assert _die_reading(_start(path), [A, B, C]) == [((A, B, C), 0)]  # a death in a batch: each a suspect

    second = _start(path)
    assert second.suspects == {mark(A): 0, mark(B): 0, mark(C): 0}  # counted against none of them
    # Each suspect alone, in order: A is read and cleared, hubd dies on B.
    assert _die_reading(second, [A, B, C]) == [((A,), 0), ((B,), 0)]

    third = _start(path)
    assert third.suspects == {mark(B): 1}  # C only died in a batch, and had its run to come again: forgotten
    assert _die_reading(third, [B, C]) == [((B,), 1)]  # read alone again, and dead again

    fourth = _start(path)
    assert fourth.suspects == {mark(B): 2}
    steps = fourth.plan([B, C, A])
    assert [(s.messages, s.deaths, s.set_aside) for s in steps] == [((B,), 2, True), ((C, A), 0, False)]
    for step in steps:
        fourth.begin(step)
        fourth.end(step)
    # B stays set aside (a retained message comes at every start).
    fifth = _start(path)
    assert fifth.suspects == {mark(B): 2}
    assert [s.set_aside for s in fifth.plan([B, Msg("z/b", b"fixed")])] == [True, False]


def test_a_clean_stop_while_a_step_is_read_is_no_death(tmp_path: Path) -> None:
    """The supervisor cancels the pump before it stops the bridge: a step begun and never ended is no death."""
    path = tmp_path / "hubd.db.inflight"
    record = _start(path)
    [step] = record.plan([B])
    record.begin(step)
    record.cancelled()
    record.close()
    assert _start(path).suspects == {}


def test_a_message_alone_in_flight_twice_is_set_aside_after_the_second_death(tmp_path: Path) -> None:
    """One message at a time (the usual case on a quiet hub): each death counts against it."""
    path = tmp_path / "hubd.db.inflight"
    assert _die_reading(_start(path), [B]) == [((B,), 0)]
    assert _die_reading(_start(path), [B]) == [((B,), 1)]
    assert [s.set_aside for s in _start(path).plan([B])] == [True]


def test_a_damaged_or_unwritable_record_never_stops_the_messages(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    path.write_text("{not json")
    assert _start(path).suspects == {}
    path.write_text(json.dumps({"inflight": [["z/a", "x", 1, 0], 5], "suspects": "no"}))
    assert _start(path).suspects == {}
    blocked = InflightRecord(tmp_path / "no-such-dir" / "hubd.db.inflight")
    blocked.load()
    [step] = blocked.plan([A])
    blocked.begin(step)  # cannot write: a warning, and the batch goes on
    blocked.end(step)
    assert blocked.plan([B])[0].messages == (B,)
