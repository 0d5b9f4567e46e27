"""Who may change devices: the write check of the owner's routes (`hubd.owner.routes`).

A write needs an owner: `Authorization: Bearer <admin token>` (`hubd admin-token create`; looked up by its hash),
or the session of an owner signed in on the devices page (`hubd.owner.signin`) together with that session's CSRF
token in the `X-CSRF-Token` header. Before either, a request that says it comes from another origin is refused
(403): its `Origin` header names another host or port than the one it was sent to (or is `null`), or its
`Sec-Fetch-Site` says `cross-site`. The Origin's scheme is the browser's, which behind a proxy that ends HTTPS is
not the one hubd sees: the rule is the login page's (`hubd.driver.urls.foreign_origin`). So a page of another
site, open in a browser on the LAN, can change nothing: its form posts and fetches carry its own origin, the
SameSite=Strict cookie does not come along, and it can read no CSRF token. Wrong admin tokens are counted per
client address (`hubd.ratelimit.FailureThrottle`): past BAD_TOKENS_FREE the address waits longer and longer. Reads
stay as they are (local network only).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Protocol

from aiohttp import hdrs, web

from hubd.driver.urls import foreign_origin
from hubd.lifecycle import Clock, SystemClock
from hubd.owner.signin import Session, Sessions
from hubd.ratelimit import FailureThrottle
from hubd.web.client_address import throttle_key
from hubd.web.jsonerror import json_error, route_pattern

log = logging.getLogger(__name__)

CSRF_HEADER = "X-CSRF-Token"
BAD_TOKENS_FREE = 10  # wrong admin tokens an address may send before it has to wait
NO_CREDENTIAL = ("this change needs the owner: send Authorization: Bearer <admin token> (hubd admin-token create), "
                 "or sign in on the devices page (/devices) with an account marked admin: true")


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a write came from, for the log: an admin token (its name) or a signed-in account."""

    via: str  # "token" or "session"
    name: str

    def __str__(self) -> str:
        return f"admin token {self.name!r}" if self.via == "token" else f"owner {self.name!r}"


class TokenLookup(Protocol):
    """The admin tokens (hubd.store.admin_tokens.AdminTokens)."""

    async def name_of(self, token: str) -> str | None:
        """The live token's name, or None (unknown or revoked)."""


class OwnerGuard:
    """Decides whether a request may change devices, and answers the ones that may not."""

    def __init__(self, sessions: Sessions, tokens: TokenLookup, *, clock: Clock | None = None) -> None:
        self._sessions = sessions
        self._tokens = tokens
        self._clock: Clock = clock or SystemClock()
        self._bad_tokens = FailureThrottle(free=BAD_TOKENS_FREE)

    def foreign(self, request: web.Request) -> web.Response | None:
        """403 for a request that says it comes from another origin (Origin, or Sec-Fetch-Site); None otherwise."""
        claimed = request.headers.get(hdrs.ORIGIN)
        where: str | None = None
        if claimed is not None:
            if foreign_origin(claimed, request.host) is not None:
                where = claimed[:100]
        elif request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
            where = "another site (Sec-Fetch-Site: cross-site)"
        if where is None:
            return None
        log.warning("%s %s: refused, sent from %s", request.method, route_pattern(request), where)
        return json_error(403, "this request was sent from another site, which may not change anything here; open "
                               "the devices page of this hub itself", [{"path": "(header) Origin", "message":
                                                                        f"{where!r} is not this hub's origin"}])

    async def owner(self, request: web.Request) -> Owner | web.Response:
        """The owner a write comes from, or the response refusing it (403 another origin or a wrong CSRF token,
        401 no or a wrong credential, 429 too many wrong tokens)."""
        refused = self.foreign(request)
        if refused is not None:
            return refused
        authorization = request.headers.get(hdrs.AUTHORIZATION)
        if authorization is not None:
            return await self._bearer(request, authorization)
        session = self._sessions.find(request)
        if session is None:
            return _unauthorized(NO_CREDENTIAL, "neither an admin token nor a session of a signed-in owner")
        return self._with_csrf(request, session)

    async def _bearer(self, request: web.Request, authorization: str) -> Owner | web.Response:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _unauthorized("the Authorization header must be Bearer <admin token>", "not a Bearer token")
        address = throttle_key(request.remote or "unknown")
        now = self._clock.monotonic()
        wait = self._bad_tokens.wait(address, now)
        if wait > 0:
            return json_error(429, "too many wrong admin tokens from this address; wait, then send a right one",
                              [{"path": "(header) Authorization", "message": "too many wrong tokens"}],
                              {"Retry-After": str(math.ceil(wait))})
        name = await self._tokens.name_of(token.strip())
        if name is None:
            self._bad_tokens.fail(address, now)
            log.warning("%s %s: refused an unknown or revoked admin token from %s", request.method,
                        route_pattern(request), request.remote)
            return _unauthorized("the admin token is unknown or revoked; make one with hubd admin-token create",
                                 "unknown or revoked admin token")
        self._bad_tokens.clear(address)
        return Owner("token", name)

    def _with_csrf(self, request: web.Request, session: Session) -> Owner | web.Response:
        if not self._sessions.csrf_ok(session, request.headers.get(CSRF_HEADER)):
            log.warning("%s %s: refused, no right %s header in %r's session", request.method, route_pattern(request),
                        CSRF_HEADER, session.username)
            return json_error(403, f"the {CSRF_HEADER} header is missing or not this session's: reload the devices "
                                   "page and try again", [{"path": f"(header) {CSRF_HEADER}",
                                                           "message": "missing or wrong"}])
        return Owner("session", session.username)


def _unauthorized(message: str, detail: str) -> web.Response:
    return json_error(401, message, [{"path": "(header) Authorization", "message": detail}],
                      {"WWW-Authenticate": 'Bearer realm="hubd"'})

