"""DriverService: hubd as the brand's driver (its command interface and login page), an OAuth provider.

Owns `POST /driver/command` (OAuth, OAuthGetToken, OAuthRefresh and its alias refreshToken), the
login page `GET/POST /oauth/authorize`, login limits (one `LoginLimiter`, which app.py shares with the devices
page's sign-in: an account's lock-out counts both), CSRF protection, and `verify_user_token` (with
`recent_verdict`, its fallback while the database stalls, emptied whenever this driver revokes or rotates
tokens), which the directive endpoint uses for the token in AcceptGrant and directives.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from hubd.config.model import DriverConfig
from hubd.driver import page as login_page
from hubd.driver.csrf import CsrfGuard
from hubd.driver.limits import LoginLimiter
from hubd.driver.passwords import dummy_hash, password_ok_blocking
from hubd.driver.policy import driver_policy
from hubd.driver.store import CodeReused, DriverRepo, Lifetimes, RefreshReused
from hubd.driver.trust import DeviceCookies
from hubd.driver.urls import (
    AUTHORIZE_PATH,
    CALLBACK_PARAM,
    CallbackInvalid,
    add_params,
    authorize_url,
    check_callback,
    get_ci,
    origin,
)
from hubd.driver.verdicts import VerdictCache
from hubd.errors import ConfigError, DriverError, StoreError
from hubd.lifecycle import Clock, SystemClock
from hubd.metrics import Metrics
from hubd.store.db import Database
from hubd.untrusted.kinds import json_kind
from hubd.usertoken import TokenCheck, TokenStatus
from hubd.web.client_address import FORWARDED_FOR, client_address, throttle_key
from hubd.web.jsonbody import JsonBodyInvalid, load_json

log = logging.getLogger(__name__)

DRIVER_ERROR = "E_DRIVER_ERROR"
COMMANDS = "OAuth, OAuthGetToken or OAuthRefresh"
MAX_COMMAND_BYTES = 16 * 1024  # a driver command is a small object: a callbackURL or a UserAuth
COMMAND_EXAMPLE = '{"command": "OAuth", "params": {"callbackURL": "https://..."}}'

_Command = Callable[[Mapping[str, Any]], Awaitable[Any]]


class DriverService:
    """Issues codes and tokens through the login page and the driver commands; verifies user tokens."""

    name = "driver"

    def __init__(
        self, db: Database, config: DriverConfig, *, public_url: str, metrics: Metrics, clock: Clock | None = None,
        auth_url: str | None = None, trusted_proxies: Sequence[str] = (), limiter: LoginLimiter | None = None,
    ) -> None:
        self._config = config
        self._public_url = public_url.rstrip("/")
        self._csrf = CsrfGuard(self._public_url)
        self._devices = DeviceCookies(self._public_url)
        self._policy = driver_policy(config, auth_url=auth_url, trusted_proxies=trusted_proxies)
        self._callback_rules = self._policy.callbacks
        self._clock: Clock = clock or SystemClock()
        self._accounts = {a.username: a.password.get_secret_value() for a in config.accounts}
        self._repo = DriverRepo(db, Lifetimes(user_s=config.token_ttl_s, refresh_s=config.refresh_ttl_s),
                                frozenset(self._accounts))
        self._limiter = limiter or LoginLimiter()  # app.py's, shared with the devices page's sign-in
        self._verdicts = VerdictCache(self._clock)
        self._commands: dict[str, _Command] = {
            "OAuth": self._oauth, "OAuthGetToken": self._get_token,
            "OAuthRefresh": self._refresh, "refreshToken": self._refresh,
        }
        self._command_count = metrics.counter(
            "hubd_driver_commands_total", "driver commands answered, by command and outcome", ("command", "result"))
        self._login_count = metrics.counter("hubd_driver_logins_total", "authorize page submissions, by outcome",
                                            "result")

    async def start(self) -> None:
        """Check driver.accounts, callback_hosts and http.trusted_proxies, warn about weak settings, load the key."""
        if self._policy.problems:
            raise ConfigError(self._policy.problems)
        key = await self._repo.server_secret()
        self._csrf.load_key(key)
        self._devices.load_key(key)
        # One real scrypt run for unknown users too, so timing does not tell which usernames exist.
        await asyncio.to_thread(dummy_hash)
        for warning in self._policy.warnings:
            log.warning("%s", warning)
        if _unspecified(urlsplit(self._public_url).hostname):
            log.warning("the driver hands out %s%s?... as the login page, which no phone can open; "
                        "set http.public_url to the URL browsers reach this hub at", self._public_url, AUTHORIZE_PATH)

    async def run(self) -> None:
        """Nothing runs between start and stop; requests arrive through the HTTP server."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Nothing to release."""

    def routes(self) -> list[web.RouteDef]:
        """`POST /driver/command`, `GET` and `POST /oauth/authorize`."""
        return [
            web.post("/driver/command", self._command_route),
            web.get("/oauth/authorize", self._page_route),
            web.post("/oauth/authorize", self._login_route),
        ]

    async def verify_user_token(self, token: str) -> TokenCheck:
        """Whether a user token from a platform message is VALID, EXPIRED or UNKNOWN (revoked counts as unknown)."""
        if not token:
            return TokenCheck(TokenStatus.UNKNOWN, None)
        generation = self._verdicts.generation
        check = await self._repo.check_user_token(token, self._clock.time())
        self._verdicts.record(token, check, generation)
        return check

    def recent_verdict(self, token: str) -> TokenCheck | None:
        """For while the database stalls: VALID (or EXPIRED once its expiry passed) if verify_user_token found the
        token VALID within the last VERDICT_TTL_S and this driver revoked or rotated no token since; else None."""
        return self._verdicts.recent(token) if token else None

    async def handle_command(self, body: object) -> dict[str, Any]:
        """One parsed `/driver/command` body in, the reply envelope out."""
        try:
            data = await self._dispatch(body)
        except DriverError as err:
            return {"status": err.status, "errorName": err.error_name, "message": err.message}
        return {"status": 0, "data": data}

    # -- driver commands ------------------------------------------------------------------------

    async def _command_route(self, request: web.Request) -> web.Response:
        body: object = None
        try:
            if request.content_length is not None and request.content_length > MAX_COMMAND_BYTES:
                raise web.HTTPRequestEntityTooLarge(max_size=MAX_COMMAND_BYTES, actual_size=request.content_length)
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            reply = _error(f"the body is too large; a driver command is a small JSON object such as {COMMAND_EXAMPLE}")
        else:
            try:
                body = load_json(raw, max_bytes=MAX_COMMAND_BYTES)
            except JsonBodyInvalid as err:
                reply = _error(f"{err}; send a small JSON object such as {COMMAND_EXAMPLE}")
            else:
                try:
                    reply = await self.handle_command(body)
                except StoreError as err:
                    log.error("driver command failed: %s", err)
                    reply = _error("the hub's database failed; see the hubd log")
        self._command_count.inc(label=(_command_name(body), "ok" if reply["status"] == 0 else "error"))
        # RFC 6749 5.1: responses that carry tokens must not be cached.
        return web.json_response(reply, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})

    async def _dispatch(self, body: object) -> Any:
        if not isinstance(body, dict):
            raise DriverError(DRIVER_ERROR, f"the body must be a JSON object with command and params, "
                                            f"got {json_kind(body)}")
        command = body.get("command")
        if command is None:
            raise DriverError(DRIVER_ERROR, f"the body has no 'command'; use {COMMANDS}")
        if not isinstance(command, str):
            raise DriverError(DRIVER_ERROR, f"'command' must be a string, got {json_kind(command)}")
        params = body.get("params", {})
        if not isinstance(params, dict):
            raise DriverError(DRIVER_ERROR, f"'params' must be an object, got {json_kind(params)}")
        handler = self._commands.get(command)
        if handler is None:
            raise DriverError(DRIVER_ERROR, f"unknown command {command[:64]!r}; use {COMMANDS}")
        return await handler(params)

    async def _oauth(self, params: Mapping[str, Any]) -> str:
        callback = _string_param(get_ci(params, CALLBACK_PARAM), CALLBACK_PARAM)
        try:
            check_callback(callback, self._callback_rules)
        except CallbackInvalid as err:
            raise DriverError(DRIVER_ERROR, f"params.{CALLBACK_PARAM}: {err}") from err
        return authorize_url(self._public_url, callback)

    async def _get_token(self, params: Mapping[str, Any]) -> dict[str, Any]:
        if self._config.mode != "oauth2":
            raise DriverError(DRIVER_ERROR, "OAuthGetToken is for OAuth 2.0, but this driver runs driver.mode "
                                            "'oauth' (v1): the login redirect already carries the UserAuth")
        code = _string_param(params.get("code"), "code")
        raw_callback = get_ci(params, CALLBACK_PARAM)
        callback = None if raw_callback is None else _string_param(raw_callback, CALLBACK_PARAM)
        try:
            pair = await self._repo.exchange_code(code, callback, self._clock.time())
        except CodeReused as err:
            self._verdicts.invalidate()
            log.warning("driver: an authorization code was used twice; revoked grant %d (the tokens issued for it)",
                        err.grant_id)
            raise
        log.info("driver: issued tokens to %r for a code", pair.user_id)
        return pair.user_auth()

    async def _refresh(self, params: Mapping[str, Any]) -> dict[str, Any]:
        raw = params.get("refreshToken")
        if raw is None:
            raise DriverError(DRIVER_ERROR, "params.refreshToken is missing; send the UserAuth object "
                                            "{userId, userToken, expiresIn, refreshToken}")
        if isinstance(raw, bool) or not isinstance(raw, str | int | float) or raw == "":
            raise DriverError(DRIVER_ERROR, f"params.refreshToken must be a non-empty string or a number, "
                                            f"got {json_kind(raw)}")
        token = raw if isinstance(raw, str) else _number_text(raw)
        user_id = params.get("userId")
        if user_id is not None and not isinstance(user_id, str):
            raise DriverError(DRIVER_ERROR, f"params.userId must be a string, got {json_kind(user_id)}")
        try:
            pair = await self._repo.refresh(token, user_id, self._clock.time())
        except RefreshReused as err:
            self._verdicts.invalidate()
            log.warning("driver: a rotated-out refresh token was used again; revoked grant %d", err.grant_id)
            raise
        self._verdicts.invalidate()  # the rotated-out userToken now dies sooner
        return pair.user_auth()

    # -- the login page -------------------------------------------------------------------------

    async def _page_route(self, request: web.Request) -> web.Response:
        raw = get_ci(request.query, CALLBACK_PARAM)
        if not isinstance(raw, str):
            return self._page(400, None, error="This link is incomplete: it has no callbackURL. "
                                                "Start linking again from the app.")
        try:
            parts = check_callback(raw, self._callback_rules)
        except CallbackInvalid as err:
            return self._page(400, None, error=f"This hub will not link to that app: {err}.")
        return self._page(200, raw, host=parts.hostname, target=origin(parts), browser=self._csrf.browser_id(request))

    async def _login_route(self, request: web.Request) -> web.Response:
        form = await request.post()
        raw = get_ci(form, CALLBACK_PARAM)
        if raw is None:
            raw = get_ci(request.query, CALLBACK_PARAM)
        if not isinstance(raw, str):
            self._login_count.inc(label="bad_callback")
            return self._page(400, None, error="This sign-in form has no callbackURL. "
                                                "Start linking again from the app.")
        try:
            parts = check_callback(raw, self._callback_rules)
        except CallbackInvalid as err:
            self._login_count.inc(label="bad_callback")
            return self._page(400, None, error=f"This hub will not link to that app: {err}.")
        callback: str = raw
        username = _form_text(form.get("username"))
        password = _form_text(form.get("password"))
        browser = self._csrf.browser_id(request)

        def again(status: int, error: str, headers: Mapping[str, str] | None = None) -> web.Response:
            return self._page(status, callback, host=parts.hostname, target=origin(parts), username=username,
                              error=error, headers=headers, browser=browser)

        now = self._clock.time()
        foreign = self._csrf.foreign_origin(request)
        if foreign is not None:
            self._login_count.inc(label="csrf")
            log.warning("driver: refused a sign-in form sent from %s", foreign)
            return again(403, f"This sign-in form was sent from another site ({foreign}). Open the link from the "
                              "app again and sign in on this page.")
        if self._csrf.sent_id(request) is None:
            self._login_count.inc(label="csrf")
            return again(400, "Your browser did not send this hub's sign-in cookie. Allow cookies for this page, "
                              "then sign in again.")
        if not self._csrf.token_ok(_form_text(form.get("csrf")), callback, browser, now):
            self._login_count.inc(label="csrf")
            return again(400, "This sign-in form has expired or did not come from this hub. Please sign in again.")
        if not username or not password:
            return again(200, "Enter your username and password.")
        address = self._client(request)
        began = self._clock.monotonic()
        device = self._devices.device_of(request, username, now)
        # Counted before the slow check (and taken back on success): no await between check and count.
        attempt = self._limiter.begin(username, throttle_key(address), device, began)
        if attempt.wait_s > 0:
            self._login_count.inc(label="limited")
            return again(429, f"Too many failed sign-in attempts. Try again in {_wait_text(attempt.wait_s)}.",
                         {"Retry-After": str(math.ceil(attempt.wait_s))})
        if not await asyncio.to_thread(password_ok_blocking, self._accounts.get(username), password):
            self._login_count.inc(label="wrong_password")
            if username in self._accounts:
                log.warning("driver: wrong password for account %r from %s", username, address)
            else:
                log.warning("driver: login with an unknown username from %s", address)
            return again(200, "Wrong username or password.")
        self._limiter.succeeded(attempt, self._clock.monotonic())
        self._login_count.inc(label="ok")
        if self._config.mode == "oauth2":
            code = await self._repo.issue_code(username, callback, now)
            location = add_params(callback, {"code": code})
        else:
            pair = await self._repo.issue_grant(username, now)
            # refreshToken is our extension of OAuth v1, so OAuthRefresh works in this mode too.
            location = add_params(callback, {"userId": pair.user_id, "userToken": pair.user_token,
                                             "expiresIn": str(pair.expires_in), "refreshToken": pair.refresh_token})
        log.info("driver: %r signed in from %s; redirecting to %s", username, address, parts.hostname)
        response = web.Response(status=302, headers={"Location": location, "Cache-Control": "no-store",
                                                     "Referrer-Policy": "no-referrer"})
        if device is None:
            self._devices.set_cookie(response, username, now)
        return response

    def _client(self, request: web.Request) -> str:
        """The client's address: the peer's, or through a trusted proxy the one X-Forwarded-For names."""
        return client_address(request.remote, request.headers.getall(FORWARDED_FOR, []), self._policy.proxies)

    def _page(
        self, status: int, callback: str | None, *, host: str | None = None, target: str | None = None,
        username: str = "", error: str | None = None, headers: Mapping[str, str] | None = None,
        browser: str | None = None,
    ) -> web.Response:
        """The page; with a form (and the cookie its CSRF token is bound to) when `callback` and `browser` are set."""
        csrf = ""
        if callback is not None and browser is not None:
            csrf = self._csrf.token(callback, browser, self._clock.time())
        body = login_page.render(login_page.LoginPage(
            hub_name=self._config.hub_name, callback_url=callback if csrf else None, callback_host=host, csrf=csrf,
            username=username, error=error))
        all_headers = login_page.headers(target)
        all_headers.update(headers or {})
        response = web.Response(status=status, text=body, content_type="text/html", charset="utf-8",
                                headers=all_headers)
        if csrf and browser is not None:
            self._csrf.set_cookie(response, browser)
        return response


def _error(message: str) -> dict[str, Any]:
    return {"status": 1, "errorName": DRIVER_ERROR, "message": message}


def _string_param(value: object, name: str) -> str:
    if value is None:
        raise DriverError(DRIVER_ERROR, f"params.{name} is missing")
    if not isinstance(value, str):
        raise DriverError(DRIVER_ERROR, f"params.{name} must be a string, got {json_kind(value)}")
    if not value:
        raise DriverError(DRIVER_ERROR, f"params.{name} is empty")
    return value


def _number_text(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _form_text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _wait_text(wait_s: float) -> str:
    """`1 second`, `12 seconds`, `15 minutes`: a wait, rounded up."""
    if wait_s <= 90:
        seconds = max(1, math.ceil(wait_s))
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = math.ceil(wait_s / 60)
    return f"{minutes} minutes"


def _unspecified(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _command_name(body: object) -> str:
    command = body.get("command") if isinstance(body, dict) else None
    return command if isinstance(command, str) and command in ("OAuth", "OAuthGetToken", "OAuthRefresh",
                                                                "refreshToken") else "invalid"

