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
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections import OrderedDict, defaultdict
from collections.abc import Awaitable, Callable
from typing import Protocol

from hubd.cloud.client import TokenSet
from hubd.errors import CloudAuthError, CloudError, CloudRejected, CloudUnavailable, StorageUnavailable
from hubd.lifecycle import Backoff, Clock
from hubd.metrics import Metrics
from hubd.store.grants import Grant, GrantRepo

log = logging.getLogger(__name__)

REFRESH_FRACTION = 0.8
REFRESH_MARGIN_S = 300.0
MAX_REFRESH_INTERVAL_S = 12 * 3600.0
MIN_REFRESH_INTERVAL_S = 1.0
RESCHEDULE_CHECK_S = 30.0  # re-check at least this often, so a clock jump or a suspend is noticed
FAILURE_REPORT_TRIES = 3
# A resent AcceptGrant (the same userId and code) within this time gets the first one's outcome.
CODE_MEMORY_S = 600.0
CODE_MEMORY_MAX = 1_000


def refresh_at(grant: Grant) -> float:
    """When to refresh: at 80% of the lifetime, 5 min before expiry or after 12 h, whichever is first.

    The 5-minute margin only applies to tokens living 10 minutes or more, so a very short-lived token
    is still refreshed at 80% of its life instead of in a tight loop; never sooner than 1 s.
    """
    lifetime = max(grant.expires_at - grant.obtained_at, 0.0)
    wait = REFRESH_FRACTION * lifetime
    if lifetime - REFRESH_MARGIN_S >= 0.5 * lifetime:
        wait = min(wait, lifetime - REFRESH_MARGIN_S)
    wait = max(min(wait, MAX_REFRESH_INTERVAL_S), MIN_REFRESH_INTERVAL_S)
    return grant.obtained_at + wait


def send_margin(grant: Grant) -> float:
    """A token this close to expiry is not used for sending; it is refreshed first."""
    lifetime = max(grant.expires_at - grant.obtained_at, 0.0)
    return min(30.0, 0.15 * lifetime)


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


