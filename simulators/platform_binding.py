"""The platform's side of binding a user to a hub: log in (SPEC 4.5), then AcceptGrant (SPEC 4.1).

Owns bind_user, the OAuth client the platform is to a hub: it asks the hub's driver for the authorize
URL, fills and submits the hub's login form as a browser does, follows the oauth2 redirect through
OAuthGetToken (or takes the userToken of an oauth one), gets a platform code (from a PlatformSimulator
in this process or from a running one's POST /sim/codes) and sends AcceptGrant. Every reply is checked by
simulators.platform_validate; a step that fails is a BindError naming it. Never imports hubd.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any, TypeVar
from urllib.parse import urljoin

import aiohttp

from simulators.platform import PlatformSimulator
from simulators.platform_validate import (
    MessageInvalid,
    validate_accept_grant_reply,
    validate_authorize_url,
    validate_driver_reply,
    validate_redirect,
    validate_user_auth,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BindResult:
    """The outcome of binding a user: ok is False when the hub answered AcceptGrant with an ErrorResponse."""

    ok: bool
    user_id: str
    user_token: str
    auth_mode: str  # "oauth2" or "oauth", as the authorize redirect showed
    reply: dict[str, Any]


class BindError(Exception):
    """A binding step failed; the message names the step and what the hub answered."""

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"bind step '{step}' failed: {detail}")
        self.step = step


async def bind_user(
    *,
    hub_url: str,
    vendor_path: str,
    sim: PlatformSimulator | str,
    username: str,
    password: str,
    user_id: str,
    callback_url: str | None = None,
    namespace: str = "Service",
) -> BindResult:
    """Bind user_id to the hub as the platform does: log in (SPEC 4.5), then AcceptGrant (SPEC 4.1).

    The callbackURL defaults to one on the simulator's own host, as the platform's is on its own: a hub
    whose driver.callback_hosts is unset allows the host of its platform.auth_url.
    """
    hub_url = hub_url.rstrip("/")
    if callback_url is None:
        sim_url = sim.url if isinstance(sim, PlatformSimulator) else sim
        callback_url = f"{sim_url.rstrip('/')}/callback?src=sim"
    jar = aiohttp.CookieJar(unsafe=True)  # the hub's login may set a CSRF cookie on an IP host
    async with aiohttp.ClientSession(cookie_jar=jar) as session:
        data = await _driver_command(session, hub_url, "OAuth", {"callbackURL": callback_url})
        authorize_url = _checked("OAuth", validate_authorize_url, data, callback_url)
        location = await _log_in(session, authorize_url, username, password)
        auth_mode, added = _checked("redirect", validate_redirect, location, callback_url)
        if auth_mode == "oauth2":
            data = await _driver_command(session, hub_url, "OAuthGetToken", {"code": added["code"]})
            user_token = _checked("OAuthGetToken", validate_user_auth, data)
        else:
            user_token = added["userToken"]
        code = await _platform_code(session, sim, user_id)
        grant = {
            "header": {
                "messageId": str(uuid.uuid4()), "namespace": f"{namespace}.Authorization",
                "name": "AcceptGrant", "payloadVersion": "v1",
                "authorization": {"type": "BearerToken", "token": user_token},
            },
            "payload": {"grant": {"type": "OAuth2.AuthorizationCode", "code": code, "userId": user_id}},
        }
        reply = await _post_json(session, "AcceptGrant", f"{hub_url}{vendor_path}", grant)
        ok = _checked("AcceptGrant", validate_accept_grant_reply, reply, namespace)
    log.info("bound user %s (%s): %s", user_id, auth_mode, "ok" if ok else reply["payload"]["name"])
    return BindResult(ok=ok, user_id=user_id, user_token=user_token, auth_mode=auth_mode, reply=reply)


def _checked(step: str, check: Callable[..., T], value: Any, *args: Any) -> T:
    """Run a validator on what the hub sent at this step; a failure becomes a BindError."""
    try:
        return check(value, *args)
    except MessageInvalid as err:
        raise BindError(step, str(err)) from None


async def _driver_command(
    session: aiohttp.ClientSession, hub_url: str, command: str, params: dict[str, Any]
) -> Any:
    url = f"{hub_url}/driver/command"
    return _checked(command, validate_driver_reply, await _post_json(session, command, url, {
        "command": command, "params": params,
    }))


async def _post_json(
    session: aiohttp.ClientSession, step: str, url: str, body: dict[str, Any]
) -> dict[str, Any]:
    try:
        async with session.post(url, json=body) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise BindError(step, f"POST {url} -> HTTP {resp.status}: {text[:300]}")
    except aiohttp.ClientError as err:
        raise BindError(step, f"POST {url}: {err}") from None
    try:
        reply = json.loads(text)
    except ValueError:
        raise BindError(step, f"POST {url} -> not JSON: {text[:300]}") from None
    if not isinstance(reply, dict):
        raise BindError(step, f"POST {url} -> expected a JSON object, got {text[:300]}")
    return reply


async def _log_in(session: aiohttp.ClientSession, page_url: str, username: str, password: str) -> str:
    """Fill and submit the authorize page's form like a browser; return the redirect's absolute Location."""
    try:
        async with session.get(page_url) as resp:
            page = await resp.text()
            if resp.status != 200:
                raise BindError("authorize page", f"GET {page_url} -> HTTP {resp.status}: {page[:300]}")
        form = _LoginFormParser.parse(page)
        if form is None:
            raise BindError("authorize page", f'no <form method="post"> on {page_url}')
        action, fields = form
        missing = {"username", "password"} - {name for name, _ in fields}
        if missing:
            raise BindError("authorize page", f"the form has no input named {sorted(missing)}")
        filled = {"username": username, "password": password}
        data = [(name, filled.get(name, value)) for name, value in fields]
        target = urljoin(page_url, action) if action else page_url
        async with session.post(target, data=data, allow_redirects=False) as resp:
            text = await resp.text()
            location = resp.headers.get("Location")
            if resp.status != 302 or not location:
                detail = f"POST {target} -> HTTP {resp.status}, expected 302 with a Location: {text[:300]}"
                raise BindError("login", detail)
    except aiohttp.ClientError as err:
        raise BindError("authorize page", str(err)) from None
    return urljoin(target, location)


async def _platform_code(session: aiohttp.ClientSession, sim: PlatformSimulator | str, user_id: str) -> str:
    if isinstance(sim, PlatformSimulator):
        return sim.issue_code(user_id)
    url = f"{sim.rstrip('/')}/sim/codes"
    code = (await _post_json(session, "platform code", url, {"userId": user_id})).get("code")
    if not isinstance(code, str):
        raise BindError("platform code", f"POST {url} gave no code")
    return code


class _LoginFormParser(HTMLParser):
    """Collects the first POST form's action and the inputs a browser would submit."""

    _SKIPPED_TYPES = frozenset({"submit", "button", "reset", "image", "file"})

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: list[tuple[str, str]] = []
        self._in_form = False
        self._done = False

    @classmethod
    def parse(cls, page: str) -> tuple[str, list[tuple[str, str]]] | None:
        """(action, [(name, value)]) of the first POST form, or None."""
        parser = cls()
        parser.feed(page)
        parser.close()
        return None if parser.action is None else (parser.action, parser.fields)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and not self._done and a.get("method", "get").lower() == "post":
            self._in_form, self.action = True, a.get("action", "")
        elif tag == "input" and self._in_form and a.get("name"):
            kind = a.get("type", "text").lower()
            if kind not in self._SKIPPED_TYPES and (kind not in ("checkbox", "radio") or "checked" in a):
                self.fields.append((a["name"], a.get("value", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._in_form:
            self._in_form, self._done = False, True
