"""One try of one outbox row, and what becomes of the row (`Outcome`); the sender applies it to its index.

What the event gateway's answer makes of a row: 2xx delivered; a row's first 401/403 in a row refreshes the
token in the background and resends with the same messageId, then a 403 ends the grant (if the refused token
is still the grant's) and a 401 backs off; 400/422 dead-letter (a batched AddOrUpdateReport or DeleteReport
refused with 400 is first split into one message per endpoint, so one bad endpoint dead-letters only itself);
anything else (5xx, 429, other 4xx, timeouts, and any unexpected error, logged with its traceback) backs off
(cap RETRY_CAP_S) and tries again. A dead letter or a split the disk refuses (`StorageUnavailable`) backs off.
Every try is told to a `DeliveryObserver` (the event journal of the status page: sending, delivered, retrying and
why, given up on, held back, merged into another's message), and each event delivered or given up on is one line
on the `hubd.events` logger (`delivered ChangeReport <messageId> for user u1: lamp (Switch=On) in 3 ms`, info, off
with `log.events: false`; `gave up on ...` is an error and always logged); never a token (stored bodies hold
none).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol

from hubd.cloud.messages import with_token_json
from hubd.errors import CloudAuthError, CloudRejected, CloudUnavailable, StorageUnavailable
from hubd.lifecycle import Backoff, Clock
from hubd.metrics import Metrics
from hubd.outbox.journal import EventRef, describe
from hubd.outbox.lanes import PendingRow
from hubd.store.outbox import Loaded, OutboxRepo

log = logging.getLogger("hubd.outbox")  # the sender's logger: its lines keep one name
# One line per platform event delivered (info; `log.events: false` quiets them) or given up on (error).
events_log = logging.getLogger("hubd.events")

RETRY_CAP_S = 60.0
# Names whose batched form is split, one endpoint per message, when the platform refuses the batch (400).
SPLITTABLE = frozenset({"AddOrUpdateReport", "DeleteReport"})

# What becomes of a row after a try:
#   done     delivered (or no longer in the outbox): out of the index; its row is deleted soon after
#   dead     refused for good: moved to the dead letters, out of the index
#   split    a batch refused as a whole: replaced by its pieces (already indexed, as barriers), out of the index
#   backoff  a failed try: stays, and goes again at its retry time (exponential backoff, cap RETRY_CAP_S)
#   resend   its token was refused or replaced: stays, and goes again at once, with the same messageId, as soon
#            as the user has a token (a refresh was started)
#   paused   the user's grant ended: stays, and goes only once the user binds again
Outcome = Literal["done", "dead", "split", "backoff", "resend", "paused"]


class DeliveryObserver(Protocol):
    """What becomes of each event (the event journal, `hubd.outbox.journal`): called on the loop, each call O(1)."""

    def queued(self, event: EventRef, at: float) -> None:
        """The sender indexed a row of the outbox: it waits for its turn."""

    def sending(self, event: EventRef, body: str, at: float) -> None:
        """It is on its way (`body`: its stored JSON text, which holds no token)."""

    def delivered(self, event: EventRef, attempts: int, at: float) -> None:
        """The platform accepted it at the `attempts`-th try."""

    def failed(self, event: EventRef, attempts: int, error: str, at: float, *, retry_at: float | None) -> None:
        """A try failed: retried at `retry_at`, or (None) given up on: moved to the dead letters."""

    def held(self, event: EventRef, reason: str, at: float) -> None:
        """Not sent for now, not a failed try: a token refresh, a grant that ended, a batch resent in pieces."""

    def merged(self, event: EventRef, rows: Sequence[int], at: float) -> None:
        """These rows (queued, never sent) became part of `event`'s row: one message, with all their endpoints."""


class PlatformApi(Protocol):
    """What the sender needs of the platform client."""

    async def post_event(self, body: dict[str, Any] | str) -> None:
        """POST one message (a dict or its JSON text); raise CloudUnavailable / CloudRejected / CloudAuthError."""


class TokenSource(Protocol):
    """What the sender needs of the token manager."""

    def is_active(self, user_id: str) -> bool:
        """True when the user's grant is active."""

    def token_now(self, user_id: str) -> str | None:
        """A token to send with now, or None while it is being refreshed; never waits."""

    def invalidate(self, user_id: str, token: str) -> None:
        """The event API refused this token: refresh in the background (no-op if already replaced)."""

    async def revoked(self, user_id: str, token: str, reason: str) -> bool:
        """The event API refused `token` again after a refresh: end the grant if `token` is still its token.

        False when `token` was replaced meanwhile (a refresh, or the user bound again): the row may go again.
        """

    def activations(self) -> int:
        """How many times a grant became active (any user) since start."""

    def activated(self, user_id: str) -> int:
        """`activations()` as it was when this user's grant last became active; 0: not since start."""


