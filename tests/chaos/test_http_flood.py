"""Slow HTTP clients under a low file-descriptor limit: hubd keeps answering, delivering and logging sanely.

The incident: 1,100 half-sent requests against the 1,024 descriptors systemd gives by default held every
descriptor, /healthz timed out, the outbox could not open a socket, and accept() logged a traceback per
try. Here a real hubd runs with RLIMIT_NOFILE 256 and the test opens three times that many half-sent
requests over loopback (a bounded number, all closed at the end).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hubd_proc import HubdProcess
from mosquitto import Mosquitto
from rig import LAMP, Rig

from hubd.web.connections import connection_cap

FD_LIMIT = 256
FLOOD = 3 * FD_LIMIT
CONNECT_BOUND_S = 5.0  # only to turn a connect that hangs into a failed one
# Half-sent requests: headers without their end, and a body shorter than its Content-Length.
HALF_HEADERS = b"GET /healthz HTTP/1.1\r\nHost: hub\r\nUser-Agent: slow\r\n"
HALF_BODY = (b"POST /vendor HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n"
             b'{"directive": ')


@contextmanager
def own_fd_limit(soft: int) -> Iterator[None]:
    """This process's soft RLIMIT_NOFILE set to `soft` (a child started meanwhile inherits it), then put back."""
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (before, hard))


def start_limited(hub: HubdProcess, limit: int) -> None:
    """Start hubd with RLIMIT_NOFILE `limit` (soft and hard), as `prlimit --nofile=L:L` would."""
    with own_fd_limit(limit):
        hub.start()
    assert hub.proc is not None
    resource.prlimit(hub.proc.pid, resource.RLIMIT_NOFILE, (limit, limit))


def open_fds(hub: HubdProcess) -> int:
    """How many file descriptors the hubd process has open."""
    assert hub.proc is not None
    return len(os.listdir(f"/proc/{hub.proc.pid}/fd"))


class Flood:
    """Connections that send part of a request and then nothing; hubd may close them, the test never does until
    `close()`."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._writers: list[asyncio.StreamWriter] = []

    async def open(self, count: int) -> int:
        """Open `count` more (64 connecting at a time); how many connected."""
        gate = asyncio.Semaphore(64)

        async def one(i: int) -> bool:
            async with gate:
                try:
                    async with asyncio.timeout(CONNECT_BOUND_S):
                        _, writer = await asyncio.open_connection("127.0.0.1", self._port)
                        writer.write(HALF_BODY if i % 2 else HALF_HEADERS)
                        await writer.drain()
                except (OSError, TimeoutError):
                    return False
                self._writers.append(writer)
                return True

        return sum(await asyncio.gather(*(one(i) for i in range(count))))

    def close(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()


def raise_own_fd_limit(needed: int) -> None:
    """Make sure this process can hold the flood (CI runners often start at 1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


async def healthz_ok(hub: HubdProcess) -> bool:
    status, _ = await hub.get("/healthz")
    return status == 200


async def test_a_slow_connection_flood_under_a_low_fd_limit_leaves_hubd_answering_and_delivering(
        make_rig: Callable[..., Awaitable[Rig]]) -> None:
    raise_own_fd_limit(FLOOD + 512)
    rig = await make_rig(start=lambda hub: start_limited(hub, FD_LIMIT))
    hub = rig.hub
    flood = Flood(hub.http_port)
    try:
        rig.publish("lamp-1", "config", LAMP, retain=True)
        await rig.bind()
        await rig.wait_events(1, "AddOrUpdateReport")
        cap = connection_cap(FD_LIMIT)
        assert await hub.metric("hubd_http_connections_max") == cap

        assert await flood.open(FLOOD) > FD_LIMIT  # more half-sent requests than hubd has descriptors
        await hub.wait_for(lambda: healthz_ok(hub), what="/healthz during the flood")
        rig.publish("lamp-1", "state", {"Switch": "On"})
        await rig.wait_events(1, "ChangeReport", endpoint="lamp-1")

        assert await hub.metric("hubd_http_connections") <= cap
        assert open_fds(hub) < FD_LIMIT
        # A second wave (this process's own descriptors stay under 1,024: paho's select() needs that), with an
        # event published while it comes in.
        flood.close()
        wave = asyncio.create_task(flood.open(FLOOD))
        rig.publish("lamp-1", "state", {"Switch": "Off"})
        changes = await rig.wait_events(2, "ChangeReport", endpoint="lamp-1")
        assert changes[1].message["payload"]["change"]["states"][0]["value"] == "Off"
        assert await wave > FD_LIMIT
        await hub.wait_for(lambda: healthz_ok(hub), what="/healthz after the second wave")
        assert await hub.metric("hubd_http_connections") <= cap
        assert await hub.metric("hubd_http_connections_closed_total", 'reason="evicted"') >= 2 * (FLOOD - cap)
        flood.close()
        assert hub.stop() == 0
    finally:
        flood.close()
        hub.kill()
    log = hub.log()
    assert log.count("Too many open files") < 20, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


async def test_accept_failures_for_want_of_descriptors_are_logged_once_and_hubd_recovers(
        tmp_path: Path, mosquitto: Mosquitto) -> None:
    raise_own_fd_limit(FLOOD + 512)
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    start_limited(hub, FD_LIMIT)
    flood = Flood(hub.http_port)
    try:
        await hub.wait_ready()
        assert hub.proc is not None
        # Something else took the descriptors: only a handful are left, far fewer than the connection cap.
        room = open_fds(hub) + 8
        resource.prlimit(hub.proc.pid, resource.RLIMIT_NOFILE, (room, FD_LIMIT))
        assert await flood.open(FD_LIMIT // 2) > 8
        await hub.wait_for(lambda: healthz_ok(hub), timeout_s=60, what="/healthz once accept() works again")
        failures = await hub.metric("hubd_http_accept_failures_total")
        assert failures >= 1
        flood.close()
        resource.prlimit(hub.proc.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))  # the soft limit back
        assert hub.stop() == 0
    finally:
        flood.close()
        hub.kill()
    log = hub.log()
    assert log.count("cannot accept HTTP connections: Too many open files") == 1, log[-3000:]
    assert log.count("Too many open files") < 20, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


async def test_a_gzip_header_on_a_body_that_is_not_gzip_is_a_json_400_on_every_post_route(
        tmp_path: Path, mosquitto: Mosquitto) -> None:
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        await hub.wait_ready()
        created = subprocess.run([sys.executable, "-m", "hubd", "webhook", "create", "-c", str(hub.config_path)],
                                 capture_output=True, text=True, timeout=30, check=True)
        token = json.loads(created.stdout)["token"]
        for path in ("/vendor", "/driver/command", f"/trigger/with/{token}", "/oauth/authorize"):
            status, body, _ = await hub.post(path, data=b'{"plain": "json"}',
                                             headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
            assert status == 400, (path, status, body)
            if path != "/oauth/authorize":  # the login form answers with its page, for a browser
                assert isinstance(body, dict) and "Content-Encoding" in body["error"], (path, body)
        assert await healthz_ok(hub)
        assert hub.stop() == 0
    finally:
        hub.kill()
    assert "Traceback" not in hub.log()
