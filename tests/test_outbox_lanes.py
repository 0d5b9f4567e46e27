"""The outbox sender's lane index (`hubd.outbox.lanes`), pure: which pending row may go, and in what order."""

from __future__ import annotations

from hubd.events import BARRIER_LANE
from hubd.outbox.lanes import IN_FLIGHT, PendingRow, UserQueue

NOW = 1000.0


def row(row_id: int, *lanes: str, next_at: float = 0.0) -> PendingRow:
    return PendingRow(row_id, "alice", lanes, 0, next_at)


def drain(queue: UserQueue, now: float = NOW) -> list[int]:
    """Take, deliver and remove rows one at a time, as a sender with one slot would; their ids in order."""
    out = []
    while (taken := queue.take(now)) is not None:
        out.append(taken.id)
        queue.remove(taken, now)
    return out


def test_a_lane_goes_in_order_and_lanes_do_not_wait_for_each_other() -> None:
    queue = UserQueue()
    for r in (row(1, "lamp"), row(2, "lamp"), row(3, "fan")):
        queue.add(r, NOW)
    first, second = queue.take(NOW), queue.take(NOW)
    assert first is not None and second is not None
    assert (first.id, second.id) == (1, 3)  # the fan's row does not wait behind the lamp's
    assert queue.take(NOW) is None  # the lamp's second row waits for its first
    queue.remove(first, NOW)
    assert drain(queue) == [2]


def test_a_row_on_two_lanes_goes_once_it_heads_both() -> None:
    queue = UserQueue()
    for r in (row(1, "lamp"), row(2, "fan"), row(3, "lamp", "fan"), row(4, "fan")):
        queue.add(r, NOW)
    assert drain(queue) == [1, 2, 3, 4]


def test_barriers_go_first_and_alone_and_split_pieces_keep_the_batch_place() -> None:
    queue = UserQueue()
    queue.add(row(1, "lamp"), NOW)
    queue.add(row(5, BARRIER_LANE, "lamp", "fan"), NOW)  # a new grant's report
    # Pieces of a split batch that was row 3: ahead of the later grant's report (row 5).
    queue.add(row(6, f"{BARRIER_LANE}3", "lamp"), NOW)
    queue.add(row(7, f"{BARRIER_LANE}3", "fan"), NOW)
    first = queue.take(NOW)
    assert first is not None and first.id == 6
    first.state = IN_FLIGHT
    assert queue.take(NOW) is None  # a barrier goes alone
    queue.remove(first, NOW)
    assert drain(queue) == [7, 5, 1]


def test_a_barrier_never_goes_ahead_of_one_in_flight() -> None:
    queue = UserQueue()
    queue.add(row(5, BARRIER_LANE, "lamp"), NOW)
    flying = queue.take(NOW)
    assert flying is not None
    flying.state = IN_FLIGHT
    queue.add(row(6, f"{BARRIER_LANE}3", "lamp"), NOW)  # an older place, but row 5 is on its way
    assert [r.id for r in queue.barriers] == [5, 6]


def test_a_row_waiting_for_its_retry_holds_its_lane_until_due() -> None:
    queue = UserQueue()
    queue.add(row(1, "lamp", next_at=NOW + 5), NOW)
    queue.add(row(2, "lamp"), NOW)
    queue.add(row(3, "fan"), NOW)
    assert drain(queue) == [3]
    assert queue.next_due(NOW) == NOW + 5
    assert queue.next_due(NOW + 5) is None  # due: made ready
    assert drain(queue, NOW + 5) == [1, 2]


def test_a_row_back_from_flight_is_ready_again_and_endpoints_leave_out_the_barrier_mark() -> None:
    queue = UserQueue()
    queue.add(row(1, "lamp"), NOW)
    taken = queue.take(NOW)
    assert taken is not None
    taken.state = IN_FLIGHT
    queue.back(taken, NOW)
    assert drain(queue) == [1]
    assert row(2, BARRIER_LANE, "lamp", "fan").endpoints == ("lamp", "fan")
    assert row(3, "lamp").endpoints == ("lamp",)


def report(row_id: int, *lanes: str, name: str = "AddOrUpdateReport", window_end: float) -> PendingRow:
    """A fresh discovery report that may go in one message with the others of its window."""
    return PendingRow(row_id, "alice", lanes, 0, 0.0, merge=name, window_end=window_end)


def test_reports_arriving_within_a_window_share_it_and_a_later_one_opens_the_next() -> None:
    queue = UserQueue()
    assert queue.window(10.0, 0.1) == queue.window(10.05, 0.1) == queue.window(10.0999, 0.1) == 10.1
    assert queue.window(10.1, 0.1) == queue.window(10.15, 0.1) == 10.2


def test_a_windows_reports_wait_for_it_to_close_and_go_together_while_other_rows_go_at_once() -> None:
    queue = UserQueue()
    first = queue.window(10.0, 0.1)  # windows as the sender opens them: the first report's arrival
    for r in (report(1, "lamp", window_end=first), row(2, "fan"), report(3, "door", window_end=first),
              report(4, "old", name="DeleteReport", window_end=first)):
        queue.add(r, NOW)
    assert queue.take_window(10.05, 100) == []
    assert queue.next_window(10.05) == 10.1
    assert drain(queue) == [2]  # the fan's change does not wait for the window
    queue.add(report(5, "hall", window_end=queue.window(10.1, 0.1)), NOW)  # arrived as the first one closed
    together = queue.take_window(10.1, 100)
    assert [r.id for r in together] == [1, 3]  # the DeleteReport goes in a message of its own
    assert [r.id for r in queue.take_window(10.1, 100)] == [4]
    assert queue.take_window(10.1, 100) == []  # row 5 is in the next window
    assert queue.next_window(10.1) == 10.2
    assert [r.id for r in queue.take_window(10.2, 100)] == [5]


def test_a_window_beyond_the_endpoint_limit_goes_in_several_messages_in_order() -> None:
    queue = UserQueue()
    queue.add(report(1, "a", "b", window_end=10.1), NOW)
    queue.add(report(2, "c", "d", window_end=10.1), NOW)
    queue.add(report(3, "e", window_end=10.1), NOW)
    assert [r.id for r in queue.take_window(10.1, 3)] == [1]  # 1 and 2 would be four endpoints
    assert [r.id for r in queue.take_window(10.1, 3)] == [2, 3]


def test_a_merged_report_heads_its_parts_lanes_and_their_events_wait_for_it() -> None:
    queue = UserQueue()
    for r in (report(1, "lamp", window_end=10.1), report(2, "door", window_end=10.1), row(3, "door"),
              row(4, "lamp")):
        queue.add(r, NOW)
    first, part = queue.take_window(10.1, 100)
    first.state = part.state = IN_FLIGHT
    queue.absorb(first, [part])
    assert first.endpoints == ("lamp", "door") and set(queue.rows) == {1, 3, 4}
    assert queue.take(NOW) is None  # the door's change waits behind the merged report, which now heads its lane
    first.merge = ""  # as the sender does before the POST: its messageId is on the wire
    queue.back(first, NOW)  # a failed try: it is ready again, as any row
    assert drain(queue) == [1, 3, 4]


def test_a_barrier_holds_back_a_closed_window() -> None:
    queue = UserQueue()
    queue.add(report(1, "lamp", window_end=10.1), NOW)
    queue.add(row(2, BARRIER_LANE, "lamp"), NOW)
    assert queue.take_window(10.1, 100) == [] and queue.next_window(10.0) is None
    assert drain(queue) == [2]
    assert [r.id for r in queue.take_window(10.1, 100)] == [1]
