"""Where the speaker may fetch audio from: which URLs it takes, and which addresses it connects to.

Owns two rules. A URL is taken only if it is http or https, names a host, and holds no character a URL never
holds as it is (control characters, white space, a backslash: what players and parsers read differently).
An address is connected to only if it is not loopback or link-local (this machine, or a cloud's metadata
service at 169.254.169.254) unless `audio.allow_local` says so, and never the unspecified, a multicast or
the broadcast address. A LAN address is fine: a media server on the LAN is what a speaker plays from.

The address rule holds where the connection is made: `download_session` resolves names through
`CheckedResolver` (which drops what the rule refuses) and opens every socket through a factory that checks
the address once more, so a name that re-resolves between a check and the connection (DNS rebinding), an IP
literal, and every redirect are covered: aiohttp connects to the addresses the check passed. A URL handed
to `player.url_command` has its redirects followed through that session first (hubd.speaker.fetch), then the
final one is checked by `check_host` (every address its name has now; that player resolves it again itself).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from hubd.config.hostnames import is_host_name
from hubd.speaker.template import control_character
from hubd.threads import in_daemon_thread

SCHEMES = ("http", "https")
ALLOW_LOCAL_KEY = "audio.allow_local"


class Refused(OSError):
    """An address (or every address of a name) the rule refuses; the text says which, why and how to allow it."""


def url_problem(url: str) -> str | None:
    """What is wrong with an audio URL (a sentence without the field's name), or None."""
    bad = control_character(url)
    if bad is None:
        bad = next((f"{'a space' if char == ' ' else 'white space'} at position {index + 1}"
                    for index, char in enumerate(url) if char.isspace()), None)
    if bad is None and "\\" in url:
        bad = f"a backslash at position {url.index(chr(92)) + 1}"
    if bad is not None:
        return f"has {bad}; percent-encode it (a space is %20) or leave it out"
    try:
        parsed = URL(url)
        scheme, host = parsed.scheme.lower(), parsed.raw_host
    except (ValueError, TypeError):  # yarl: a bad port, an unclosed [, a name IDNA cannot encode
        return "is not a valid URL; give one such as http://nas.local/chime.mp3"
    if scheme not in SCHEMES:
        return (f"only http:// and https:// URLs are played, not {scheme + ':' if scheme else 'a URL without a scheme'}"
                "; give the URL of an audio file on a web server")
    if not host or not _valid_host(host):
        return "has no valid host name or address; give one such as http://nas.local/chime.mp3"
    return None


def address_problem(address: str, *, allow_local: bool) -> str | None:
    """Why the agent may not connect to this IP address, as "a loopback address (...); set ..." (what it is,
    and how to allow it where it can be), or None."""
    try:
        ip = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified or (ip.version == 4 and ip in _THIS_NETWORK):
        return "an unspecified address (0.0.0.0/8 or ::; 0.0.0.0 reaches this machine), never fetched from"
    if ip.is_multicast:
        return "a multicast address, never fetched from"
    if ip == _BROADCAST:
        return "the broadcast address, never fetched from"
    if allow_local:
        return None
    if ip.is_loopback:
        return (f"a loopback address (this machine itself); set {ALLOW_LOCAL_KEY}: true in the speaker's config "
                "to play from this machine")
    if ip.is_link_local:
        return ("a link-local address (169.254.0.0/16 or fe80::/10, where cloud metadata services answer); set "
                f"{ALLOW_LOCAL_KEY}: true in the speaker's config to play from there")
    return None


class CheckedResolver(AbstractResolver):
    """aiohttp's resolver, keeping only the addresses the rule allows; Refused when none is left."""

    def __init__(self, *, allow_local: bool) -> None:
        self._inner = aiohttp.DefaultResolver()
        self._allow_local = allow_local

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        """The name's addresses that may be connected to."""
        found = await self._inner.resolve(host, port, family)
        kept = [result for result in found if address_problem(result["host"], allow_local=self._allow_local) is None]
        if found and not kept:
            address = found[0]["host"]
            raise Refused(f"{host} resolves to {address}, {address_problem(address, allow_local=self._allow_local)}")
        return kept

    async def close(self) -> None:
        """Release the resolver it wraps."""
        await self._inner.close()


def checked_socket_factory(*, allow_local: bool) -> Callable[[tuple[Any, ...]], socket.socket]:
    """A socket factory for aiohttp's connector: Refused for an address the rule refuses (the last check)."""

    def make(addr_info: tuple[Any, ...]) -> socket.socket:
        family, kind, proto, _, sockaddr = addr_info
        address = str(sockaddr[0])
        problem = address_problem(address, allow_local=allow_local)
        if problem is not None:
            raise Refused(f"{address} is {problem}")
        return socket.socket(family=family, type=kind, proto=proto)

    return make


def download_session(*, allow_local: bool) -> aiohttp.ClientSession:
    """An HTTP session that connects only where the rule allows (call it on the running loop)."""
    connector = aiohttp.TCPConnector(resolver=CheckedResolver(allow_local=allow_local),
                                     socket_factory=checked_socket_factory(allow_local=allow_local))
    return aiohttp.ClientSession(connector=connector)


async def check_host(url: str, *, allow_local: bool) -> None:
    """Refused when the URL's host is, or its name resolves to, an address the rule refuses (any of them: the
    program it goes to picks one itself); OSError (socket.gaierror) when the name does not resolve. The
    caller bounds the time (a lookup runs in a daemon thread, which a stop does not wait for)."""
    parsed = URL(url)
    host = parsed.raw_host or ""
    port = parsed.port
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        infos = await in_daemon_thread(lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM),
                                       name="hubd-speaker-dns")
        for address in dict.fromkeys(str(info[4][0]) for info in infos):
            problem = address_problem(address, allow_local=allow_local)
            if problem is not None:
                raise Refused(f"{host} resolves to {address}, {problem}") from None
        return
    problem = address_problem(host, allow_local=allow_local)
    if problem is not None:
        raise Refused(f"{host} is {problem}")


_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_BROADCAST = ipaddress.ip_address("255.255.255.255")


def _valid_host(host: str) -> bool:
    """An IP literal, or a DNS name as yarl encodes it (IDNA): a host name to hubd.config.model, counted without its
    trailing dot (253 characters and the dot is one)."""
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        pass
    else:
        return True
    name = host[:-1] if host.endswith(".") else host
    return not name.endswith(".") and is_host_name(name)
