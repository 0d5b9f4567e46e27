"""Resent directives (PROTOCOL.md 5.4): a copy with the same messageId gets the first answer, and a control
never runs twice, not even across a restart.

Owns the replies remembered in memory for DUPLICATE_TTL_S, by (hubd account, messageId, content), and
their durable copy (hubd.store.replies): a control's reply is written to SQLite *before* its `set` is
published (`claim`, on the request path), so a resend after a restart is answered from there. The
rest of the writes (the reply that went out, removing the row of a try that never published, pruning)
are queued and done in order by run(), which Directives runs in its TaskGroup. Transient refusals
(busy, unreachable) are not remembered: nothing ran, so a retry runs. Imports hubd.vendor for the
Directive only; no MQTT, no registry.
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

from hubd.errors import DirectiveError, StoreError
from hubd.metrics import Metrics
from hubd.store.replies import ReplyKey, StoredReply
from hubd.vendor import BUSY, Directive

log = logging.getLogger(__name__)

DUPLICATE_TTL_S = 600.0  # PROTOCOL.md 5.4: resends come within about 10 minutes
DUPLICATE_MAX = 10_000
WRITES_MAX = 1_000
PRUNE_EVERY_S = 60.0
# Refusals that mean "nothing ran, try again": a resend runs instead of getting them back.
TRANSIENT = frozenset({BUSY, "E_ENDPOINT_UNREACHABLE", "E_GATEWAY_UNREACHABLE"})

Outcome = dict[str, Any] | DirectiveError


class ReplyStore(Protocol):
    """hubd.store.replies.DirectiveReplyRepo: first replies that survive a restart."""

    async def claim(self, key: ReplyKey, attempt: str, reply: dict[str, Any], now: float, *,
                    replace: bool = False) -> StoredReply | None:
        """Write the reply for `key` (None) or return the one already there."""

    async def find(self, key: ReplyKey) -> StoredReply | None:
        """The remembered reply, if any."""

    async def finish(self, key: ReplyKey, attempt: str, reply: dict[str, Any]) -> None:
        """Store the reply that went out."""

    async def release(self, key: ReplyKey, attempt: str) -> None:
        """Forget the row of a try that never published."""

    async def prune(self, before: float) -> int:
        """Forget rows older than `before` (epoch seconds)."""


@dataclass(slots=True)
class Attempt:
    """One try at a directive: its key, its stored row's id, and the reply to give should it be cut off
    once its `set` may have gone out (`fallback`, set by the handler just before it publishes)."""

    key: ReplyKey
    id: str
    fallback: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Finish:
    attempt: Attempt
    reply: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Release:
    attempt: Attempt


class Resends:
    """Runs each directive once per key and remembers its reply, in memory and (for controls) in SQLite."""

    def __init__(self, store: ReplyStore, metrics: Metrics) -> None:
        self._store = store
        self._writes: asyncio.Queue[_Finish | _Release] = asyncio.Queue(WRITES_MAX)
        # key -> (loop time received, the reply, resolved once known)
        self._replies: OrderedDict[ReplyKey, tuple[float, asyncio.Future[Outcome]]] = OrderedDict()
        # Keys whose stored row belongs to a try that never published -> when: the next try overwrites it.
        self._released: OrderedDict[ReplyKey, float] = OrderedDict()
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

        E_ENDPOINT_BUSY if the database does not answer by `deadline`: then nothing may be sent.
        """
        replace = self._released.pop(attempt.key, None) is not None
        try:
            async with asyncio.timeout_at(deadline):
                stored = await self._store.claim(attempt.key, attempt.id, reply, time.time(), replace=replace)
        except asyncio.CancelledError:
            self.release(attempt)
            raise
        except (TimeoutError, StoreError) as err:
            self.release(attempt)  # the claim may still land in the database after this
            log.warning("directive %s: the database did not record it in time (%s); not sent: %s",
                        attempt.key.message_id, err or "timeout", BUSY)
            raise DirectiveError(BUSY, "the hub's database did not answer in time; nothing was sent, try "
                                       "again") from err
        return None if stored is None else self._answered_before(attempt.key, stored)

    async def stored(self, key: ReplyKey, deadline: float) -> dict[str, Any] | None:
        """The stored reply of an earlier run of this directive (before a restart), if the database has one."""
        if key in self._released:  # that row is a try of ours that never published
            return None
        try:
            async with asyncio.timeout_at(deadline):
                found = await self._store.find(key)
        except (TimeoutError, StoreError):
            return None
        return None if found is None else self._answered_before(key, found)

    def finish(self, attempt: Attempt, reply: dict[str, Any]) -> None:
        """Queue the reply that went out, to replace the claimed one."""
        self._write(_Finish(attempt, reply))

    def release(self, attempt: Attempt) -> None:
        """The attempt's `set` never went out: queue the removal of its row; the next try overwrites it."""
        self._released[attempt.key] = asyncio.get_running_loop().time()
        self._released.move_to_end(attempt.key)
        self._write(_Release(attempt))

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
            await self._apply(op)

    async def flush(self, timeout_s: float) -> None:
        """Write what is still queued (at shutdown, after run() ended), for at most timeout_s."""
        try:
            async with asyncio.timeout(timeout_s):
                while not self._writes.empty():
                    await self._apply(self._writes.get_nowait())
        except TimeoutError:
            log.warning("%d directive reply writes not done at shutdown", self._writes.qsize())

    async def _apply(self, op: _Finish | _Release | None) -> None:
        try:
            if isinstance(op, _Finish):
                await self._store.finish(op.attempt.key, op.attempt.id, op.reply)
            elif isinstance(op, _Release):
                await self._store.release(op.attempt.key, op.attempt.id)
            else:
                removed = await self._store.prune(time.time() - DUPLICATE_TTL_S)
                log.debug("pruned %d remembered directive replies", removed)
        except StoreError as err:
            log.warning("remembered directive replies: %s", err)

    def _answered_before(self, key: ReplyKey, stored: StoredReply) -> dict[str, Any]:
        self._resends.inc()
        log.info("directive %s ran before (%s): answering with its first reply", key.message_id,
                 "done" if stored.done else "unfinished: the target states")
        return stored.reply

    def _write(self, op: _Finish | _Release) -> None:
        try:
            self._writes.put_nowait(op)
        except asyncio.QueueFull:
            log.warning("directive %s: too many reply writes waiting for the database; this one is skipped",
                        op.attempt.key.message_id)

    def _prune(self, now: float) -> None:
        while self._replies:
            received_at, _ = next(iter(self._replies.values()))
            if now - received_at < DUPLICATE_TTL_S and len(self._replies) < DUPLICATE_MAX:
                break
            self._replies.popitem(last=False)
        while self._released:
            released_at = next(iter(self._released.values()))
            if now - released_at < DUPLICATE_TTL_S and len(self._released) < DUPLICATE_MAX:
                break
            self._released.popitem(last=False)


def _key(directive: Directive) -> ReplyKey:
    """What makes a message a resend: same account, messageId and content (a token refresh in between is fine)."""
    endpoint_id = (directive.endpoint or {}).get("endpointId")
    content = json.dumps([directive.namespace, directive.name, str(endpoint_id), directive.payload],
                         sort_keys=True, separators=(",", ":"), default=str)
    return ReplyKey(directive.user or "", directive.message_id, hashlib.sha256(content.encode()).hexdigest())
