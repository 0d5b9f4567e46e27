"""zeroconf: a listener on loopback only (what `hubd init` writes) is not advertised, and no mDNS socket is opened
that the LAN could query."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

import pytest
from unit_helpers import eventually

from hubd.advertiser import Advertiser

MDNS_PORT = 5353


def _own_udp_ports() -> set[int]:
    """The local ports of this process's UDP sockets."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/self/net/udp", "/proc/self/net/udp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
async def test_a_loopback_only_listener_is_not_advertised(host: str, caplog: pytest.LogCaptureFixture) -> None:
    advertiser = Advertiser(host=host, port=8081, name="hubd-test")
    caplog.set_level(logging.INFO, logger="hubd.advertiser")
    task = asyncio.create_task(advertiser.run())
    try:
        await eventually(lambda: "advertising" in caplog.text, "the advertiser's decision")
        assert f"zeroconf: not advertising port 8081: it listens on {host} only" in caplog.text
        assert MDNS_PORT not in _own_udp_ports()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await advertiser.stop()
