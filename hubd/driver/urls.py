"""The URLs of the driver flow: callbackURL rules, the authorize URL, and the redirect.

Pure functions, shared by the service and `hubd check-driver`.

driver.callback_hosts entries (docs/driver.md): a bare `host` or `host:port`
allows https on that port (443 by default); a loopback host (localhost, 127.x, [::1]) also allows
http, and any port when none is given; `https://host[:port]` (or, for a loopback host only,
`http://host[:port]`) allows exactly that scheme and port (the scheme's default port when none is
given); `["*"]` allows any host. Unset (or empty), it allows the host of platform.auth_url, or only
loopback hosts without one. Whatever the entries, plain http goes to loopback hosts only, and a
callbackURL that already carries a parameter the redirect adds (`code`, or in oauth mode `userId`,
`userToken`, `expiresIn`, `refreshToken`) is refused: it would reach the app with two of them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlencode, urlsplit

from hubd.errors import HubdError
from hubd.untrusted.numbers import ascii_int

AUTHORIZE_PATH = "/oauth/authorize"
CALLBACK_PARAM = "callbackURL"
ANY_HOST = "*"
# What the login redirect adds to the callbackURL, by driver.mode.
ADDED_PARAMS = {"oauth2": ("code",), "oauth": ("userId", "userToken", "expiresIn", "refreshToken")}
MAX_URL_CHARS = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}
# A host name is letters, digits, '-' and '.'; anything else (';', ',', "'", '\\', '_' ...) could
# end up in the page's Content-Security-Policy header or be read differently by a browser.
_NAME = r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.?"
_NETLOC = re.compile(rf"(?P<host>{_NAME}|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[^:]*))?")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class CallbackInvalid(HubdError):
    """A callbackURL this driver will not redirect to, or a driver.callback_hosts entry; the text says why."""


@dataclass(frozen=True, slots=True)
class HostRule:
    """One parsed driver.callback_hosts entry."""

    host: str  # lower case, IPv6 without brackets
    scheme: str | None  # None: a bare host
    port: int | None  # None: the scheme's default port (or any port on a bare loopback host)

    def allows(self, scheme: str, host: str, port: int) -> bool:
        """Whether a callbackURL with this scheme, host and port (explicit or default) is allowed."""
        if host != self.host:
            return False
        if self.scheme is not None:
            return scheme == self.scheme and port == (self.port or DEFAULT_PORTS[self.scheme])
        if is_loopback(self.host):
            return self.port is None or port == self.port
        return scheme == "https" and port == (self.port or DEFAULT_PORTS["https"])


@dataclass(frozen=True, slots=True)
class CallbackRules:
    """Where a callbackURL may point, and which parameters it must not carry yet."""

    hosts: tuple[HostRule, ...] = ()
    any_host: bool = False
    any_loopback: bool = False  # any loopback host (localhost, 127.0.0.0/8, ::1), any port, http or https
    added: tuple[str, ...] = ()  # the parameters the redirect adds
    source: str = "driver.callback_hosts"  # where the hosts come from, for the refusal's message


def authorize_url(public_url: str, callback_url: str) -> str:
    """The login page URL for `callback_url`, fully percent-encoded."""
    return f"{public_url.rstrip('/')}{AUTHORIZE_PATH}?{CALLBACK_PARAM}={quote(callback_url, safe='')}"


def callback_rules(entries: Sequence[str], *, auth_url: str | None, mode: str) -> tuple[CallbackRules, list[str]]:
    """The rules of driver.callback_hosts (or its default) in driver.mode, and one line per bad entry."""
    added = ADDED_PARAMS.get(mode, ())
    if ANY_HOST in (entry.strip() for entry in entries):
        problems = [] if len(entries) == 1 else [
            f'driver.callback_hosts: "{ANY_HOST}" allows any host, so the other entries mean nothing; '
            f'give ["{ANY_HOST}"] alone, or list the hosts without it']
        return CallbackRules(any_host=True, added=added), problems
    if entries:
        hosts, problems = parse_callback_hosts(entries)
        return CallbackRules(hosts, added=added), problems
    return default_rules(auth_url, added), []


def default_rules(auth_url: str | None, added: tuple[str, ...] = ()) -> CallbackRules:
    """What an unset driver.callback_hosts allows: the host of platform.auth_url, or without one loopback hosts."""
    loopback = CallbackRules(any_loopback=True, added=added,
                             source="driver.callback_hosts (not set, and without platform.auth_url its default "
                                    "allows only loopback hosts)")
    if auth_url is None:
        return loopback
    try:
        parts = urlsplit(auth_url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return loopback
    if not host or _NETLOC.fullmatch(host if ":" not in host else f"[{host}]") is None:
        return loopback
    hosts = [HostRule(host.lower(), None, None)]
    if parts.scheme.lower() == "https" and port not in (None, DEFAULT_PORTS["https"]):
        hosts.append(HostRule(host.lower(), "https", port))
    shown = f"[{host}]" if ":" in host else host
    return CallbackRules(tuple(hosts), added=added,
                         source=f"driver.callback_hosts (not set: its default allows only {shown}, the host of "
                                "platform.auth_url)")


def parse_callback_hosts(entries: Iterable[str]) -> tuple[tuple[HostRule, ...], list[str]]:
    """The rules of driver.callback_hosts, and one `driver.callback_hosts[i]: why` per bad entry."""
    rules: list[HostRule] = []
    problems: list[str] = []
    for i, entry in enumerate(entries):
        try:
            rules.append(host_rule(entry))
        except CallbackInvalid as err:
            problems.append(f"driver.callback_hosts[{i}]: {err}")
    return tuple(rules), problems


def host_rule(entry: str) -> HostRule:
    """One driver.callback_hosts entry: `host`, `host:port` or `http(s)://host[:port][/]`."""
    text = entry.strip()
    if not text:
        raise CallbackInvalid("the entry is empty; give a host such as callback.platform.example")
    scheme: str | None = None
    if "://" in text:
        scheme, _, text = text.partition("://")
        scheme = scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise CallbackInvalid(f"{entry!r}: the scheme must be http:// or https://, or none")
        text = text.removesuffix("/")
    if any(c in text for c in "/@?#"):
        raise CallbackInvalid(f"{entry!r} must be a host, host:port or scheme://host[:port], "
                              "with no path, user name, query or fragment")
    match = _NETLOC.fullmatch(text)
    if match is None or not _valid_host(match["host"]):
        raise CallbackInvalid(f"{entry!r} does not name a valid host (letters, digits, '-' and '.', "
                              "or an IPv6 address in brackets)")
    port_text = match["port"]
    port: int | None = None
    if port_text is not None:
        port = ascii_int(port_text, max_digits=5)
        if port is None or not 0 < port < 65536:
            raise CallbackInvalid(f"{entry!r} has a bad port {port_text!r}; use a number from 1 to 65535")
    host = match["host"].strip("[]").lower()
    if scheme == "http" and not is_loopback(host):
        raise CallbackInvalid(f"{entry!r} allows plain http to a host that is not this machine: the login's code "
                              f"would cross the network unencrypted; write https://{match['host']}"
                              f"{':' + port_text if port_text else ''} or the bare host (http:// is only for "
                              "localhost, 127.0.0.1 and [::1])")
    return HostRule(host, scheme, port)


def check_callback(url: str, rules: CallbackRules) -> SplitResult:
    """The parsed callbackURL, or CallbackInvalid: http(s), a valid host, no credentials, an allowed host,
    http only to a loopback host, none of the parameters the redirect adds."""
    if not url:
        raise CallbackInvalid("callbackURL is empty")
    if len(url) > MAX_URL_CHARS:
        raise CallbackInvalid(f"callbackURL is longer than {MAX_URL_CHARS} characters")
    for i, char in enumerate(url):
        if not 0x21 <= ord(char) <= 0x7E:
            kind = "a non-ASCII character" if ord(char) > 0x7E else "a space or control character"
            raise CallbackInvalid(f"callbackURL has {kind} at position {i + 1}; it must be percent-encoded ASCII "
                                  "without spaces or control characters (e.g. %20 for a space, %C3%A9 for \u00e9)")
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError as err:
        raise CallbackInvalid(f"callbackURL is not a valid URL ({err})") from None
    if parts.scheme.lower() not in DEFAULT_PORTS:
        shown = parts.scheme or "none"
        raise CallbackInvalid(f"callbackURL must be an http:// or https:// URL (its scheme is {shown!r})")
    if not parts.netloc or not hostname:
        raise CallbackInvalid("callbackURL has no host")
    if "@" in parts.netloc:
        raise CallbackInvalid("callbackURL must not carry a user name or password before its host")
    match = _NETLOC.fullmatch(parts.netloc)
    if match is None or not _valid_host(match["host"]):
        raise CallbackInvalid(f"callbackURL's host {parts.netloc!r} is not a valid host name (letters, digits, "
                              "'-' and '.', or an IPv6 address in brackets)")
    try:
        port = parts.port
    except ValueError as err:
        raise CallbackInvalid(f"callbackURL has a bad port: {err}") from None
    scheme = parts.scheme.lower()
    if scheme == "http" and not is_loopback(hostname):
        raise CallbackInvalid(f"callbackURL {origin(parts)!r} is plain http to another machine, which would carry "
                              "the login's code unencrypted; only https:// is allowed there (http:// only to "
                              "localhost, 127.0.0.1 and [::1])")
    if not rules.any_host and not (rules.any_loopback and is_loopback(hostname)):
        effective = port if port is not None else DEFAULT_PORTS[scheme]
        if not any(rule.allows(scheme, hostname, effective) for rule in rules.hosts):
            raise CallbackInvalid(f"callbackURL's origin {origin(parts)!r} is not allowed by {rules.source}; "
                                  "add its host to driver.callback_hosts if it is the platform's (a bare host "
                                  "allows https on port 443 only; write host:port to allow another port)")
    _check_added(parts.query, rules.added)
    return parts


def is_loopback(host: str) -> bool:
    """localhost, *.localhost, 127.0.0.0/8 or ::1 (lower case, IPv6 without brackets)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def origin(parts: SplitResult) -> str:
    """scheme://host[:port] of a parsed URL."""
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def origin_key(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the default port filled in, for comparing origins; None if not http(s)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not host:
        return None
    return scheme, host, port if port is not None else DEFAULT_PORTS[scheme]


def foreign_origin(claimed: str, host: str, ours: tuple[str, str, int] | None = None) -> str | None:
    """The other site a request says it comes from (`claimed`: its Origin, or a Referer), shown as
    `scheme://host:port`; None when it is this hub.

    This hub: `ours` (http.public_url's origin, if any), or the host the request was addressed to (`host`: its
    Host header) with the scheme the browser used, which is the claim's: behind a proxy that ends HTTPS, hubd
    itself sees http. Something that is no http(s) origin (`null`, sent from sandboxed frames and data: URLs) is
    foreign, shown quoted.
    """
    key = origin_key(claimed)
    if key is None:
        return repr(claimed[:100])
    if key == ours or key == origin_key(f"{key[0]}://{host}"):
        return None
    scheme, name, port = key
    return f"{scheme}://{f'[{name}]' if ':' in name else name}:{port}"


def normal_path(path: str) -> str:
    """A URL path with escapes of unreserved characters decoded and other escapes in upper case (RFC 3986 6.2.2)."""
    def fix(match: re.Match[str]) -> str:
        char = unquote(match.group())
        return char if char in _UNRESERVED else match.group().upper()

    return _ESCAPE.sub(fix, path) or "/"


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
    """`mapping[name]`, or the first key equal to it ignoring case (callbackURL comes in either); None if absent."""
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


def _check_added(query: str, added: Sequence[str]) -> None:
    """Refuse a query that already has a parameter the redirect adds (by any case, split at & or ;)."""
    wanted = {name.lower(): name for name in added}
    for pair in re.split("[&;]", query):
        name = unquote(pair.partition("=")[0].replace("+", " ")).strip().lower()
        if name in wanted:
            raise CallbackInvalid(f"callbackURL already carries a {wanted[name]!r} parameter; this hub adds its own "
                                  "after the sign-in and never a second one, so it will not use this link (links "
                                  "made by the platform carry none)")


def _valid_host(host: str) -> bool:
    if not host.startswith("["):
        return True  # _NAME already allows only letters, digits, '-' and '.'
    try:
        return ipaddress.ip_address(host[1:-1]).version == 6
    except ValueError:
        return False
