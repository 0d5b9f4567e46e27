"""Process lifecycle: the Component protocol, the Supervisor, readiness and Backoff.

The supervisor starts components in order, runs their `run()` loops as named tasks, and stops them
in reverse. It is one of the places that catch exceptions (ARCHITECTURE.md, "Where errors are caught"): a run loop that
raises is fatal and the process exits non-zero so systemd restarts it. Not a TaskGroup: a TaskGroup
waits without limit for a task that is slow to cancel, and the whole stop (cancelling the loops,
then every stop()) must fit in STOP_BUDGET_S, under the 5 s hubd promises (the unit's TimeoutStopSec=10 leaves room).
SIGHUP (`systemctl reload hubd`) calls `reload()` on every started component that has one (`Reloadable`), one
SIGHUP after the other, from a task of its own: a failed reload is logged, never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import random
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hubd.errors import ConfigError
from hubd.systemd import Notifier

log = logging.getLogger(__name__)

STOP_BUDGET_S = 4.0
# While not ready, each EXTEND_TIMEOUT_USEC gives systemd's start timeout this much more time.
START_EXTEND_S = 30.0
# The exit code for a configuration error, at `check-config` and at `run` alike: restarting cannot help.
EXIT_CONFIG_ERROR = 2
# hubd cannot start on this machine as it is (its data directory not writable, its port taken): a restart
# cannot fix it, so the unit's RestartPreventExitStatus= lists it beside 2 (sysexits.h's EX_CONFIG).
EXIT_CANNOT_START = 78


class Component(Protocol):
    """A part of the daemon with a start/run/stop life; `__init__` only stores its arguments."""

    name: str

    async def start(self) -> None:
        """Acquire resources and fail fast; spawn no tasks."""

    async def run(self) -> None:
        """The long-lived loop; only the supervisor calls it."""

    async def stop(self) -> None:
        """Release resources; idempotent and quick."""


@runtime_checkable
class Reloadable(Protocol):
    """A component that takes SIGHUP: it reads what it can change live again (the config file)."""

    async def reload(self) -> None:
        """Apply what changed; log, never raise, what cannot be applied."""


class Clock(Protocol):
    """Wall-clock and monotonic time, replaceable in tests."""

    def time(self) -> float:
        """Seconds since the epoch."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        return time.monotonic()


@dataclass
class _Check:
    ok: bool
    detail: str


class Health:
    """Readiness flags that components set; /healthz and READY=1 read them."""

    def __init__(self) -> None:
        self._checks: dict[str, _Check] = {}
        self._changed = asyncio.Event()

    def require(self, name: str, detail: str = "starting") -> None:
        """Declare a check that must pass before hubd is ready."""
        self._checks[name] = _Check(False, detail)

    def set(self, name: str, ok: bool, detail: str = "") -> None:
        """Update a check."""
        self._checks[name] = _Check(ok, detail or ("ok" if ok else "not ready"))
        self._changed.set()

    @property
    def ready(self) -> bool:
        """True when every declared check passes."""
        return all(check.ok for check in self._checks.values())

    def snapshot(self) -> dict[str, dict[str, object]]:
        """Every check with its state, for /healthz."""
        return {name: {"ok": c.ok, "detail": c.detail} for name, c in self._checks.items()}

    def not_ready(self) -> list[str]:
        """Names and details of failing checks."""
        return [f"{name}: {c.detail}" for name, c in self._checks.items() if not c.ok]

    async def wait_ready(self) -> None:
        """Return once every check passes."""
        while not self.ready:
            self._changed.clear()
            await self._changed.wait()


