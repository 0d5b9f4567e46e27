"""The device cookie: a browser that signed in to an account can be told apart from a guesser next time.

After a right password the redirect sets `hubd_device` = `issued.nonce.HMAC(key, issued, nonce, account)`
(HttpOnly, SameSite=Lax, `Secure` behind an https public URL, on the authorize page's path, for
DEVICE_TTL_S). Its later attempts for that account are throttled on their own (`LoginLimiter`), so
someone guessing the account's password, even from the same address, cannot lock that browser out.
The account name itself is not in the cookie, only in the MAC.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from aiohttp import web

from hubd.driver.urls import AUTHORIZE_PATH
from hubd.errors import StoreError

COOKIE_NAME = "hubd_device"
DEVICE_TTL_S = 365 * 86400
_NONCE_BYTES = 16


class DeviceCookies:
    """Issues and checks device cookies for one public URL."""

    def __init__(self, public_url: str) -> None:
        public = urlsplit(public_url)
        self._cookie_path = public.path.rstrip("/") + AUTHORIZE_PATH
        self._secure = public.scheme.lower() == "https"
        self._key: bytes | None = None

    def load_key(self, key: bytes) -> None:
        """The HMAC key; cookies cannot be made or checked before."""
        self._key = key

    def device_of(self, request: web.Request, username: str, now: float) -> str | None:
        """The id of the request's device cookie if it was issued for `username` within DEVICE_TTL_S; else None."""
        value = request.cookies.get(COOKIE_NAME, "")
        issued_text, _, rest = value.partition(".")
        nonce, _, mac = rest.partition(".")
        if not value.isascii() or not issued_text.isdigit() or len(issued_text) > 12 or not nonce or not mac:
            return None
        issued = int(issued_text)
        if not issued - 60 <= now <= issued + DEVICE_TTL_S:
            return None
        if not hmac.compare_digest(mac, self._mac(issued, nonce, username)):
            return None
        return nonce

    def set_cookie(self, response: web.StreamResponse, username: str, now: float) -> None:
        """Give the browser a device cookie for `username`."""
        issued = int(now)
        nonce = secrets.token_urlsafe(_NONCE_BYTES)
        response.set_cookie(COOKIE_NAME, f"{issued}.{nonce}.{self._mac(issued, nonce, username)}",
                            max_age=DEVICE_TTL_S, path=self._cookie_path, httponly=True, samesite="Lax",
                            secure=self._secure or None)

    def _mac(self, issued: int, nonce: str, username: str) -> str:
        if self._key is None:
            raise StoreError("the driver was not started: its device cookie key is not loaded")
        account = username.strip().casefold()
        message = f"device\n{issued}\n{nonce}\n{account}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()
