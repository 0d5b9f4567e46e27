"""PlatformClient: the platform's HTTP APIs over aiohttp (event gateway, token endpoint, failure report).

The only module that talks to {base_url} and {auth_url}. It translates HTTP outcomes into
hubd.errors: CloudUnavailable (retry later), CloudRejected (do not retry), CloudAuthError (token).
Only the platform's own verdicts on a message are final (400 malformed, 422
unprocessable); any other status (404, 408, 413, ... from a proxy, or a wrong base_url) is retried. A body that is
not valid in its charset (a proxy's error page) is decoded with replacement characters, never an error.
Host names are looked up in a daemon thread per lookup (`hubd.threads`), not the default executor, which
`asyncio.run` waits for at exit: a slow DNS server never holds up a stop.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from hubd.config.model import PlatformConfig
from hubd.errors import CloudAuthError, CloudRejected, CloudUnavailable
from hubd.threads import in_daemon_thread

log = logging.getLogger(__name__)

# RFC 6749 5.2 errors that mean the grant itself is dead: the user must bind again.
FATAL_GRANT_ERRORS = frozenset({"invalid_grant", "unauthorized_client"})
# The event API's answers that say the message itself is wrong: dead-lettered, never retried.
FINAL_STATUSES = frozenset({400, 422})


@dataclass(frozen=True, slots=True)
class TokenSet:
    """What the token endpoint returned."""

    access_token: str
    refresh_token: str | None
    expires_in: float

    def __repr__(self) -> str:
        return f"TokenSet(expires_in={self.expires_in})"


class DaemonThreadResolver(AbstractResolver):
    """aiohttp's name lookups, each `getaddrinfo` in a daemon thread: a cancelled request leaves it behind.

    aiohttp's default (ThreadedResolver) uses the loop's default executor, and `asyncio.run` joins that
    executor's threads at exit without a time limit. The connector caches answers (10 s) and reuses
    connections, so lookups are rare.
    """

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        """The addresses of `host` (aiohttp's ResolveResult); socket.gaierror if there are none."""
        return await in_daemon_thread(lambda: _lookup_blocking(host, port, family), name="hubd-dns")

    async def close(self) -> None:
        """Nothing to release."""


def _lookup_blocking(host: str, port: int, family: socket.AddressFamily) -> list[ResolveResult]:
    infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_ADDRCONFIG)
    out: list[ResolveResult] = []
    for found_family, _, proto, _, address in infos:
        if isinstance(address[0], int):
            continue  # not an IP address (AF_INET and AF_INET6 only are asked for)
        address_host, address_port = str(address[0]), int(address[1])
        if found_family == socket.AF_INET6 and len(address) >= 4 and address[3]:
            # A link-local address needs its scope ("fe80::1%eth0").
            address_host, service = socket.getnameinfo((address_host, address_port, 0, int(address[3])),
                                                       socket.NI_NUMERICHOST | socket.NI_NUMERICSERV)
            address_port = int(service)
        out.append(ResolveResult(hostname=host, host=address_host, port=address_port, family=found_family,
                                 proto=proto, flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV))
    return out


def failure_sign(user_id: str, client_id: str, client_secret: str) -> str:
    """The failure report's sign: lowercase hex HMAC-SHA256 of `userId=<u>&clientId=<c>`, keyed with the secret."""
    message = f"userId={user_id}&clientId={client_id}".encode()
    return hmac.new(client_secret.encode(), message, hashlib.sha256).hexdigest()


def client_credentials(client_auth: str, client_id: str, client_secret: str,
                       form: dict[str, str]) -> tuple[dict[str, str] | None, dict[str, str]]:
    """A token request's headers and form with the client's credentials, per `platform.client_auth` (RFC 6749 2.3.1)."""
    if client_auth == "basic":
        # RFC 6749 2.3.1: the id and the secret are form-urlencoded before they go into Basic.
        pair = f"{quote_plus(client_id)}:{quote_plus(client_secret)}".encode("ascii")
        return {"Authorization": f"Basic {base64.b64encode(pair).decode('ascii')}"}, form
    return None, {**form, "client_id": client_id, "client_secret": client_secret}