class Delivery:
    """Sends one row with a token and says what became of it; counts, logs and reports every try."""

    def __init__(self, store: OutboxRepo, api: PlatformApi, tokens: TokenSource, *, clock: Clock, metrics: Metrics,
                 observer: DeliveryObserver | None, log_events: bool, load_new: Callable[[], Awaitable[None]],
                 label: Callable[[str], str] | None = None) -> None:
        self._store = store
        self._api = api
        self._tokens = tokens
        self._clock = clock
        self._observer = observer
        self._log_events = log_events  # `log.events`: the info line per delivered event
        self._load_new = load_new  # the sender's load of new rows: a split's pieces, before the batch leaves
        self._label = label  # a device's name and id for log lines ("Desk Lamp (lamp-1)"); None: its id
        self._sent = metrics.counter("hubd_events_sent_total", "events the platform accepted, by name", "name")
        self._failed = metrics.counter("hubd_event_send_failures_total", "failed sends, by reason", "reason")
        self._dead = metrics.counter("hubd_events_dead_lettered_total", "events the platform refused for good")

    async def send(self, row: PendingRow, token: str, loaded: Loaded | None, event: EventRef | None) -> Outcome:
        """One try: `loaded` is the row's stored name, body, messageId and time (None: no longer stored)."""
        if loaded is None or event is None:
            return "done"  # no longer in the outbox (dropped or removed meanwhile)
        name, body, _, _ = loaded
        if self._observer is not None:
            self._observer.sending(event, body, self._clock.time())
        try:
            # The stored JSON text goes out as is, with the token spliced in: no parse, no re-encode.
            await self._api.post_event(with_token_json(body, token))
        except CloudAuthError as err:
            return await self._refused(row, event, token, err)
        except CloudUnavailable as err:
            row.refusals = 0  # the next 401/403 is a first one again: it gets its refresh
            return await self._try_later(row, event, str(err), "unavailable")
        except CloudRejected as err:
            if err.status == 400 and name in SPLITTABLE and len(row.endpoints) > 1:
                return await self._split(row, event, err)
            now = self._clock.time()
            try:
                await self._store.dead_letter(row.id, err.status, err.body[:4000], now)
            except StorageUnavailable as store_err:
                return await self._try_later(row, event, f"refused (HTTP {err.status}), and the move to dead "
                                                         f"letters failed: {store_err}", "storage")
            self._dead.inc()
            answer = f"HTTP {err.status}: {err.body[:300]}"
            if self._observer is not None:
                self._observer.failed(event, row.attempts + 1, answer, now, retry_at=None)
            events_log.error("gave up on %s %s for user %s: %s (%s), moved to dead letters", name, event.message_id,
                             row.user_id, _Description(event, body, self._label), answer)
            return "dead"
        self._sent.inc(label=name)
        now = self._clock.time()
        if self._observer is not None:
            self._observer.delivered(event, row.attempts + 1, now)
        if self._log_events and events_log.isEnabledFor(logging.INFO):
            events_log.info("delivered %s %s for user %s: %s in %s%s", name, event.message_id, row.user_id,
                            _Description(event, body, self._label), _took(now - event.created_at),
                            f" (try {row.attempts + 1})" if row.attempts else "")
        return "done"

    def unexpected(self, row: PendingRow, event: EventRef | None) -> Outcome:
        """Called in an `except`: log the error with its traceback, count it, retry the row with backoff."""
        delay = self._back_off(row)
        self._failed.inc(label="error")
        log.error("delivery of %s for user %s failed unexpectedly (attempt %d), retrying in %.1f s",
                  self._what(row, event), row.user_id, row.attempts, delay, exc_info=True)
        if self._observer is not None and event is not None:
            err = sys.exception()
            self._observer.failed(event, row.attempts, f"hubd failed unexpectedly ({type(err).__name__}: {err})",
                                  self._clock.time(), retry_at=row.next_attempt_at)
        return "backoff"

    async def _refused(self, row: PendingRow, event: EventRef, token: str, err: CloudAuthError) -> Outcome:
        """401/403. The row's first in a row: refresh (in the background) and resend at once. After that a
        403 ends the grant, unless `token` was replaced meanwhile (then resend); a 401 backs off.

        Counted per row, not by comparing tokens: a refresh may hand back the same access token.
        """
        user = row.user_id
        if not self._tokens.is_active(user):
            self._failed.inc(label="grant_ended")  # the grant ended meanwhile: keep the row until a new one
            self._held(event, "kept until the user links again (their grant ended)")
            return "paused"
        row.refusals += 1
        if row.refusals == 1:
            self._failed.inc(label="403" if err.fatal else "401")
            self._tokens.invalidate(user, token)  # a no-op if `token` was already replaced
            self._held(event, f"the platform refused the token ({err}); resent once it is refreshed")
            return "resend"  # same row, same messageId, once the token is refreshed
        if err.fatal:
            if await self._tokens.revoked(user, token, f"event API refused the token after a refresh: {err}"):
                self._failed.inc(label="revoked")
                self._held(event, "kept until the user links again (the platform refused their token after a "
                                  "refresh)")
                return "paused"
            row.refusals = 0  # a late 403 for a replaced token says nothing about the current one
            self._failed.inc(label="403")
            self._held(event, f"the platform refused a replaced token ({err}); resent with the current one")
            return "resend"
        self._tokens.invalidate(user, token)
        return await self._try_later(row, event, f"token refused after a refresh: {err}", "auth")

    def _what(self, row: PendingRow, event: EventRef | None) -> str:
        """An event as a retry's log line names it: "ChangeReport <messageId>: Desk Lamp (lamp-1)"."""
        if event is None:
            return f"outbox row {row.id}"
        return f"{event.name} {event.message_id}: {_Description(event, None, self._label)}"

    def _held(self, event: EventRef, reason: str) -> None:
        if self._observer is not None:
            self._observer.held(event, reason, self._clock.time())

    def _back_off(self, row: PendingRow) -> float:
        """Count a failed attempt and set the row's next attempt time; return the delay."""
        row.attempts += 1
        if row.backoff is None:
            row.backoff = Backoff(initial_s=1.0, cap_s=RETRY_CAP_S)
        delay = row.backoff.next_delay()
        row.next_attempt_at = self._clock.time() + delay
        return delay

    async def _try_later(self, row: PendingRow, event: EventRef, error: str, reason: str) -> Outcome:
        """A failed try: back off, count `reason`, log and report it, note it in the row (for a restart)."""
        delay = self._back_off(row)
        self._failed.inc(label=reason)
        log.warning("delivery of %s for user %s failed (attempt %d), retrying in %.1f s: %s",
                    self._what(row, event), row.user_id, row.attempts, delay, error[:200])
        if self._observer is not None:
            self._observer.failed(event, row.attempts, error, self._clock.time(), retry_at=row.next_attempt_at)
        # The row's attempts and retry time are in memory too: a refused write only makes a restart forget them.
        with contextlib.suppress(StorageUnavailable):
            await self._store.note_retry(row.id, row.attempts, row.next_attempt_at, error[:500])
        return "backoff"

    async def _split(self, row: PendingRow, event: EventRef, err: CloudRejected) -> Outcome:
        """A batch refused as a whole: resend it one endpoint per message, in its place (barriers go first)."""
        try:
            count = await self._store.split(row.id)
        except StorageUnavailable as store_err:
            return await self._try_later(row, event, f"refused as a batch (HTTP {err.status}), and splitting it "
                                                     f"failed: {store_err}", "storage")
        log.warning("platform rejected a %s of %d endpoints for user %s (HTTP %d: %s); resending them one by one",
                    event.name, count, row.user_id, err.status, err.body[:300])
        self._held(event, f"refused as a batch (HTTP {err.status}); resent as {count} messages, one per endpoint")
        await self._load_new()  # the pieces, before the row behind it in any lane may go
        return "split"


class _Description:
    """An event's description for a log line, made only if the line is written (it may parse the body)."""

    __slots__ = ("body", "event", "label")

    def __init__(self, event: EventRef, body: str | None, label: Callable[[str], str] | None) -> None:
        self.event = event
        self.body = body
        self.label = label

    def __str__(self) -> str:
        endpoints = self.event.endpoints if self.label is None or len(self.event.endpoints) > 4 else \
            tuple(self.label(e) for e in self.event.endpoints)  # "Desk Lamp (lamp-1)"
        return describe(self.event.name, endpoints, self.body)


def _took(seconds: float) -> str:
    """A latency for a log line: "3 ms", "1.2 s", "4 min"."""
    seconds = max(0.0, seconds)
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120.0:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.0f} min"
