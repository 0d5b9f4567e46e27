"""The in-flight record (hubd.mqtt.inflight): a message hubd died on while it was alone in flight is set aside at the
next start, after that one death, and whenever it comes again (retained) until its content changes; a death in a
batch makes the next run careful (every message read alone, each with its own mark on disk before it is decoded),
so N poisons cost at most N + 1 restarts; each message set aside is counted once, across starts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hubd.mqtt.inflight import CAREFUL_S, InflightRecord, mark


@dataclass(frozen=True)
class Msg:
    topic: str
    payload: bytes


A, B, C = Msg("z/a", b"1"), Msg("z/b", b"poison"), Msg("z/c", b"3")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _start(path: Path, clock: Clock | None = None) -> InflightRecord:
    record = InflightRecord(path, clock or Clock())
    record.load()
    return record


def _read(record: InflightRecord, messages: list[Msg], poisons: tuple[Msg, ...] = (B,)) -> list[tuple[tuple[Msg, ...],
                                                                                                     bool]]:
    """Plan a batch and read its steps, as the bridge does: each begun (on disk) before it is read, ended once
    committed; a step holding a poison that is not set aside kills hubd there (nothing ends). The steps read."""
    steps = []
    for step in record.plan(messages):
        steps.append((step.messages, step.set_aside))
        record.begin(step)
        if step.set_aside:
            record.first_set_aside(step.messages[0])
        elif any(p in step.messages for p in poisons):
            return steps
        record.end(step)
    return steps


def _on_disk(path: Path) -> dict[str, object]:
    return json.loads(path.read_bytes())  # type: ignore[no-any-return]


def test_a_clean_batch_leaves_an_empty_record_and_nothing_suspected(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    record = _start(path)
    [step] = record.plan([A, C])
    record.begin(step)
    assert b"z/c" in path.read_bytes()  # on disk before the batch is decoded
    record.end(step)
    assert path.read_bytes() == b""
    again = _start(path)
    assert again.suspects == {} and not again.careful


def test_a_message_alone_in_flight_at_a_death_is_set_aside_at_the_next_start(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    assert _read(_start(path), [B]) == [((B,), False)]  # hubd dies reading it
    second = _start(path)
    assert second.suspects == {mark(B): 1}
    assert _read(second, [B, A]) == [((B,), True), ((A,), False)]  # set aside unread; A goes on
    # A retained copy comes at every start: set aside again, until its content changes.
    third = _start(path)
    assert [(s.messages, s.set_aside) for s in third.plan([B, Msg("z/b", b"fixed")])] == \
        [((B,), True), ((Msg("z/b", b"fixed"),), False)]


def test_a_death_in_a_batch_makes_the_next_run_read_each_message_alone_then_set_the_poison_aside(
        tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    assert _read(_start(path), [A, B, C]) == [((A, B, C), False)]  # a death in a batch: blames none of them

    clock = Clock()
    second = _start(path, clock)
    assert second.suspects == {} and second.careful
    # Each message alone, its own mark on disk first: A is read, hubd dies on B alone.
    assert _read(second, [A, B, C]) == [((A,), False), ((B,), False)]
    assert _on_disk(path)["inflight"] == [[*mark(B), 0]]

    third = _start(path, clock)
    assert third.suspects == {mark(B): 1} and third.careful  # a careful run that died: the next is careful too
    assert _read(third, [B, C, A]) == [((B,), True), ((C,), False), ((A,), False)]
    # Once its first CAREFUL_S of messages are past, a careful run reads batches again.
    clock.now += CAREFUL_S
    assert _read(third, [A, C]) == [((A, C), False)]
    fourth = _start(path, clock)
    assert not fourth.careful and fourth.suspects == {mark(B): 1}


def _died(steps: list[tuple[tuple[Msg, ...], bool]], poisons: tuple[Msg, ...]) -> bool:
    return bool(steps) and not steps[-1][1] and any(p in steps[-1][0] for p in poisons)


def test_n_poisons_in_the_retained_burst_cost_at_most_n_plus_one_restarts(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    poisons = tuple(Msg(f"z/p{i}", f"poison {i}".encode()) for i in range(5))
    ordinary = [Msg(f"z/o{i}", b"fine") for i in range(6)]
    burst = [m for pair in zip(ordinary, [*poisons, A], strict=True) for m in pair]
    restarts = 0
    while True:
        record = _start(path)
        # The burst comes in two batches (the first poison in the first); a death ends the run.
        died = _died(_read(record, burst[:5], poisons), poisons) or _died(_read(record, burst[5:], poisons), poisons)
        if not died:
            break
        restarts += 1
        assert restarts <= len(poisons) + 1
    assert restarts == len(poisons) + 1  # one death in a batch, then one alone each
    assert record.set_aside_total == len(poisons) and set(record.suspects) == {mark(p) for p in poisons}


def test_each_message_set_aside_is_counted_once_across_starts(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    _read(_start(path), [B])
    second = _start(path)
    assert second.set_aside_total == 0
    assert second.first_set_aside(B) and not second.first_set_aside(B)  # the redelivery and the retained copy
    [step] = second.plan([B])
    second.begin(step)
    second.end(step)
    for _ in range(2):  # a later start: the retained copy is set aside again, not counted again
        later = _start(path)
        assert later.set_aside_total == 1 and not later.first_set_aside(B)
        later.end(later.plan([B])[0])


def test_a_death_before_the_next_step_is_begun_loses_no_count(tmp_path: Path) -> None:
    """The record is rewritten at start: a run that dies before it begins a step (while receiving a message, say)
    leaves the death it found counted, and stays careful."""
    path = tmp_path / "hubd.db.inflight"
    _read(_start(path), [A, B])
    assert _start(path).careful  # and dies at once
    third = _start(path)
    assert third.careful
    _read(third, [B])
    _start(path)  # dies at once
    assert _start(path).suspects == {mark(B): 1}


def test_a_clean_stop_while_a_step_is_read_is_no_death(tmp_path: Path) -> None:
    """The supervisor cancels the pump before it stops the bridge: a step begun and never ended is no death."""
    path = tmp_path / "hubd.db.inflight"
    record = _start(path)
    [step] = record.plan([B])
    record.begin(step)
    record.cancelled()
    record.close()
    assert _start(path).suspects == {}


def test_a_damaged_or_unwritable_record_never_stops_the_messages(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    path.write_text("{not json")
    assert _start(path).suspects == {}
    path.write_text(json.dumps({"inflight": [["z/a", "x", 1, 0], 5], "suspects": "no", "counted": 3,
                                "total": True}))
    damaged = _start(path)
    assert damaged.suspects == {} and damaged.set_aside_total == 0
    blocked = InflightRecord(tmp_path / "no-such-dir" / "hubd.db.inflight")
    blocked.load()
    [step] = blocked.plan([A])
    blocked.begin(step)  # cannot write: a warning, and the batch goes on
    blocked.end(step)
    assert blocked.plan([B])[0].messages == (B,)


def test_a_death_across_a_reboot_blames_no_message(tmp_path: Path) -> None:
    """A power cut is no poison: a record left by another boot makes the next run careful, and blames nothing."""
    path = tmp_path / "hubd.db.inflight"
    before = InflightRecord(path, Clock(), boot_id="boot-1")
    before.load()
    _read(before, [B])
    after = InflightRecord(path, Clock(), boot_id="boot-2")
    after.load()
    assert after.suspects == {} and after.careful
    assert [(s.messages, s.set_aside) for s in after.plan([B, A])] == [((B,), False), ((A,), False)]


def _die_committing(record: InflightRecord, message: Msg) -> None:
    """Read `message` alone and die once it is decoded, while its effects are committed (a kill from outside)."""
    (step,) = record.plan([message])
    record.begin(step)
    record.decoded(step)


def test_a_death_after_the_message_was_decoded_reads_it_again_alone_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    _die_committing(_start(path), A)

    again = _start(path)
    assert not again.suspects and again.careful
    assert _read(again, [A, C], poisons=()) == [((A,), False), ((C,), False)]  # read, each alone, none set aside
    assert _start(path).suspects == {} and not _on_disk(path).get("after_decode")


def test_a_message_hubd_dies_on_twice_after_decoding_it_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    _die_committing(_start(path), B)
    _die_committing(_start(path), B)

    third = _start(path)
    assert third.suspects == {mark(B): 1}
    assert _read(third, [A, B, C]) == [((A,), False), ((B,), True), ((C,), False)]


def test_a_death_while_decoding_still_sets_the_message_aside_at_once(tmp_path: Path) -> None:
    path = tmp_path / "hubd.db.inflight"
    record = _start(path)
    (step,) = record.plan([B])
    record.begin(step)  # dies while decoding: no `decoded`

    assert _start(path).suspects == {mark(B): 1}
