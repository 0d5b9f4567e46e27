"""`python -m bench --profile OUT`: sample hubd with py-spy during a throughput run and name the top costs.

py-spy writes collapsed stacks (`--format raw`, one `frame;frame;... count` per line, innermost last);
we sum samples per function, both where it runs itself (self) and below it (inclusive).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import scenarios
from bench.rig import Hubd
from bench.scenarios import Contender, Rig

TOP = 25
# Leaf frames that are waiting, not working: the event loop's epoll and the database thread's queue. py-spy
# counts them as active because they wait in C without the usual idle markers.
IDLE = frozenset({"EpollSelector.select (selectors.py)", "_worker (futures/thread.py)"})


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise RuntimeError("py-spy is not installed: pip install py-spy")
    return found


def summarize(raw: Path, top: int = TOP) -> dict[str, Any]:
    """Self and inclusive sample shares per function from a py-spy raw (collapsed) file, idle waits left out."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if f and not f.startswith("process ")
                  and not f.startswith("thread ")]
        if not frames:
            continue
        if frames[-1] in IDLE:
            idle += count
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    return {
        "samples": total, "idle_samples": idle,
        "self": [(name, round(100 * n / total, 1)) for name, n in own.most_common(top)] if total else [],
        "inclusive": [(name, round(100 * n / total, 1)) for name, n in inclusive.most_common(top * 2)]
        if total else [],
    }


def _short(frame: str) -> str:
    """`func (path/to/module.py:12)` -> `func (module.py)`: lines differ per call site, functions do not."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if parts else path
    return f"{name} ({short})"


def profile_hubd(rig: Rig, out: Path, rate: float | None = None,
                 start: Callable[[Rig], tuple[Contender, Hubd]] = scenarios.start_hubd) -> dict[str, Any]:
    """Start hubd and run the throughput scenario (or, with `rate`, the latency one) with py-spy attached.

    `start`: how hubd starts with its devices known (hubd's own topics; bench.imports.starter for an import)."""
    who, hub = start(rig)
    raw = out.with_suffix(".txt")
    raw.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen([_py_spy(), "record", "--format", "raw", "--rate", "200", "--threads", "-o", str(raw),
                            "--pid", str(hub.child.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        result = scenarios.throughput(rig, who) if rate is None else scenarios.latency(rig, who, rate)
    finally:
        hub.stop()  # py-spy ends and writes its file when the target exits
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.terminate()
            spy.wait(timeout=10)
    summary = summarize(raw)
    pace = (f"{result.get('events_per_s', 0):.0f} events/s" if rate is None
            else f"at {rate:.0f}/s, p99 {result.get('p99_ms', 0):.1f} ms")
    print(f"\nprofile of hubd ({who.name}) during {result.get('events')} events ({pace} under py-spy); "
          f"{summary['samples']} samples; raw stacks in {raw}")
    print("\ntop self time:")
    for name, share in summary["self"]:
        print(f"  {share:5.1f}%  {name}")
    print("\ntop inclusive time:")
    for name, share in summary["inclusive"]:
        print(f"  {share:5.1f}%  {name}")
    return {"throughput_under_py_spy": result, **summary, "raw": str(raw)}