def _code_key(user_id: str, code: str) -> bytes:
    """What the outcome of a code's exchange is remembered by (not the code itself)."""
    # surrogatepass: a code or userId with a lone surrogate (JSON allows "\ud800") is still only a key here.
    return hashlib.sha256(f"{user_id}\0{code}".encode("utf-8", "surrogatepass")).digest()


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
        self._grants: dict[str, Grant] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._retry_at: dict[str, float] = {}
        self._stale: set[str] = set()  # users whose current token the event API refused: refresh first
        self._backoffs: defaultdict[str, Backoff] = defaultdict(lambda: Backoff(initial_s=2.0, cap_s=60.0))
        self._changed = asyncio.Event()
        self._reports: asyncio.Queue[str] = asyncio.Queue()
        self._exchanges: asyncio.Queue[_Exchange] = asyncio.Queue()
        # _code_key -> (the exchange's outcome, monotonic time it began), oldest first
        self._codes: OrderedDict[bytes, tuple[asyncio.Future[None], float]] = OrderedDict()
        self._activations = 0
        self._activated: dict[str, int] = {}
        self._unsaved: set[str] = set()  # users whose grant in memory is newer than its row (the disk refused)
        self._unsaved_added = asyncio.Event()
        self._refreshes = metrics.counter("hubd_token_refreshes_total", "token refreshes, by outcome", "outcome")
        self._failures = metrics.counter("hubd_failure_reports_total", "failure reports sent, by outcome", "outcome")
        metrics.gauge("hubd_grants_active", "users whose grant is active",
                      lambda: float(sum(g.active for g in self._grants.values())))

    async def start(self) -> None:
        """Load the grants."""
        self._grants = {g.user_id: g for g in await self._repo.all()}
        for grant in self._grants.values():
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
        grant = self._grants.get(user_id)
        return grant is not None and grant.active

    def activations(self) -> int:
        """How many times a grant became active (any user) since start."""
        return self._activations

    def activated(self, user_id: str) -> int:
        """`activations()` as it was when this user's grant last became active; 0: not since start."""
        return self._activated.get(user_id, 0)

    def grants(self) -> list[Grant]:
        """Every grant (for the status page)."""
        return list(self._grants.values())

    def exchange_known(self, user_id: str, code: str) -> bool:
        """True when `accept_grant` began exchanging this code within CODE_MEMORY_S (its outcome is kept)."""
        self._forget_codes()
        return _code_key(user_id, code) in self._codes

    async def accept_grant(self, user_id: str, code: str, *, driver_user: str | None, timeout_s: float | None = None,
                           commit: GrantCommit | None = None) -> None:
        """Exchange an AcceptGrant code and store the tokens, replacing any earlier grant of the user.

        The exchange (bounded by `timeout_s`, default the client's request timeout) and the storing run in a
        task of `run()` to the end even if the caller stops waiting (a reply deadline): the platform spends
        the code when it answers, so its tokens are never thrown away. The same user and code again within
        CODE_MEMORY_S (a resent AcceptGrant) waits for that outcome instead of spending the code twice;
        CloudUnavailable is not remembered (the code may be unspent: the next call tries again).

        `commit` stores the grant (default: the grant table alone); the vendor endpoint passes the reporter's,
        which queues the user's AddOrUpdateReport in the same transaction. Only then is the grant active
        here, and only then may the outbox send for the user.
        """
        self._forget_codes()
        key = _code_key(user_id, code)
        known = self._codes.get(key)
        if known is None:
            outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            outcome.add_done_callback(functools.partial(self._exchanged, key, user_id))
            self._codes[key] = known = (outcome, self._clock.monotonic())
            self._exchanges.put_nowait((outcome, user_id, code, driver_user, timeout_s,
                                        commit or self._repo.replace))
        await asyncio.shield(known[0])

    def token_now(self, user_id: str) -> str | None:
        """The user's access token if events may be sent with it now, else None (a refresh is under way).

        None for a token the event API refused (until refreshed) and for one within `send_margin` of
        expiry; the sender is woken when a refresh succeeds. Never waits.
        """
        grant = self._grants.get(user_id)
        if grant is None or not grant.active or user_id in self._stale:
            return None
        if grant.expires_at - self._clock.time() <= send_margin(grant):
            self._changed.set()  # the scheduler re-checks (its refresh may be waiting out a clock jump)
            return None
        return grant.access_token

    def invalidate(self, user_id: str, token: str) -> None:
        """The event API refused `token` (401/403): refresh it in the background before the next send.

        A no-op when `token` was already replaced, so a late 401 right after a refresh refreshes nothing.
        """
        grant = self._grants.get(user_id)
        if grant is None or not grant.active or grant.access_token != token:
            return
        self._stale.add(user_id)
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
                del self._grants[user_id]
                self._stale.discard(user_id)
                log.info("the grant of user %s was removed; no more events for them", user_id)
                raise CloudAuthError(f"user {user_id} has no grant", fatal=True)
            self._grants[user_id] = Grant(user_id, grant.driver_user, tokens.access_token,
                                          tokens.refresh_token or grant.refresh_token, now + tokens.expires_in, now,
                                          "active", False, None)
            if unsaved:
                self._mark_unsaved(user_id)
            self._refreshes.inc(label="ok")
            self._stale.discard(user_id)
            self._retry_at.pop(user_id, None)
            self._backoffs.pop(user_id, None)
            log.info("refreshed the token of user %s (valid for %d s)", user_id, tokens.expires_in)
            self._changed.set()
            self._outbox_wakeup.set()  # events waiting for this token may go now

    async def revoked(self, user_id: str, token: str, reason: str) -> bool:
        """The event API refused `token` even after a refresh: end the grant, if `token` is still its token.

        False (nothing ended) when `token` was replaced meanwhile, by a refresh or a new grant: a late
        refusal of an old token says nothing about the current one. True when the grant is over.
        """
        async with self._locks[user_id]:
            grant = self._grants.get(user_id)
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

    def _exchanged(self, key: bytes, user_id: str, outcome: asyncio.Future[None]) -> None:
        """An exchange ended: log a failure (its caller may have stopped waiting); forget what may be retried."""
        error = None if outcome.cancelled() else outcome.exception()
        current = self._codes.get(key)
        if (outcome.cancelled() or isinstance(error, CloudUnavailable)) and current is not None \
                and current[0] is outcome:
            del self._codes[key]
        if isinstance(error, CloudError):
            log.warning("AcceptGrant for user %s: %s", user_id, error)
        elif error is not None:
            log.error("AcceptGrant for user %s failed", user_id, exc_info=error)

    def _forget_codes(self) -> None:
        cutoff = self._clock.monotonic() - CODE_MEMORY_S
        while self._codes:
            key, (outcome, began) = next(iter(self._codes.items()))
            if not outcome.done() or (began > cutoff and len(self._codes) <= CODE_MEMORY_MAX):
                return
            del self._codes[key]

    async def _activate(self, user_id: str, driver_user: str | None, tokens: TokenSet, commit: GrantCommit) -> None:
        async with self._locks[user_id]:
            now = self._clock.time()
            grant = Grant(user_id, driver_user, tokens.access_token, tokens.refresh_token, now + tokens.expires_in,
                          now, "active", False, None)
            await self._commit_new(user_id, grant, commit)
            self._grants[user_id] = grant
            self._unsaved.discard(user_id)  # the whole row was just written
            self._stale.discard(user_id)
            # The sender reads `activations()` before each load of new rows: once it has loaded after this,
            # it has the rows `commit` wrote (the new grant's AddOrUpdateReport, which must go first).
            self._activations += 1
            self._activated[user_id] = self._activations
        self._retry_at.pop(user_id, None)
        self._backoffs.pop(user_id, None)
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
        self._unsaved.add(user_id)
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
            while self._unsaved:
                await self._repo.writable()
                for user_id in sorted(self._unsaved):
                    async with self._locks[user_id]:
                        grant = self._grants.get(user_id)
                        if user_id not in self._unsaved or grant is None:
                            self._unsaved.discard(user_id)
                            continue
                        try:
                            found = await self._repo.store(grant)
                        except StorageUnavailable:
                            break  # wait for the database again
                        self._unsaved.discard(user_id)
                        if found:
                            log.info("stored the grant of user %s that the database had refused", user_id)
                        else:
                            del self._grants[user_id]
                            self._stale.discard(user_id)
                            log.info("the grant of user %s was removed; no more events for them", user_id)

    def _require_active(self, user_id: str) -> Grant:
        grant = self._grants.get(user_id)
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
        self._stale.discard(grant.user_id)
        self._grants[grant.user_id] = Grant(grant.user_id, grant.driver_user, grant.access_token,
                                            grant.refresh_token, grant.expires_at, grant.obtained_at,
                                            "needs_rebind", grant.failure_reported, reason[:500])
        if unsaved:
            self._mark_unsaved(grant.user_id)
        if self._failure_report and not grant.failure_reported:
            self._reports.put_nowait(grant.user_id)

    async def _schedule(self) -> None:
        refreshing: set[str] = set()
        async with asyncio.TaskGroup() as group:
            while True:
                now = self._clock.time()
                next_due = now + RESCHEDULE_CHECK_S
                for grant in list(self._grants.values()):
                    if not grant.active or grant.user_id in refreshing:
                        continue
                    due = now if grant.user_id in self._stale else refresh_at(grant)
                    due = max(due, self._retry_at.get(grant.user_id, 0.0))
                    if due <= now:
                        refreshing.add(grant.user_id)
                        group.create_task(self._refresh_in_background(grant.user_id, refreshing),
                                          name=f"tokens.refresh.{grant.user_id}")
                    else:
                        next_due = min(next_due, due)
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
            if not err.fatal and user_id in self._grants:
                self._retry_at[user_id] = self._clock.time() + self._backoffs[user_id].next_delay()
        except CloudUnavailable:
            self._retry_at[user_id] = self._clock.time() + self._backoffs[user_id].next_delay()
        except Exception:  # per user (STYLE 2.6): a surprise in one refresh never stops the others
            self._refreshes.inc(label="error")
            delay = self._backoffs[user_id].next_delay()
            self._retry_at[user_id] = self._clock.time() + delay
            log.error("refresh for user %s failed unexpectedly, retrying in %.0f s", user_id, delay, exc_info=True)
        finally:
            refreshing.discard(user_id)
            self._changed.set()

    async def _send_failure_reports(self) -> None:
        while True:
            user_id = await self._reports.get()
            grant = self._grants.get(user_id)
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
                except Exception:  # per report (STYLE 2.6): counted as a failed try, never the manager's end
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
            current = self._grants.get(user_id)
            if current is not None and not current.active:
                self._grants[user_id] = Grant(current.user_id, current.driver_user, current.access_token,
                                              current.refresh_token, current.expires_at, current.obtained_at,
                                              current.status, True, current.last_error)
                if unsaved:
                    self._mark_unsaved(user_id)
