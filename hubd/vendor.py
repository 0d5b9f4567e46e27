"""The vendor endpoint ({vendor_endpoint} = http.vendor_path): platform directives in, replies out.

`VendorEndpoint.handle(message) -> reply` is dict in, dict out (HA's async_handle_message); the
aiohttp view only parses JSON and serialises the reply, always with HTTP 200, also for
a body that is too large or not JSON. Every directive's header token must be a live user token issued by
hubd's driver. Every reply is due within 3 s: the budget (REPLY_BUDGET_S) starts when the
request arrives, the handlers get its end as `Directive.deadline`, the token check gets a share of it
(a database that stalls falls back to the driver's recent_verdict: a check within its last 15 s), and a
reply not ready HANDLER_GRACE_S after it is E_ENDPOINT_BUSY. The request's messageId is echoed whenever
it is a non-empty string. DirectiveError is turned into an ErrorResponse here and nowhere else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from aiohttp import web

from hubd.cloud import messages
from hubd.cloud.tokens import TokenManager
from hubd.driver.store import TokenCheck, TokenStatus
from hubd.errors import CloudAuthError, CloudUnavailable, DirectiveError, StoreError
from hubd.metrics import Metrics
from hubd.reporter import Reporter
from hubd.web.jsonbody import JsonBodyInvalid, load_json

log = logging.getLogger(__name__)

# AcceptGrant with less of the budget left than this answers E_ENDPOINT_BUSY before the exchange, code unspent.
ACCEPT_GRANT_MIN_S = 0.5
REPLY_BUDGET_S = 2.5  # the platform wants every reply within 3 s; the rest is for HTTP and the network
HANDLER_GRACE_S = 0.3  # a handler still busy this long after its deadline is cut off: a late reply is lost
TOKEN_CHECK_S = 1.0  # the header token check's share of the budget
BUSY = "E_ENDPOINT_BUSY"  # transient: the platform may retry


class UserTokenVerifier(Protocol):
    """hubd's driver: checks the user tokens it issued."""

    async def verify_user_token(self, token: str) -> TokenCheck:
        """Valid, expired or unknown."""

    def recent_verdict(self, token: str) -> TokenCheck | None:
        """Its recent verdict on the token, for while the database stalls; None if it has none it still trusts."""


@dataclass(frozen=True, slots=True)
class Directive:
    """A parsed platform message."""

    message_id: str
    namespace: str
    name: str
    token: str
    user: str | None
    correlation_token: str | None
    endpoint: dict[str, Any] | None
    payload: dict[str, Any]
    raw: dict[str, Any]
    deadline: float  # loop time by which the reply must be ready (the request's arrival + the budget)


DirectiveHandler = Callable[[Directive], Awaitable[dict[str, Any]]]


