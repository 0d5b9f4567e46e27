"""`RenderProcess`: hubd's side of the render process, where every template Jinja must run is compiled and
rendered.

A template comes from a device's discovery config, so it is untrusted: a regex that backtracks for ever, three
nested loops, a filter that allocates gigabytes. In hubd's own process any of these would stall the event loop
(one C call is never interrupted) or exhaust its memory, and a message that is never acknowledged comes back
after every restart. So templates render in a process of their own (hubd.dialects.homeassistant.worker) with a
memory cap, and hubd waits for each answer at most `DEADLINE_S`: past it, the process is killed and a new one
started, and the template is put aside (`QUARANTINE_S`): its later renders fail at once with the same reason,
so one template costs one deadline, not one per message. Each failure is a `TemplateError` (the entity's message
is refused, a problem on the status page); hubd goes on.

The call is synchronous (a dialect decodes in the bridge's loop): a render costs a round trip to the process
(tens of microseconds) and never more than DEADLINE_S. The commonest value templates never come here
(hubd.dialects.homeassistant.direct reads them in-process). The process is started on first use or by `prepare()`
(so it is ready before the first message), ends with hubd (its stdin closes), and is stopped by `close()`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from hubd.dialects.homeassistant.sandbox import (
    FRAME_HEAD,
    MAX_FRAME_BYTES,
    RENDER_BUDGET_S,
    TemplateError,
    frame_bytes,
    frame_message,
)

log = logging.getLogger(__name__)

DEADLINE_S = RENDER_BUDGET_S + 0.25  # the process's own checks answer within the budget; this is for one C call
START_TIMEOUT_S = 20.0  # a Raspberry Pi Zero imports Jinja in about a second
QUARANTINE_S = 600.0
MEMORY_MB = 128
MAX_QUARANTINED = 1_000
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])  # where `hubd` is importable from, for the process


class RenderProcess:
    """One render process at a time, started again whenever the last one had to be stopped."""

    def __init__(self, *, deadline_s: float = DEADLINE_S, memory_mb: int = MEMORY_MB,
                 quarantine_s: float = QUARANTINE_S) -> None:
        self._deadline_s = deadline_s
        self._memory_mb = memory_mb
        self._quarantine_s = quarantine_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._buffer = b""
        self._quarantined: dict[str, tuple[float, str]] = {}  # source → (until, why)
        self.starts = 0  # processes started, for tests and the status line
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def pid(self) -> int | None:
        """The running process's pid, or None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def prepare(self) -> None:
        """Start the process now, without waiting for it (so it is ready when the first template comes)."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()

    def render(self, request: dict[str, Any]) -> str:
        """The text a template renders for a request (`{"source", "value"}` or `{"source", "variables"}`)."""
        source = str(request.get("source", ""))
        held = self._quarantined.get(source)
        if held is not None:
            if time.monotonic() < held[0]:
                raise TemplateError(f"{held[1]}; hubd skips this template for {self._quarantine_s / 60:.0f} minutes "
                                    "after that")
            del self._quarantined[source]
        answer = self._ask(source, frame_bytes(request))
        text = answer.get("text")
        if isinstance(text, str):
            return text
        error = str(answer.get("error") or "no answer")
        if answer.get("overtime") is True:
            self._put_aside(source, error)
        raise TemplateError(error)

    def stats(self) -> dict[str, Any]:
        """What the running process has done: `compiled` (sources) and `renders`."""
        return self._ask("", frame_bytes({"stats": True}))

    def close(self) -> None:
        """Stop the process (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None

    # The process.

    def _ask(self, source: str, frame: bytes) -> dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        sent = False
        try:
            if not self._ready:
                ready = self._read(proc, time.monotonic() + START_TIMEOUT_S)
                if ready is None or "ready" not in ready:
                    raise _Lost(f"did not start within {START_TIMEOUT_S:.0f} s")
                self._ready = True
            deadline = time.monotonic() + self._deadline_s
            self._write(proc, frame, deadline)
            sent = True
            answer = self._read(proc, deadline)
        except _Lost as lost:
            if sent:  # it ended on this template (the kernel's OOM killer, say): not this template again soon
                self._put_aside(source, f"the render process {lost} while rendering it")
            self._restart(f"the render process {lost}")
            raise TemplateError(f"the template could not be rendered: the render process {lost}") from None
        if answer is None:
            self._put_aside(source, f"took longer than {self._deadline_s:.2f} s")
            self._restart(f"a template took longer than {self._deadline_s:.2f} s")
            raise TemplateError(f"took longer than {self._deadline_s:.2f} s, so hubd stopped it")
        return answer

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "hubd.dialects.homeassistant.worker", "--memory-mb", str(self._memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
            start_new_session=True)  # a Ctrl-C in hubd's terminal is hubd's to handle, not the process's
        assert self._proc.stdin is not None and self._proc.stdout is not None
        os.set_blocking(self._proc.stdin.fileno(), False)
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._ready = False
        self._buffer = b""
        self.starts += 1
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _stop, self._proc)

    def _restart(self, why: str) -> None:
        proc, self._proc = self._proc, None
        status = _stop(proc) if proc is not None else None
        log.warning("template render process stopped: %s%s; starting another", why,
                    f" (it ended with {_ended(status)})" if status not in (None, -signal.SIGKILL) else "")
        self._start()

    def _put_aside(self, source: str, why: str) -> None:
        if len(self._quarantined) >= MAX_QUARANTINED:
            self._quarantined.pop(next(iter(self._quarantined)))
        self._quarantined[source] = (time.monotonic() + self._quarantine_s, why)

    def _write(self, proc: subprocess.Popen[bytes], data: bytes, deadline: float) -> None:
        assert proc.stdin is not None
        fd = proc.stdin.fileno()
        view = memoryview(data)
        while view:
            try:
                written = os.write(fd, view)  # a request fits the pipe's buffer: it goes at once, without a poll
            except BlockingIOError:
                if not _wait(fd, select.POLLOUT, deadline):
                    raise _Lost("took no request within the deadline") from None
                continue
            except OSError as err:  # BrokenPipeError: it died
                raise _Lost(f"ended ({_ended(proc.poll())}: {err.strerror})") from None
            view = view[written:]

    def _read(self, proc: subprocess.Popen[bytes], deadline: float) -> dict[str, Any] | None:
        """The next frame, or None when the deadline passed first; _Lost when the process ended or garbled it."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while True:
            frame = self._take_frame(proc)
            if frame is not None:
                return frame
            if not _wait(fd, select.POLLIN, deadline):
                return None
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)
                raise _Lost(f"ended ({_ended(proc.poll())})")
            self._buffer += chunk

    def _take_frame(self, proc: subprocess.Popen[bytes]) -> dict[str, Any] | None:
        if len(self._buffer) < FRAME_HEAD.size:
            return None
        (length,) = FRAME_HEAD.unpack_from(self._buffer)
        if length > MAX_FRAME_BYTES:
            raise _Lost(f"sent a frame of {length} bytes")
        if len(self._buffer) < FRAME_HEAD.size + length:
            return None
        end = FRAME_HEAD.size + length
        body, self._buffer = self._buffer[FRAME_HEAD.size:end], self._buffer[end:]
        try:
            return frame_message(body)
        except ValueError as err:  # json.JSONDecodeError too
            raise _Lost(f"sent {err}") from None


class _Lost(Exception):
    """The process can no longer be talked to (it ended, or it garbled a frame)."""


def _wait(fd: int, event: int, deadline: float) -> bool:
    """Whether the fd became ready for `event` before the deadline."""
    poller = select.poll()
    poller.register(fd, event | select.POLLHUP | select.POLLERR)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if poller.poll(left * 1000):
            return True


def _stop(proc: subprocess.Popen[bytes]) -> int | None:
    """Kill the process and reap it; its exit status (negative: the signal)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    return proc.returncode


def _ended(status: int | None) -> str:
    if status is None:
        return "still running"
    if status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"exit status {status}"
