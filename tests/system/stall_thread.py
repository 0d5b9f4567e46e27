"""Stall one thread of another process, and only that one: `python3 stall_thread.py TID [SECONDS]`.

Runs inside the test container, as root with CAP_SYS_PTRACE. It attaches to the thread with ptrace
(PTRACE_SEIZE), stops it (PTRACE_INTERRUPT) and keeps it stopped until the thread's process ends or SECONDS
pass (then it detaches and the thread runs on). The process's other threads keep running: this is a hung
event loop in a live process, which SIGSTOP (the whole process) is not. Prints `stalled TID` once stopped.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
WALL = 0x40000000  # __WALL: wait for a thread that is not a thread group leader too
DEFAULT_HOLD_S = 120.0


def main(argv: list[str]) -> int:
    """Stall the thread, hold it, report."""
    tid = int(argv[1])
    hold_s = float(argv[2]) if len(argv) > 2 else DEFAULT_HOLD_S
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    for request in (PTRACE_SEIZE, PTRACE_INTERRUPT):
        if libc.ptrace(request, tid, None, None) != 0:
            err = ctypes.get_errno()
            print(f"ptrace({request:#x}, {tid}): {os.strerror(err)}", file=sys.stderr)
            return 1
    os.waitpid(tid, WALL)  # the interrupt's stop
    print(f"stalled {tid}", flush=True)
    deadline = time.monotonic() + hold_s
    while time.monotonic() < deadline:
        # Each stop the thread reaches (a signal for it) is left stopped; its process's end ends the wait.
        try:
            waited, status = os.waitpid(tid, WALL | os.WNOHANG)
        except ChildProcessError:
            return 0
        if waited and (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
            return 0
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
