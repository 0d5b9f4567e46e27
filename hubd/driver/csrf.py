"""CSRF protection of the login form: a cookie per browser, a form token bound to it, an Origin check.

The page gives the browser a random HttpOnly, SameSite=Lax cookie, its id, and keeps the id a browser
already has, so a login page opened earlier (in another tab) stays good; the form carries
`issued.HMAC(key, issued, callbackURL, browser id)`, good for CSRF_TTL_S in that browser only
(double submit: another site can neither read the cookie nor make the token). Lax, not Strict: the
page is opened from the platform's site, and a Strict cookie would not come along on that navigation,
so each opening would replace it. Lax still keeps it off another site's POST, and a POST whose Origin
(or, without one, Referer) is another site's is refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from aiohttp import web

from hubd.driver.urls import AUTHORIZE_PATH, foreign_origin, origin_key
from hubd.errors import StoreError

CSRF_TTL_S = 600
# A form issued by a hub whose clock was then set back a little must still be accepted.
CSRF_SKEW_S = 60
COOKIE_NAME = "hubd_login"
_ID_BYTES = 32
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class CsrfGuard:
    """Issues and checks the login form's cookie and token for one public URL."""

    def __init__(self, public_url: str) -> None:
        public = urlsplit(public_url)
        self._public_origin = origin_key(public_url)
        # the authorize page's path as browsers see it (under a proxy's prefix, if any)
        self._cookie_path = public.path.rstrip("/") + AUTHORIZE_PATH
        self._secure = public.scheme.lower() == "https"
        self._key: bytes | None = None

    def load_key(self, key: bytes) -> None:
        """The HMAC key; tokens cannot be made or checked before."""
        self._key = key

    @staticmethod
    def sent_id(request: web.Request) -> str | None:
        """The browser id the request's cookie carries, if it is well formed."""
        sent = request.cookies.get(COOKIE_NAME, "")
        return sent if len(sent) == 43 and set(sent) <= _ID_CHARS else None

    def browser_id(self, request: web.Request) -> str:
        """The browser's id from its cookie (kept, so its other open forms stay good), or a new random one."""
        return self.sent_id(request) or secrets.token_urlsafe(_ID_BYTES)

    def set_cookie(self, response: web.StreamResponse, browser: str) -> None:
        """Give the browser its id (a session cookie: the token it backs lives 10 minutes anyway)."""
        response.set_cookie(COOKIE_NAME, browser, path=self._cookie_path, httponly=True, samesite="Lax",
                            secure=self._secure or None)

    def token(self, callback: str, browser: str, now: float) -> str:
        """The form's hidden csrf value."""
        issued = int(now)
        return f"{issued}.{self._mac(issued, callback, browser)}"

    def token_ok(self, token: str, callback: str, browser: str, now: float) -> bool:
        """Whether `token` was issued by this hub, to this browser, for this callbackURL, less than 10 minutes ago."""
        issued_text, _, mac = token.partition(".")
        # compare_digest refuses non-ASCII text, and isdigit() alone takes other scripts' digits
        if not token.isascii() or not issued_text.isdigit() or not mac:
            return False
        issued = int(issued_text)
        if not issued - CSRF_SKEW_S <= now <= issued + CSRF_TTL_S:
            return False
        return hmac.compare_digest(mac, self._mac(issued, callback, browser))

    def foreign_origin(self, request: web.Request) -> str | None:
        """The other site a POST came from (by its Origin, else its Referer); None when it is ours or not said.

        Ours: http.public_url's origin, or the origin the request was addressed to (`hubd.driver.urls.foreign_origin`,
        the devices page's rule too), since a LAN address or a proxy may front the same hub.
        """
        claimed = request.headers.get("Origin")
        if claimed is None:
            claimed = request.headers.get("Referer")
            if not claimed:
                return None
        return foreign_origin(claimed, request.host, self._public_origin)

    def _mac(self, issued: int, callback: str, browser: str) -> str:
        if self._key is None:
            raise StoreError("the driver was not started: its CSRF key is not loaded")
        message = f"csrf\n{issued}\n{callback}\n{browser}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()