class Backoff:
    """Exponential backoff with full jitter, a cap, and reset on success."""

    def __init__(self, *, initial_s: float = 0.5, cap_s: float = 60.0, factor: float = 2.0) -> None:
        self._initial = initial_s
        self._cap = cap_s
        self._factor = factor
        self._attempt = 0

    def next_delay(self) -> float:
        """The delay before the next attempt; grows with each call."""
        ceiling = min(self._cap, self._initial * self._factor**self._attempt)
        self._attempt += 1
        # "equal jitter": never less than half the ceiling, so retries do not hammer a dead peer.
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def reset(self) -> None:
        """Start again from the initial delay."""
        self._attempt = 0

    async def sleep(self) -> None:
        """Sleep for the next delay."""
        await asyncio.sleep(self.next_delay())


def _freeze_long_lived_objects() -> None:
    """Leave what exists once every component has started out of the cyclic collector's passes.

    Modules, the config and the device table live as long as the process; scanning them made each full
    collection stall the event loop for 50-70 ms every few seconds under load (BENCHMARKS.md).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(700, 10, 100)  # full passes 10x rarer than the default (700, 10, 10)


class Supervisor:
    """Starts components in order, runs them, stops them in reverse; owns signals and sd_notify."""

    def __init__(self, components: Sequence[Component], health: Health, notifier: Notifier) -> None:
        self._components = list(components)
        self._health = health
        self._notifier = notifier
        self._stopping_sent = False
        self._stop = asyncio.Event()
        self._reload = asyncio.Event()

    def request_stop(self) -> None:
        """Stop as if SIGTERM had arrived (used by `hubd demo`)."""
        self._stop.set()

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT (exit code 0), a fatal component error (exit code 1) or a config
        error a component found while starting (exit code 2).

        The whole stop (cancelling the run() loops, then every stop()) fits in STOP_BUDGET_S.
        """
        loop = asyncio.get_running_loop()
        stop = self._stop
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload.set)  # taken up once running; never the default (exit)
        started: list[Component] = []
        code = 0
        deadline: float | None = None
        try:
            for component in self._components:
                if stop.is_set():
                    break
                log.debug("starting %s", component.name)
                await component.start()
                started.append(component)
            if not stop.is_set():
                _freeze_long_lived_objects()
                code, deadline = await self._run_all(started, stop)
        except ConfigError as err:
            # Found only once a component looked at it (e.g. a bad password hash in driver.accounts):
            # exit 2, which the unit's RestartPreventExitStatus keeps from being restarted in a loop.
            for problem in err.problems:
                log.critical("config error: %s", problem)
            code = EXIT_CONFIG_ERROR
        except Exception as err:
            reason = cannot_start(err)
            if reason is None:
                log.critical("hubd failed to start", exc_info=True)
                code = 1
            else:
                log.critical("%s", reason)
                code = EXIT_CANNOT_START
        finally:
            if not self._stopping_sent:
                self._notify_stopping()
            await self._stop_all(started, deadline if deadline is not None else time.monotonic() + STOP_BUDGET_S)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        log.info("hubd stopped (exit code %d)", code)
        return code

    async def _run_all(self, started: list[Component], stop: asyncio.Event) -> tuple[int, float]:
        """Run every run() loop until a stop request or a fatal error; (exit code, stop deadline)."""
        tasks: set[asyncio.Task[Any]] = {asyncio.create_task(c.run(), name=c.name) for c in started}
        tasks.add(asyncio.create_task(self._announce_ready(), name="ready"))
        tasks.add(asyncio.create_task(self._watchdog(), name="watchdog"))
        tasks.add(asyncio.create_task(self._reloads(started), name="reloads"))
        stop_waiter = asyncio.create_task(stop.wait(), name="signals")
        code = 0
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending | {stop_waiter}, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(stop_waiter)
                failed = [t for t in done if t is not stop_waiter and not t.cancelled() and t.exception()]
                for task in failed:
                    log.critical("fatal error in %s, exiting so the service manager restarts hubd", task.get_name(),
                                 exc_info=task.exception())
                if failed:
                    code = 1
                    break
                if stop_waiter in done:
                    break
        finally:
            # STOPPING=1 first thing on stop, before anything is torn down.
            self._notify_stopping()
            deadline = time.monotonic() + STOP_BUDGET_S
            if stop.is_set():
                log.info("stop requested")
            await self._cancel(tasks | {stop_waiter}, deadline)
        return code, deadline

    async def _cancel(self, tasks: set[asyncio.Task[Any]], deadline: float) -> None:
        """Cancel the run() loops and wait for them, but not past `deadline` (the rest of the stop needs time too)."""
        running = {task for task in tasks if not task.done()}
        for task in running:
            task.cancel()
        if not running:
            return
        # Half of what is left: the components' stop() calls get the other half.
        timeout = max(0.1, (deadline - time.monotonic()) / 2)
        _, stuck = await asyncio.wait(running, timeout=timeout)
        for task in stuck:
            log.error("%s did not finish within %.1f s of being cancelled; carrying on with the stop",
                      task.get_name(), timeout)
        for task in running - stuck:
            if not task.cancelled() and task.exception() is not None:
                log.error("%s failed while stopping", task.get_name(), exc_info=task.exception())

    def _notify_stopping(self) -> None:
        self._stopping_sent = True
        self._notifier.notify("STOPPING=1")

    async def _announce_ready(self) -> None:
        # Not ready for as long as the broker is down. systemd's watchdog only starts with READY=1, so
        # until then the unit's TimeoutStartSec is what catches a hung start: keep extending it from
        # this event loop, which a hung loop stops doing.
        while not self._health.ready:
            self._notifier.notify(f"EXTEND_TIMEOUT_USEC={int(START_EXTEND_S * 1_000_000)}")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(START_EXTEND_S / 3):
                    await self._health.wait_ready()
        log.info("hubd is ready")
        self._notifier.notify("READY=1")
        await asyncio.Event().wait()

    async def _reloads(self, started: Sequence[Component]) -> None:
        """On each SIGHUP, every started component that takes it reloads, in start order."""
        while True:
            await self._reload.wait()
            self._reload.clear()
            for component in started:
                if not isinstance(component, Reloadable):
                    continue
                try:
                    await component.reload()
                except Exception:  # a reload must never take hubd down
                    log.error("%s failed to reload; it keeps what it had", component.name, exc_info=True)

    async def _watchdog(self) -> None:
        interval = self._notifier.watchdog_interval_s()
        if interval is None:
            await asyncio.Event().wait()
            return
        while True:
            # This task runs on the event loop, so a ping proves the loop is alive.
            self._notifier.notify("WATCHDOG=1")
            await asyncio.sleep(interval)

    async def _stop_all(self, started: list[Component], deadline: float) -> None:
        for component in reversed(started):
            remaining = max(0.1, deadline - time.monotonic())
            try:
                async with asyncio.timeout(remaining):
                    await component.stop()
            except TimeoutError:
                log.error("%s did not stop within %.1f s", component.name, remaining)
            except Exception:
                log.error("%s failed to stop cleanly", component.name, exc_info=True)


def cannot_start(err: BaseException) -> str | None:
    """One line with the fix for a start that no restart can mend (a data directory hubd may not write, a port
    in use), or None for any other failure (logged with its traceback)."""
    chain: list[BaseException] = []
    cause: BaseException | None = err
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(isinstance(found, OSError) and found.errno == errno.EADDRINUSE for found in chain):
        # hubd.web.server's message names the address: "cannot listen on 127.0.0.1:8080: Address already in use"
        return (f"hubd {err}: is hubd already running? (systemctl status hubd) "
                "Else choose another http.port or http.local_port")
    for found in chain:
        if isinstance(found, OSError) and found.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            where = found.filename or "its data directory"
            return (f"hubd cannot write {where}: {found.strerror}: its directory must be writable by the user hubd "
                    "runs as (under systemd the unit's StateDirectory, /var/lib/hubd, is; by hand, run hubd as "
                    "that directory's owner or choose another storage.path)")
    return None