class VendorEndpoint:
    """Routes directives on namespace and name; answers AcceptGrant itself."""

    def __init__(self, *, path: str, brand: str, verifier: UserTokenVerifier, tokens: TokenManager,
                 reporter: Reporter, reporting_enabled: bool, metrics: Metrics,
                 reply_budget_s: float = REPLY_BUDGET_S) -> None:
        self._path = path
        self._budget_s = reply_budget_s
        self._brand = brand
        self._verifier = verifier
        self._tokens = tokens
        self._reporter = reporter
        self._reporting_enabled = reporting_enabled
        self._handlers: dict[tuple[str, str], DirectiveHandler] = {
            (f"{brand}.Authorization", "AcceptGrant"): self._accept_grant,
        }
        self._namespace_handlers: dict[str, DirectiveHandler] = {}
        self._directives = metrics.counter("hubd_directives_total", "platform directives, by reply name", "reply")

    def add_handler(self, namespace: str, name: str, handler: DirectiveHandler) -> None:
        """Serve another directive (wired in app.py)."""
        self._handlers[(namespace, name)] = handler

    def add_namespace_handler(self, namespace: str, handler: DirectiveHandler) -> None:
        """Serve every name of a namespace (control: `<Interface>.<Op>`)."""
        self._namespace_handlers[namespace] = handler

    def routes(self) -> list[web.RouteDef]:
        """POST {vendor_path}."""
        return [web.post(self._path, self._view)]

    async def _view(self, request: web.Request) -> web.Response:
        received_at = asyncio.get_running_loop().time()
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            reply = messages.error_response(
                self._brand, messages.new_message_id(), "E_INTERNAL_ERROR",
                f"the body is larger than http.max_body_bytes ({request.client_max_size} bytes); a directive is "
                "a small JSON object")
        else:
            try:
                message = load_json(raw, max_bytes=max(len(raw), request.client_max_size))
            except JsonBodyInvalid as err:
                reply = messages.error_response(self._brand, messages.new_message_id(), "E_INTERNAL_ERROR",
                                                f"{err}; send a JSON object {{header, endpoint?, payload?}}")
            else:
                reply = await self.handle(message, received_at=received_at)
        self._directives.inc(label=str(reply["header"]["name"]))
        return web.json_response(reply, status=200)

    async def handle(self, message: Any, *, received_at: float | None = None) -> dict[str, Any]:
        """One directive in, one reply out, ready by `received_at` (loop time, default now) plus the budget.

        Never raises. A reply that is not ready HANDLER_GRACE_S after the budget is E_ENDPOINT_BUSY.
        """
        loop = asyncio.get_running_loop()
        deadline = (loop.time() if received_at is None else received_at) + self._budget_s
        message_id = _message_id_of(message) or messages.new_message_id()
        try:
            async with asyncio.timeout_at(deadline + HANDLER_GRACE_S):
                return await self._answer(message, message_id, deadline)
        except TimeoutError:
            # _answer turns every exception into a reply: this is the guard's own timeout.
            log.warning("directive %s not answered within the %.1f s budget: %s", message_id, self._budget_s, BUSY)
            return messages.error_response(self._brand, message_id, BUSY,
                                           "the hub could not answer in time; try again")

    async def _answer(self, message: Any, message_id: str, deadline: float) -> dict[str, Any]:
        try:
            directive = self._parse(message, deadline)
            check = await self._check_token(directive.token, deadline)
            if check.status is TokenStatus.EXPIRED:
                raise DirectiveError("E_AUTHORIZATION_EXPIRED", "the user token has expired; refresh it")
            if check.status is not TokenStatus.VALID:
                raise DirectiveError("E_INVALID_AUTHORIZATION",
                                     "the user token is not one this hub issued (or it was revoked)")
            directive = replace(directive, user=check.user)
            handler = self._handlers.get((directive.namespace, directive.name)) or self._namespace_handlers.get(
                directive.namespace)
            if handler is None:
                raise DirectiveError("E_NOT_SUPPORTED_DIRECTIVE",
                                     f"{directive.namespace}/{directive.name} is not supported by this hub")
            return await handler(directive)
        except DirectiveError as err:
            log.info("directive %s answered %s: %s", message_id, err.name, err.message)
            return messages.error_response(self._brand, message_id, err.name, err.message)
        except Exception:
            # The platform treats anything but HTTP 200 as a transport failure.
            log.exception("directive %s failed", message_id)
            return messages.error_response(self._brand, message_id, "E_INTERNAL_ERROR",
                                           "the hub failed to handle this directive; see its log")

    async def _check_token(self, token: str, deadline: float) -> TokenCheck:
        """The driver's verdict, within TOKEN_CHECK_S; if the database does not answer in time, the driver's
        recent verdict (a check within its last few seconds, never past the token's expiry, forgotten when the
        driver revokes tokens), else E_ENDPOINT_BUSY."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(min(deadline, loop.time() + TOKEN_CHECK_S)):
                return await self._verifier.verify_user_token(token)
        except (TimeoutError, StoreError) as err:
            why = str(err) or "timed out"
            recent = self._verifier.recent_verdict(token)
            if recent is not None:
                log.warning("the database did not answer the token check (%s); using the token's last check: %s",
                            why, recent.status.value)
                return recent
            log.warning("the database did not answer the token check (%s): %s", why, BUSY)
            raise DirectiveError(BUSY, "the hub's database did not answer in time to check the token; "
                                       "try again") from err

    def _parse(self, message: Any, deadline: float) -> Directive:
        if not isinstance(message, dict):
            raise DirectiveError("E_INTERNAL_ERROR", "the body must be a JSON object {header, endpoint?, payload?}")
        header = message.get("header")
        if not isinstance(header, dict):
            raise DirectiveError("E_INTERNAL_ERROR", "header: missing or not an object")
        for key in ("messageId", "namespace", "name"):
            if not isinstance(header.get(key), str) or not header[key]:
                raise DirectiveError("E_INTERNAL_ERROR", f"header.{key}: missing or not a non-empty string")
        for key in ("messageId", "namespace", "name", "correlationToken"):
            if isinstance(header.get(key), str) and not _is_text(header[key]):
                raise DirectiveError("E_INTERNAL_ERROR", f"header.{key}: holds an unpaired surrogate (\\ud800-"
                                     "\\udfff); send text that is valid Unicode")
        if header.get("payloadVersion") != messages.PAYLOAD_VERSION:
            raise DirectiveError("E_INTERNAL_ERROR", f"header.payloadVersion: must be \"v1\", "
                                 f"got {header.get('payloadVersion')!r}")
        auth = header.get("authorization")
        if not isinstance(auth, dict) or not isinstance(auth.get("token"), str) or not auth["token"]:
            raise DirectiveError("E_INVALID_AUTHORIZATION", "header.authorization.token: missing")
        if auth.get("type") != "BearerToken":
            raise DirectiveError("E_INVALID_AUTHORIZATION",
                                 f"header.authorization.type: must be BearerToken, got {auth.get('type')!r}")
        payload = message.get("payload", {})
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            raise DirectiveError("E_INTERNAL_ERROR", "payload: must be an object")
        endpoint = message.get("endpoint")
        if endpoint is not None and not isinstance(endpoint, dict):
            raise DirectiveError("E_INTERNAL_ERROR", "endpoint: must be an object")
        correlation = header.get("correlationToken")
        return Directive(header["messageId"], header["namespace"], header["name"], auth["token"], None,
                         correlation if isinstance(correlation, str) else None, endpoint, payload, message, deadline)

    async def _accept_grant(self, directive: Directive) -> dict[str, Any]:
        grant = directive.payload.get("grant")
        if not isinstance(grant, dict):
            raise DirectiveError("E_INTERNAL_ERROR", "payload.grant: missing or not an object")
        if grant.get("type") != "OAuth2.AuthorizationCode":
            raise DirectiveError("E_INTERNAL_ERROR", "payload.grant.type: must be OAuth2.AuthorizationCode, "
                                 f"got {grant.get('type')!r}")
        code, user_id = grant.get("code"), grant.get("userId")
        if not isinstance(code, str) or not code:
            raise DirectiveError("E_INTERNAL_ERROR", "payload.grant.code: missing")
        if not isinstance(user_id, str) or not user_id:
            raise DirectiveError("E_INTERNAL_ERROR", "payload.grant.userId: missing")
        for key, value in (("code", code), ("userId", user_id)):
            if not _is_text(value):
                raise DirectiveError("E_INTERNAL_ERROR", f"payload.grant.{key}: holds an unpaired surrogate "
                                     "(\\ud800-\\udfff); send text that is valid Unicode")
        if not self._reporting_enabled:
            raise DirectiveError("E_INTERNAL_ERROR", "state reporting is not configured on this hub: set "
                                 "platform.base_url, auth_url, client_id and client_secret")
        # A resend of an AcceptGrant whose exchange began (the same userId and code) gets that outcome, however
        # little time is left; a new one needs time for the exchange, or the code stays unspent for a resend.
        loop = asyncio.get_running_loop()
        if directive.deadline - loop.time() < ACCEPT_GRANT_MIN_S and not self._tokens.exchange_known(user_id, code):
            raise DirectiveError(BUSY, "too little of the reply time was left to exchange the code (it is unspent); "
                                       "send AcceptGrant again")
        try:
            # The grant and the new user's AddOrUpdateReport of every device are stored in one transaction, the
            # report ahead of the user's kept events, so the platform knows the endpoints before any event.
            # The exchange and that commit go on when the reply is due; the outcome waits for a resend.
            async with asyncio.timeout_at(directive.deadline):
                await self._tokens.accept_grant(user_id, code, driver_user=directive.user,
                                                commit=self._reporter.commit_grant)
        except TimeoutError as err:
            raise DirectiveError(BUSY, "the platform's token endpoint has not answered yet; hubd keeps its answer "
                                       "(and the grant, if the code is good): send AcceptGrant again") from err
        except CloudAuthError as err:
            raise DirectiveError("E_INTERNAL_ERROR",
                                 f"the token endpoint refused the code (error={err.error or 'unknown'})") from err
        except CloudUnavailable as err:
            raise DirectiveError("E_SERVER_UNREACHABLE", "the platform's token endpoint could not be reached") from err
        return messages.accept_grant_response(self._brand, directive.message_id)


def _message_id_of(message: Any) -> str | None:
    """header.messageId when it is a non-empty string, however wrong the rest is."""
    header = message.get("header") if isinstance(message, dict) else None
    message_id = header.get("messageId") if isinstance(header, dict) else None
    return message_id if isinstance(message_id, str) and message_id else None


def _is_text(value: str) -> bool:
    """Whether a string is valid Unicode (JSON's "\\ud800" escapes make strings that are not)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
