"""TokenManager: each bound user's platform tokens, refreshed before they expire.

Owns the grant lifecycle: AcceptGrant's code exchange (in a task of its own `run()`, so a reply deadline
never throws away tokens the platform issued; its outcome remembered per (user, code) for a resend),
background refresh (one at a time per user, persisted before use), the 401 path (`invalidate`: refresh in
the background, the sender waits for `token_now`), and the end of a grant (needs_rebind + the signed
failure report, sent once). Nobody waits for a refresh while holding a send slot. Tokens are never logged.
An unexpected error in one refresh or failure report is logged with its traceback and retried later; it
never stops the manager.
A write the disk refuses (`StorageUnavailable`) never loses what the platform gave: a new grant's commit is
retried until stored (its code is spent); refreshed tokens, an ended grant and a sent failure report take
effect in memory and are stored by `run()` once the database takes writes again (the platform may have
spent the old refresh token, so the new one is kept and used meanwhile).
The I/O, the per-user locks, the tasks, the logs and the metrics are here; the grants in memory and the refresh
schedule are hubd.cloud.grantstate's, the remembered code outcomes hubd.cloud.grantcodes's (both pure).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Protocol

from hubd.cloud.client import TokenSet
from hubd.cloud.grantcodes import CodeOutcomes
from hubd.cloud.grantstate import GrantState
from hubd.errors import CloudAuthError, CloudError, CloudRejected, CloudUnavailable, StorageUnavailable
from hubd.lifecycle import Backoff, Clock
from hubd.metrics import Metrics
from hubd.store.grants import Grant, GrantRepo

log = logging.getLogger(__name__)

FAILURE_REPORT_TRIES = 3


class TokenEndpoint(Protocol):
    """What the token manager needs of the platform client."""

    async def exchange_code(self, code: str, *, timeout_s: float | None = None) -> TokenSet:
        """RFC 6749 4.1.3."""

    async def refresh(self, refresh_token: str) -> TokenSet:
        """RFC 6749 6."""

    async def report_failure(self, user_id: str) -> None:
        """Whether a failure report is sent when a user's refresh fails for good."""


GrantCommit = Callable[[Grant], Awaitable[None]]
# An AcceptGrant for `run()` to exchange: its outcome, user, code, driver user, timeout, commit.
_Exchange = tuple[asyncio.Future[None], str, str, str | None, float | None, GrantCommit]


