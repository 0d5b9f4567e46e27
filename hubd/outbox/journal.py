"""The event journal: a bounded, in-memory record of the latest platform events and of what went wrong.

A passive recorder. The outbox sender tells it what becomes of each platform event (written to the outbox and
waiting, sending, delivered, retrying and why, given up on, held back), the device registry tells it which
device messages it refused and why and what else it noticed (a doorbell's burst of presses); the status page
(`status/routes.py`) reads it. It calls nobody and stores nothing on disk: a restart starts it empty (the outbox
and the dead letters stay the record of truth).

Bounded and cheap on the hot path: every record is a dict update plus at most one eviction (O(1)); the latest
MAX_EVENTS events, MAX_PROBLEMS refused device messages (one entry per topic and reason, counted) and
MAX_PROBLEMS failed deliveries (one per user, event name and error, counted). An event's description ("lamp
(Switch=ON)") is made from its body only when someone reads it (`describe`), and only ChangeReport and Response
bodies are kept for that (small; stored bodies never hold a token, it is added at send time).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

MAX_EVENTS = 100
MAX_PROBLEMS = 50
MAX_TEXT = 300  # characters of a reason or an error kept
MAX_DETAIL = 160  # characters of an event's description
MAX_BODY = 8192  # a body longer than this is not kept for its description
DESCRIBED_BY_BODY = frozenset({"ChangeReport", "Response"})  # the others are described by their endpoints

Status = Literal["waiting", "sending", "delivered", "retrying", "dead", "held"]


@dataclass(frozen=True, slots=True)
class EventRef:
    """One outbox row: a platform event for one user. `created_at`: when it was written to the outbox."""

    row_id: int
    user_id: str
    name: str
    message_id: str
    endpoints: tuple[str, ...]
    created_at: float


class _Event:
    """What the journal knows of one event; updated in place as it goes."""

    __slots__ = ("attempts", "body", "delivered_at", "detail", "error", "ref", "retry_at", "status", "updated_at")

    def __init__(self, ref: EventRef, at: float) -> None:
        self.ref = ref
        self.status: Status = "waiting"
        self.attempts = 0
        self.error: str | None = None
        self.updated_at = at
        self.delivered_at: float | None = None
        self.retry_at: float | None = None
        self.body: str | None = None  # kept until described
        self.detail: str | None = None

    def keep_body(self, body: str) -> None:
        if self.detail is None and self.ref.name in DESCRIBED_BY_BODY and len(body) <= MAX_BODY:
            self.body = body

    def as_json(self) -> dict[str, Any]:
        ref = self.ref
        detail = self.detail
        if detail is None:
            detail = describe(ref.name, ref.endpoints, self.body)
            if self.body is not None or ref.name not in DESCRIBED_BY_BODY:  # final: made from all there is
                self.detail, self.body = detail, None
        latency = None if self.delivered_at is None else max(0.0, self.delivered_at - ref.created_at)
        return {"userId": ref.user_id, "name": ref.name, "messageId": ref.message_id, "endpoints": list(ref.endpoints),
                "detail": detail, "status": self.status, "error": self.error, "attempts": self.attempts,
                "createdAt": ref.created_at, "updatedAt": self.updated_at, "deliveredAt": self.delivered_at,
                "retryAt": self.retry_at, "latencyMs": None if latency is None else round(latency * 1000)}


class _Problem:
    """A recurring problem: first and last time, how often, and one example of what it concerned."""

    __slots__ = ("count", "first", "last", "subject")

    def __init__(self, at: float, subject: str) -> None:
        self.first = self.last = at
        self.count = 1
        self.subject = subject


class EventJournal:
    """The latest platform events with their delivery status, refused device messages and failed deliveries."""

    def __init__(self, *, max_events: int = MAX_EVENTS, max_problems: int = MAX_PROBLEMS) -> None:
        self._max_events = max_events
        self._max_problems = max_problems
        self._events: OrderedDict[int, _Event] = OrderedDict()  # by outbox row id, oldest first
        self._rejected: OrderedDict[tuple[str, str], _Problem] = OrderedDict()  # (topic, reason), least recent first
        self._failed: OrderedDict[tuple[str, str, str], _Problem] = OrderedDict()  # (user, event name, error)
        self._notices: OrderedDict[tuple[str, str], _Problem] = OrderedDict()  # (subject, problem)
        self._users: dict[str, tuple[float | None, str | None, float | None]] = {}  # delivered at, error, error at

    # --- what the outbox sender reports (hubd.outbox.delivery.DeliveryObserver) -----------------------------

    def queued(self, event: EventRef, at: float) -> None:
        """The sender took up a row written to the outbox: waiting for its turn."""
        if event.row_id not in self._events:
            self._entry(event, at)

    def sending(self, event: EventRef, body: str, at: float) -> None:
        """The event is on its way (`body`: its stored JSON text, which holds no token)."""
        entry = self._entry(event, at)
        entry.status, entry.updated_at, entry.retry_at = "sending", at, None
        entry.keep_body(body)

    def delivered(self, event: EventRef, attempts: int, at: float) -> None:
        """The platform accepted the event, at the `attempts`-th try."""
        entry = self._entry(event, at)
        entry.status, entry.attempts, entry.updated_at, entry.delivered_at = "delivered", attempts, at, at
        entry.error = entry.retry_at = None
        _, error, error_at = self._users.get(event.user_id, (None, None, None))
        self._users[event.user_id] = (at, error, error_at)

    def failed(self, event: EventRef, attempts: int, error: str, at: float, *, retry_at: float | None) -> None:
        """A try failed: retried at `retry_at`, or (None) given up on and moved to the dead letters."""
        error = error[:MAX_TEXT]
        entry = self._entry(event, at)
        entry.status = "dead" if retry_at is None else "retrying"
        entry.attempts, entry.error, entry.updated_at, entry.retry_at = attempts, error, at, retry_at
        delivered_at, _, _ = self._users.get(event.user_id, (None, None, None))
        self._users[event.user_id] = (delivered_at, error, at)
        self._count(self._failed, (event.user_id, event.name, error), at, event.message_id, self._max_problems)

    def held(self, event: EventRef, reason: str, at: float) -> None:
        """Not sent for now, and not a failure of the delivery: a token being refreshed, a grant that ended, a
        batch resent in pieces."""
        entry = self._entry(event, at)
        entry.status, entry.error, entry.updated_at, entry.retry_at = "held", reason[:MAX_TEXT], at, None

    def merged(self, event: EventRef, rows: Sequence[int], at: float) -> None:
        """Discovery reports of one window became one message, `event` (its row, with every endpoint): the other
        rows are no events of their own any more."""
        for row_id in rows:
            self._events.pop(row_id, None)
        entry = self._entry(event, at)
        entry.ref, entry.detail, entry.updated_at = event, None, at

    # --- what the device registry reports (hubd.problems.RejectionObserver) ---------------------------------

    def rejected(self, topic: str, reason: str, at: float) -> None:
        """A device message was refused (invalid, or hubd failed on it)."""
        self._count(self._rejected, (topic, reason[:MAX_TEXT]), at, topic, self._max_problems)

    def noticed(self, subject: str, problem: str, at: float) -> None:
        """Something else went wrong for `subject` (a device, a webhook, a speaker): a burst of presses, a refused
        webhook call, a speaker's failed command. One entry per subject and problem, counted."""
        self._count(self._notices, (subject, problem[:MAX_TEXT]), at, subject, self._max_problems)

    # --- what the status page reads ----------------------------------------------------------------------

    def events(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The latest events, newest first."""
        entries = list(reversed(self._events.values()))
        return [e.as_json() for e in entries[:limit]]

    def rejected_messages(self) -> list[dict[str, Any]]:
        """Refused device messages, most recent first: topic, reason, first and last time, how many."""
        return [{"topic": topic, "reason": reason, "firstSeen": p.first, "lastSeen": p.last, "count": p.count}
                for (topic, reason), p in reversed(self._rejected.items())]

    def notices(self) -> list[dict[str, Any]]:
        """Other problems, most recent first: what they concern, the problem, first and last time, how many."""
        return [{"subject": subject, "problem": problem, "firstSeen": p.first, "lastSeen": p.last, "count": p.count}
                for (subject, problem), p in reversed(self._notices.items())]

    def failed_deliveries(self) -> list[dict[str, Any]]:
        """Failed tries, most recent first: user, event name, error, first and last time, how many, the last
        messageId."""
        return [{"userId": user, "name": name, "error": error, "firstSeen": p.first, "lastSeen": p.last,
                 "count": p.count, "messageId": p.subject}
                for (user, name, error), p in reversed(self._failed.items())]

    def user(self, user_id: str) -> dict[str, Any]:
        """When the user's last event was delivered, and their last failed try (error and time)."""
        delivered_at, error, error_at = self._users.get(user_id, (None, None, None))
        return {"lastDeliveredAt": delivered_at,
                "lastDeliveryError": None if error is None else {"error": error, "at": error_at}}

    # --- internals -----------------------------------------------------------------------------------------

    def _entry(self, event: EventRef, at: float) -> _Event:
        entry = self._events.get(event.row_id)
        if entry is None:
            entry = self._events[event.row_id] = _Event(event, at)
            if len(self._events) > self._max_events:
                self._events.popitem(last=False)
        return entry

    @staticmethod
    def _count(table: OrderedDict[Any, _Problem], key: Any, at: float, subject: str, limit: int) -> None:
        problem = table.get(key)
        if problem is None:
            table[key] = _Problem(at, subject)
            if len(table) > limit:
                table.popitem(last=False)
            return
        problem.count += 1
        problem.last = at
        problem.subject = subject
        table.move_to_end(key)


def describe(name: str, endpoints: Sequence[str], body: str | None) -> str:
    """A short description of an event: its endpoint(s), and for a ChangeReport or Response the states it carries
    (from the body, when given). Never the header: no correlationToken, no authorization."""
    states = _states(name, body) if body is not None else None
    if states:
        return _cut(f"{', '.join(endpoints)} ({states})")
    if len(endpoints) > 4:
        return _cut(f"{', '.join(endpoints[:3])} and {len(endpoints) - 3} more")
    return _cut(", ".join(endpoints))


def _states(name: str, body: str) -> str | None:
    try:
        message = json.loads(body)
        if name == "ChangeReport":
            items = message["payload"]["change"]["states"]
        elif name == "Response":
            items = message["endpoint"]["states"]
        else:
            return None
        return ", ".join(f"{s['interface']}={_value(s['value'])}" for s in items)
    except (ValueError, KeyError, TypeError):
        return None


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL - 1] + "…"
