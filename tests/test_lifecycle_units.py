"""The supervisor, Backoff and the HTTP body limit, with small real components (no hubd process)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hubd_proc import NotifyListener, free_port

from hubd import lifecycle
from hubd.errors import ConfigError
from hubd.lifecycle import Backoff, Health, Supervisor
from hubd.metrics import Metrics
from hubd.systemd import Notifier
from hubd.web.server import HttpServer

FAILURE_BOUND_S = 10.0  # only to turn a hang into a failure; nothing here takes more than a fraction of it


class Part:
    """A component that writes what happens to it into a shared journal."""

    def __init__(self, name: str, journal: list[str], *, fail_start: bool = False, fail_run: bool = False) -> None:
        self.name = name
        self._journal = journal
        self._fail_start = fail_start
        self._fail_run = fail_run
        self.running = asyncio.Event()

    async def start(self) -> None:
        self._journal.append(f"start {self.name}")
        if self._fail_start:
            raise RuntimeError(f"{self.name} cannot start")

    async def run(self) -> None:
        self.running.set()
        if self._fail_run:
            raise RuntimeError(f"{self.name} broke")
        await asyncio.Event().wait()

    async def stop(self) -> None:
        self._journal.append(f"stop {self.name}")


class BadConfig(Part):
    """A component that finds a problem in its part of the config only when it starts."""

    async def start(self) -> None:
        self._journal.append(f"start {self.name}")
        raise ConfigError(["driver.accounts[1].username: 'anna' is listed twice"])


class SlowToCancel(Part):
    """A run() loop that ignores being cancelled until released (a library that swallows CancelledError)."""

    def __init__(self, name: str, journal: list[str]) -> None:
        super().__init__(name, journal)
        self.release = asyncio.Event()

    async def run(self) -> None:
        self.running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await self.release.wait()


@pytest.fixture(autouse=True)
def _unfreeze() -> Any:
    """The supervisor freezes the objects alive after start (for hubd's GC pauses): undo it in this process."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


async def supervise(parts: list[Part], *, stop_when_running: bool = True) -> int:
    supervisor = Supervisor(parts, Health(), Notifier({}))
    task = asyncio.create_task(supervisor.run())
    if stop_when_running:
        all_running = asyncio.ensure_future(asyncio.gather(*(p.running.wait() for p in parts)))
        async with asyncio.timeout(FAILURE_BOUND_S):
            await asyncio.wait([all_running, task], return_when=asyncio.FIRST_COMPLETED)
        all_running.cancel()
        supervisor.request_stop()
    async with asyncio.timeout(FAILURE_BOUND_S):
        return await task


async def test_start_in_order_stop_in_reverse() -> None:
    journal: list[str] = []
    parts = [Part(name, journal) for name in ("store", "mqtt", "http")]
    assert await supervise(parts) == 0
    assert journal == ["start store", "start mqtt", "start http", "stop http", "stop mqtt", "stop store"]


async def test_failed_start_stops_what_was_started_in_reverse() -> None:
    journal: list[str] = []
    parts = [Part("store", journal), Part("broker", journal), Part("mqtt", journal, fail_start=True),
             Part("http", journal)]
    assert await supervise(parts, stop_when_running=False) == 1
    assert journal == ["start store", "start broker", "start mqtt", "stop broker", "stop store"]


async def test_a_run_loop_that_raises_is_fatal() -> None:
    journal: list[str] = []
    parts = [Part("store", journal), Part("mqtt", journal, fail_run=True), Part("http", journal)]
    assert await supervise(parts, stop_when_running=False) == 1
    assert journal[-3:] == ["stop http", "stop mqtt", "stop store"]


async def test_stop_budget_covers_run_loops_slow_to_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run() loop that does not end when cancelled must not hold up the stop beyond the budget."""
    monkeypatch.setattr(lifecycle, "STOP_BUDGET_S", 0.2)
    journal: list[str] = []
    stuck = SlowToCancel("zeroconf", journal)
    try:
        assert await supervise([Part("store", journal), stuck]) == 0
        assert journal == ["start store", "start zeroconf", "stop zeroconf", "stop store"]
    finally:
        stuck.release.set()
        await asyncio.sleep(0)


async def test_a_config_error_found_at_start_exits_2_and_names_the_key(caplog: pytest.LogCaptureFixture) -> None:
    """Exit 2 like check-config: the unit's RestartPreventExitStatus=2 does not restart it in a loop."""
    journal: list[str] = []
    parts = [Part("store", journal), BadConfig("driver", journal), Part("http", journal)]
    assert await supervise(parts, stop_when_running=False) == lifecycle.EXIT_CONFIG_ERROR == 2
    assert journal == ["start store", "start driver", "stop store"]
    assert "driver.accounts[1].username: 'anna' is listed twice" in caplog.text
    assert "Traceback" not in caplog.text


async def test_the_start_timeout_is_extended_until_ready_then_ready_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd's watchdog starts only with READY=1: until then, a live loop extends TimeoutStartSec."""
    monkeypatch.setattr(lifecycle, "START_EXTEND_S", 0.3)
    notify = NotifyListener(tmp_path / "notify.sock")
    health = Health()
    health.require("mqtt", "broker down")
    supervisor = Supervisor([Part("mqtt", [])], health, Notifier({"NOTIFY_SOCKET": str(notify.path)}))
    task = asyncio.create_task(supervisor.run())
    try:
        extends = 0
        while extends < 3:  # sent again and again while not ready
            message = await notify.next_message(FAILURE_BOUND_S)
            assert message == "EXTEND_TIMEOUT_USEC=300000", message
            extends += 1
        health.set("mqtt", True, "connected")
        while (message := await notify.next_message(FAILURE_BOUND_S)) != "READY=1":
            assert message == "EXTEND_TIMEOUT_USEC=300000", message
        supervisor.request_stop()
        assert await notify.next_message(FAILURE_BOUND_S) == "STOPPING=1"  # and no EXTEND after READY=1
        async with asyncio.timeout(FAILURE_BOUND_S):
            assert await task == 0
    finally:
        task.cancel()
        notify.close()


def test_backoff_grows_to_the_cap_with_equal_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    backoff = Backoff(initial_s=0.5, cap_s=4.0, factor=2.0)
    monkeypatch.setattr(lifecycle.random, "uniform", lambda low, high: high)  # the top of the jitter range
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    backoff.reset()
    monkeypatch.setattr(lifecycle.random, "uniform", lambda low, high: low)  # the bottom: half the ceiling
    assert [backoff.next_delay() for _ in range(5)] == [0.25, 0.5, 1.0, 2.0, 2.0]


def test_backoff_jitter_stays_within_half_and_full_ceiling() -> None:
    backoff = Backoff(initial_s=1.0, cap_s=8.0)
    for ceiling in (1.0, 2.0, 4.0, 8.0, 8.0, 8.0):
        delays = []
        for _ in range(200):
            probe = Backoff(initial_s=1.0, cap_s=8.0)
            probe._attempt = backoff._attempt
            delays.append(probe.next_delay())
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (ceiling, min(delays), max(delays))
        assert len(set(delays)) > 1  # jittered, not fixed
        backoff.next_delay()


def test_backoff_reset_starts_again() -> None:
    backoff = Backoff(initial_s=1.0, cap_s=60.0)
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    assert 0.5 <= backoff.next_delay() <= 1.0


class _Echo:
    """A route that reads its whole body, as every POST route does."""

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/echo", self._echo)]

    async def _echo(self, request: web.Request) -> web.Response:
        return web.json_response({"length": len(await request.read())})


@pytest.fixture
async def http() -> AsyncIterator[str]:
    server = HttpServer(host="127.0.0.1", port=free_port(), max_body_bytes=1024, health=Health(), metrics=Metrics(),
                        sources=[_Echo()])
    await server.start()
    yield f"http://127.0.0.1:{server.bound_port}"
    await server.stop()


async def test_too_large_body_is_a_json_413(http: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{http}/echo", data=b"x" * 1024) as response:
            assert (response.status, await response.json()) == (200, {"length": 1024})
        async with session.post(f"{http}/echo", data=b"x" * 1025) as response:
            assert response.status == 413
            assert response.content_type == "application/json"
            body = await response.json()
        assert "1024 bytes (http.max_body_bytes)" in body["error"], body
