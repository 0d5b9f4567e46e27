"""The render process: `python -m hubd.dialects.homeassistant.worker`, started by hubd, compiles and renders
templates (the only process where a device's template is compiled: compiling, too, is within its limits).

hubd (hubd.dialects.homeassistant.renderer) sends it one request at a time as a frame on its stdin and reads the
answer from its stdout (hubd.dialects.homeassistant.sandbox: frames, the sandbox, `render`). It renders in the
sandbox with two limits of its own, so that a hostile template costs this process and never hubd:
- memory: its address space is capped at what it uses once started plus `--memory-mb` (RLIMIT_AS), so a filter
  that would allocate gigabytes fails at once with MemoryError (an error answer), and the process goes on;
- time: an interval timer interrupts a render that runs past the budget between two Python operations (an empty
  loop in a loop in a loop), an error answer again.
What neither can stop, one C call that runs on (a regex that backtracks), hubd stops: it kills this process at its
deadline and starts another. The process ends when its stdin closes (hubd stopped or died). It writes nothing but
frames on stdout; stderr is hubd's.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
from types import FrameType
from typing import BinaryIO

from hubd.dialects.homeassistant.sandbox import (
    OVERTIME_ANSWER,
    RENDER_BUDGET_S,
    Overtime,
    TemplateSandbox,
    read_frame,
    render,
    write_frame,
)

DEFAULT_MEMORY_MB = 128
# The timer fires a little after the sandbox's own budget check would have: that check gives the clearer error.
ALARM_AFTER_S = RENDER_BUDGET_S * 1.2


class _Alarm:
    """The interval timer around one render: raises Overtime into it, and only into it."""

    def __init__(self) -> None:
        self.rendering = False
        signal.signal(signal.SIGALRM, self._ring)

    def __enter__(self) -> None:
        self.rendering = True
        signal.setitimer(signal.ITIMER_REAL, ALARM_AFTER_S)

    def __exit__(self, *exc: object) -> None:
        self.rendering = False
        signal.setitimer(signal.ITIMER_REAL, 0)

    def _ring(self, signum: int, frame: FrameType | None) -> None:
        if self.rendering:
            raise Overtime


def limit_memory(extra_mb: int) -> int | None:
    """Cap the address space at what the process maps now plus `extra_mb`; the cap in bytes, or None if unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            mapped = int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None
    cap = mapped + extra_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return cap


def serve(requests: BinaryIO, answers: BinaryIO, sandbox: TemplateSandbox) -> None:
    """Answer requests until the input ends."""
    alarm = _Alarm()
    while True:
        request = read_frame(requests)
        if request is None:
            return
        try:
            with alarm:
                answer = render(sandbox, request)
        except Overtime:  # the timer rang between the render's end and the timer's reset
            answer = OVERTIME_ANSWER
        except MemoryError:
            answer = {"error": "the template needed more memory than a render may have"}
        write_frame(answers, answer)


def main(argv: list[str] | None = None) -> int:
    """The process: limits, a ready frame, then requests until stdin closes."""
    parser = argparse.ArgumentParser(prog="python -m hubd.dialects.homeassistant.worker")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB)
    args = parser.parse_args(argv)
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # whatever else prints cannot break the frames
    sandbox = TemplateSandbox()
    cap = limit_memory(args.memory_mb)
    write_frame(answers, {"ready": os.getpid(), "memory_cap": cap})
    try:
        serve(sys.stdin.buffer, answers, sandbox)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    except ValueError as err:  # a damaged frame: hubd starts another process
        print(f"hubd template render process: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
