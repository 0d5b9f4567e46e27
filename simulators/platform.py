"""The smart-speaker platform simulator: token host, event gateway, failure report, and binding client.

Plays SPEC.md's {auth_url} and {base_url} on one port, validates every message strictly (the rules
live in simulators.platform_validate), records what it accepted for tests and the demo, and injects
faults on request. bind_user plays the platform's side of binding a user to a hub. A user who binds
again (a new code exchange) starts with no known endpoints (PROTOCOL.md D24: an unbind is not
signalled, a new binding is a new start), so the hub must announce its devices again.
Never imports hubd: it is the outside world.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hmac
import json
import logging
import secrets
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import Enum
from html.parser import HTMLParser
from typing import Any, Literal, Self, TypeVar
from urllib.parse import parse_qsl, unquote_plus, urljoin

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from simulators import platform_directives
from simulators.platform_validate import (
    AsyncEvent,
    MessageInvalid,
    failure_report_sign,
    validate_accept_grant_reply,
    validate_authorize_url,
    validate_driver_reply,
    validate_event,
    validate_redirect,
    validate_user_auth,
)

log = logging.getLogger(__name__)

ClientAuth = Literal["basic", "body", "any"]
T = TypeVar("T")
CODE_TTL_S = 600.0  # PROTOCOL 14: codes live at most 10 minutes
FORM = "application/x-www-form-urlencoded"
# Events about one endpoint need the user to know it; AddOrUpdate/Delete change what is known.
_ENDPOINT_REFS = frozenset({"ChangeReport", "DoorbellPress", "Response"})


class TokenState(Enum):
    """How the gateway sees an access token at receipt."""

    VALID = "valid"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One async event the gateway accepted (202)."""

    user_id: str
    name: str
    message_id: str
    endpoint_ids: tuple[str, ...]
    message: dict[str, Any]
    received_at: float

    def to_json(self) -> dict[str, Any]:
        """The record as served by GET /sim/events."""
        return {
            "userId": self.user_id, "name": self.name, "messageId": self.message_id,
            "endpointIds": list(self.endpoint_ids), "receivedAt": _iso(self.received_at),
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Rejection:
    """A POST /async/events that did not get 202; scripted ones came from the fault script."""

    status: int
    error: str
    user_id: str | None
    scripted: bool
    received_at: float
    message_id: str | None = None  # the header's messageId, when the body had one


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """One POST /oauth/token, without secrets."""

    grant_type: str | None
    client_auth: str | None  # "basic", "body" or None
    status: int
    error: str | None
    user_id: str | None
    received_at: float


@dataclass(frozen=True, slots=True)
class IssuedTokens:
    """A token pair the token endpoint handed out."""

    user_id: str
    grant_type: str
    access_token: str
    refresh_token: str
    expires_in: int
    issued_at: float


@dataclass(frozen=True, slots=True)
class FailureReport:
    """One accepted POST /report/failed."""

    user_id: str
    client_id: str
    received_at: float


class GrantRejected(Exception):
    """The token endpoint refuses a code or refresh token (RFC 6749 invalid_grant)."""


@dataclass(slots=True)
class _UserTokens:
    refresh_token: str
    refresh_revoked: bool = False
    access: dict[str, float] = field(default_factory=dict)  # token -> expires_at


class TokenAuthority:
    """Codes, access tokens and refresh tokens of the simulated platform, per user."""

    def __init__(self, access_ttl_s: int, clock: Callable[[], float]) -> None:
        self.access_ttl_s = access_ttl_s
        self._clock = clock
        self._codes: dict[str, tuple[str, float]] = {}  # code -> (user_id, expires_at)
        self._users: dict[str, _UserTokens] = {}
        self._access_owner: dict[str, str] = {}
        self._refresh_owner: dict[str, str] = {}
        self._known_users: set[str] = set()
        self.issued: list[IssuedTokens] = []

    def issue_code(self, user_id: str) -> str:
        """Mint a single-use authorization code for user_id, as the platform puts in AcceptGrant."""
        code = f"code_{secrets.token_urlsafe(16)}"
        self._codes[code] = (user_id, self._clock() + CODE_TTL_S)
        self._known_users.add(user_id)
        return code

    def exchange_code(self, code: str) -> IssuedTokens:
        """Redeem a code (once); the user's earlier refresh token stops working."""
        user_id, expires_at = self._codes.pop(code, ("", 0.0))
        if not user_id:
            raise GrantRejected("unknown or already used code")
        if self._clock() >= expires_at:
            raise GrantRejected("code expired")
        old = self._users.get(user_id)
        if old is not None:
            self._refresh_owner.pop(old.refresh_token, None)
        return self._issue(user_id, "authorization_code", old.access if old else {})

    def refresh(self, refresh_token: str) -> IssuedTokens:
        """Rotate both tokens; the old refresh token stops working, old access tokens live out their time."""
        user_id = self._refresh_owner.get(refresh_token)
        if user_id is None:
            raise GrantRejected("unknown or rotated refresh token")
        user = self._users[user_id]
        if user.refresh_revoked:
            raise GrantRejected("refresh token revoked")
        del self._refresh_owner[refresh_token]
        return self._issue(user_id, "refresh_token", user.access)

    def check(self, access_token: str) -> tuple[str | None, TokenState]:
        """Whose token this is and whether it is valid now."""
        user_id = self._access_owner.get(access_token)
        if user_id is None:
            return None, TokenState.UNKNOWN
        expires_at = self._users[user_id].access[access_token]
        return user_id, TokenState.VALID if self._clock() < expires_at else TokenState.EXPIRED

    def expire(self, user_id: str | None = None) -> None:
        """Make the access tokens of one user (or all users) expired now."""
        now = self._clock()
        for uid, user in self._users.items():
            if user_id in (None, uid):
                user.access = {token: min(at, now) for token, at in user.access.items()}

    def revoke_refresh(self, user_id: str) -> None:
        """Every later refresh for user_id fails with invalid_grant."""
        self._users[user_id].refresh_revoked = True

    def revoke(self, user_id: str) -> None:
        """Forget user_id's tokens: the gateway answers 403, refresh answers invalid_grant."""
        user = self._users[user_id]
        for token in user.access:
            del self._access_owner[token]
        user.access.clear()
        user.refresh_revoked = True

    def knows_user(self, user_id: str) -> bool:
        """Whether the platform ever issued a code for user_id."""
        return user_id in self._known_users

    def status(self) -> list[dict[str, Any]]:
        """Per user: the newest access token's validity and expiry, and whether refresh works."""
        now = self._clock()
        rows = []
        for user_id, user in self._users.items():
            newest = max(user.access.values(), default=None)
            rows.append({
                "userId": user_id,
                "accessValid": newest is not None and now < newest,
                "accessExpiresAt": None if newest is None else _iso(newest),
                "refreshValid": not user.refresh_revoked,
            })
        return rows

    def _issue(self, user_id: str, grant_type: str, access: dict[str, float]) -> IssuedTokens:
        now = self._clock()
        tokens = IssuedTokens(
            user_id=user_id, grant_type=grant_type, access_token=f"at_{secrets.token_urlsafe(24)}",
            refresh_token=f"rt_{secrets.token_urlsafe(24)}", expires_in=self.access_ttl_s, issued_at=now,
        )
        access[tokens.access_token] = now + self.access_ttl_s
        self._users[user_id] = _UserTokens(refresh_token=tokens.refresh_token, access=access)
        self._access_owner[tokens.access_token] = user_id
        self._refresh_owner[tokens.refresh_token] = user_id
        self.issued.append(tokens)
        return tokens


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
        app = web.Application(middlewares=[self._faults])
        app.router.add_post("/oauth/token", self._handle_token)
        app.router.add_post("/async/events", self._handle_event)
        app.router.add_post("/report/failed", self._handle_failure_report)
        app.router.add_post("/sim/codes", self._sim_codes)
        app.router.add_post("/sim/faults", self._sim_faults)
        app.router.add_post("/sim/tokens/{action}", self._sim_token_action)
        app.router.add_post("/sim/reset", self._sim_reset)
        app.router.add_get("/sim/{kind}", self._sim_list)
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

    def set_outage(self, on: bool, user_id: str | None = None) -> None:
        """While on, every platform route (not /sim/*) answers 503; with user_id, only that user's events do."""
        if user_id is None:
            self._outage = on
        elif on:
            self._user_outages.add(user_id)
        else:
            self._user_outages.discard(user_id)

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
    async def _faults(self, request: web.Request, handler: Handler) -> web.StreamResponse:
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
        headers = {"Cache-Control": "no-store", "Pragma": "no-cache"}
        error: str | None
        try:
            issued = await self._grant(request, seen)
        except _OAuthError as err:
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
            raise _OAuthError(status, error, "scripted fault")
        if request.content_type != FORM:
            raise _OAuthError(400, "invalid_request", f"Content-Type must be {FORM}")
        pairs = parse_qsl(await request.text(), keep_blank_values=True)
        params = dict(pairs)
        seen["grant_type"] = grant_type = params.get("grant_type")
        if len(params) != len(pairs):
            raise _OAuthError(400, "invalid_request", "a parameter is repeated")
        self._authenticate_client(request, params, seen)
        try:
            if grant_type == "authorization_code":
                issued = self.tokens.exchange_code(_required(params, "code"))
                self._known.pop(issued.user_id, None)  # a new binding: the user knows no endpoint yet
                return issued
            if grant_type == "refresh_token":
                return self.tokens.refresh(_required(params, "refresh_token"))
        except GrantRejected as err:
            raise _OAuthError(400, "invalid_grant", str(err)) from None
        if grant_type is None:
            raise _OAuthError(400, "invalid_request", "grant_type is missing")
        raise _OAuthError(400, "unsupported_grant_type", f"{grant_type!r} is not supported")

    def _authenticate_client(
        self, request: web.Request, params: dict[str, str], seen: dict[str, str | None]
    ) -> None:
        """RFC 6749 2.3.1: HTTP Basic or client_id/client_secret in the body, never both."""
        header = request.headers.get("Authorization")
        in_body = "client_id" in params or "client_secret" in params
        if header is not None and in_body:
            raise _OAuthError(400, "invalid_request", "use only one client authentication method")
        if header is not None:
            seen["client_auth"] = "basic"
            scheme, _, encoded = header.partition(" ")
            try:
                raw = base64.b64decode(encoded.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raw = ""
            client_id, sep, secret = raw.partition(":")
            if scheme.lower() != "basic" or not sep:
                raise _OAuthError(401, "invalid_client", "malformed Basic credentials")
            client_id, secret = unquote_plus(client_id), unquote_plus(secret)
        elif in_body:
            seen["client_auth"] = "body"
            client_id, secret = params.get("client_id", ""), params.get("client_secret", "")
        else:
            raise _OAuthError(401, "invalid_client", "no client authentication")
        if self.client_auth not in ("any", seen["client_auth"]):
            raise _OAuthError(401, "invalid_client", f"this client must authenticate with {self.client_auth}")
        id_ok = hmac.compare_digest(client_id.encode(), self.client_id.encode())
        if not (hmac.compare_digest(secret.encode(), self.client_secret.encode()) and id_ok):
            raise _OAuthError(401, "invalid_client", "unknown client or wrong secret")

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

    async def _sim_codes(self, request: web.Request) -> web.Response:
        user_id = (await _sim_json(request)).get("userId")
        if not isinstance(user_id, str) or not user_id:
            return web.json_response({"error": "userId: expected a non-empty string"}, status=400)
        return web.json_response({"code": self.issue_code(user_id)})

    async def _sim_faults(self, request: web.Request) -> web.Response:
        body = await _sim_json(request)
        scripts = {key: body.get(key, []) for key in ("events", "token")}
        for key, statuses in scripts.items():
            if not isinstance(statuses, list) or not all(type(s) is int and 100 <= s < 600 for s in statuses):
                return web.json_response({"error": f"{key}: expected a list of HTTP statuses"}, status=400)
        self.fail_events(*scripts["events"])
        self.fail_token_requests(*scripts["token"])
        if "latencyS" in body:
            self.set_latency(float(body["latencyS"]))
        if "outage" in body:
            outage_user = body.get("userId")
            if outage_user is not None and not isinstance(outage_user, str):
                return web.json_response({"error": "userId: expected a string"}, status=400)
            self.set_outage(body["outage"] is True, outage_user)
        return web.json_response({
            "events": self._event_script, "token": self._token_script,
            "latencyS": self._latency_s, "outage": self._outage, "outageUsers": sorted(self._user_outages),
        })

    async def _sim_token_action(self, request: web.Request) -> web.Response:
        user_id = (await _sim_json(request)).get("userId")
        action = request.match_info["action"]
        if action not in ("expire", "revoke-refresh", "revoke"):
            raise web.HTTPNotFound()
        if not isinstance(user_id, str) and (user_id is not None or action != "expire"):
            return web.json_response({"error": "userId: expected a string"}, status=400)
        try:
            if action == "expire":
                self.expire_tokens(user_id)
            elif action == "revoke-refresh":
                self.revoke_refresh(str(user_id))
            else:
                self.revoke_user(str(user_id))
        except KeyError:
            return web.json_response({"error": f"userId: {user_id!r} has no tokens"}, status=404)
        return web.json_response({"users": self.tokens.status()})

    async def _sim_reset(self, request: web.Request) -> web.Response:
        self.reset(full=bool((await _sim_json(request)).get("full", False)))
        return web.json_response({"ok": True})

    async def _sim_list(self, request: web.Request) -> web.Response:
        kind = request.match_info["kind"]
        query = request.query
        if kind in ("events", "duplicates"):
            records = self.events if kind == "events" else self.duplicates
            rows = [
                r.to_json() for r in records
                if query.get("name", r.name) == r.name and query.get("userId", r.user_id) == r.user_id
                and ("endpointId" not in query or query["endpointId"] in r.endpoint_ids)
            ]
            return web.json_response(rows)
        if kind == "tokens":
            hits = self.expired_token_hits
            return web.json_response({"users": self.tokens.status(), "expiredTokenHits": hits})
        lists: dict[str, list[Any]] = {
            "failures": self.failure_reports,
            "rejections": self.rejections,
            "token-requests": self.token_requests,
        }
        if kind not in lists:
            raise web.HTTPNotFound()
        return web.json_response([_camel(asdict(r)) for r in lists[kind]])

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


@dataclass(frozen=True, slots=True)
class BindResult:
    """The outcome of binding a user: ok is False when the hub answered AcceptGrant with an ErrorResponse."""

    ok: bool
    user_id: str
    user_token: str
    auth_mode: str  # "oauth2" or "oauth", as the authorize redirect showed
    reply: dict[str, Any]


class BindError(Exception):
    """A binding step failed; the message names the step and what the hub answered."""

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"bind step '{step}' failed: {detail}")
        self.step = step


async def bind_user(
    *,
    hub_url: str,
    vendor_path: str,
    sim: PlatformSimulator | str,
    username: str,
    password: str,
    user_id: str,
    callback_url: str | None = None,
    namespace: str = "Service",
) -> BindResult:
    """Bind user_id to the hub as the platform does: log in (SPEC 4.5), then AcceptGrant (SPEC 4.1).

    The callbackURL defaults to one on the simulator's own host, as the platform's is on its own: a hub
    whose driver.callback_hosts is unset allows the host of its platform.auth_url.
    """
    hub_url = hub_url.rstrip("/")
    if callback_url is None:
        sim_url = sim.url if isinstance(sim, PlatformSimulator) else sim
        callback_url = f"{sim_url.rstrip('/')}/callback?src=sim"
    jar = aiohttp.CookieJar(unsafe=True)  # the hub's login may set a CSRF cookie on an IP host
    async with aiohttp.ClientSession(cookie_jar=jar) as session:
        data = await _driver_command(session, hub_url, "OAuth", {"callbackURL": callback_url})
        authorize_url = _checked("OAuth", validate_authorize_url, data, callback_url)
        location = await _log_in(session, authorize_url, username, password)
        auth_mode, added = _checked("redirect", validate_redirect, location, callback_url)
        if auth_mode == "oauth2":
            data = await _driver_command(session, hub_url, "OAuthGetToken", {"code": added["code"]})
            user_token = _checked("OAuthGetToken", validate_user_auth, data)
        else:
            user_token = added["userToken"]
        code = await _platform_code(session, sim, user_id)
        grant = {
            "header": {
                "messageId": str(uuid.uuid4()), "namespace": f"{namespace}.Authorization",
                "name": "AcceptGrant", "payloadVersion": "v1",
                "authorization": {"type": "BearerToken", "token": user_token},
            },
            "payload": {"grant": {"type": "OAuth2.AuthorizationCode", "code": code, "userId": user_id}},
        }
        reply = await _post_json(session, "AcceptGrant", f"{hub_url}{vendor_path}", grant)
        ok = _checked("AcceptGrant", validate_accept_grant_reply, reply, namespace)
    log.info("bound user %s (%s): %s", user_id, auth_mode, "ok" if ok else reply["payload"]["name"])
    return BindResult(ok=ok, user_id=user_id, user_token=user_token, auth_mode=auth_mode, reply=reply)


def _checked(step: str, check: Callable[..., T], value: Any, *args: Any) -> T:
    """Run a validator on what the hub sent at this step; a failure becomes a BindError."""
    try:
        return check(value, *args)
    except MessageInvalid as err:
        raise BindError(step, str(err)) from None


async def _driver_command(
    session: aiohttp.ClientSession, hub_url: str, command: str, params: dict[str, Any]
) -> Any:
    url = f"{hub_url}/driver/command"
    return _checked(command, validate_driver_reply, await _post_json(session, command, url, {
        "command": command, "params": params,
    }))


async def _post_json(
    session: aiohttp.ClientSession, step: str, url: str, body: dict[str, Any]
) -> dict[str, Any]:
    try:
        async with session.post(url, json=body) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise BindError(step, f"POST {url} -> HTTP {resp.status}: {text[:300]}")
    except aiohttp.ClientError as err:
        raise BindError(step, f"POST {url}: {err}") from None
    try:
        reply = json.loads(text)
    except ValueError:
        raise BindError(step, f"POST {url} -> not JSON: {text[:300]}") from None
    if not isinstance(reply, dict):
        raise BindError(step, f"POST {url} -> expected a JSON object, got {text[:300]}")
    return reply


async def _log_in(session: aiohttp.ClientSession, page_url: str, username: str, password: str) -> str:
    """Fill and submit the authorize page's form like a browser; return the redirect's absolute Location."""
    try:
        async with session.get(page_url) as resp:
            page = await resp.text()
            if resp.status != 200:
                raise BindError("authorize page", f"GET {page_url} -> HTTP {resp.status}: {page[:300]}")
        form = _LoginFormParser.parse(page)
        if form is None:
            raise BindError("authorize page", f'no <form method="post"> on {page_url}')
        action, fields = form
        missing = {"username", "password"} - {name for name, _ in fields}
        if missing:
            raise BindError("authorize page", f"the form has no input named {sorted(missing)}")
        filled = {"username": username, "password": password}
        data = [(name, filled.get(name, value)) for name, value in fields]
        target = urljoin(page_url, action) if action else page_url
        async with session.post(target, data=data, allow_redirects=False) as resp:
            text = await resp.text()
            location = resp.headers.get("Location")
            if resp.status != 302 or not location:
                detail = f"POST {target} -> HTTP {resp.status}, expected 302 with a Location: {text[:300]}"
                raise BindError("login", detail)
    except aiohttp.ClientError as err:
        raise BindError("authorize page", str(err)) from None
    return urljoin(target, location)


async def _platform_code(session: aiohttp.ClientSession, sim: PlatformSimulator | str, user_id: str) -> str:
    if isinstance(sim, PlatformSimulator):
        return sim.issue_code(user_id)
    url = f"{sim.rstrip('/')}/sim/codes"
    code = (await _post_json(session, "platform code", url, {"userId": user_id})).get("code")
    if not isinstance(code, str):
        raise BindError("platform code", f"POST {url} gave no code")
    return code


class _LoginFormParser(HTMLParser):
    """Collects the first POST form's action and the inputs a browser would submit."""

    _SKIPPED_TYPES = frozenset({"submit", "button", "reset", "image", "file"})

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: list[tuple[str, str]] = []
        self._in_form = False
        self._done = False

    @classmethod
    def parse(cls, page: str) -> tuple[str, list[tuple[str, str]]] | None:
        """(action, [(name, value)]) of the first POST form, or None."""
        parser = cls()
        parser.feed(page)
        parser.close()
        return None if parser.action is None else (parser.action, parser.fields)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and not self._done and a.get("method", "get").lower() == "post":
            self._in_form, self.action = True, a.get("action", "")
        elif tag == "input" and self._in_form and a.get("name"):
            kind = a.get("type", "text").lower()
            if kind not in self._SKIPPED_TYPES and (kind not in ("checkbox", "radio") or "checked" in a):
                self.fields.append((a["name"], a.get("value", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._in_form:
            self._in_form, self._done = False, True


def main(argv: list[str]) -> int:
    """`python -m simulators platform serve|bind|discover|control|report-state ...`; argv starts at the command."""
    parser = argparse.ArgumentParser(prog="python -m simulators platform", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the platform simulator until SIGINT/SIGTERM")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=9000)
    serve.add_argument("--client-id", default="sim-client")
    serve.add_argument("--client-secret", default="sim-secret")
    serve.add_argument("--access-ttl", type=int, default=3600, help="access token lifetime in seconds")
    serve.add_argument("--client-auth", choices=["any", "basic", "body"], default="any")
    serve.add_argument("--namespace", default="Service", help="the brand word in namespaces")
    serve.add_argument("--allow-unknown-endpoints", action="store_true")
    bind = sub.add_parser("bind", help="bind a user to a hub as the platform does")
    bind.add_argument("--hub", required=True, help="the hub's base URL")
    bind.add_argument("--sim", required=True, help="the running simulator's URL (mints the platform code)")
    bind.add_argument("--username", required=True)
    bind.add_argument("--password", required=True)
    bind.add_argument("--user-id", required=True, help="the platform userId to bind")
    bind.add_argument("--vendor-path", default="/vendor")
    platform_directives.add_commands(sub)
    args = parser.parse_args(argv)
    if args.command in platform_directives.COMMANDS:
        return platform_directives.run_command(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        sim = PlatformSimulator(
            host=args.host, port=args.port, client_id=args.client_id, client_secret=args.client_secret,
            client_auth=args.client_auth, access_ttl_s=args.access_ttl, namespace=args.namespace,
            require_known_endpoints=not args.allow_unknown_endpoints,
        )
        asyncio.run(_serve(sim))
        return 0
    try:
        result = asyncio.run(bind_user(
            hub_url=args.hub, vendor_path=args.vendor_path, sim=args.sim, username=args.username,
            password=args.password, user_id=args.user_id,
        ))
    except BindError as err:
        print(err, file=sys.stderr)
        return 2
    summary = {"ok": result.ok, "userId": result.user_id, "authMode": result.auth_mode,
               "userToken": result.user_token, "reply": result.reply}
    print(json.dumps(summary))
    return 0 if result.ok else 1


async def _serve(sim: PlatformSimulator) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sim.start()
    print(f"platform simulator on {sim.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await sim.stop()


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


async def _sim_json(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.text() or "{}")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text='{"error": "$: expected an object"}', content_type="application/json")
    return body


class _OAuthError(Exception):
    """An RFC 6749 5.2 error reply."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description


def _required(params: dict[str, str], key: str) -> str:
    if not params.get(key):
        raise _OAuthError(400, "invalid_request", f"{key} is missing")
    return params[key]


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


def _camel(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in row.items():
        head, *rest = key.split("_")
        name = head + "".join(part.capitalize() for part in rest)
        out[name] = _iso(value) if key.endswith("_at") and isinstance(value, float) else value
    return out


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
