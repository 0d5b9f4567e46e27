"""Which client a request came from: the peer's address, or behind a trusted proxy the client it names.

`X-Forwarded-For` is honoured only when the peer is in `http.trusted_proxies`, and then read from
the right: each hop a trusted proxy added is believed, and the first address not of a trusted proxy
is the client. Anything to the left of it was written by the client itself and is ignored, so
a client cannot pick the address its failures are counted against. `throttle_key` groups IPv6
clients by their /64, the block one household or host usually gets. Pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

UNKNOWN = "unknown"
IPV6_PREFIX = 64
FORWARDED_FOR = "X-Forwarded-For"


@dataclass(frozen=True, slots=True)
class TrustedProxies:
    """The networks whose requests may say, in X-Forwarded-For, which client they forward."""

    networks: tuple[IpNetwork, ...] = ()

    def trusts(self, address: IpAddress) -> bool:
        """Whether `address` is one of the trusted proxies."""
        return any(address in network for network in self.networks)


def parse_trusted_proxies(
    entries: Iterable[str], key: str = "http.trusted_proxies"
) -> tuple[TrustedProxies, list[str]]:
    """The networks of `entries` (addresses or CIDR networks), and one `key[i]: why` per entry that is neither."""
    networks: list[IpNetwork] = []
    problems: list[str] = []
    for i, entry in enumerate(entries):
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=True))
            continue
        except ValueError:
            pass
        try:
            loose = ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            problems.append(f"{key}[{i}]: {entry!r} is not an IP address or network; give the proxy's address "
                            "(e.g. 127.0.0.1 or ::1) or its network (e.g. 10.0.0.0/24)")
        else:
            problems.append(f"{key}[{i}]: {entry!r} has host bits set; write the network as {loose}, or the "
                            "proxy's address alone")
    return TrustedProxies(tuple(networks)), problems


def client_address(peer: str | None, forwarded_for: Sequence[str], trusted: TrustedProxies) -> str:
    """The client's address as text: the peer's, or through trusted proxies the one X-Forwarded-For names.

    `forwarded_for` holds every X-Forwarded-For header of the request, in order. A hop that is not an
    address ends the walk at the trusted proxy that passed it on.
    """
    current = _address(peer) if peer else None
    if current is None:
        return peer or UNKNOWN
    if trusted.networks:
        hops = [hop for header in forwarded_for for hop in header.split(",")]
        for hop in reversed(hops):
            if not trusted.trusts(current):
                break
            named = _address(hop)
            if named is None:
                break
            current = named
    return str(current)


def throttle_key(address: str) -> str:
    """What failures are counted against: the address, or for IPv6 its /64 network."""
    parsed = _address(address)
    if parsed is None:
        return address
    if parsed.version == 6:
        return str(ipaddress.ip_network(f"{parsed}/{IPV6_PREFIX}", strict=False))
    return str(parsed)


def _address(text: str) -> IpAddress | None:
    """An address from `1.2.3.4`, `1.2.3.4:80`, `::1`, `[::1]` or `[::1]:80`; IPv4-mapped IPv6 as IPv4; else None."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # IPv4 with a port (an IPv6 address has at least two colons)
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.scope_id:
            return ipaddress.IPv6Address(text.partition("%")[0])
    return address
