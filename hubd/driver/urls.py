"""The URLs of the driver flow: callbackURL rules, the authorize URL, and the redirect (SPEC.md 4.5).

Pure functions, shared by the service and `hubd check-driver`. Imports nothing from hubd but errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import SplitResult, parse_qsl, quote, urlencode, urlsplit

from hubd.errors import HubdError

AUTHORIZE_PATH = "/oauth/authorize"
CALLBACK_PARAM = "callbackURL"
MAX_URL_CHARS = 2048


class CallbackInvalid(HubdError):
    """A callbackURL this driver will not redirect to; the text says why."""


def authorize_url(public_url: str, callback_url: str) -> str:
    """The login page URL for `callback_url`, fully percent-encoded (PROTOCOL.md 10)."""
    return f"{public_url.rstrip('/')}{AUTHORIZE_PATH}?{CALLBACK_PARAM}={quote(callback_url, safe='')}"


def check_callback(url: str, allowed_hosts: Iterable[str]) -> SplitResult:
    """The parsed callbackURL, or CallbackInvalid: http(s), a host, no credentials, an allowed host."""
    if not url:
        raise CallbackInvalid("callbackURL is empty")
    if len(url) > MAX_URL_CHARS:
        raise CallbackInvalid(f"callbackURL is longer than {MAX_URL_CHARS} characters")
    if any(not 0x21 <= ord(c) <= 0x7E for c in url):
        raise CallbackInvalid("callbackURL must be percent-encoded ASCII without spaces or control characters")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        shown = parts.scheme or "none"
        raise CallbackInvalid(f"callbackURL must be an http:// or https:// URL (its scheme is {shown!r})")
    if not parts.netloc or not parts.hostname:
        raise CallbackInvalid("callbackURL has no host")
    if "@" in parts.netloc:
        raise CallbackInvalid("callbackURL must not carry a user name or password before its host")
    try:
        port = parts.port
    except ValueError as err:
        raise CallbackInvalid(f"callbackURL has a bad port: {err}") from err
    allowed = {_host_entry(h) for h in allowed_hosts}
    if allowed:
        host = parts.hostname.lower()
        if host not in allowed and f"{host}:{port}" not in allowed:
            raise CallbackInvalid(f"callbackURL's host {host!r} is not one of driver.callback_hosts")
    return parts


def origin(parts: SplitResult) -> str:
    """scheme://host[:port] of a parsed URL."""
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def add_params(callback_url: str, params: Mapping[str, str]) -> str:
    """`callback_url` with `params` appended to its query; path, query and fragment are kept as they are."""
    base, hash_sign, fragment = callback_url.partition("#")
    extra = urlencode(list(params.items()), quote_via=quote)
    if "?" not in base:
        base = f"{base}?{extra}"
    elif base.endswith(("?", "&")):
        base = f"{base}{extra}"
    else:
        base = f"{base}&{extra}"
    return f"{base}{hash_sign}{fragment}"


def get_ci(mapping: Mapping[str, object], name: str) -> object | None:
    """`mapping[name]`, or the first key equal to it ignoring case (PROTOCOL.md DIFF-12); None if absent."""
    if name in mapping:
        return mapping[name]
    lowered = name.lower()
    for key in mapping:
        if key.lower() == lowered:
            return mapping[key]
    return None


def query_pairs(query: str) -> list[tuple[str, str]]:
    """A query string's (name, value) pairs in order, blanks kept."""
    return parse_qsl(query, keep_blank_values=True)


def _host_entry(entry: str) -> str:
    entry = entry.strip().lower()
    if "://" in entry:
        entry = entry.split("://", 1)[1]
    entry = entry.rstrip("/")
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        entry = host + rest
    return entry
