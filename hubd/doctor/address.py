"""The `public-url` and `dns` checks: what `http.public_url` names, and what its host name resolves to here.
A name that resolves only to loopback or private addresses is a WARN: right with split DNS at home, wrong for
the platform on the internet.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from hubd.config.model import HttpConfig
from hubd.doctor.report import Result, failed, passed, warned
from hubd.driver.urls import origin_key
from hubd.threads import in_daemon_thread

PUBLIC_URL = "public-url"
DNS = "dns"
DNS_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class PublicAddress:
    """`http.public_url` taken apart."""

    url: str  # without a trailing slash
    scheme: str
    host: str  # an IPv6 address without its brackets
    port: int

    @property
    def hostport(self) -> str:
        """`host:port` as a person writes it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def check_public_url(http: HttpConfig) -> tuple[Result, PublicAddress | None]:
    """`http.public_url` is set and names a host."""
    if not http.public_url:
        return failed(PUBLIC_URL, "http.public_url is not set: the platform and your phone reach hubd at the "
                                  "https:// URL your reverse proxy or tunnel gives it; set it (docs/reverse-proxy.md)"
                      ), None
    key = origin_key(http.public_url)
    if key is None:
        try:
            urlsplit(http.public_url).port  # noqa: B018 (read for the ValueError: a bad port, a bad IPv6 address)
        except ValueError as err:
            return failed(PUBLIC_URL, f"http.public_url {http.public_url!r} is not a URL ({err})"), None
        return failed(PUBLIC_URL, f"http.public_url {http.public_url!r} names no host; write it as "
                                  "https://hub.example.com"), None
    address = PublicAddress(http.public_url.rstrip("/"), *key)
    return passed(PUBLIC_URL, f"{address.url} (host {address.host}, port {address.port})"), address


async def check_dns(address: PublicAddress) -> tuple[Result, bool]:
    """The host resolves; a WARN when only to addresses the internet cannot reach. Also whether it resolved."""
    host = address.host
    try:
        infos = await asyncio.wait_for(in_daemon_thread(
            lambda: socket.getaddrinfo(host, address.port, type=socket.SOCK_STREAM), name="doctor-dns"),
            DNS_TIMEOUT_S)
    except socket.gaierror as err:
        return failed(DNS, f"{host} does not resolve ({err.strerror}): create its DNS record (an A record to your "
                           "home's public address, or your dynamic-DNS name), or correct http.public_url"), False
    except TimeoutError:
        return failed(DNS, f"no answer for {host} within {DNS_TIMEOUT_S:.0f} s: check this machine's DNS server "
                           "(/etc/resolv.conf)"), False
    found = sorted({str(info[4][0]) for info in infos})
    public = [a for a in found if _is_public(a)]
    shown = ", ".join(found)
    if public:
        return passed(DNS, f"{host} resolves to {shown}"), True
    return warned(DNS, f"{host} resolves here only to {shown} (loopback or private): the platform on the internet "
                       "cannot reach that; fine if your router answers this name with a LAN address (split DNS) "
                       "while public DNS has your home's public address, else point the record there"), True


def _is_public(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_global
    except ValueError:
        return False
