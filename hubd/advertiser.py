"""The zeroconf component: advertises `_hubd._tcp.local.` so tools on the LAN can find the hub.

Owns (and closes) its AsyncZeroconf. Registration runs in `run()` because it takes over a second;
a network without multicast only costs a warning, never the daemon. A listener on loopback only is not
advertised at all: nothing on the LAN could reach it, and zeroconf's socket would still answer the LAN.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

from zeroconf import InterfaceChoice, IPVersion
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from hubd import __version__
from hubd.threads import in_daemon_thread

log = logging.getLogger(__name__)

SERVICE_TYPE = "_hubd._tcp.local."


class Advertiser:
    """Registers hubd's HTTP port over mDNS."""

    name = "zeroconf"

    def __init__(self, *, host: str, port: int, name: str) -> None:
        self._host = host
        self._port = port
        self._name = name
        self._zc: AsyncZeroconf | None = None
        self._info: AsyncServiceInfo | None = None

    async def start(self) -> None:
        """Nothing to acquire before run()."""

    async def run(self) -> None:
        """Register, then stay registered until stopped; nothing for a loopback-only listener."""
        if self._is_loopback():
            log.info("zeroconf: not advertising port %d: it listens on %s only, which the LAN cannot reach",
                     self._port, self._host)
            await asyncio.Event().wait()
            return
        # A name lookup can block for seconds: not on the loop, and not in the executor asyncio.run() waits for.
        addresses = await in_daemon_thread(self._lan_addresses, name="hubd-zeroconf-lookup")
        self._info = AsyncServiceInfo(
            SERVICE_TYPE, f"{self._name}.{SERVICE_TYPE}", port=self._port, addresses=addresses,
            properties={"version": __version__, "path": "/"}, server=f"{socket.gethostname()}.local.",
        )
        try:
            self._zc = AsyncZeroconf(interfaces=InterfaceChoice.All, ip_version=IPVersion.V4Only)
            await self._zc.async_register_service(self._info, allow_name_change=True)
            log.info("advertising %s on port %d", self._info.name, self._port)
        except (OSError, RuntimeError) as err:
            log.warning("zeroconf advertisement unavailable: %s", err)
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Unregister and close; idempotent."""
        zc, self._zc = self._zc, None
        if zc is None:
            return
        try:
            if self._info is not None:
                await zc.async_unregister_service(self._info)
        finally:
            await zc.async_close()

    def _is_loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self._host).is_loopback
        except ValueError:
            return self._host == "localhost"

    def _lan_addresses(self) -> list[bytes]:
        """Blocking: the address to advertise (the host's own when listening on every interface)."""
        host = socket.gethostname() if self._host in ("0.0.0.0", "", "::") else self._host
        try:
            return [socket.inet_aton(socket.gethostbyname(host))]
        except OSError:
            return [socket.inet_aton("127.0.0.1")]
