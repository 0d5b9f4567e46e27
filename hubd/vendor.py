"""The vendor endpoint ({vendor_endpoint} = http.vendor_path): platform directives in, replies out.

`VendorEndpoint.handle(message) -> reply` is dict in, dict out (HA's async_handle_message); the
aiohttp view only parses JSON and serialises the reply, always with HTTP 200 (PROTOCOL.md D2).
Every directive's header token must be a live user token issued by hubd's driver (D9).
DirectiveError is turned into an ErrorResponse here and nowhere else.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from hubd.cloud import messages
from hubd.cloud.tokens import TokenManager
from hubd.driver.store import TokenCheck, TokenStatus
from hubd.errors import CloudAuthError, CloudUnavailable, DirectiveError
from hubd.metrics import Metrics
from hubd.registry import DeviceRegistry
from hubd.reporter import Reporter, discovery_events

log = logging.getLogger(__name__)

ACCEPT_GRANT_EXCHANGE_TIMEOUT_S = 2.5  # the platform wants every reply within 3 s


class UserTokenVerifier(Protocol):
    """hubd's driver: checks the user tokens it issued."""

    async def verify_user_token(self, token: str) -> TokenCheck:
        """Valid, expired or unknown."""


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


DirectiveHandler = Callable[[Directive], Awaitable[dict[str, Any]]]


class VendorEndpoint:
    """Routes directives on namespace and name; answers AcceptGrant itself."""

    def __init__(self, *, path: str, brand: str, verifier: UserTokenVerifier, tokens: TokenManager,
                 registry: DeviceRegistry, reporter: Reporter, reporting_enabled: bool, metrics: Metrics) -> None:
        self._path = path
        self._brand = brand
        self._verifier = verifier
        self._tokens = tokens
        self._registry = registry
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
        try:
            raw = await request.read()
            message = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            message = None
        reply = await self.handle(message)
        self._directives.inc(label=str(reply["header"]["name"]))
        return web.json_response(reply, status=200)

    async def handle(self, message: Any) -> dict[str, Any]:
        """One directive in, one reply out; never raises."""
        message_id = messages.new_message_id()
        try:
            directive = self._parse(message)
            message_id = directive.message_id
            check = await self._verifier.verify_user_token(directive.token)
            if check.status is TokenStatus.EXPIRED:
                raise DirectiveError("E_AUTHORIZATION_EXPIRED", "the user token has expired; refresh it")
            if check.status is not TokenStatus.VALID:
                raise DirectiveError("E_INVALID_AUTHORIZATION",
                                     "the user token is not one this hub issued (or it was revoked)")
            directive = Directive(directive.message_id, directive.namespace, directive.name, directive.token,
                                  check.user, directive.correlation_token, directive.endpoint, directive.payload,
                                  directive.raw)
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
            # The platform treats anything but HTTP 200 as a transport failure (PROTOCOL.md D2).
            log.exception("directive %s failed", message_id)
            return messages.error_response(self._brand, message_id, "E_INTERNAL_ERROR",
                                           "the hub failed to handle this directive; see its log")

    def _parse(self, message: Any) -> Directive:
        if not isinstance(message, dict):
            raise DirectiveError("E_INTERNAL_ERROR", "the body must be a JSON object {header, endpoint?, payload?}")
        header = message.get("header")
        if not isinstance(header, dict):
            raise DirectiveError("E_INTERNAL_ERROR", "header: missing or not an object")
        for key in ("messageId", "namespace", "name"):
            if not isinstance(header.get(key), str) or not header[key]:
                raise DirectiveError("E_INTERNAL_ERROR", f"header.{key}: missing or not a non-empty string")
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
                         correlation if isinstance(correlation, str) else None, endpoint, payload, message)

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
        if not self._reporting_enabled:
            raise DirectiveError("E_INTERNAL_ERROR", "state reporting is not configured on this hub: set "
                                 "platform.base_url, auth_url, client_id and client_secret")
        try:
            await self._tokens.accept_grant(user_id, code, driver_user=directive.user,
                                            timeout_s=ACCEPT_GRANT_EXCHANGE_TIMEOUT_S)
        except CloudAuthError as err:
            log.warning("AcceptGrant for user %s: code exchange refused (error=%s)", user_id, err.error)
            raise DirectiveError("E_INTERNAL_ERROR",
                                 f"the token endpoint refused the code (error={err.error or 'unknown'})") from err
        except CloudUnavailable as err:
            log.warning("AcceptGrant for user %s: token endpoint unreachable: %s", user_id, err)
            raise DirectiveError("E_SERVER_UNREACHABLE", "the platform's token endpoint could not be reached") from err
        # A new grant gets every current device, so the platform knows them before any ChangeReport.
        events = discovery_events(self._brand, [d.endpoint() for d in self._registry.devices()])
        await self._reporter.enqueue(events, [user_id])
        return messages.accept_grant_response(self._brand, directive.message_id)
