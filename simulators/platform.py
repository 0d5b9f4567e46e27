"""The smart-speaker platform simulator's server: token host, event gateway and failure report on one port.

Plays the platform's {auth_url} and {base_url} (docs/platform.md) on one port, validates every message strictly
(the rules live in simulators.platform_validate, the token rules in simulators.platform_tokens), records what it
accepted for tests and the demo (simulators.platform_records), and injects faults on request (also over
the /sim/* routes of simulators.platform_control). A user who binds again (a new code exchange) starts
with no known endpoints (an unbind is not signalled, a new binding is a new start), so
the hub must announce its devices again. Never imports hubd: it is the outside world.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any, Self
from urllib.parse import parse_qsl

from aiohttp import web
from aiohttp.typedefs import Handler

from simulators.platform_control import ControlRoutes
from simulators.platform_records import EventRecord, FailureReport, Rejection, TokenRequest
from simulators.platform_tokens import (
    ClientAuth,
    IssuedTokens,
    OAuthError,
    TokenAuthority,
    TokenState,
    authenticate_client,
    redeem,
)
from simulators.platform_validate import AsyncEvent, MessageInvalid, failure_report_sign, validate_event

log = logging.getLogger(__name__)

FORM = "application/x-www-form-urlencoded"
# Events about one endpoint need the user to know it; AddOrUpdate/Delete change what is known.
_ENDPOINT_REFS = frozenset({"ChangeReport", "DoorbellPress", "Response"})


class PlatformSimulator:
    """A strict fake of the platform's token host and event gateway, on one loopback port."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        client_id: str = "sim-client",
        client_secret: str = "sim-secret",  # noqa: S107 - a simulator default, not a real secret
        client_auth: ClientAuth = "any",
        access_ttl_s: int = 3600,
        namespace: str = "Service",
        require_known_endpoints: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.client_secret = client_secret
        self.client_auth = client_auth
        self.namespace = namespace
        self.require_known_endpoints = require_known_endpoints
        self.tokens = TokenAuthority(access_ttl_s, clock)
        self._clock = clock
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Condition()
        self._event_script: list[int] = []
        self._token_script: list[int] = []
        self._latency_s = 0.0
        self._clock_offset_s = 0.0
        self._outage = False
        self._user_outages: set[str] = set()  # users whose events get 503 (the others' do not)
        self._known: dict[str, set[str]] = {}  # user_id -> endpointIds the user knows
        self._accepted_ids: set[tuple[str, str]] = set()
        self.events: list[EventRecord] = []
        self.duplicates: list[EventRecord] = []
        self.rejections: list[Rejection] = []
        self.token_requests: list[TokenRequest] = []
        self.failure_reports: list[FailureReport] = []
        # Requests to /async/events that carried a known but expired access token, whatever the reply.
        self.expired_token_hits = 0

    @property
    def url(self) -> str:
        """Base URL of the running simulator, serving as both {base_url} and {auth_url}."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"http://{host}:{self.port}"

    @property
    def tokens_issued(self) -> list[IssuedTokens]:
        """Every token pair handed out, oldest first."""
        return self.tokens.issued

    async def start(self) -> None:
        """Bind the port (0 picks a free one) and start serving."""
        app = web.Application(middlewares=[self._inject_faults])
        app.router.add_post("/oauth/token", self._handle_token)
        app.router.add_post("/async/events", self._handle_event)
        app.router.add_post("/report/failed", self._handle_failure_report)
        ControlRoutes(self).add_to(app.router)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = self._runner.addresses[0][1]
        log.info("platform simulator listening on %s", self.url)

    async def stop(self) -> None:
        """Stop serving; safe to call twice."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def issue_code(self, user_id: str) -> str:
        """Mint a platform authorization code for user_id (single use, 10 min)."""
        return self.tokens.issue_code(user_id)

    def fail_events(self, *statuses: int) -> None:
        """Answer the next POSTs to /async/events with these statuses, one each; 401 means "token expired"."""
        self._event_script.extend(statuses)

    def fail_token_requests(self, *statuses: int) -> None:
        """Answer the next POSTs to /oauth/token with these statuses, one each."""
        self._token_script.extend(statuses)

    def set_latency(self, seconds: float) -> None:
        """Delay every platform route (not /sim/*) by this much."""
        self._latency_s = seconds

    def set_clock_offset(self, seconds: float) -> None:
        """The platform's clock, as the token endpoint's Date header shows it, runs this far ahead (negative:
        behind) of the simulator's clock."""
        self._clock_offset_s = seconds

    def set_outage(self, on: bool, user_id: str | None = None) -> None:
        """While on, every platform route (not /sim/*) answers 503; with user_id, only that user's events do."""
        if user_id is None:
            self._outage = on
        elif on:
            self._user_outages.add(user_id)
        else:
            self._user_outages.discard(user_id)

    def faults(self) -> dict[str, Any]:
        """The scripted statuses still to come, the latency and the outages, as POST /sim/faults answers."""
        return {
            "events": self._event_script, "token": self._token_script,
            "latencyS": self._latency_s, "outage": self._outage, "outageUsers": sorted(self._user_outages),
        }

    def expire_tokens(self, user_id: str | None = None) -> None:
        """Make the current access tokens of user_id (or everyone) expired now."""
        self.tokens.expire(user_id)

    def revoke_refresh(self, user_id: str) -> None:
        """Make every later refresh for user_id fail with invalid_grant."""
        self.tokens.revoke_refresh(user_id)

    def revoke_user(self, user_id: str) -> None:
        """Disable the integration for user_id: its access tokens get 403, its refresh fails."""
        self.tokens.revoke(user_id)

    def known_endpoints(self, user_id: str) -> set[str]:
        """The endpointIds user_id currently knows through AddOrUpdateReport/DeleteReport."""
        return set(self._known.get(user_id, ()))

    def reset(self, *, full: bool = False) -> None:
        """Clear recordings and faults; full also forgets tokens, codes and known endpoints."""
        self.events.clear()
        self.duplicates.clear()
        self.rejections.clear()
        self.token_requests.clear()
        self.failure_reports.clear()
        self._event_script.clear()
        self._token_script.clear()
        self._latency_s = 0.0
        self._clock_offset_s = 0.0
        self._outage = False
        self._user_outages.clear()
        self.expired_token_hits = 0
        if full:
            self.tokens = TokenAuthority(self.tokens.access_ttl_s, self._clock)
            self._known.clear()
            self._accepted_ids.clear()

    async def wait_for(self, predicate: Callable[[EventRecord], bool], timeout_s: float = 5.0) -> EventRecord:
        """The first recorded event matching predicate, waiting up to timeout_s for one to arrive."""
        found: list[EventRecord] = []

        def check() -> bool:
            found.extend(r for r in self.events if predicate(r))
            return bool(found)

        try:
            await self.wait_until(check, timeout_s)
        except TimeoutError:
            seen = ", ".join(f"{r.name}{list(r.endpoint_ids)}" for r in self.events[-10:])
            raise TimeoutError(
                f"no matching event within {timeout_s}s; {len(self.events)} recorded, last: [{seen}]; "
                f"rejections: {[(r.status, r.error) for r in self.rejections[-5:]]}"
            ) from None
        return found[0]

    async def wait_until(self, check: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Wait until check() is true; it is re-evaluated whenever the simulator records something."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(check)

    @web.middleware
    async def _inject_faults(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if not request.path.startswith("/sim/"):
                if self._latency_s:
                    await asyncio.sleep(self._latency_s)
                if self._outage:
                    return web.json_response({"error": "platform outage (simulated)"}, status=503)
            return await handler(request)
        except ConnectionResetError as err:
            # A client that dies mid-request (a hub killed in a test) is news, not a crash: one line.
            log.warning("%s %s: the client went away mid-request (%s)", request.method, request.path, err)
            return web.Response(status=400, text="connection reset by the client")

    async def _handle_token(self, request: web.Request) -> web.Response:
        seen: dict[str, str | None] = {"grant_type": None, "client_auth": None}
        # The platform's own time: what a hub may compare its clock with.
        headers = {"Cache-Control": "no-store", "Pragma": "no-cache",
                   "Date": formatdate(self._clock() + self._clock_offset_s, usegmt=True)}
        error: str | None
        try:
            issued = await self._grant(request, seen)
        except OAuthError as err:
            status, error, user_id = err.status, err.error, None
            body: dict[str, Any] = {"error": err.error, "error_description": err.description}
            if status == 401:
                headers["WWW-Authenticate"] = 'Basic realm="platform"'
        else:
            status, error, user_id = 200, None, issued.user_id
            body = {
                "access_token": issued.access_token, "token_type": "Bearer",
                "expires_in": issued.expires_in, "refresh_token": issued.refresh_token,
            }
        grant_type, client_auth = seen["grant_type"], seen["client_auth"]
        now = self._clock()
        self.token_requests.append(TokenRequest(grant_type, client_auth, status, error, user_id, now))
        log.info("token grant_type=%s client_auth=%s -> %d %s", grant_type, client_auth, status, error)
        await self._notify()
        return web.json_response(body, status=status, headers=headers)

    async def _grant(self, request: web.Request, seen: dict[str, str | None]) -> IssuedTokens:
        """RFC 6749 4.1.3 and 6; fills seen with grant_type and client_auth as they become known."""
        if self._token_script:
            status = self._token_script.pop(0)
            error = {400: "invalid_grant", 401: "invalid_client"}.get(status, "temporarily_unavailable")
            raise OAuthError(status, error, "scripted fault")
        if request.content_type != FORM:
            raise OAuthError(400, "invalid_request", f"Content-Type must be {FORM}")
        pairs = parse_qsl(await request.text(), keep_blank_values=True)
        params = dict(pairs)
        seen["grant_type"] = params.get("grant_type")
        if len(params) != len(pairs):
            raise OAuthError(400, "invalid_request", "a parameter is repeated")
        authenticate_client(
            request.headers.get("Authorization"), params, seen,
            client_id=self.client_id, client_secret=self.client_secret, client_auth=self.client_auth,
        )
        issued = redeem(self.tokens, params)
        if issued.grant_type == "authorization_code":
            self._known.pop(issued.user_id, None)  # a new binding: the user knows no endpoint yet
        return issued

    async def _handle_event(self, request: web.Request) -> web.Response:
        received_at = self._clock()
        raw = await request.read()
        message, event, error = _parse_event(raw, request.content_type, self.namespace)
        user_id, token_state = self.tokens.check(_token_of(message))
        message_id = _message_id_of(message)
        if token_state is TokenState.EXPIRED:
            self.expired_token_hits += 1
        if self._event_script:
            status = self._event_script.pop(0)
            reason = "header.authorization.token: expired" if status == 401 else "simulated failure"
            return await self._reject(status, f"{reason} (scripted)", user_id, received_at, message_id, scripted=True)
        if event is None:
            return await self._reject(400, error, user_id, received_at, message_id)
        if token_state is TokenState.UNKNOWN or user_id is None:
            error = "header.authorization.token: unknown or revoked"
            return await self._reject(403, error, None, received_at, message_id)
        if token_state is TokenState.EXPIRED:
            return await self._reject(401, "header.authorization.token: expired", user_id, received_at, message_id)
        if user_id in self._user_outages:
            return await self._reject(503, "platform outage for this user (simulated)", user_id, received_at,
                                      message_id, scripted=True)
        known = self._known.setdefault(user_id, set())
        about = event.endpoint_ids[0]
        if self.require_known_endpoints and event.name in _ENDPOINT_REFS and about not in known:
            path = "payload.endpointId" if event.name == "DoorbellPress" else "endpoint.endpointId"
            error = f"{path}: {about!r} is not a known endpoint of this user"
            return await self._reject(422, error, user_id, received_at, message_id)
        record = EventRecord(
            user_id, event.name, event.message_id, event.endpoint_ids, event.body, received_at
        )
        key = (user_id, event.message_id)
        if key in self._accepted_ids:
            self.duplicates.append(record)
            log.info("%s user=%s messageId=%s duplicate -> 202", event.name, user_id, event.message_id)
        else:
            self._accepted_ids.add(key)
            if event.name == "AddOrUpdateReport":
                known.update(event.endpoint_ids)
            elif event.name == "DeleteReport":
                known.difference_update(event.endpoint_ids)
            self.events.append(record)
            log.info("%s user=%s endpoints=%s -> 202", event.name, user_id, ",".join(event.endpoint_ids))
        await self._notify()
        return web.Response(status=202)

    async def _reject(
        self, status: int, error: str, user_id: str | None, received_at: float, message_id: str | None = None,
        *, scripted: bool = False,
    ) -> web.Response:
        self.rejections.append(Rejection(status, error, user_id, scripted, received_at, message_id))
        log.warning("event user=%s -> %d %s", user_id, status, error)
        await self._notify()
        return web.json_response({"error": error}, status=status)

    async def _handle_failure_report(self, request: web.Request) -> web.Response:
        is_form = request.content_type == FORM
        pairs = parse_qsl(await request.text(), keep_blank_values=True) if is_form else []
        error = self._failure_report_error(pairs) if is_form else f"$: Content-Type must be {FORM}"
        if error is not None:
            log.warning("failure report -> 400 %s", error)
            return web.json_response({"error": error}, status=400)
        form = dict(pairs)
        self.failure_reports.append(FailureReport(form["userId"], form["clientId"], self._clock()))
        log.info("failure report user=%s -> 200", form["userId"])
        await self._notify()
        return web.json_response({"ok": True})

    def _failure_report_error(self, pairs: list[tuple[str, str]]) -> str | None:
        """What is wrong with a failure report form (SPEC 4.4), or None."""
        error = _form_error(pairs, ("userId", "clientId", "sign"))
        if error is not None:
            return error
        form = dict(pairs)
        if form["clientId"] != self.client_id:
            return f"clientId: {form['clientId']!r} is not this platform's client"
        if not self.tokens.knows_user(form["userId"]):
            return f"userId: {form['userId']!r} never received a grant"
        expected = failure_report_sign(form["userId"], form["clientId"], self.client_secret)
        if not hmac.compare_digest(form["sign"], expected):
            return "sign: not the lowercase hex HMAC-SHA256 of userId=<u>&clientId=<c> (SPEC 4.4)"
        return None

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


def _parse_event(raw: bytes, content_type: str, namespace: str) -> tuple[object, AsyncEvent | None, str]:
    """(parsed JSON or None, AsyncEvent or None, error) for an /async/events body."""
    if content_type != "application/json":
        return None, None, "$: Content-Type must be application/json"
    try:
        message = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as err:
        return None, None, f"$: not JSON: {err}"
    try:
        return message, validate_event(message, namespace), ""
    except MessageInvalid as err:
        return message, None, str(err)


def _token_of(message: object) -> str:
    """The header token of a body, valid or not, so expired tokens are counted even on scripted faults."""
    try:
        token = message["header"]["authorization"]["token"]  # type: ignore[index]
    except (KeyError, TypeError):
        return ""
    return token if isinstance(token, str) else ""


def _message_id_of(message: Any) -> str | None:
    header = message.get("header") if isinstance(message, dict) else None
    value = header.get("messageId") if isinstance(header, dict) else None
    return value if isinstance(value, str) else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _form_error(pairs: list[tuple[str, str]], fields: tuple[str, ...]) -> str | None:
    """The first problem of a form that must carry exactly these non-empty fields, once each."""
    names = [name for name, _ in pairs]
    for name in names:
        if name not in fields:
            return f"{name}: unknown field"
    for name in fields:
        if names.count(name) != 1:
            return f"{name}: {'missing' if name not in names else 'repeated'}"
        if not dict(pairs)[name]:
            return f"{name}: must not be empty"
    return None
