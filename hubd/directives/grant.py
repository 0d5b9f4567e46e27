"""AcceptGrant (`{namespace}.Authorization`): a platform user binds to this hub.

`TokenManager.accept_grant` exchanges the code; the grant and the new user's AddOrUpdateReport of every device
are stored in one transaction (`OutboxWriter.commit_grant`). The exchange and the commit run in the token
manager's task, so this handler may stop waiting at the directive's deadline (E_ENDPOINT_BUSY) without losing
the tokens: a resent AcceptGrant gets the outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from hubd.cloud import messages
from hubd.directives.message import BUSY, Directive, DirectiveRouter, is_text
from hubd.errors import CloudAuthError, CloudUnavailable, DirectiveError
from hubd.store.grants import Grant

# AcceptGrant with less of the budget left than this answers E_ENDPOINT_BUSY before the exchange, code unspent.
ACCEPT_GRANT_MIN_S = 0.5


class GrantExchange(Protocol):
    """The token manager (`hubd.cloud.tokens.TokenManager`): exchanges a code and keeps the outcome."""

    def exchange_known(self, user_id: str, code: str) -> bool:
        """True when the exchange of this code began recently (its outcome is kept)."""

    async def accept_grant(self, user_id: str, code: str, *, driver_user: str | None, timeout_s: float | None = None,
                           commit: Callable[[Grant], Awaitable[None]] | None = None) -> None:
        """Exchange the code and store the grant through `commit`; a resend waits for the same outcome."""


class GrantStore(Protocol):
    """The outbox writer (`hubd.outbox.writer.OutboxWriter`): stores a grant with its user's first report."""

    async def commit_grant(self, grant: Grant) -> None:
        """Store a new grant and queue its user's AddOrUpdateReport of every device, in one transaction."""


class AcceptGrant:
    """Answers AcceptGrant: exchanges the code and stores the grant with the user's first report."""

    def __init__(self, *, namespace: str, tokens: GrantExchange, writer: GrantStore, reporting_enabled: bool) -> None:
        self._namespace = namespace
        self._tokens = tokens
        self._writer = writer
        self._reporting_enabled = reporting_enabled

    def register(self, router: DirectiveRouter) -> None:
        """Route `{namespace}.Authorization/AcceptGrant` here."""
        router.add_handler(f"{self._namespace}.Authorization", "AcceptGrant", self.accept_grant)

    async def accept_grant(self, directive: Directive) -> dict[str, Any]:
        """AcceptGrantResponse once the grant is stored; a DirectiveError when it cannot be."""
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
            if not is_text(value):
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
                                                commit=self._writer.commit_grant)
        except TimeoutError as err:
            raise DirectiveError(BUSY, "the platform's token endpoint has not answered yet; hubd keeps its answer "
                                       "(and the grant, if the code is good): send AcceptGrant again") from err
        except CloudAuthError as err:
            raise DirectiveError("E_INTERNAL_ERROR",
                                 f"the token endpoint refused the code (error={err.error or 'unknown'})") from err
        except CloudUnavailable as err:
            raise DirectiveError("E_SERVER_UNREACHABLE", "the platform's token endpoint could not be reached") from err
        return messages.accept_grant_response(self._namespace, directive.message_id)
