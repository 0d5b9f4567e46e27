"""The directive endpoint ({vendor_endpoint} = http.vendor_path): platform directives in, replies out.

`DirectiveEndpoint.handle(message) -> reply` is dict in, dict out (HA's async_handle_message); the
aiohttp view only parses JSON and serialises the reply, always with HTTP 200, also for
a body that is too large or not JSON. Every directive's header token must be a live user token issued by
hubd's driver. Every reply is due within 3 s: the budget (REPLY_BUDGET_S) starts when the
request arrives, the handlers get its end as `Directive.deadline`, the token check gets a share of it
(a database that stalls falls back to the driver's recent_verdict: a check within its last 15 s), and a
reply not ready HANDLER_GRACE_S after it is E_ENDPOINT_BUSY. The request's messageId is echoed whenever
it is a non-empty string. DirectiveError is turned into an ErrorResponse here and nowhere else. It routes
on namespace and name to the handlers registered with it (AcceptGrant, discovery, control, wired in
app.py) and knows none of them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, Protocol

from aiohttp import web

from hubd.cloud import messages
from hubd.directives.message import BUSY, DirectiveHandler, message_id_of, parse
from hubd.errors import DirectiveError, StoreError
from hubd.events import new_message_id
from hubd.metrics import Metrics
from hubd.usertoken import TokenCheck, TokenStatus
from hubd.web.jsonbody import JsonBodyInvalid, load_json

log = logging.getLogger(__name__)

REPLY_BUDGET_S = 2.5  # the platform wants every reply within 3 s; the rest is for HTTP and the network
HANDLER_GRACE_S = 0.3  # a handler still busy this long after its deadline is cut off: a late reply is lost
TOKEN_CHECK_S = 1.0  # the header token check's share of the budget


class UserTokenVerifier(Protocol):
    """hubd's driver: checks the user tokens it issued."""

    async def verify_user_token(self, token: str) -> TokenCheck:
        """Valid, expired or unknown."""

    def recent_verdict(self, token: str) -> TokenCheck | None:
        """Its recent verdict on the token, for while the database stalls; None if it has none it still trusts."""


class DirectiveEndpoint:
    """Checks each directive's token and routes it on namespace and name to the handler registered for it."""

    def __init__(self, *, path: str, namespace: str, verifier: UserTokenVerifier, metrics: Metrics,
                 reply_budget_s: float = REPLY_BUDGET_S) -> None:
        self._path = path
        self._budget_s = reply_budget_s
        self._namespace = namespace
        self._verifier = verifier
        self._handlers: dict[tuple[str, str], DirectiveHandler] = {}
        self._namespace_handlers: dict[str, DirectiveHandler] = {}
        self._directives = metrics.counter("hubd_directives_total", "platform directives, by reply name", "reply")

    def add_handler(self, namespace: str, name: str, handler: DirectiveHandler) -> None:
        """Serve one directive (wired in app.py)."""
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
                self._namespace, new_message_id(), "E_INTERNAL_ERROR",
                f"the body is larger than http.max_body_bytes ({request.client_max_size} bytes); a directive is "
                "a small JSON object")
        else:
            try:
                message = load_json(raw, max_bytes=max(len(raw), request.client_max_size))
            except JsonBodyInvalid as err:
                reply = messages.error_response(self._namespace, new_message_id(), "E_INTERNAL_ERROR",
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
        message_id = message_id_of(message) or new_message_id()
        try:
            async with asyncio.timeout_at(deadline + HANDLER_GRACE_S):
                return await self._answer(message, message_id, deadline)
        except TimeoutError:
            # _answer turns every exception into a reply: this is the guard's own timeout.
            log.warning("directive %s not answered within the %.1f s budget: %s", message_id, self._budget_s, BUSY)
            return messages.error_response(self._namespace, message_id, BUSY,
                                           "the hub could not answer in time; try again")

    async def _answer(self, message: Any, message_id: str, deadline: float) -> dict[str, Any]:
        try:
            directive = parse(message, deadline)
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
            return messages.error_response(self._namespace, message_id, err.name, err.message)
        except Exception:
            # The platform treats anything but HTTP 200 as a transport failure.
            log.exception("directive %s failed", message_id)
            return messages.error_response(self._namespace, message_id, "E_INTERNAL_ERROR",
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
