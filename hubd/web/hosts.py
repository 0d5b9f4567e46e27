"""Which `Host` headers the local routes answer: IP literals, `localhost`, this machine's names, configured names.

A page of some other site open in a browser on the LAN can reach hubd by DNS rebinding: the site's own name
re-resolves to hubd's address, so the browser's same-origin rule lets the page read what it fetched. Such a
request still carries the site's name in `Host`. An IP literal or `localhost` cannot be rebound, and the
machine's own names (hostname, `<hostname>.local` as zeroconf advertises it, the FQDN) and the names the
owner lists (`http.allowed_hosts`, `http.public_url`'s host) are the owner's: those pass, nothing else does.
Pure but for `machine_names` and `fqdn`, which ask the system (`fqdn` may wait on DNS).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

HOST_SHOWN_CHARS = 100  # a refused Host is quoted back this long at most
ALWAYS_ALLOWED = frozenset({"localhost"})


def normalized_name(name: str) -> str:
    """A host name as the check compares it: lower case, without a trailing dot."""
    name = name.strip().lower()
    return name[:-1] if name.endswith(".") else name


def machine_names() -> frozenset[str]:
    """This machine's hostname and `<hostname>.local` (also of its first label): no DNS, at once."""
    hostname = normalized_name(socket.gethostname())
    short = hostname.split(".", 1)[0]
    return frozenset(name for name in (hostname, f"{hostname}.local", short, f"{short}.local")
                     if name and name != ".local")


def fqdn() -> str:
    """Blocking (it may ask DNS): this machine's fully qualified name."""
    return normalized_name(socket.getfqdn())


def split_host(header: str) -> tuple[str, bool] | None:
    """(the host without its port, whether it is an IP literal); None when `host[:port]` is malformed."""
    value = header.strip()
    if value.startswith("["):  # an IPv6 literal, as URLs write it
        inside, bracket, rest = value[1:].partition("]")
        if not bracket or not _port_ok(rest):
            return None
        return (inside, True) if _ip(inside) else None
    if value.count(":") > 1:  # a bare IPv6 address: not how a browser writes it, but no name either
        return (value, True) if _ip(value) else None
    host, colon, port = value.partition(":")
    if not host or (colon and not _port_ok(":" + port)):
        return None
    return host, _ip(host)


class HostCheck:
    """The Host values the local routes answer."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._names = ALWAYS_ALLOWED | {normalized_name(name) for name in names if name.strip()}

    def add(self, names: Iterable[str]) -> None:
        """Allow these names too (the machine's, found at start)."""
        self._names = self._names | {normalized_name(name) for name in names if name.strip()}

    @property
    def names(self) -> frozenset[str]:
        """The names allowed, besides every IP literal."""
        return frozenset(self._names)

    def refusal(self, values: list[str]) -> str | None:
        """None when the request's Host header (all its values) is allowed, else why not, for the error's details."""
        if not values:
            return "the request has no Host header"
        if len(values) > 1:
            return "the request has more than one Host header"
        parsed = split_host(values[0])
        shown = values[0] if len(values[0]) <= HOST_SHOWN_CHARS else values[0][:HOST_SHOWN_CHARS - 1] + "…"
        if parsed is None:
            return f"{shown!r} is not a host name or address with an optional port"
        host, literal = parsed
        if literal or normalized_name(host) in self._names:
            return None
        return f"{shown!r} is neither an IP address, localhost, nor one of this hub's names"


def _ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.replace("%25", "%", 1))  # a zone, as a URL escapes it: fe80::1%25eth0
    except ValueError:
        return False
    return True


def _port_ok(rest: str) -> bool:
    """Nothing, or `:` and at most 5 digits (an empty port is allowed by RFC 3986)."""
    return rest == "" or (rest.startswith(":") and len(rest) <= 6 and rest[1:].isascii()
                          and (rest[1:] == "" or rest[1:].isdigit()))
