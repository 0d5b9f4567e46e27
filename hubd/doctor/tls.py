"""The `tls` check: a handshake with the public URL's host as the platform makes it (this machine's CAs, or
those SSL_CERT_FILE names): a chain valid for the host, and how long it has left. Plain http is a WARN on a
loopback address and a FAIL anywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from dataclasses import dataclass
from typing import Any

from hubd.doctor.address import PublicAddress
from hubd.doctor.report import Result, failed, passed, warned
from hubd.driver.urls import is_loopback

TLS = "tls"
CONNECT_TIMEOUT_S = 10.0
EXPIRY_WARN_DAYS = 14
DAY_S = 86400.0
# OpenSSL's X509_V_ERR_* codes, as ssl.SSLCertVerificationError.verify_code carries them.
_NOT_YET_VALID, _EXPIRED, _SELF_SIGNED = 9, 10, 18
_UNTRUSTED = frozenset({19, 20, 21})  # self-signed CA in the chain, issuer unknown, leaf not verifiable
_HOSTNAME_MISMATCH = 62
# Many home routers do not take their own public address from inside the LAN ("NAT loopback"), so the doctor on
# the Pi may fail where the platform would not.
_HAIRPIN = ("if your router does not let the LAN reach your home's public address (no NAT loopback), have your "
            "router's DNS answer this name with the Pi's LAN address (split DNS), or check from outside")
_RENEW = ("Caddy renews 30 days ahead by itself when Let's Encrypt reaches it on port 80 or 443: is it running, "
          "is the port forwarded? (`journalctl -u caddy`)")


@dataclass(frozen=True, slots=True)
class TlsOutcome:
    """The check's result; whether something answered TLS there, and whether its certificate holds."""

    result: Result
    reachable: bool
    verified: bool


async def check_tls(address: PublicAddress) -> TlsOutcome:
    """A valid chain for the host with more than EXPIRY_WARN_DAYS left; plain http only on loopback."""
    if address.scheme == "http":
        if is_loopback(address.host):
            return TlsOutcome(warned(TLS, f"plain http to {address.host}, a loopback address: only this machine "
                                          "reaches it, for trying hubd out; the platform needs an https:// "
                                          "public_url (docs/reverse-proxy.md)"), True, True)
        return TlsOutcome(failed(TLS, f"plain http to {address.host}: the platform calls hubd over https only; put "
                                      "a reverse proxy with a certificate, or a tunnel, in front of hubd and set "
                                      "http.public_url to its https:// URL (docs/reverse-proxy.md)"), True, True)
    try:
        cert = await _handshake(address, ssl.create_default_context())
    except ssl.SSLCertVerificationError as err:
        return TlsOutcome(failed(TLS, await _refusal(address, err)), True, False)
    except ssl.SSLError as err:
        return TlsOutcome(failed(TLS, f"no TLS handshake with {address.hostport} ({err.reason or err}): is that the "
                                      "proxy's https port, and does the proxy have a certificate for "
                                      f"{address.host}?"), False, False)
    except TimeoutError:
        return TlsOutcome(failed(TLS, f"no answer from {address.hostport} within {CONNECT_TIMEOUT_S:.0f} s: check "
                                      f"the router's port forward (port {address.port} to this machine) and any "
                                      f"firewall; {_HAIRPIN}"), False, False)
    except OSError as err:
        return TlsOutcome(failed(TLS, f"nothing answers on {address.hostport} ({err.strerror or err}): is the proxy "
                                      f"running, and is port {address.port} forwarded to it? {_HAIRPIN}"), False,
                          False)
    not_after = ssl.cert_time_to_seconds(str(cert["notAfter"]))
    days = (not_after - time.time()) / DAY_S
    when = time.strftime("%Y-%m-%d", time.gmtime(not_after))
    issuer = _name(cert.get("issuer", ()))
    if days < EXPIRY_WARN_DAYS:
        return TlsOutcome(warned(TLS, f"the certificate for {address.host} expires in {days:.0f} days ({when}): "
                                      f"renew it; {_RENEW}"), True, True)
    return TlsOutcome(passed(TLS, f"a valid chain for {address.host} (issued by {issuer}), {days:.0f} days left "
                                  f"(until {when})"), True, True)


async def _handshake(address: PublicAddress, context: ssl.SSLContext) -> dict[str, Any]:
    """The peer's certificate (as `getpeercert()` gives it) after a handshake."""
    async with asyncio.timeout(CONNECT_TIMEOUT_S):
        _, writer = await asyncio.open_connection(address.host, address.port, ssl=context,
                                                  server_hostname=address.host)
    cert = writer.get_extra_info("peercert") or {}
    writer.close()
    with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
        async with asyncio.timeout(1.0):
            await writer.wait_closed()
    return dict(cert)


async def _refusal(address: PublicAddress, err: ssl.SSLCertVerificationError) -> str:
    """Why the chain does not hold, and the fix."""
    code, message = err.verify_code, err.verify_message
    if code == _HOSTNAME_MISMATCH:
        names = await _names_on_certificate(address)
        return (f"the certificate is for {names or 'other names'}, not {address.host}: get one for {address.host} "
                f"(Caddy: the site address in the Caddyfile must be {address.host})")
    if code == _EXPIRED:
        return f"the certificate for {address.host} has expired: renew it; {_RENEW}"
    if code == _NOT_YET_VALID:
        return ("the certificate is not valid yet: is this machine's clock right? (`timedatectl`; see the clock "
                "check)")
    if code == _SELF_SIGNED:
        return ("the certificate is self-signed: the platform trusts only certificates from a public CA; let Caddy "
                "get one from Let's Encrypt")
    if code in _UNTRUSTED:
        return (f"the chain does not lead to a CA this machine trusts ({message}): use a certificate from a public "
                "CA, and have the proxy send the whole chain (fullchain.pem, not cert.pem)")
    return f"the certificate was refused: {message}"


async def _names_on_certificate(address: PublicAddress) -> str:
    """The names a (validly signed) certificate is for, from a handshake that does not check the host name."""
    context = ssl.create_default_context()
    context.check_hostname = False
    try:
        cert = await _handshake(address, context)
    except (OSError, TimeoutError, ssl.SSLError):
        return ""
    names = [str(value) for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "IP Address")]
    return ", ".join(names)


def _name(rdns: object) -> str:
    """An issuer's organisation (or common name) from `getpeercert()`'s nested tuples."""
    fields = {key: value for rdn in rdns for key, value in rdn} if isinstance(rdns, tuple) else {}
    return str(fields.get("organizationName") or fields.get("commonName") or "an unnamed CA")
