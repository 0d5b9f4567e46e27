"""Which TCP peers count as local: loopback, the private ranges (RFC 1918), link-local and IPv6 ULA.

With one listener for everything (no `http.local_port`), the local routes answer only such peers.
The test is on the connection's own peer address, never on X-Forwarded-For. Pure.
"""

from __future__ import annotations

import ipaddress

# Spelled out rather than `is_private`, which also counts the documentation ranges (192.0.2.0/24, ...),
# 0.0.0.0/8 and others that a hub's own network never uses.
LOCAL_NETWORKS: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = tuple(
    ipaddress.ip_network(network) for network in (
        "127.0.0.0/8", "::1/128",  # loopback
        "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",  # RFC 1918
        "169.254.0.0/16", "fe80::/10",  # link-local
        "fc00::/7",  # IPv6 unique local addresses
    ))


def is_local_address(host: str | None) -> bool:
    """Whether `host` (a peer address as the socket gives it, e.g. `::ffff:10.0.0.2` or `fe80::1%eth0`) is local."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in LOCAL_NETWORKS)
