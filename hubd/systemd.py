"""systemd notification (sd_notify): READY=1, WATCHDOG=1, STOPPING=1.

Silent without NOTIFY_SOCKET. A failure to notify is logged, never raised: the service manager
is a spectator, not a dependency.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends datagrams to $NOTIFY_SOCKET."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        # A leading '@' means the abstract socket namespace.
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self._watchdog_usec = env.get("WATCHDOG_USEC", "")
        self._watchdog_pid = env.get("WATCHDOG_PID", "")

    @property
    def enabled(self) -> bool:
        """True when running under a service manager that listens."""
        return bool(self._address)

    def notify(self, message: str) -> None:
        """Send one state line, e.g. READY=1."""
        if not self._address:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self._address)
                sock.sendall(message.encode())
        except OSError as err:
            log.warning("sd_notify(%s) failed: %s", message, err)

    def watchdog_interval_s(self) -> float | None:
        """Half of WATCHDOG_USEC in seconds when the watchdog is on for this process, else None."""
        if not self._address or not self._watchdog_usec:
            return None
        if self._watchdog_pid and self._watchdog_pid != str(os.getpid()):
            return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            log.warning("ignoring WATCHDOG_USEC=%r: not an integer", self._watchdog_usec)
            return None
        return usec / 2 / 1_000_000 if usec > 0 else None
