"""How many HTTP connections hubd may hold at once, from its file-descriptor limit (pure but for reading it).

Imports nothing of hubd.
"""

from __future__ import annotations

import resource

# File descriptors HTTP leaves to the rest of hubd: SQLite (database, WAL, shared memory), the MQTT
# connection, up to 64 outbox sends in flight (outbox.MAX_IN_FLIGHT), zeroconf, the event loop, the log.
RESERVED_FDS = 96
MAX_CONNECTIONS = 1024  # a hub's clients are a platform, a few browsers and automations
MIN_CONNECTIONS = 8


def fd_limit() -> int:
    """The soft RLIMIT_NOFILE: how many file descriptors this process may have open."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def connection_cap(limit: int, configured: int | None = None) -> int:
    """HTTP connections allowed at once: half of the descriptors left after RESERVED_FDS, within bounds.

    The other half is headroom: a batch of accepts whose evictions are not released yet, the embedded
    broker's clients. A configured value lowers the cap, never raises it past what the limit allows.
    """
    derived = max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, (limit - RESERVED_FDS) // 2))
    return derived if configured is None else min(configured, derived)
