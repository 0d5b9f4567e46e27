"""The local webhook (docs/webhook.md): `POST /trigger/with/<token>` makes speakers speak, play or obey.

A call goes: token found (SQLite, by hash) -> counted, and within the token's limits -> body
checked -> speakers selected -> command written -> one QoS 1 message per speaker on
`B/device/ID/command`. The token is looked up first, always: a right token is never refused for
its address's wrong guesses (a token has 256 random bits, so guessing gets nowhere at any rate).
An unknown token is a guess of its client address (`http.trusted_proxies` decides whether
X-Forwarded-For names it): after GUESS_FREE of them the address gets 429 with a growing wait, and
while it waits its tokens are checked against the known hashes in memory (reloaded at most once a
second) before SQLite: a flood of made-up tokens costs no lookup each.
Results arrive through the registry and the outbox writer (`record_results_blocking`);
`GET /api/commands/<id>` shows them.

Calls are counted in memory (`CallLimiter`) and saved to SQLite by `run()` at most once a second,
in one transaction: a flood of refused calls costs no write per call. A crash loses at most the
last second's counts; a stop saves them. Refused calls are logged one line per subject and reason a
minute (`hubd.failures.RefusalLog`); `run()` sums up the rest once their minute is over. The flow is
one-way: HTTP -> webhook -> MQTT bridge. Never logs a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiohttp import web

from hubd.devices.model import Route
from hubd.dialects.base import CommandRefused
from hubd.dialects.commands import DeviceCommands
from hubd.errors import ConfigError, MqttUnavailable, StorageUnavailable, StoreError
from hubd.failures import RefusalLog
from hubd.metrics import Metrics
from hubd.ratelimit import FailureThrottle
from hubd.registry import DeviceRegistry
from hubd.store.db import Database
from hubd.web.client_address import FORWARDED_FOR, client_address, parse_trusted_proxies, throttle_key
from hubd.webhook import store
from hubd.webhook.limits import CallLimiter, Refusal
from hubd.webhook.selection import NoMatch, Selection, Speaker, select, speakers
from hubd.webhook.trigger import (
    EXAMPLE,
    MAX_BODY_BYTES,
    Problem,
    Trigger,
    TriggerInvalid,
    parse,
    parse_bytes,
    summary,
    too_large,
)

log = logging.getLogger(__name__)

# Unknown tokens an address may present before it waits: 1 s after the next, doubling up to 15
# minutes; forgotten a day after the last. A signal to stop, not the guard: tokens have 256 bits.
GUESS_FREE = 10
GUESS_CAP_S = 15 * 60.0
KNOWN_HASHES_MAX_AGE_S = 1.0  # a webhook made by the CLI is found from a waiting address within this
PRUNE_EVERY_S = 3600.0
SAVE_EVERY_S = 1.0  # counts are saved at most this often: one write a second under a flood
SAVE_RETRY_S = 10.0  # after a failed save
PUBLISH_TIMEOUT_S = 5.0
USAGE_MAX_AGE_S = 5.0  # the list of webhooks the status page shows is read from SQLite at most this often


class Notices(Protocol):
    """Where refused calls are listed for the status page (`hubd.outbox.journal.EventJournal`)."""

    def noticed(self, subject: str, problem: str, at: float) -> None:
        """Something went wrong for `subject`."""


class WebhookService:
    """The webhook routes and the housekeeping of their tables."""

    name = "webhook"

    def __init__(self, db: Database, registry: DeviceRegistry, commands: DeviceCommands, *, per_minute: int,
                 per_day: int, metrics: Metrics, clock: Callable[[], float] = time.time,
                 trusted_proxies: Sequence[str] = (), notices: Notices | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self._notices = notices  # the event journal: refused calls are the status page's problems
        self._refusals = RefusalLog(log, what="refused webhook calls", line="webhook: %s refused: %s%s",
                                    clock=monotonic)
        self._registry = registry
        self._device_commands = commands
        self._clock = clock
        self._limits = CallLimiter(per_minute=per_minute, per_day=per_day)
        self._counted = asyncio.Event()  # set when counts wait to be saved
        self._guesses = FailureThrottle(free=GUESS_FREE, cap_s=GUESS_CAP_S)
        self._proxies, self._proxy_problems = parse_trusted_proxies(trusted_proxies)
        self._known: frozenset[str] | None = None  # token hashes, for addresses that must wait
        self._known_at = 0.0  # loop time of the last load
        self._known_lock = asyncio.Lock()
        self._hooks: list[store.WebhookUse] | None = None  # for `usage`, read at most every USAGE_MAX_AGE_S
        self._hooks_at = 0.0
        self._hooks_lock = asyncio.Lock()
        self._per_minute, self._per_day = per_minute, per_day
        self._calls = metrics.counter("hubd_webhook_calls_total", "webhook calls, by outcome", "outcome")
        self._commands = metrics.counter("hubd_webhook_commands_total", "speaker commands published, by type", "type")

    async def start(self) -> None:
        """Check http.trusted_proxies; prune what is past keeping."""
        if self._proxy_problems:
            raise ConfigError(self._proxy_problems)
        await self._db.call(store.prune_blocking, self._clock())

    async def run(self) -> None:
        """Save the counts (at most once a second, when there are new ones), prune hourly, and sum up the refused
        calls not logged one by one once their minute is over.

        A database error is logged and tried again next time: the counts stay in memory until saved.
        """
        async with asyncio.TaskGroup() as group:
            group.create_task(self._housekeeping(), name="webhook-housekeeping")
            group.create_task(self._refusals.run(), name="webhook-refusals-summed-up")

    async def stop(self) -> None:
        """Save the counts not saved yet (the HTTP server stopped before: no call comes in any more)."""
        await save_counts(self._db, self._limits)

    async def _housekeeping(self) -> None:
        loop = asyncio.get_running_loop()
        prune_at = loop.time() + PRUNE_EVERY_S
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._counted.wait(), timeout=max(0.0, prune_at - loop.time()))
            if self._counted.is_set():
                await asyncio.sleep(SAVE_EVERY_S)  # gather a second's calls into one write
                self._counted.clear()
                if not await save_counts(self._db, self._limits):
                    self._counted.set()
                    await asyncio.sleep(SAVE_RETRY_S)
            if loop.time() >= prune_at:
                prune_at = loop.time() + PRUNE_EVERY_S
                await prune(self._db, self._limits, self._clock())

    def routes(self) -> list[web.RouteDef]:
        """The routes this module serves."""
        return [web.post("/trigger/with/{token}", self._trigger), web.get("/api/commands/{id}", self._command)]

    async def usage(self) -> list[dict[str, Any]]:
        """Each live webhook's name, calls in the last minute and 24 hours and its limits (never the token).

        Counts from memory for tokens called since the start (exact, also the ones not saved yet), else the
        saved ones; the list of webhooks is read from SQLite at most every USAGE_MAX_AGE_S (one made with
        the CLI shows up within that). A failed read keeps the list as last read: the page never fails for it.
        """
        loop = asyncio.get_running_loop()
        async with self._hooks_lock:
            if self._hooks is None or loop.time() - self._hooks_at >= USAGE_MAX_AGE_S:
                try:
                    self._hooks = await self._db.call(store.usage_blocking, self._clock())
                except StoreError as err:  # the page shows the rest; the list as last read, until a read works
                    log.debug("webhook: could not read the webhooks for the status page: %s", err)
                self._hooks_at = loop.time()
            hooks = self._hooks or []
        now = self._clock()
        out = []
        for hook in hooks:
            live = self._limits.usage((hook.id, hook.token_hash), now)
            minute, day, last = live if live is not None else (hook.calls_last_minute, hook.calls_last_day,
                                                               hook.last_call_at)
            out.append({"id": hook.id, "name": hook.name, "callsLastMinute": minute, "callsLastDay": day,
                        "perMinute": self._per_minute, "perDay": self._per_day,
                        "lastCallAt": None if last is None else float(last)})
        return out

    # --- POST /trigger/with/<token> ---------------------------------------------------------------

    async def _trigger(self, request: web.Request) -> web.Response:
        now = self._clock()
        token = request.match_info["token"]
        address = client_address(request.remote, request.headers.getall(FORWARDED_FOR, []), self._proxies)
        source = throttle_key(address)
        found = await self._find(token, source, now) if store.TOKEN_RE.fullmatch(token) else None
        if found is None:
            return self._guess(address, source, now)
        if isinstance(found, store.RetiredToken):
            # A URL that worked once (a stale automation): not a guess, so it blocks nothing.
            self._calls.inc(label="retired_token")
            return self._refuse(f"a retired webhook ({address})", 404, _retired(found), now)

        live = found
        key = (live.id, live.token_hash)
        if not self._limits.known(key):
            counts = await self._db.call(store.recent_counts_blocking, live.id, now)
            self._limits.load(key, counts, now)
        refusal = self._limits.admit(key, now)
        self._counted.set()
        subject = f"webhook {live.id} ({live.name})"
        if refusal is not None:
            self._calls.inc(label="limited")
            message = _limit_message(refusal)
            return self._refuse(subject, 429, message, now, _error(429, message, [Problem("(limit)", message)],
                                                                  retry_after=refusal.retry_after_s))

        try:
            trigger = await self._read(request, live.default_action)
            chosen = select(speakers(self._registry.devices()), trigger.devices)
        except TriggerInvalid as err:
            self._calls.inc(label="invalid")
            return self._refuse(subject, 422, summary(err.problems), now, _error(422, summary(err.problems),
                                                                                err.problems))
        except NoMatch as err:
            self._calls.inc(label="no_match")
            return self._refuse(subject, 422, err.problem.message, now, _error(422, err.problem.message,
                                                                              [err.problem]))
        return await self._dispatch(live, trigger, chosen, now)

    async def _find(self, token: str, source: str, now: float) -> store.LiveToken | store.RetiredToken | None:
        """The token's webhook, always found when it exists; from an address that must wait, an unknown hash is
        told from memory, without a lookup."""
        if self._guesses.wait(source, now) > 0 and not await self._maybe_known(store.digest(token)):
            return None
        return await self._db.call(store.lookup_blocking, token)

    async def _maybe_known(self, wanted: str) -> bool:
        """Whether `wanted` is among the token hashes, loaded at most once every KNOWN_HASHES_MAX_AGE_S."""
        if self._known is not None and wanted in self._known:
            return True
        async with self._known_lock:
            loop = asyncio.get_running_loop()
            if self._known is None or loop.time() - self._known_at >= KNOWN_HASHES_MAX_AGE_S:
                self._known = await self._db.call(store.hashes_blocking)
                self._known_at = loop.time()
            return wanted in self._known

    def _guess(self, address: str, source: str, now: float) -> web.Response:
        """An unknown token: a 404, or a 429 while its address must wait (then it is not counted)."""
        wait = self._guesses.wait(source, now)
        if wait > 0:
            self._calls.inc(label="guessing")
            failures = self._guesses.failures(source, now)
            message = f"too many unknown webhook tokens from {address}; check the URL and try again later"
            return self._refuse(f"unknown tokens from {address}", 429, message, now, _error(
                429, message, [Problem("(address)", f"{failures} unknown tokens; the wait doubles with each further "
                                                    f"one, up to {GUESS_CAP_S / 60:.0f} minutes")],
                retry_after=max(1, int(wait + 0.999))))
        self._guesses.fail(source, now)
        if self._guesses.failures(source, now) == GUESS_FREE:
            log.warning("webhook: %s presented %d unknown tokens; its further guesses must wait", address, GUESS_FREE)
        self._calls.inc(label="unknown_token")
        return self._refuse(f"unknown tokens from {address}", 404, "unknown webhook token; check the URL, or make a "
                            "new one with `hubd webhook create`", now)

    def _refuse(self, subject: str, status: int, message: str, now: float,
                response: web.Response | None = None) -> web.Response:
        """A refused call: logged (one line per subject and reason a minute), listed under the status page's
        problems, answered with `response` (by default the JSON error with `message`)."""
        self._refusals.refused(subject, f"{status}: {message}")
        if self._notices is not None:
            self._notices.noticed(subject, f"a webhook call refused, {status}: {message}", now)
        return response if response is not None else _error(status, message)

    async def _read(self, request: web.Request, default_action: dict[str, Any] | None) -> Trigger:
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            raise too_large(request.content_length)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(None) from None
        if raw.strip():
            return parse_bytes(raw)
        if default_action is None:
            raise TriggerInvalid([Problem("(body)", f"the body is empty and this webhook has no default action; "
                                                    f"send a body like {EXAMPLE}, or create the webhook with "
                                                    "`hubd webhook create --default-action '<body>'`")])
        return parse(default_action)

    async def _dispatch(self, live: store.LiveToken, trigger: Trigger, chosen: Selection, now: float) -> web.Response:
        skipped = [{**s.as_dict(), "reason": "offline"} for s in chosen.offline]
        if not self._device_commands.connected:
            self._calls.inc(label="unavailable")
            return _error(503, "hubd is not connected to the MQTT broker; nothing was sent, try again shortly", [])
        if not chosen.reachable:
            self._calls.inc(label="offline")
            names = ", ".join(s.sn for s in chosen.offline)
            return _error(503, f"every matching speaker is offline ({names}); nothing was sent",
                          [Problem("devices", f"{s.sn} is offline") for s in chosen.offline], skipped=skipped)

        command_id = uuid.uuid4().hex
        targets = [store.Target(s.endpoint_id, s.sn, "sent") for s in chosen.reachable] + \
                  [store.Target(s.endpoint_id, s.sn, "offline", "offline") for s in chosen.offline]
        await self._db.call(store.record_command_blocking, live.id, now, command_id, trigger, targets)
        failed = await self._publish_all(chosen.reachable, trigger.command(command_id))
        if failed:
            await self._db.call(store.mark_unsent_blocking, command_id, [s.endpoint_id for s in failed],
                                "could not publish: MQTT broker unreachable", self._clock())
            skipped += [{**s.as_dict(), "reason": "unsent"} for s in failed]
        sent = [s for s in chosen.reachable if s not in failed]
        if not sent:
            self._calls.inc(label="unavailable")
            return _error(503, "the MQTT broker did not take the command; nothing was sent, try again shortly",
                          [], skipped=skipped)
        self._calls.inc(label="ok")
        self._commands.inc(label=trigger.type)
        log.info("webhook %d (%s): %s %s to %s", live.id, live.name, trigger.type, command_id,
                 ", ".join(s.endpoint_id for s in sent))
        return web.json_response({"id": command_id, "type": trigger.type, "devices": [s.as_dict() for s in sent],
                                  "skipped": skipped})

    async def _publish_all(self, targets: Sequence[Speaker], command: dict[str, Any]) -> list[Speaker]:
        """Publish to every target at once, each in its own dialect; the ones that failed."""
        async def one(speaker: Speaker) -> Speaker | None:
            device = self._registry.get(speaker.endpoint_id)
            route = device.route if device is not None else Route("native", speaker.endpoint_id)
            try:
                messages = self._device_commands.encode_speaker(speaker.endpoint_id, route, command)
                async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                    await self._device_commands.send(messages)
            except (MqttUnavailable, TimeoutError, CommandRefused) as err:
                log.warning("webhook: command to %s not published: %s", speaker.endpoint_id, err)
                return speaker
            return None

        results = await asyncio.gather(*(one(s) for s in targets))
        return [s for s in results if s is not None]

    # --- GET /api/commands/<id> ------------------------------------------------------------------

    async def _command(self, request: web.Request) -> web.Response:
        found = await self._db.call(store.command_blocking, request.match_info["id"])
        if found is None:
            return web.json_response({"error": "no such command; commands are kept for 7 days"}, status=404)
        return web.json_response(found)


async def save_counts(db: Database, limits: CallLimiter) -> bool:
    """Save the counts not saved yet, in one transaction; False if the database failed (they are kept)."""
    unsaved = limits.take_unsaved()
    if not unsaved:
        return True
    rows = [(token_id, token_hash, second, calls)
            for (token_id, token_hash), seconds in unsaved.items() for second, calls in seconds.items()]
    try:
        await db.call(store.save_counts_blocking, rows)
    except StorageUnavailable as err:  # the disk refuses writes: said once by the database; wait for it
        limits.restore_unsaved(unsaved)
        log.debug("webhook: call counts kept in memory until the disk takes writes: %s", err)
        await db.writable()
        return False
    except StoreError as err:
        limits.restore_unsaved(unsaved)
        log.warning("webhook: could not save the call counts (kept in memory, trying again in %.0f s): %s",
                    SAVE_RETRY_S, err)
        return False
    return True


async def prune(db: Database, limits: CallLimiter, now: float) -> None:
    """Forget old counts and commands; a database error is logged, and the next prune tries again."""
    try:
        await db.call(store.prune_blocking, now)
    except StoreError as err:
        log.warning("webhook: could not prune old calls and commands (trying again in an hour): %s", err)
    limits.forget_idle(now)


def _limit_message(refusal: Refusal) -> str:
    return (f"this webhook was called {refusal.limit} times or more in the last {refusal.window} "
            f"({refusal.limit_key} is {refusal.limit}); stop calling and try again in {refusal.retry_after_s} s "
            "(refused calls count too)")


def _retired(token: store.RetiredToken) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(token.at))
    if token.why == "rotated":
        return (f"this webhook URL was replaced on {when} (`hubd webhook rotate`); use the new URL "
                "(`hubd webhook list` shows the webhooks)")
    return f"this webhook was revoked on {when}; make a new one with `hubd webhook create`"


def _error(status: int, message: str, problems: Sequence[Problem] = (), *, retry_after: int | None = None,
           skipped: list[dict[str, str]] | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message, "details": [p.as_dict() for p in problems]}
    if skipped is not None:
        body["skipped"] = skipped
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.json_response(body, status=status, headers=headers)
