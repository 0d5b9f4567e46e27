"""The platform simulator's token authority: authorization codes, access tokens and refresh tokens, per user.

Owns what the platform and RFC 6749 say about them: a code is single use and lives 10 minutes, a
refresh rotates both tokens, a new code exchange ends the user's old refresh token; and the token
endpoint's rules for one request (client authentication by HTTP Basic or in the body, never both; the
two grant types), whose every refusal is an OAuthError (RFC 6749 5.2). No I/O: simulators.platform
serves it over HTTP. Never imports hubd.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal
from urllib.parse import unquote_plus

from simulators.platform_records import iso_utc

ClientAuth = Literal["basic", "body", "any"]
CODE_TTL_S = 600.0  # PROTOCOL 14: codes live at most 10 minutes


class TokenState(Enum):
    """How the gateway sees an access token at receipt."""

    VALID = "valid"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class IssuedTokens:
    """A token pair the token endpoint handed out."""

    user_id: str
    grant_type: str
    access_token: str
    refresh_token: str
    expires_in: int
    issued_at: float


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
                "accessExpiresAt": None if newest is None else iso_utc(newest),
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


class OAuthError(Exception):
    """An RFC 6749 5.2 error reply."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description


def authenticate_client(
    authorization: str | None, params: dict[str, str], seen: dict[str, str | None], *,
    client_id: str, client_secret: str, client_auth: ClientAuth,
) -> None:
    """RFC 6749 2.3.1: HTTP Basic or client_id/client_secret in the body, never both; fills seen["client_auth"]."""
    in_body = "client_id" in params or "client_secret" in params
    if authorization is not None and in_body:
        raise OAuthError(400, "invalid_request", "use only one client authentication method")
    if authorization is not None:
        seen["client_auth"] = "basic"
        scheme, _, encoded = authorization.partition(" ")
        try:
            raw = base64.b64decode(encoded.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raw = ""
        given_id, sep, secret = raw.partition(":")
        if scheme.lower() != "basic" or not sep:
            raise OAuthError(401, "invalid_client", "malformed Basic credentials")
        given_id, secret = unquote_plus(given_id), unquote_plus(secret)
    elif in_body:
        seen["client_auth"] = "body"
        given_id, secret = params.get("client_id", ""), params.get("client_secret", "")
    else:
        raise OAuthError(401, "invalid_client", "no client authentication")
    if client_auth not in ("any", seen["client_auth"]):
        raise OAuthError(401, "invalid_client", f"this client must authenticate with {client_auth}")
    id_ok = hmac.compare_digest(given_id.encode(), client_id.encode())
    if not (hmac.compare_digest(secret.encode(), client_secret.encode()) and id_ok):
        raise OAuthError(401, "invalid_client", "unknown client or wrong secret")


def redeem(tokens: TokenAuthority, params: dict[str, str]) -> IssuedTokens:
    """RFC 6749 4.1.3 and 6: exchange a code or a refresh token for a new token pair."""
    grant_type = params.get("grant_type")
    try:
        if grant_type == "authorization_code":
            return tokens.exchange_code(_required(params, "code"))
        if grant_type == "refresh_token":
            return tokens.refresh(_required(params, "refresh_token"))
    except GrantRejected as err:
        raise OAuthError(400, "invalid_grant", str(err)) from None
    if grant_type is None:
        raise OAuthError(400, "invalid_request", "grant_type is missing")
    raise OAuthError(400, "unsupported_grant_type", f"{grant_type!r} is not supported")


def _required(params: dict[str, str], key: str) -> str:
    if not params.get(key):
        raise OAuthError(400, "invalid_request", f"{key} is missing")
    return params[key]
