"""Run `hubd demo` until its status page answers and the platform simulator received events, then stop it with
Ctrl-C (SIGINT): `python arm64_demo.py HUBD STATE_DIR`. Runs inside the arm64 root file system, under emulation.

Prints how long each step took; exit 1 if a step did not happen within its deadline, the demo did not exit 0,
or its output holds a traceback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

READY_TIMEOUT_S = 300.0  # emulated: the imports alone take tens of seconds
EVENTS_TIMEOUT_S = 300.0
EXIT_TIMEOUT_S = 60.0
EVENTS_WANTED = 3
STATUS_URL = "http://127.0.0.1:8080"  # the demo's port: nothing else listens in this network namespace
POLL_S = 0.5


def main(argv: list[str]) -> int:
    """Start, wait, stop, report."""
    hubd, state = argv[1], Path(argv[2])
    state.mkdir(parents=True, exist_ok=True)
    log_path = state / "demo.log"
    started = time.monotonic()
    with log_path.open("w") as log:
        demo = subprocess.Popen([hubd, "demo", "--state-dir", str(state)], stdout=log, stderr=subprocess.STDOUT)
    try:
        ready_s = _wait(_healthy, READY_TIMEOUT_S) - started
        events_s = _wait(lambda: log_path.read_text().count("platform ◀") >= EVENTS_WANTED, EVENTS_TIMEOUT_S) - started
        status = json.load(urllib.request.urlopen(f"{STATUS_URL}/api/status", timeout=30))  # noqa: S310
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=EXIT_TIMEOUT_S)
    output = log_path.read_text()
    print(f"demo: /healthz 200 after {ready_s:.1f} s, {EVENTS_WANTED} platform events after {events_s:.1f} s, "
          f"{len(status['devices'])} devices, exit code {code}")
    if code != 0 or "Traceback" in output:
        print(output[-3000:])
        return 1
    return 0


def _healthy() -> bool:
    try:
        with urllib.request.urlopen(f"{STATUS_URL}/healthz", timeout=5) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except OSError:
        return False


def _wait(condition: Callable[[], bool], timeout_s: float) -> float:
    """Poll until the condition holds; the time it did. TimeoutError at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not so within {timeout_s:.0f} s")
        time.sleep(POLL_S)
    return time.monotonic()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
