"""`hubd check-driver`: the platform's four pre-publication checks against any driver.

Owns the HTTP client side of the driver flow: 1 OAuth gives the exact authorize URL; 2 the page is
filled and submitted like a browser (cookies kept) and the redirect to the callback is read without
following it. Other redirects are followed, with GET, also to another origin (a single sign-on host),
but not to the callback's origin nor with a code or token away from the driver; the username and
password go only to the origin that served the form (a form sent elsewhere fails); 3 OAuthGetToken; 4
OAuthRefresh. Prints one PASS/FAIL line per check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

import aiohttp

from hubd.driver.urls import (
    AUTHORIZE_PATH,
    CALLBACK_PARAM,
    authorize_url,
    normal_path,
    origin,
    origin_key,
    query_pairs,
)
from hubd.web.jsonbody import JsonBodyInvalid, load_json

TIMEOUT_S = 15.0
MAX_REPLY_BYTES = 1024 * 1024
MAX_HOPS = 10
_SECRET_PARAMS = frozenset({"code", "userToken", "refreshToken"})
SHOWN_CHARS = 300
_REDACTED_NAMES = "code|userToken|refreshToken|password|csrf"
_JSON_SECRET = re.compile(r'("(?:' + _REDACTED_NAMES + r')"\s*:\s*")([^"]{4})[^"]*(")')
_QUERY_SECRET = re.compile(r"([?&](?:" + _REDACTED_NAMES + r")=)([^&#]{4})[^&#]*")


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's outcome and the reason, as printed."""

    number: int
    name: str
    ok: bool
    reason: str

    def line(self) -> str:
        """`PASS 1 OAuth: reason` or `FAIL ...`."""
        return f"{'PASS' if self.ok else 'FAIL'} {self.number} {self.name}: {self.reason}"


class CheckFailed(Exception):
    """A check did not pass; the text is the reason with the response that failed."""


async def run_checks(base_url: str, *, callback_url: str, username: str | None, password: str | None) -> int:
    """Run the four checks, print one line each; 0 only if all pass."""
    results = await DriverChecker(base_url, callback_url, username, password).run()
    for result in results:
        print(result.line(), flush=True)
    return 0 if all(r.ok for r in results) else 1


