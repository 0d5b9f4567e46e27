"""Resent directives (the platform resends one it got no answer to, with the same messageId): a copy gets the
first answer, and a control never runs twice, not even across a restart.

Owns the replies remembered in memory for DUPLICATE_TTL_S, by (hubd account, messageId, content), and
their durable copy (hubd.store.replies): a control's reply is written to SQLite *before* its `set` is
published (`claim`, on the request path), so a resend after a restart is answered from there. The
rest of the writes (the reply that went out, removing the row of a try that never published, pruning)
are queued and done in order by run(), which the control component runs in its TaskGroup; a claim first reserves
the place of its later write, so the removal of a row that never published is never dropped (a claim
finds no place: E_ENDPOINT_BUSY, nothing sent). A claim overwrites only a row of one of this process's
tries that never published; any other row, such as one from before a restart, is the answer. While the disk
refuses writes (`StorageUnavailable`), a claim fails at once (E_ENDPOINT_BUSY, nothing sent) and run() holds
the queued write, in its place, until the database takes writes again. Transient
refusals (busy, unreachable) are not remembered: nothing ran, so a retry runs. Imports
hubd.directives.message for the Directive only; no MQTT, no registry.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from hubd.directives.message import BUSY, Directive
from hubd.errors import DirectiveError, StorageUnavailable, StoreError
from hubd.metrics import Metrics
from hubd.store.replies import ReplyKey, StoredReply

log = logging.getLogger(__name__)

DUPLICATE_TTL_S = 600.0  # the platform's resends come within about 10 minutes
DUPLICATE_MAX = 10_000
WRITES_MAX = 1_000
PRUNE_EVERY_S = 60.0
# Refusals that mean "nothing ran, try again": a resend runs instead of getting them back.
TRANSIENT = frozenset({BUSY, "E_ENDPOINT_UNREACHABLE", "E_GATEWAY_UNREACHABLE"})

Outcome = dict[str, Any] | DirectiveError


class ReplyStore(Protocol):
    """hubd.store.replies.DirectiveReplyRepo: first replies that survive a restart."""

    async def claim(self, key: ReplyKey, attempt: str, reply: dict[str, Any], now: float, *,
                    replaceable: frozenset[str]) -> StoredReply | None:
        """Write the reply for `key` (None), overwriting only a row of a `replaceable` attempt; or return the
        row already there."""

    async def find(self, key: ReplyKey) -> StoredReply | None:
        """The remembered reply, if any."""

    async def finish(self, key: ReplyKey, attempt: str, reply: dict[str, Any]) -> None:
        """Store the reply that went out."""

    async def release(self, key: ReplyKey, attempt: str) -> None:
        """Forget the row of a try that never published."""

    async def prune(self, before: float) -> int:
        """Forget rows older than `before` (epoch seconds)."""

    async def writable(self) -> None:
        """Return once the database takes writes again."""


@dataclass(slots=True)
class Attempt:
    """One try at a directive: its key, its stored row's id, and the reply to give should it be cut off
    once its `set` may have gone out (`fallback`, set by the handler just before it publishes, and back to
    None if the `set` never left hubd).

    `reserved` while it holds a place in the write queue for its finish or release (from its claim on); a
    claimed try that ends neither finished nor with a `fallback` is released by once().
    """

    key: ReplyKey
    id: str
    fallback: dict[str, Any] | None = None
    reserved: bool = False


@dataclass(frozen=True, slots=True)
class _Finish:
    key: ReplyKey
    attempt: str
    reply: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Release:
    key: ReplyKey
    attempt: str


class Replay:
    """Runs each directive once per key and remembers its reply, in memory and (for controls) in SQLite."""

    def __init__(self, store: ReplyStore, metrics: Metrics) -> None:
        self._store = store
        # Never full: a claim reserves the place of its finish or release first (at most WRITES_MAX in all), so
        # a release, which a restart depends on, is never dropped.
        self._writes: asyncio.Queue[_Finish | _Release] = asyncio.Queue()
        self._reserved = 0
        # Releases that failed in the database, tried again at the next prune.
        self._retry: list[_Release] = []
        # key -> (loop time received, the reply, resolved once known)
        self._replies: OrderedDict[ReplyKey, tuple[float, asyncio.Future[Outcome]]] = OrderedDict()
        # key -> attempts of this process that never published and whose row may still be in the database (their
        # release is not done yet). Only such a row is overwritten by the next try or ignored as an answer; any
        # other row (from before a restart, say) is the answer.
        self._released: OrderedDict[ReplyKey, set[str]] = OrderedDict()
        self._resends = metrics.counter("hubd_directive_resends_total",
                                        "directives resent with a known messageId, answered from memory or SQLite")

    async def once(self, directive: Directive,
                   handler: Callable[[Directive, Attempt], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Run a handler once per key; a resend (even while the first still runs) gets the first reply."""
        loop = asyncio.get_running_loop()
        key = _key(directive)
        self._prune(loop.time())
        known = self._replies.get(key)
        if known is not None:
            self._resends.inc()
            log.info("directive %s %s is a resend; answering with the first reply", directive.message_id,
                     directive.name)
            try:
                async with asyncio.timeout_at(directive.deadline):
                    outcome = await asyncio.shield(known[1])
            except TimeoutError:
                raise DirectiveError(BUSY, "the first copy of this message is still running") from None
        else:
            attempt = Attempt(key, uuid.uuid4().hex)
            future: asyncio.Future[Outcome] = loop.create_future()
            self._replies[key] = (loop.time(), future)
            outcome = DirectiveError(BUSY, "the directive was cut off before its set was sent")
            try:
                outcome = await handler(directive, attempt)
            except DirectiveError as err:
                outcome = err
            except asyncio.CancelledError:
                if attempt.fallback is not None:  # the set may have gone out: a resend must not run it again
                    outcome = attempt.fallback
                raise
            finally:
                if attempt.reserved:  # claimed, not finished
                    if attempt.fallback is None:
                        self._release(attempt)  # its set never went out
                    else:
                        self._unreserve(attempt)  # its set may have gone out: the claimed row is the answer
                future.set_result(outcome)
                entry = self._replies.get(key)
                if isinstance(outcome, DirectiveError) and outcome.name in TRANSIENT and entry is not None and \
                        entry[1] is future:
                    del self._replies[key]
        if isinstance(outcome, DirectiveError):
            raise DirectiveError(outcome.name, outcome.message)
        return outcome

    async def claim(self, attempt: Attempt, reply: dict[str, Any], deadline: float) -> dict[str, Any] | None:
        """Store `reply` for the attempt before its `set` goes out (None); or the reply of an earlier run.

        E_ENDPOINT_BUSY if the database does not answer by `deadline`, or too many writes wait for it: then
        nothing may be sent, and once() queues the removal of what the claim may still write (nothing to remove
        when the disk refused it).
        """
        if self._writes.qsize() + self._reserved >= WRITES_MAX:
            log.warning("directive %s: %d directive reply writes are waiting for the database; not sent: %s",
                        attempt.key.message_id, self._writes.qsize() + self._reserved, BUSY)
            raise DirectiveError(BUSY, "the hub's database is behind; nothing was sent, try again")
        attempt.reserved = True
        self._reserved += 1
        replaceable = frozenset(self._released.get(attempt.key, ()))
        try:
            async with asyncio.timeout_at(deadline):
                stored = await self._store.claim(attempt.key, attempt.id, reply, time.time(),
                                                 replaceable=replaceable)
        except StorageUnavailable as err:
            self._unreserve(attempt)  # rolled back: there is no row to release
            log.warning("directive %s: the database refuses writes (%s); not sent: %s", attempt.key.message_id,
                        err, BUSY)
            raise DirectiveError(BUSY, "the hub's disk refuses writes; nothing was sent, try again") from err
        except (TimeoutError, StoreError) as err:
            # The claim may still land in the database after this: its release removes it, and until then the
            # next try may overwrite it (it is one of ours). Only if hubd dies before the release is written does
            # that row outlive it, and a resend after the restart gets its target states though nothing was sent.
            log.warning("directive %s: the database did not record it in time (%s); not sent: %s",
                        attempt.key.message_id, str(err) or "timed out", BUSY)
            raise DirectiveError(BUSY, "the hub's database did not answer in time; nothing was sent, try "
                                       "again") from err
        if stored is None:
            return None
        self._unreserve(attempt)
        return self._answered_before(attempt.key, stored)

    async def stored(self, key: ReplyKey, deadline: float) -> dict[str, Any] | None:
        """The stored reply of an earlier run of this directive (before a restart), if the database has one."""
        try:
            async with asyncio.timeout_at(deadline):
                found = await self._store.find(key)
        except (TimeoutError, StoreError):
            return None
        if found is None or found.attempt in self._released.get(key, ()):  # a try of ours that never published
            return None
        return self._answered_before(key, found)

    def finish(self, attempt: Attempt, reply: dict[str, Any]) -> None:
        """Queue the reply that went out, to replace the claimed one."""
        self._unreserve(attempt)
        self._writes.put_nowait(_Finish(attempt.key, attempt.id, reply))

    def _release(self, attempt: Attempt) -> None:
        """The attempt's `set` never went out: queue the removal of its row; until then the next try of the same
        directive overwrites that row."""
        self._unreserve(attempt)
        self._released.setdefault(attempt.key, set()).add(attempt.id)
        self._released.move_to_end(attempt.key)
        self._writes.put_nowait(_Release(attempt.key, attempt.id))

    async def run(self) -> None:
        """Store finished replies, remove released rows, prune old ones: in order, one at a time."""
        loop = asyncio.get_running_loop()
        next_prune = loop.time()
        while True:
            op: _Finish | _Release | None = None
            try:
                async with asyncio.timeout_at(next_prune):
                    op = await self._writes.get()
            except TimeoutError:
                next_prune = loop.time() + PRUNE_EVERY_S
                self._requeue_failed()
            await self._apply(op)

    async def flush(self, timeout_s: float) -> None:
        """Write what is still queued (at shutdown, after run() ended), for at most timeout_s."""
        self._requeue_failed()
        try:
            async with asyncio.timeout(timeout_s):
                while not self._writes.empty():
                    await self._apply(self._writes.get_nowait())
        except TimeoutError:
            log.warning("%d directive reply writes not done at shutdown", self._writes.qsize())

    async def _apply(self, op: _Finish | _Release | None) -> None:
        try:
            while True:
                try:
                    await self._apply_once(op)
                    return
                except StorageUnavailable as err:
                    if op is None:
                        log.debug("remembered directive replies not pruned: %s", err)
                        return
                    await self._store.writable()  # the Database logged the outage; this write keeps its place
        except StoreError as err:
            log.warning("remembered directive replies: %s", err)
            if isinstance(op, _Release) and len(self._retry) < DUPLICATE_MAX:
                self._retry.append(op)  # its row must go, or a restart would answer "ran before"

    async def _apply_once(self, op: _Finish | _Release | None) -> None:
        if isinstance(op, _Finish):
            await self._store.finish(op.key, op.attempt, op.reply)
        elif isinstance(op, _Release):
            await self._store.release(op.key, op.attempt)
            self._forget_release(op)
        else:
            removed = await self._store.prune(time.time() - DUPLICATE_TTL_S)
            log.debug("pruned %d remembered directive replies", removed)

    def _requeue_failed(self) -> None:
        for op in self._retry:
            self._writes.put_nowait(op)
        self._retry.clear()

    def _forget_release(self, op: _Release) -> None:
        """The row is gone (a late claim of that attempt, submitted before, cannot land after this)."""
        ids = self._released.get(op.key)
        if ids is not None:
            ids.discard(op.attempt)
            if not ids:
                del self._released[op.key]

    def _unreserve(self, attempt: Attempt) -> None:
        if attempt.reserved:
            attempt.reserved = False
            self._reserved -= 1

    def _answered_before(self, key: ReplyKey, stored: StoredReply) -> dict[str, Any]:
        self._resends.inc()
        log.info("directive %s ran before (%s): answering with its first reply", key.message_id,
                 "done" if stored.done else "unfinished: the target states")
        return stored.reply

    def _prune(self, now: float) -> None:
        while self._replies:
            received_at, _ = next(iter(self._replies.values()))
            if now - received_at < DUPLICATE_TTL_S and len(self._replies) < DUPLICATE_MAX:
                break
            self._replies.popitem(last=False)
        while len(self._released) > DUPLICATE_MAX:  # only releases that keep failing in the database stay long
            self._released.popitem(last=False)


def _key(directive: Directive) -> ReplyKey:
    """What makes a message a resend: same account, messageId and content (a token refresh in between is fine)."""
    endpoint_id = (directive.endpoint or {}).get("endpointId")
    content = json.dumps([directive.namespace, directive.name, str(endpoint_id), directive.payload],
                         sort_keys=True, separators=(",", ":"), default=str)
    return ReplyKey(directive.user or "", directive.message_id, hashlib.sha256(content.encode()).hexdigest())