class PlatformClient:
    """The platform's event API, token endpoint and failure report."""

    name = "platform-client"

    def __init__(self, config: PlatformConfig) -> None:
        self._config = config
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the HTTP session (keep-alive connections to the platform)."""
        timeout = aiohttp.ClientTimeout(total=self._config.request_timeout_s)
        # No pool limit: the outbox bounds the sends in flight per user and in all (a pool limit would
        # queue one user's requests behind another's, out of the outbox's sight).
        connector = aiohttp.TCPConnector(limit=0, resolver=DaemonThreadResolver())
        self._session = aiohttp.ClientSession(timeout=timeout, connector=connector, raise_for_status=False)

    async def run(self) -> None:
        """Nothing to loop over."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Close the session; idempotent."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post_event(self, body: dict[str, Any] | str) -> None:
        """POST one message (a dict, or its JSON text) to {base_url}/async/events; returns on 2xx."""
        url = f"{self._require('base_url')}/async/events"
        status, text = await self._post(url, json_body=body)
        if 200 <= status < 300:
            return
        if status == 401:
            raise CloudAuthError(f"event API: token expired (401): {text[:200]}", fatal=False)
        if status == 403:
            raise CloudAuthError(f"event API: token invalid or integration disabled (403): {text[:200]}",
                                 fatal=True)
        if status in FINAL_STATUSES:
            raise CloudRejected(status, text)
        hint = " (not an answer about the message: check platform.base_url and any proxy)" \
            if 400 <= status < 500 and status != 429 else ""
        raise CloudUnavailable(f"event API answered {status}{hint}: {text[:200]}")

    async def exchange_code(self, code: str, *, timeout_s: float | None = None) -> TokenSet:
        """RFC 6749 4.1.3: trade an authorization code for tokens."""
        return await self._token_request({"grant_type": "authorization_code", "code": code}, timeout_s)

    async def refresh(self, refresh_token: str) -> TokenSet:
        """RFC 6749 6: a new access token (and usually a new refresh token)."""
        return await self._token_request({"grant_type": "refresh_token", "refresh_token": refresh_token}, None)

    async def report_failure(self, user_id: str) -> None:
        """POST the signed failure report."""
        client_id = self._require("client_id")
        secret = self._secret()
        form = {"userId": user_id, "clientId": client_id, "sign": failure_sign(user_id, client_id, secret)}
        status, text = await self._post(f"{self._require('base_url')}/report/failed", form=form)
        if 200 <= status < 300:
            return
        if status >= 500 or status == 429:
            raise CloudUnavailable(f"failure report answered {status}: {text[:200]}")
        raise CloudRejected(status, text)

    async def _token_request(self, form: dict[str, str], timeout_s: float | None) -> TokenSet:
        headers, form = client_credentials(self._config.client_auth, self._require("client_id"), self._secret(), form)
        status, text = await self._post(f"{self._require('auth_url')}/oauth/token", form=form, headers=headers,
                                        timeout_s=timeout_s)
        data: dict[str, Any] = {}
        try:
            parsed = json.loads(text) if text else {}
            if isinstance(parsed, dict):
                data = parsed
        except json.JSONDecodeError:
            pass
        if status == 200:
            access, refresh, expires = data.get("access_token"), data.get("refresh_token"), data.get("expires_in")
            if not isinstance(access, str) or not access:
                raise CloudUnavailable("token endpoint answered 200 without an access_token")
            if refresh is not None and not isinstance(refresh, str):
                refresh = str(refresh)
            try:
                lifetime = float(expires) if expires is not None else 3600.0
            except (TypeError, ValueError):
                lifetime = 3600.0
            return TokenSet(access, refresh, max(lifetime, 1.0))
        error = data.get("error") if isinstance(data.get("error"), str) else None
        description = data.get("error_description") if isinstance(data.get("error_description"), str) else ""
        if status >= 500 or status == 429 or (status != 200 and not error and status not in (400, 401, 403)):
            raise CloudUnavailable(f"token endpoint answered {status}")
        fatal = error in FATAL_GRANT_ERRORS or status == 403
        raise CloudAuthError(f"token endpoint refused ({status}, error={error}): {description}"[:300],
                             fatal=fatal, error=error)

    async def _post(self, url: str, *, json_body: dict[str, Any] | str | None = None,
                    form: dict[str, str] | None = None,
                    headers: dict[str, str] | None = None, timeout_s: float | None = None) -> tuple[int, str]:
        if self._session is None:
            raise CloudUnavailable("the platform client is not started")
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s is not None else None
        try:
            kwargs: dict[str, Any] = {"headers": dict(headers or {})}
            if timeout is not None:
                kwargs["timeout"] = timeout
            if json_body is not None:
                text = json_body if isinstance(json_body, str) else json.dumps(json_body, separators=(",", ":"))
                kwargs["data"] = text.encode()
                kwargs["headers"]["Content-Type"] = "application/json"
            else:
                kwargs["data"] = form
            async with self._session.post(url, **kwargs) as response:
                # errors="replace": a proxy's error page in another charset is news for the log, not a crash.
                return response.status, await response.text(errors="replace")
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise CloudUnavailable(f"{url}: {type(err).__name__}: {err}") from err

    def _require(self, key: str) -> str:
        value = getattr(self._config, key)
        if not value:
            raise CloudUnavailable(f"platform.{key} is not configured")
        return str(value)

    def _secret(self) -> str:
        if self._config.client_secret is None:
            raise CloudUnavailable("platform.client_secret is not configured")
        return self._config.client_secret.get_secret_value()