class DriverChecker:
    """The four checks in order; a check whose input an earlier one failed to give fails as skipped."""

    def __init__(self, base_url: str, callback_url: str, username: str | None, password: str | None) -> None:
        self._base = base_url.rstrip("/")
        self._callback = callback_url
        self._username = username
        self._password = password

    async def run(self) -> list[CheckResult]:
        """The four results."""
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
        # unsafe: keep cookies for IP-address hosts too, as a browser does.
        async with aiohttp.ClientSession(timeout=timeout, cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            results: list[CheckResult] = []
            page_url = await self._check(results, 1, "OAuth", self._oauth(session))
            redirect: _Redirect | None = None
            if page_url is not None:
                redirect = await self._check(results, 2, "authorize", self._authorize(session, page_url))
            else:
                results.append(CheckResult(2, "authorize", False, "skipped: check 1 gave no authorize URL"))
            auth: dict[str, Any] | None = None
            if redirect is None:
                results.append(CheckResult(3, "OAuthGetToken", False, "skipped: check 2 gave no redirect"))
            elif redirect.mode == "oauth":
                auth = redirect.user_auth()
                results.append(CheckResult(3, "OAuthGetToken", True,
                                           "not used in OAuth (v1) mode: the redirect carried the UserAuth "
                                           f"for userId {auth['userId']!r}"))
            else:
                auth = await self._check(results, 3, "OAuthGetToken", self._get_token(session, redirect.added["code"]))
            if auth is None:
                results.append(CheckResult(4, "OAuthRefresh", False, "skipped: no UserAuth from checks 2-3"))
            else:
                await self._check(results, 4, "OAuthRefresh", self._refresh(session, auth))
            return results

    async def _check(self, results: list[CheckResult], number: int, name: str, step: Any) -> Any:
        try:
            value, reason = await step
        except CheckFailed as err:
            results.append(CheckResult(number, name, False, str(err)))
            return None
        except (aiohttp.ClientError, TimeoutError) as err:
            results.append(CheckResult(number, name, False, f"no answer from the driver: {_describe(err)}"))
            return None
        except ValueError as err:  # urlsplit/urljoin on a URL the driver sent
            results.append(CheckResult(number, name, False, f"the driver sent a malformed URL: {_describe(err)}"))
            return None
        results.append(CheckResult(number, name, True, reason))
        return value

    async def _oauth(self, session: aiohttp.ClientSession) -> tuple[str, str]:
        data = await self._command(session, "OAuth", {CALLBACK_PARAM: self._callback})
        expected = authorize_url(self._base, self._callback)
        if data == expected:
            return data, f"status 0 and the exact authorize URL {_short(data)}"
        if not isinstance(data, str):
            raise CheckFailed(f"data must be the authorize URL (a string), got {_show(data)}")
        parts = urlsplit(data)
        want_query = f"{CALLBACK_PARAM}={quote(self._callback, safe='')}"
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise CheckFailed(f"data is not an absolute http(s) URL: expected {_short(expected)}, got {_show(data)}")
        if not parts.path.endswith(AUTHORIZE_PATH):
            raise CheckFailed(f"the authorize URL's path must end in {AUTHORIZE_PATH}: expected {_short(expected)}, "
                              f"got {_show(data)}")
        if parts.query != want_query:
            decoded = dict(query_pairs(parts.query)).get(CALLBACK_PARAM)
            loose = self._callback in (decoded, unquote(parts.query).partition("=")[2])
            why = ("callbackURL is there but not fully percent-encoded" if loose
                   else "the query must be exactly callbackURL=<the percent-encoded callbackURL>")
            raise CheckFailed(f"{why}: expected ?{want_query}, got {_show(data)}")
        if parts.fragment:
            raise CheckFailed(f"the authorize URL must not have a fragment: got {_show(data)}")
        return data, f"status 0 and the authorize URL {_short(data)} (served outside {self._base})"

    async def _authorize(self, session: aiohttp.ClientSession, page_url: str) -> tuple[_Redirect, str]:
        driver_origin = origin_key(page_url)
        url, method, data = page_url, "GET", None
        for _ in range(MAX_HOPS):
            async with session.request(method, url, data=data, allow_redirects=False) as resp:
                text = await resp.text(errors="replace")
                status, location = resp.status, resp.headers.get("Location")
            if status in (301, 302, 303, 307, 308):
                if not location:
                    raise CheckFailed(f"{method} {_short(url)} answered HTTP {status} without a Location header")
                target = urljoin(url, location)
                if self._leads_to_callback(target):
                    redirect = self._verify_redirect(target)
                    return redirect, (f"HTTP {status} to the callback with its path, query and fragment kept, "
                                      f"adding {', '.join(sorted(redirect.added))} (mode {redirect.mode})")
                self._check_hop(target, driver_origin)
                # Followed with GET and no body, whatever the status: the form's fields go nowhere else.
                url, method, data = target, "GET", None
                continue
            if method == "POST":
                raise CheckFailed(f"the login did not redirect: POST {_short(url)} -> HTTP {status}"
                                  f"{_page_message(text)}")
            if status != 200:
                raise CheckFailed(f"GET {_short(url)} -> HTTP {status}, expected the login page: {_snippet(text)}")
            form = _find_form(text)
            if form is None:
                raise CheckFailed(f"GET {_short(url)} -> HTTP 200 but the page has no login form: {_snippet(text)}")
            password_field = form.password_field()
            if password_field is not None and (self._username is None or self._password is None):
                raise CheckFailed("the page asks for a username and password; pass --username and --password")
            action = urljoin(url, form.action or "")
            if origin_key(action) != origin_key(url):
                raise CheckFailed(f"the login form on {origin(urlsplit(url))} is sent to {_short(action)}, another "
                                  "origin; check-driver sends the username and password only to the origin that "
                                  "served the form")
            filled = form.fill(self._username or "", self._password or "")
            url, method, data = action, form.method, filled
            if method == "GET":
                url = f"{url.split('?', 1)[0]}?{_query(filled)}"
                data = None
        raise CheckFailed(f"no redirect to the callback after {MAX_HOPS} requests; last was {method} {_short(url)}")

    def _check_hop(self, target: str, driver_origin: tuple[str, str, int] | None) -> None:
        """A redirect that is not the callback is followed, also to another origin (a single sign-on host),
        unless it goes to the callback's origin (the platform) or carries a code or token away from the driver."""
        want = urlsplit(self._callback)
        expected = f"expected path {want.path or '/'} on {want.scheme}://{want.netloc}"
        target_origin = origin_key(target)
        if target_origin is None:
            raise CheckFailed(f"the login redirected to {_show(target)}, which is not an http(s) URL; {expected}")
        if target_origin == origin_key(self._callback) and target_origin != driver_origin:
            raise CheckFailed(f"the login redirected to {_show(target)}, {expected}; a redirect to the callback's "
                              "origin that is not the callback is not followed")
        parts = urlsplit(target)
        carried = sorted({name for name, _ in query_pairs(parts.query) + query_pairs(parts.fragment)
                          if name in _SECRET_PARAMS})
        if carried and target_origin != driver_origin:
            raise CheckFailed(f"the login redirected to {_show(target)} with {', '.join(carried)}, {expected}; a "
                              "redirect that carries a code or token away from the driver is not followed")

    def _leads_to_callback(self, target: str) -> bool:
        # The same path may be written with different escapes (%7E or ~, %2f or %2F): RFC 3986 6.2.2.
        got, want = urlsplit(target), urlsplit(self._callback)
        return origin_key(target) == origin_key(self._callback) and normal_path(got.path) == normal_path(want.path)

    def _verify_redirect(self, target: str) -> _Redirect:
        got, want = urlsplit(target), urlsplit(self._callback)
        pairs = query_pairs(got.query)
        remaining = list(pairs)
        for pair in query_pairs(want.query):
            if pair not in remaining:
                raise CheckFailed(f"the redirect lost the callback's query parameter {pair[0]}={pair[1]}: "
                                  f"Location {_show(target)}")
            remaining.remove(pair)
        if want.fragment and got.fragment != want.fragment:
            raise CheckFailed(f"the redirect lost the callback's fragment #{want.fragment}: Location {_show(target)}")
        added = dict(remaining)
        if len(added) != len(remaining):
            raise CheckFailed(f"the redirect repeats a parameter: Location {_show(target)}")
        if added.get("code"):
            return _Redirect("oauth2", added)
        v1 = ("userId", "userToken", "expiresIn")
        if all(added.get(k) for k in v1):
            if not re.fullmatch(r"\d+(\.\d+)?", added["expiresIn"]):
                raise CheckFailed(f"expiresIn must be a number of seconds: Location {_show(target)}")
            return _Redirect("oauth", added)
        raise CheckFailed(f"the redirect adds {sorted(added) or 'nothing'}; expected code (OAuth 2.0) or userId, "
                          f"userToken and expiresIn (OAuth): Location {_show(target)}")

    async def _get_token(self, session: aiohttp.ClientSession, code: str) -> tuple[dict[str, Any], str]:
        data = await self._command(session, "OAuthGetToken", {"code": code})
        _check_user_auth(data)
        return data, f"status 0 and a UserAuth for userId {data['userId']!r}, expiresIn {data['expiresIn']}"

    async def _refresh(self, session: aiohttp.ClientSession, auth: dict[str, Any]) -> tuple[dict[str, Any], str]:
        data = await self._command(session, "OAuthRefresh", auth)
        _check_user_auth(data)
        note = "" if data["userToken"] != auth.get("userToken") else " (note: the userToken did not change)"
        return data, f"status 0 and the newest UserAuth for userId {data['userId']!r}{note}"

    async def _command(self, session: aiohttp.ClientSession, command: str, params: Mapping[str, Any]) -> Any:
        url = f"{self._base}/driver/command"
        async with session.post(url, json={"command": command, "params": dict(params)}) as resp:
            text = await resp.text(errors="replace")
            status = resp.status
        if status != 200:
            raise CheckFailed(f"POST {url} -> HTTP {status}, expected 200: {_snippet(text)}")
        try:
            body = load_json(text.encode("utf-8", "surrogatepass"), max_bytes=MAX_REPLY_BYTES)
        except JsonBodyInvalid as err:
            raise CheckFailed(f"POST {url} -> not JSON a driver would send ({err}): {_snippet(text)}") from None
        if not isinstance(body, dict):
            raise CheckFailed(f"the reply must be a JSON object: {_snippet(text)}")
        if type(body.get("status")) is not int:
            raise CheckFailed(f"the reply's status must be an integer: {_snippet(text)}")
        if body["status"] != 0:
            raise CheckFailed(f"status {body['status']}, not 0: {_snippet(text)}")
        if "data" not in body:
            raise CheckFailed(f"status 0 but no data: {_snippet(text)}")
        return body["data"]


@dataclass(frozen=True, slots=True)
class _Redirect:
    mode: str
    added: dict[str, str]

    def user_auth(self) -> dict[str, Any]:
        expires = float(self.added["expiresIn"])
        auth: dict[str, Any] = {"userId": self.added["userId"], "userToken": self.added["userToken"],
                                "expiresIn": int(expires) if expires.is_integer() else expires}
        if "refreshToken" in self.added:
            auth["refreshToken"] = self.added["refreshToken"]
        return auth


@dataclass
class _Form:
    method: str
    action: str | None
    inputs: list[tuple[str, str, str]] = field(default_factory=list)  # (name, type, value)

    def password_field(self) -> str | None:
        return next((name for name, kind, _ in self.inputs if kind == "password"), None)

    def fill(self, username: str, password: str) -> list[tuple[str, str]]:
        password_name = self.password_field()
        user_name = next((n for n, k, _ in self.inputs if n == "username"), None) or next(
            (n for n, k, _ in self.inputs if k in ("text", "email")), None)
        out = []
        for name, _kind, value in self.inputs:
            if name == password_name:
                value = password
            elif name == user_name:
                value = username
            out.append((name, value))
        return out


class _FormParser(HTMLParser):
    """Every form on a page with the inputs a browser would submit."""

    _SKIPPED = frozenset({"submit", "button", "reset", "image", "file"})

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[_Form] = []
        self._current: _Form | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._current = _Form(a.get("method", "get").upper() or "GET", a.get("action"))
            self.forms.append(self._current)
        elif tag == "input" and self._current is not None and a.get("name"):
            kind = a.get("type", "text").lower()
            if kind not in self._SKIPPED and (kind not in ("checkbox", "radio") or "checked" in a):
                self._current.inputs.append((a["name"], kind, a.get("value", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def _find_form(page: str) -> _Form | None:
    parser = _FormParser()
    parser.feed(page)
    parser.close()
    with_password = [f for f in parser.forms if f.password_field() is not None]
    posts = [f for f in parser.forms if f.method == "POST"]
    candidates = with_password or posts
    return candidates[0] if candidates else None


def _check_user_auth(data: object) -> None:
    if not isinstance(data, dict):
        raise CheckFailed(f"data must be a UserAuth object, got {_show(data)}")
    for key in ("userId", "userToken"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise CheckFailed(f"UserAuth.{key} must be a non-empty string: {_show(data)}")
    if not any(_is_number(data.get(k)) for k in ("expiresIn", "expiredTime")):
        raise CheckFailed(f"UserAuth.expiresIn must be a number of seconds: {_show(data)}")
    refresh = data.get("refreshToken")
    if not (isinstance(refresh, str) and refresh) and not _is_number(refresh):
        raise CheckFailed(f"UserAuth.refreshToken must be a non-empty string or a number: {_show(data)}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _query(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)


def _page_message(page: str) -> str:
    match = re.search(r'<[^>]*(?:role="alert"|class="[^"]*error[^"]*")[^>]*>(.*?)</', page, re.DOTALL)
    if match:
        return f"; the page says: {_strip(match.group(1))!r} (wrong username or password?)"
    return f": {_snippet(page)}"


def _strip(html_text: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html_text).split())


def _redact(text: str) -> str:
    return _QUERY_SECRET.sub(r"\1\2…", _JSON_SECRET.sub(r"\1\2…\3", text))


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return _redact(flat[:SHOWN_CHARS] + ("…" if len(flat) > SHOWN_CHARS else ""))


def _show(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return _snippet(text)


def _short(url: str) -> str:
    return _redact(url)


def _describe(err: BaseException) -> str:
    return str(err) or type(err).__name__