class TokenManager:
    """Keeps every bound user's access token valid."""

    name = "tokens"

    def __init__(self, repo: GrantRepo, client: TokenEndpoint, *, clock: Clock, failure_report: bool,
                 metrics: Metrics, outbox_wakeup: asyncio.Event) -> None:
        self._repo = repo
        self._client = client
        self._clock = clock
        self._failure_report = failure_report
        self._outbox_wakeup = outbox_wakeup
        self._state = GrantState()
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._changed = asyncio.Event()
        self._reports: asyncio.Queue[str] = asyncio.Queue()
        self._exchanges: asyncio.Queue[_Exchange] = asyncio.Queue()
        self._codes = CodeOutcomes()
        self._unsaved_added = asyncio.Event()
        self._refreshes = metrics.counter("hubd_token_refreshes_total", "token refreshes, by outcome", "outcome")
        self._failures = metrics.counter("hubd_failure_reports_total", "failure reports sent, by outcome", "outcome")
        metrics.gauge("hubd_grants_active", "users whose grant is active",
                      lambda: float(self._state.active_count()))

    async def start(self) -> None:
        """Load the grants."""
        self._state.load(await self._repo.all())
        for grant in self._state.all():
            if grant.status == "needs_rebind" and not grant.failure_reported and self._failure_report:
                self._reports.put_nowait(grant.user_id)

    async def run(self) -> None:
        """Refresh tokens when due; send failure reports; exchange AcceptGrant codes."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._schedule(), name="tokens.refresh")
            group.create_task(self._send_failure_reports(), name="tokens.failure-report")
            group.create_task(self._save_unsaved(), name="tokens.save")
            while True:
                exchange = await self._exchanges.get()
                group.create_task(self._exchange(*exchange), name="tokens.accept-grant")

    async def stop(self) -> None:
        """Nothing to release (exchanges under way ended with `run()`)."""

    def is_active(self, user_id: str) -> bool:
        """True when events for this user can be sent."""
        grant = self._state.get(user_id)
        return grant is not None and grant.active

    def activations(self) -> int:
        """How many times a grant became active (any user) since start."""
        return self._state.activations()

    def activated(self, user_id: str) -> int:
        """`activations()` as it was when this user's grant last became active; 0: not since start."""
        return self._state.activated(user_id)

    def grants(self) -> list[Grant]:
        """Every grant (for the status page)."""
        return self._state.all()

    def exchange_known(self, user_id: str, code: str) -> bool:
        """True when `accept_grant` began exchanging this code within CODE_MEMORY_S (its outcome is kept)."""
        return self._codes.known(user_id, code, self._clock.monotonic())

    async def accept_grant(self, user_id: str, code: str, *, driver_user: str | None, timeout_s: float | None = None,
                           commit: GrantCommit | None = None) -> None:
        """Exchange an AcceptGrant code and store the tokens, replacing any earlier grant of the user.

        The exchange (bounded by `timeout_s`, default the client's request timeout) and the storing run in a
        task of `run()` to the end even if the caller stops waiting (a reply deadline): the platform spends
        the code when it answers, so its tokens are never thrown away. The same user and code again within
        CODE_MEMORY_S (a resent AcceptGrant) waits for that outcome instead of spending the code twice;
        CloudUnavailable is not remembered (the code may be unspent: the next call tries again).

        `commit` stores the grant (default: the grant table alone); AcceptGrant passes the outbox writer's,
        which queues the user's AddOrUpdateReport in the same transaction. Only then is the grant active
        here, and only then may the outbox send for the user.
        """
        outcome, new = self._codes.outcome(user_id, code, self._clock.monotonic())
        if new:
            outcome.add_done_callback(functools.partial(self._exchanged, user_id))
            self._exchanges.put_nowait((outcome, user_id, code, driver_user, timeout_s,
                                        commit or self._repo.replace))
        await asyncio.shield(outcome)

    def token_now(self, user_id: str) -> str | None:
        """The user's access token if events may be sent with it now, else None (a refresh is under way).

        None for a token the event API refused (until refreshed) and for one within `send_margin` of
        expiry; the sender is woken when a refresh succeeds. Never waits.
        """
        token, near_expiry = self._state.usable_token(user_id, self._clock.time())
        if near_expiry:
            self._changed.set()  # the scheduler re-checks (its refresh may be waiting out a clock jump)
        return token

    def invalidate(self, user_id: str, token: str) -> None:
        """The event API refused `token` (401/403): refresh it in the background before the next send.

        A no-op when `token` was already replaced, so a late 401 right after a refresh refreshes nothing.
        """
        if self._state.invalidate(user_id, token):
            self._changed.set()

    async def refresh(self, user_id: str, *, stale_token: str | None = None) -> None:
        """Refresh now; with `stale_token`, only if nobody replaced that token meanwhile (the 401 path)."""
        async with self._locks[user_id]:
            grant = self._require_active(user_id)
            if stale_token is not None and grant.access_token != stale_token:
                return
            if not grant.refresh_token:
                await self._end(grant, "the platform gave no refresh token")
                raise CloudAuthError(f"user {user_id}: no refresh token", fatal=True)
            try:
                tokens = await self._client.refresh(grant.refresh_token)
            except CloudAuthError as err:
                log.warning("refresh for user %s refused: error=%s", user_id, err.error)
                if err.fatal:
                    self._refreshes.inc(label="fatal")
                    await self._end(grant, f"refresh refused: {err.error or err}")
                else:
                    self._refreshes.inc(label="failed")
                    await self._note_error(user_id, str(err))
                raise
            except CloudUnavailable as err:
                self._refreshes.inc(label="failed")
                log.warning("refresh for user %s failed, will retry: %s", user_id, err)
                await self._note_error(user_id, str(err))
                raise
            now = self._clock.time()
            # Persist before use: a crash after this point still has the new tokens.
            unsaved = False
            try:
                stored = await self._repo.update_tokens(user_id, tokens.access_token, tokens.refresh_token,
                                                        now + tokens.expires_in, now)
            except StorageUnavailable as err:
                # The platform may have spent the old refresh token: keep (and use) the new tokens, store them later.
                log.warning("refreshed the token of user %s but could not store it (%s); using it, and storing it "
                            "once the database takes writes", user_id, err)
                stored = unsaved = True
            if not stored:
                # `hubd grants remove` deleted the grant while hubd ran: forget the user.
                self._state.forget(user_id)
                log.info("the grant of user %s was removed; no more events for them", user_id)
                raise CloudAuthError(f"user {user_id} has no grant", fatal=True)
            self._state.refreshed(grant, tokens.access_token, tokens.refresh_token, now + tokens.expires_in, now)
            if unsaved:
                self._mark_unsaved(user_id)
            self._refreshes.inc(label="ok")
            log.info("refreshed the token of user %s (valid for %d s)", user_id, tokens.expires_in)
            self._changed.set()
            self._outbox_wakeup.set()  # events waiting for this token may go now

    async def revoked(self, user_id: str, token: str, reason: str) -> bool:
        """The event API refused `token` even after a refresh: end the grant, if `token` is still its token.

        False (nothing ended) when `token` was replaced meanwhile, by a refresh or a new grant: a late
        refusal of an old token says nothing about the current one. True when the grant is over.
        """
        async with self._locks[user_id]:
            grant = self._state.get(user_id)
            if grant is None or not grant.active:
                return True
            if grant.access_token != token:
                return False
            await self._end(grant, reason)
            return True

    async def _exchange(self, outcome: asyncio.Future[None], user_id: str, code: str, driver_user: str | None,
                        timeout_s: float | None, commit: GrantCommit) -> None:
        try:
            tokens = await self._client.exchange_code(code, timeout_s=timeout_s)
            await self._activate(user_id, driver_user, tokens, commit)
        except Exception as err:  # the outcome of this AcceptGrant: whoever waits for it gets it
            if not outcome.done():
                outcome.set_exception(err)
        else:
            if not outcome.done():
                outcome.set_result(None)
        finally:
            if not outcome.done():
                outcome.cancel()  # hubd is stopping

    def _exchanged(self, user_id: str, outcome: asyncio.Future[None]) -> None:
        """An exchange ended: log a failure (its caller may have stopped waiting)."""
        error = None if outcome.cancelled() else outcome.exception()
        if isinstance(error, CloudError):
            log.warning("AcceptGrant for user %s: %s", user_id, error)
        elif error is not None:
            log.error("AcceptGrant for user %s failed", user_id, exc_info=error)

    async def _activate(self, user_id: str, driver_user: str | None, tokens: TokenSet, commit: GrantCommit) -> None:
        async with self._locks[user_id]:
            now = self._clock.time()
            grant = Grant(user_id, driver_user, tokens.access_token, tokens.refresh_token, now + tokens.expires_in,
                          now, "active", False, None)
            await self._commit_new(user_id, grant, commit)
            self._state.activate(grant)  # counted: the sender loads the rows `commit` wrote before sending
        log.info("user %s bound (token valid for %d s)", user_id, tokens.expires_in)
        self._changed.set()
        self._outbox_wakeup.set()

    async def _commit_new(self, user_id: str, grant: Grant, commit: GrantCommit) -> None:
        """Store a new grant; a commit the disk refuses is retried once it takes writes (the code is spent)."""
        held = False
        while True:
            try:
                await commit(grant)
            except StorageUnavailable as err:
                if not held:
                    held = True
                    log.warning("holding the new grant of user %s until the database takes it: %s", user_id, err)
                await self._repo.writable()
                continue
            return

    def _mark_unsaved(self, user_id: str) -> None:
        self._state.unsaved.add(user_id)
        self._unsaved_added.set()

    async def _note_error(self, user_id: str, error: str) -> None:
        """Remember the last transient error for the status page, if the disk takes it."""
        try:
            await self._repo.note_error(user_id, error)
        except StorageUnavailable as err:
            log.debug("could not note the refresh error of user %s: %s", user_id, err)

    async def _save_unsaved(self) -> None:
        """Store the grants that memory holds newer than their rows, once the database takes writes."""
        while True:
            await self._unsaved_added.wait()
            self._unsaved_added.clear()
            unsaved = self._state.unsaved
            while unsaved:
                await self._repo.writable()
                for user_id in sorted(unsaved):
                    async with self._locks[user_id]:
                        grant = self._state.get(user_id)
                        if user_id not in unsaved or grant is None:
                            unsaved.discard(user_id)
                            continue
                        try:
                            found = await self._repo.store(grant)
                        except StorageUnavailable:
                            break  # wait for the database again
                        unsaved.discard(user_id)
                        if found:
                            log.info("stored the grant of user %s that the database had refused", user_id)
                        else:
                            self._state.forget(user_id)
                            log.info("the grant of user %s was removed; no more events for them", user_id)

    def _require_active(self, user_id: str) -> Grant:
        grant = self._state.get(user_id)
        if grant is None:
            raise CloudAuthError(f"user {user_id} has no grant", fatal=True)
        if not grant.active:
            raise CloudAuthError(f"user {user_id} must bind again", fatal=True)
        return grant

    async def _end(self, grant: Grant, reason: str) -> None:
        log.error("the grant of user %s has ended (%s); keeping their events until they bind again",
                  grant.user_id, reason)
        unsaved = False
        try:
            await self._repo.mark_needs_rebind(grant.user_id, reason)
        except StorageUnavailable:
            unsaved = True  # ended in memory now, in the database once it takes writes
        self._state.ended(grant, reason)
        if unsaved:
            self._mark_unsaved(grant.user_id)
        if self._failure_report and not grant.failure_reported:
            self._reports.put_nowait(grant.user_id)

    async def _schedule(self) -> None:
        refreshing: set[str] = set()
        async with asyncio.TaskGroup() as group:
            while True:
                due, next_due = self._state.due(self._clock.time(), refreshing)
                for user_id in due:
                    refreshing.add(user_id)
                    group.create_task(self._refresh_in_background(user_id, refreshing),
                                      name=f"tokens.refresh.{user_id}")
                self._changed.clear()
                try:
                    async with asyncio.timeout(max(0.05, next_due - self._clock.time())):
                        await self._changed.wait()
                except TimeoutError:
                    pass

    async def _refresh_in_background(self, user_id: str, refreshing: set[str]) -> None:
        try:
            await self.refresh(user_id)
        except CloudAuthError as err:
            if not err.fatal and self._state.get(user_id) is not None:
                self._state.retry_later(user_id, self._clock.time())
        except CloudUnavailable:
            self._state.retry_later(user_id, self._clock.time())
        except Exception:  # per user: a surprise in one refresh never stops the others
            self._refreshes.inc(label="error")
            delay = self._state.retry_later(user_id, self._clock.time())
            log.error("refresh for user %s failed unexpectedly, retrying in %.0f s", user_id, delay, exc_info=True)
        finally:
            refreshing.discard(user_id)
            self._changed.set()

    async def _send_failure_reports(self) -> None:
        while True:
            user_id = await self._reports.get()
            grant = self._state.get(user_id)
            if grant is None or grant.active or grant.failure_reported:
                continue
            backoff = Backoff(initial_s=1.0, cap_s=8.0)
            for attempt in range(1, FAILURE_REPORT_TRIES + 1):
                try:
                    await self._client.report_failure(user_id)
                except CloudRejected as err:
                    log.error("the platform rejected the failure report for user %s: %s", user_id, err)
                    self._failures.inc(label="rejected")
                    break
                except CloudUnavailable as err:
                    log.warning("failure report for user %s failed (try %d): %s", user_id, attempt, err)
                except Exception:  # per report: counted as a failed try, never the manager's end
                    log.error("failure report for user %s failed unexpectedly (try %d)", user_id, attempt,
                              exc_info=True)
                else:
                    self._failures.inc(label="sent")
                    log.info("sent the failure report for user %s", user_id)
                    break
                if attempt < FAILURE_REPORT_TRIES:
                    await backoff.sleep()
            else:
                self._failures.inc(label="gave_up")
            # Once per grant, whatever the outcome: the platform is not asked again for this grant.
            unsaved = False
            try:
                await self._repo.mark_failure_reported(user_id)
            except StorageUnavailable:
                unsaved = True
            if self._state.failure_reported(user_id) and unsaved:
                self._mark_unsaved(user_id)
