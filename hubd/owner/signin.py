"""The owner's sign-in on the devices page: sessions, their cookie and CSRF token, and the login limits.

An account of `driver.accounts` with `admin: true` signs in with its password (`POST /api/session`). Failed
attempts are counted by the authorize page's own `hubd.driver.limits.LoginLimiter` (app.py hands both the one: per
source and per account, an address the account signed in from within 30 days trusted, so a guesser gets one budget
for the two pages), counted before the password is checked, and an unknown username costs one scrypt run like a
known one (`hubd.driver.passwords.password_ok_blocking`). A session is a random id in an HttpOnly, SameSite=Strict
cookie (Secure over https), kept in memory as its SHA-256 only (a restart signs everyone out) for SESSION_TTL_S, at
most MAX_SESSIONS at once (the oldest goes first); it carries a random CSRF token that every write must send back in
the `X-CSRF-Token` header (`hubd.owner.guard`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web

from hubd.config.model import Account
from hubd.driver.limits import LoginLimiter
from hubd.driver.passwords import password_ok_blocking
from hubd.lifecycle import Clock, SystemClock
from hubd.web.client_address import throttle_key

log = logging.getLogger(__name__)

SESSION_COOKIE = "hubd_session"
SESSION_TTL_S = 12 * 3600
MAX_SESSIONS = 64
MAX_FIELD_CHARS = 1024  # a username or password longer than this is refused before scrypt runs


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in owner: the account, the CSRF token its writes carry, and when it ends (epoch seconds)."""

    username: str
    csrf: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class SignIn:
    """What came of an attempt: a session and its id, or the HTTP status and what to tell (and how long to wait)."""

    status: int
    session_id: str | None = None
    session: Session | None = None
    error: str | None = None
    wait_s: float = 0.0


class Sessions:
    """The owners signed in on the devices page, and signing in."""

    def __init__(self, accounts: Sequence[Account], limiter: LoginLimiter, *, clock: Clock | None = None) -> None:
        self._accounts = {a.username: (a.password.get_secret_value(), a.admin) for a in accounts}
        self._clock: Clock = clock or SystemClock()
        self._limiter = limiter  # the driver's: one lock-out per account for both pages
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # by the id's SHA-256, oldest first

    @property
    def owners(self) -> list[str]:
        """The accounts that may sign in (`admin: true`)."""
        return sorted(name for name, (_, admin) in self._accounts.items() if admin)

    def find(self, request: web.Request) -> Session | None:
        """The session the request's cookie names, if it is live."""
        sent = request.cookies.get(SESSION_COOKIE, "")
        if not sent or len(sent) > 100 or not sent.isascii():
            return None
        key = _key(sent)
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires_at <= self._clock.time():
            del self._sessions[key]
            return None
        return session

    async def sign_in(self, username: str, password: str, address: str) -> SignIn:
        """Check an attempt against the limits and the password: a new session, or why not."""
        if not username or not password:
            return SignIn(400, error="enter the username and the password of an owner account")
        if len(username) > MAX_FIELD_CHARS or len(password) > MAX_FIELD_CHARS:
            return SignIn(400, error=f"a username or password is at most {MAX_FIELD_CHARS} characters")
        began = self._clock.monotonic()
        # Counted before the slow check (and taken back on success): no await between check and count.
        attempt = self._limiter.begin(username, throttle_key(address), None, began)
        if attempt.wait_s > 0:
            return SignIn(429, error="too many failed sign-in attempts", wait_s=attempt.wait_s)
        stored = self._accounts.get(username, (None, False))[0]
        if not await asyncio.to_thread(password_ok_blocking, stored, password):
            if username in self._accounts:
                log.warning("owner sign-in: wrong password for account %r from %s", username, address)
            else:
                log.warning("owner sign-in: an unknown username from %s", address)
            return SignIn(401, error="wrong username or password")
        self._limiter.succeeded(attempt, self._clock.monotonic())
        if not self._accounts[username][1]:
            log.warning("owner sign-in: %r is not an owner account (admin: true) from %s", username, address)
            return SignIn(403, error=f"{username!r} may link the hub but not change devices: mark the account "
                                     "admin: true in driver.accounts (then restart hubd)")
        session_id = secrets.token_urlsafe(32)
        session = Session(username, secrets.token_urlsafe(32), self._clock.time() + SESSION_TTL_S)
        self._sessions[_key(session_id)] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        log.info("owner sign-in: %r signed in on the devices page from %s", username, address)
        return SignIn(200, session_id, session)

    def sign_out(self, request: web.Request) -> Session | None:
        """End the request's session; the session it was, if any."""
        session = self.find(request)
        if session is not None:
            self._sessions.pop(_key(request.cookies.get(SESSION_COOKIE, "")), None)
        return session

    def csrf_ok(self, session: Session, sent: str | None) -> bool:
        """Whether a write's `X-CSRF-Token` is the session's (compared in constant time)."""
        return sent is not None and sent.isascii() and hmac.compare_digest(sent, session.csrf)

    @staticmethod
    def set_cookie(response: web.StreamResponse, session_id: str, *, secure: bool) -> None:
        """Give the browser its session: HttpOnly, SameSite=Strict, for the session's lifetime."""
        response.set_cookie(SESSION_COOKIE, session_id, max_age=SESSION_TTL_S, path="/", httponly=True,
                            samesite="Strict", secure=secure or None)

    @staticmethod
    def clear_cookie(response: web.StreamResponse) -> None:
        """Tell the browser to forget its session."""
        response.del_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="Strict")


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()
