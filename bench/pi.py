"""`python -m bench --pi`: hubd on a Raspberry-Pi-class budget: ONE core and 256 MiB (see BENCHMARKS.md).

hubd runs pinned to one core (`taskset -c N`, the highest core this process may use) inside a memory cgroup
limited to 256 MiB (cgroup v1 `memory.limit_in_bytes` or v2 `memory.max`; without either, it runs unlimited
and the report says so). The bench itself and everything it starts (mosquitto, the platform simulator, the
publisher's paho thread) are pinned to the other core(s) first, so they never run on hubd's core.

The database is measured in two places, one hubd life each: on tmpfs (/dev/shm: fsync costs next to nothing,
so what is left is CPU) and on the real disk (the bench's work directory). Each life measures, in order:
  1. ready time with DEVICES retained configs already on the broker (the steps of `scenarios.scale`: a first
     life binds the platform user with no device and stops; the configs are published; the measured life
     starts): start → /healthz 200, start → the platform has every device;
  2. RSS idle (devices known);
  3. throughput on hubd's native topics (`scenarios.throughput`), with each core's busy share;
  4. latency at 100 events/s (`scenarios.latency`);
  5. RSS peak (VmHWM) and the cgroup's peak (which also counts page cache and tmpfs pages).
Each storage place also gets the cost of one synchronous=FULL SQLite commit there (the machine-speed
line's measurement, `calibrate`), so a reader can scale to an SD card.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import scenarios
from bench.procs import REPO
from bench.report import STAGE_NAMES, save_and_print, step
from bench.rig import Hubd, wait_until
from bench.scenarios import Contender, Params, Rig

MEMORY_LIMIT_MIB = 256
GOAL_EVENTS_PER_S = 1000.0
GOAL_P99_MS = 10.0
LATENCY_RATE = 100.0
SHM = Path("/dev/shm")  # noqa: S108 - only a mkdtemp() directory inside it is used
# Filesystems that keep their files in memory: a database there is not "on disk".
MEMORY_FS = frozenset({"tmpfs", "ramfs"})
# What a reader may assume for an SD card (NOT measured here): the notes under the table say so.
SD_FSYNC_MS = (2.0, 20.0)

Calibrate = Callable[[Path], dict[str, float]]
Machine = Callable[[], dict[str, Any]]


@dataclass(frozen=True)
class PiParams:
    """Sizes of one `--pi` run."""

    devices: int
    events: int
    rates: tuple[float, ...]
    latency_s: float
    synchronous: str
    rest_s: float


def pi_params(args: argparse.Namespace) -> PiParams:
    """The `--pi` sizes: the shared flags (--devices, --events, --rates, --latency-seconds) override them."""
    quick = bool(args.quick)

    def pick(value: Any, full: Any, small: Any) -> Any:
        return value if value is not None else (small if quick else full)

    # 100/s is the goal's rate; 1000/s shows whether the goal's throughput is sustained at a steady rate.
    rates = tuple(float(r) for r in pick(getattr(args, "rates", None), "100,1000", "100,1000").split(","))
    return PiParams(devices=pick(args.devices, 1000, 200), events=pick(args.events, 20_000, 3_000), rates=rates,
                    latency_s=pick(args.latency_seconds, 10.0, 3.0), synchronous=args.synchronous,
                    rest_s=1.0 if quick else 3.0)


# --- cores ------------------------------------------------------------------------------------------------------

def split_cores(allowed: set[int]) -> tuple[int, list[int]]:
    """hubd's core (the highest allowed: core 0 usually takes more interrupts) and the others.

    With a single core there is nothing to separate: the others are that core too (the caller says so)."""
    if not allowed:
        raise ValueError("no CPU is allowed")
    core = max(allowed)
    others = sorted(allowed - {core}) or [core]
    return core, others


def pin_this_process(cores: list[int]) -> None:
    """Pin every thread of the bench (os.sched_setaffinity(0) would pin only the calling thread)."""
    for tid in os.listdir("/proc/self/task"):
        with suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(int(tid), cores)


def affinity(pid: int) -> list[int]:
    """The cores any thread of `pid` may run on (the union over its threads)."""
    cores: set[int] = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with suppress(ProcessLookupError):
                cores |= os.sched_getaffinity(int(tid))
    except FileNotFoundError:
        return []
    return sorted(cores)


@contextmanager
def on_core(core: int) -> Iterator[None]:
    """Run the calling thread on `core` for a while (the calibration measures hubd's core)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def pin_prefix(core: int) -> list[str]:
    """A command prefix that runs the rest of the command on `core` only (same pid: it execs)."""
    taskset = shutil.which("taskset")
    if taskset:
        return [taskset, "-c", str(core)]
    code = f"import os, sys; os.sched_setaffinity(0, {{{core}}}); os.execvp(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", code]


def cpu_times(stat_text: str) -> dict[int, tuple[int, int]]:
    """Per core (busy, total) jiffies from /proc/stat text. Busy: user, nice, system, irq, softirq; total also
    counts idle, iowait and steal (guest time is already inside user)."""
    out: dict[int, tuple[int, int]] = {}
    for line in stat_text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        f = [int(x) for x in rest.split()[:8]] + [0] * 8
        user, nice, system, idle, iowait, irq, softirq, steal = f[:8]
        out[int(name[3:])] = (user + nice + system + irq + softirq, user + nice + system + idle + iowait + irq
                              + softirq + steal)
    return out


def busy_percent(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> dict[int, float]:
    """Each core's busy share between two cpu_times() readings, in percent."""
    out: dict[int, float] = {}
    for cpu, (busy, total) in after.items():
        busy0, total0 = before.get(cpu, (busy, total))
        span = total - total0
        out[cpu] = round(100 * (busy - busy0) / span, 1) if span > 0 else math.nan
    return out


def _proc_stat() -> dict[int, tuple[int, int]]:
    return cpu_times(Path("/proc/stat").read_text())


# --- memory cgroup ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CgroupPlan:
    """Where a memory-limited child cgroup can be made: the parent directory and the files to use."""

    version: int
    parent: Path
    limit_file: str
    peak_file: str


def _unescape(mount_point: str) -> str:
    """/proc/mounts writes spaces, tabs, newlines and backslashes in octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        mount_point = mount_point.replace(code, char)
    return mount_point


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def plan_memory_cgroup(mounts: str, root: Path = Path("/")) -> CgroupPlan | str:
    """A memory cgroup this process can create, or the reason why not.

    `mounts`: the text of /proc/self/mounts; `root` is prepended to every mount point (tests pass a fake tree).
    cgroup v1 first (its memory controller, when mounted, is not in v2), then v2 at the root of its mount, whose
    cgroup.subtree_control must already have `memory` (this code never changes the system's controllers)."""
    v1: Path | None = None
    v2: Path | None = None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        point, fstype, options = _unescape(parts[1]), parts[2], parts[3].split(",")
        path = root / point.lstrip("/")
        if fstype == "cgroup" and "memory" in options and v1 is None:
            v1 = path
        elif fstype == "cgroup2" and v2 is None:
            v2 = path
    reasons: list[str] = []
    if v1 is not None:
        if not (v1 / "memory.limit_in_bytes").exists():
            reasons.append(f"cgroup v1 memory at {v1} has no memory.limit_in_bytes")
        elif not os.access(v1, os.W_OK):
            reasons.append(f"cgroup v1 memory at {v1} is not writable (run as root)")
        else:
            return CgroupPlan(1, v1, "memory.limit_in_bytes", "memory.max_usage_in_bytes")
    if v2 is not None:
        if "memory" not in _words(v2 / "cgroup.controllers"):
            reasons.append(f"cgroup v2 at {v2} has no memory controller")
        elif "memory" not in _words(v2 / "cgroup.subtree_control"):
            reasons.append(f"cgroup v2 at {v2}: memory is not enabled in cgroup.subtree_control")
        elif not os.access(v2, os.W_OK):
            reasons.append(f"cgroup v2 at {v2} is not writable (run as root)")
        else:
            return CgroupPlan(2, v2, "memory.max", "memory.peak")
    if v1 is None and v2 is None:
        reasons.append("no cgroup filesystem is mounted")
    return "; ".join(reasons)


class MemoryCgroup:
    """One child cgroup with a memory limit; hubd joins it through `join_prefix()` before it execs."""

    def __init__(self, plan: CgroupPlan, name: str, limit_mib: int) -> None:
        self.plan = plan
        self.path = plan.parent / name
        self.limit_bytes = limit_mib * 1024 * 1024

    def create(self) -> None:
        """Make the directory and set the limit; raise OSError (with the directory removed) if that fails."""
        self.path.mkdir()
        try:
            (self.path / self.plan.limit_file).write_text(str(self.limit_bytes))
            applied = (self.path / self.plan.limit_file).read_text().strip()
            if applied != str(self.limit_bytes):
                raise OSError(f"{self.path / self.plan.limit_file} reads {applied!r} after writing {self.limit_bytes}")
        except OSError:
            self.remove()
            raise

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def join_prefix(self) -> list[str]:
        """`sh` writes its own pid into cgroup.procs, then execs the rest: hubd is limited from its first byte."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.procs)]

    def _read_int(self, name: str) -> int | None:
        try:
            return int((self.path / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def peak_mib(self) -> float | None:
        """The cgroup's peak charge (RSS + page cache + tmpfs pages); None where the kernel has no such file."""
        peak = self._read_int(self.plan.peak_file)
        return None if peak is None else peak / (1024 * 1024)

    def oom_kills(self) -> int | None:
        """How many processes the limit killed (v1 memory.oom_control, v2 memory.events)."""
        name = "memory.oom_control" if self.plan.version == 1 else "memory.events"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return None

    def remove(self) -> None:
        """rmdir, retried briefly: the kernel may still be tearing down the exited process."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        print(f"[bench] pi: could not remove the cgroup {self.path}; remove it with rmdir", flush=True)


def find_memory_cgroup() -> CgroupPlan | str:
    """The plan on this machine, or why there is none."""
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError as err:
        return f"cannot read /proc/self/mounts: {err}"
    return plan_memory_cgroup(mounts)


# --- storage places ---------------------------------------------------------------------------------------------

def fs_type(path: Path, mounts: str) -> str:
    """The filesystem type of the mount holding `path` (the longest mount point that is a prefix of it)."""
    best, kind = "", "?"
    target = str(path.resolve())
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = _unescape(parts[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def storage_dirs(workdir: Path, mounts: str) -> tuple[dict[str, tuple[Path, str]], dict[str, str]]:
    """{name: (database directory, fs type)} for "tmpfs" and "disk", and {name: why skipped}."""
    places: dict[str, tuple[Path, str]] = {}
    skipped: dict[str, str] = {}
    shm_type = fs_type(SHM, mounts) if SHM.is_dir() else "missing"
    if shm_type in MEMORY_FS:
        places["tmpfs"] = (Path(tempfile.mkdtemp(prefix="hubd-bench-pi-", dir=SHM)), shm_type)
    else:
        skipped["tmpfs"] = f"{SHM} is not a tmpfs ({shm_type})"
    # /var/tmp: only a mkdtemp() directory inside it is used.
    for candidate in (workdir, Path("/var/tmp"), REPO / "bench" / ".cache"):  # noqa: S108
        kind = fs_type(candidate, mounts) if candidate.is_dir() else "missing"
        if kind not in MEMORY_FS and kind not in ("missing", "?"):
            directory = candidate / "pi-disk" if candidate == workdir else Path(
                tempfile.mkdtemp(prefix="hubd-bench-pi-", dir=candidate))
            directory.mkdir(parents=True, exist_ok=True)
            places["disk"] = (directory, kind)
            break
    else:
        skipped["disk"] = "no directory on a disk filesystem (the work dir, /var/tmp, bench/.cache are in memory)"
    return places, skipped


# --- one hubd life per storage place ----------------------------------------------------------------------------

def _measure(out: dict[str, Any], key: str, run: Callable[[], Any]) -> Any:
    """One measurement; a failure (e.g. hubd killed by the memory limit) is recorded instead of ending the run."""
    return step(out, key, run, label="pi ")


def _with_cpu(hub: Hubd, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`run()`'s result plus each core's busy share and hubd's own CPU share of one core over it: on a shared
    machine, the difference on hubd's core is other processes (not this bench's: they are on the other cores)."""
    before, cpu, started = _proc_stat(), hub.child.stats().cpu_s, time.monotonic()
    result = run()
    wall = time.monotonic() - started
    result["busy_percent"] = busy_percent(before, _proc_stat())
    result["hubd_cpu_percent"] = round(100 * (hub.child.stats().cpu_s - cpu) / wall, 1) if wall > 0 else math.nan
    return result


def run_place(rig: Rig, pi: PiParams, name: str, db_dir: Path, core: int, plan: CgroupPlan | str,
              calibrate: Calibrate) -> dict[str, Any]:
    """One storage place: ready, idle RSS, throughput, latency, peaks (see the module docstring)."""
    n = pi.devices
    base, user = f"pi-{name}", f"pi-{name}-user"
    workdir = rig.workdir / f"pi-{name}"
    extra = {"storage": {"path": str(db_dir / "hubd.db")}}
    pin = pin_prefix(core)
    out: dict[str, Any] = {"db_dir": str(db_dir)}
    with on_core(core):
        out["calibration"] = calibrate(db_dir)
    # First life (as scenarios.scale): bind the user while no device exists; the grant stays in SQLite.
    first = Hubd(workdir, mqtt_port=rig.broker.port, receiver=rig.receiver, base_topic=base,
                 synchronous=pi.synchronous, extra=extra, prefix=pin)
    first.start(timeout_s=60)
    try:
        first.bind(user)
        out["idle_rss_no_devices_mib"] = first.child.stats().rss_mib
    finally:
        first.stop()
    rig.publisher.configs(base, range(n))
    rig.publisher.wait_acked()
    rig.receiver.take(user)
    cgroup: MemoryCgroup | None = None
    if isinstance(plan, CgroupPlan):
        cgroup = MemoryCgroup(plan, f"hubd-bench-pi-{os.getpid()}-{name}", MEMORY_LIMIT_MIB)
        try:
            cgroup.create()
            out["memory_limit_mib"] = MEMORY_LIMIT_MIB
        except OSError as err:
            print(f"[bench] pi: the memory limit could not be applied: {err}; hubd runs without one", flush=True)
            out["memory_limit_error"] = str(err)
            cgroup = None
    hub = Hubd(workdir, mqtt_port=rig.broker.port, receiver=rig.receiver, base_topic=base,
               synchronous=pi.synchronous, extra=extra, prefix=[*(cgroup.join_prefix() if cgroup else []), *pin])
    try:
        # Second life: every device arrives as a retained config.
        out["ready_s"] = hub.start(timeout_s=60)
        started = hub.child.started_at
        wait_until(lambda: rig.receiver.user(user)["endpoints"] >= n, 120, f"{n} endpoints for {user}", 0.02)
        out["all_known_s"] = time.monotonic() - started
        out["affinity"] = affinity(hub.child.pid)
        time.sleep(pi.rest_s)
        out["idle_rss_mib"] = hub.child.stats().rss_mib

        def rest() -> dict[str, Any]:
            time.sleep(pi.rest_s)
            return {"seconds": pi.rest_s}

        out["idle"] = _with_cpu(hub, rest)  # what hubd costs doing nothing
        who = Contender("hubd", user, base, hub)

        _measure(out, "throughput", lambda: _with_cpu(hub, lambda: scenarios.throughput(rig, who)))
        for rate in pi.rates:
            _measure(out, f"latency.{rate:g}",
                     lambda rate=rate: _with_cpu(hub, lambda: scenarios.latency(rig, who, rate)))  # type: ignore[misc]
        stats = hub.child.stats()
        out["rss_after_mib"] = stats.rss_mib
        out["peak_rss_mib"] = stats.peak_rss_mib  # VmHWM: the process's peak over its whole life
        out["cpu_s"] = stats.cpu_s
    except Exception as err:
        traceback.print_exc()
        out["error"] = f"{type(err).__name__}: {err}"
    finally:
        hub.stop()
        if cgroup is not None:
            out["cgroup_peak_mib"] = cgroup.peak_mib()
            out["oom_kills"] = cgroup.oom_kills()
            cgroup.remove()
        rig.publisher.clear_retained(base, range(n))
    with on_core(core):  # again: a shared disk's fsync cost moves from second to second
        out["calibration_after"] = calibrate(db_dir)
    return out


def run(args: argparse.Namespace, calibrate: Calibrate, machine: Machine) -> dict[str, Any]:
    pi = pi_params(args)
    allowed = os.sched_getaffinity(0)
    core, others = split_cores(allowed)
    results: dict[str, Any] = {"mode": "pi", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "local_time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "quick": bool(args.quick),
                               "params": asdict(pi), "machine": machine(), "pi_core": core, "other_cores": others,
                               "goals": {"events_per_s": GOAL_EVENTS_PER_S, "p99_ms": GOAL_P99_MS,
                                         "rate": LATENCY_RATE},
                               "skipped": {}, "places": {}}
    if others == [core]:
        print(f"[bench] pi: only core {core} is available: hubd shares it with the broker, the simulator and the "
              "publisher", flush=True)
    plan = find_memory_cgroup()
    if isinstance(plan, CgroupPlan):
        results["memory_limit"] = {"applied": True, "cgroup": f"v{plan.version}", "parent": str(plan.parent),
                                   "limit_mib": MEMORY_LIMIT_MIB}
        print(f"[bench] pi: hubd on core {core}, memory limit {MEMORY_LIMIT_MIB} MiB (cgroup v{plan.version} under "
              f"{plan.parent}); the rest on core(s) {others}", flush=True)
    else:
        results["memory_limit"] = {"applied": False, "reason": plan}
        print(f"[bench] pi: the memory limit could not be applied: {plan}; hubd runs without one", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="hubd-bench-"))
    results["workdir"] = str(workdir)
    mounts = Path("/proc/self/mounts").read_text()
    places, skipped = storage_dirs(workdir, mounts)
    results["skipped"].update(skipped)
    original = os.sched_getaffinity(0)
    pin_this_process(others)  # before any child or thread: they inherit it
    with on_core(core):
        results["calibration_before"] = calibrate(workdir)
    params = Params(devices=pi.devices, throughput_events=pi.events, rates=pi.rates, latency_s=pi.latency_s,
                    scale_devices=pi.devices, backlog_events=0, webhook_calls=0, flood_rate=0.0, flood_s=0.0,
                    flood_event_rate=0.0, synchronous=pi.synchronous)
    rig = Rig.start(workdir, params)
    try:
        results["affinity"] = {"bench": affinity(os.getpid()), "mosquitto": affinity(rig.broker.child.pid),
                               "receiver": affinity(rig.receiver.child.pid)}
        for name, (db_dir, kind) in places.items():
            print(f"[bench] pi: the database on {name} ({kind}, {db_dir})", flush=True)
            place = _measure(results["places"], name,
                             lambda name=name, db_dir=db_dir: run_place(  # type: ignore[misc]
                                 rig, pi, name, db_dir, core, plan, calibrate))
            place["fs_type"] = kind
    finally:
        rig.stop()
        with on_core(core):
            results["calibration_after"] = calibrate(workdir)
        pin_this_process(sorted(original))
        if args.keep:
            print(f"[bench] pi: kept {workdir} and {', '.join(str(d) for d, _ in places.values())}", flush=True)
        else:
            for db_dir, _ in places.values():
                shutil.rmtree(db_dir, ignore_errors=True)
            shutil.rmtree(workdir, ignore_errors=True)
    return results


# --- the table --------------------------------------------------------------------------------------------------

def _num(value: Any, digits: int = 0) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        return "–"
    return f"{value:,.{digits}f}"


def _get(data: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


PLACE_NAMES = {"tmpfs": "database on tmpfs", "disk": "database on disk"}


def markdown(results: dict[str, Any]) -> str:
    """The `--pi` tables from a results dict (as written to bench/results/*-pi.json)."""
    lines: list[str] = []
    before, after = results.get("calibration_before") or {}, results.get("calibration_after") or {}
    core = results.get("pi_core")
    if results.get("started"):
        lines += [f"Run started {results['started']} ({'--quick' if results.get('quick') else 'full run'}, "
                  f"{_num(results.get('duration_s'))} s).", ""]
    if before:
        lines += [f"Machine speed (before / after the run, measured on core {core}): a pure-Python loop of 5M "
                  f"additions {before.get('python_loop_5m_s')} / {after.get('python_loop_5m_s', '–')} s; one SQLite "
                  f"commit with synchronous=FULL in the work dir {before.get('sqlite_full_commit_ms')} / "
                  f"{after.get('sqlite_full_commit_ms', '–')} ms.", ""]
    limit = results.get("memory_limit") or {}
    limit_text = (f"memory limit {limit.get('limit_mib')} MiB (cgroup {limit.get('cgroup')})" if limit.get("applied")
                  else f"NO memory limit ({limit.get('reason', 'unknown')})")
    others = ", ".join(str(c) for c in results.get("other_cores", []))
    lines += [f"hubd pinned to core {core} (taskset), {limit_text}; mosquitto, the platform simulator and the "
              f"publisher on core {others}.", ""]
    places: dict[str, Any] = results.get("places") or {}
    names = [n for n in ("tmpfs", "disk") if n in places]
    params = results.get("params") or {}
    goals = results.get("goals") or {}
    goal_rate = float(goals.get("events_per_s", GOAL_EVENTS_PER_S))
    goal_p99 = float(goals.get("p99_ms", GOAL_P99_MS))
    goal_at = float(goals.get("rate", LATENCY_RATE))
    n = _num(params.get("devices"))
    headers = [f"{PLACE_NAMES.get(p, p)} ({_get(places, p, 'fs_type') or '?'})" for p in names]
    lines += [f"| metric | {' | '.join(headers)} | goal |", f"|---|{'---:|' * len(names)}---|"]

    def row(label: str, cells: list[str], goal: str = "") -> None:
        lines.append(f"| {label} | {' | '.join(cells)} | {goal} |")

    def value_row(label: str, path: tuple[str, ...], digits: int = 0, goal: str = "") -> None:
        row(label, [_num(_get(places, p, *path), digits) for p in names], goal)

    for p in names:
        if "error" in places[p]:
            row(f"error ({p})", [str(places[p]["error"])[:120] if q == p else "" for q in names])
    row("one SQLite commit, synchronous=FULL, ms (before / after this column's runs)",
        [" / ".join(_num(_get(places, p, key, "sqlite_full_commit_ms"), 3) for key in ("calibration",
                                                                                      "calibration_after"))
         for p in names])
    cells = []
    for p in names:
        t = _get(places, p, "throughput")
        cells.append(f"{t['received']:,} / {t['events']:,}" if isinstance(t, dict) and "received" in t else "–")
    row("throughput: delivered / published", cells)
    value_row("throughput, events/s (first publish → last receipt)", ("throughput", "events_per_s"),
              goal=f"≥ {goal_rate:,.0f}")
    value_row("throughput, sustained events/s (10th–90th percentile of receipts)",
              ("throughput", "sustained_events_per_s"))
    value_row("CPU s per 1,000 events", ("throughput", "cpu_s_per_1000"), 3)
    hub_cores = [core] if isinstance(core, int) else []
    other_cores = list(results.get("other_cores", []))

    def cpu_row(label: str, key: str) -> None:
        row(label, [" / ".join(_num(v, 0) for v in (_get(places, p, key, "hubd_cpu_percent"),
                                                      _busy(places, p, hub_cores, key),
                                                      _busy(places, p, other_cores, key))) for p in names])

    cpu_row(f"during throughput: hubd's CPU / core {core} busy (all processes) / core {others} busy, %",
            "throughput")
    for rate in params.get("rates", [goal_at]):
        for q in ("p50", "p99", "max"):
            goal = f"≤ {goal_p99:g}" if q == "p99" and float(rate) == goal_at else ""
            value_row(f"latency at {float(rate):g}/s, {q} ms", (f"latency.{float(rate):g}", f"{q}_ms"), 1, goal)
        cpu_row(f"during latency at {float(rate):g}/s: hubd's CPU / core {core} busy / core {others} busy, %",
                f"latency.{float(rate):g}")
        for stage, what in STAGE_NAMES:
            row(f"at {float(rate):g}/s, {what}: mean ms (p99 ≤ bucket)",
                [f"{_num(_get(places, p, f'latency.{float(rate):g}', 'stages', stage, 'mean_ms'), 2)} "
                 f"({_num(_get(places, p, f'latency.{float(rate):g}', 'stages', stage, 'p99_le_ms'), 1)})"
                 for p in names])
    value_row(f"{n} devices: start → ready (/healthz 200), s", ("ready_s",), 2)
    value_row(f"{n} devices: start → platform has all {n}, s", ("all_known_s",), 2)
    value_row("RSS after binding the user, no devices yet (first life), MiB", ("idle_rss_no_devices_mib",), 1)
    value_row(f"RSS idle ({n} devices known), MiB", ("idle_rss_mib",), 1)
    value_row(f"hubd's CPU at idle ({n} devices known), % of its core", ("idle", "hubd_cpu_percent"), 1)
    value_row("RSS peak (VmHWM, whole life), MiB", ("peak_rss_mib",), 1)
    row("cgroup memory peak (RSS + page cache + tmpfs), MiB",
        [_num(_get(places, p, "cgroup_peak_mib"), 1) if _get(places, p, "memory_limit_mib") else "not limited"
         for p in names], f"≤ {MEMORY_LIMIT_MIB}")
    row("memory limit",
        [f"{_get(places, p, 'memory_limit_mib')} MiB" if _get(places, p, "memory_limit_mib") else "not limited"
         for p in names])
    cells = []
    for p in names:
        rate = _get(places, p, "throughput", "events_per_s")
        p99 = _get(places, p, f"latency.{goal_at:g}", "p99_ms")
        if not isinstance(rate, int | float) or not isinstance(p99, int | float):
            cells.append("–")
            continue
        cells.append(f"{'yes' if rate >= goal_rate else 'NO'} / {'yes' if p99 <= goal_p99 else 'NO'}")
    row(f"goals met: ≥ {goal_rate:,.0f} events/s / p99 ≤ {goal_p99:g} ms at {goal_at:g}/s", cells)
    for what, why in (results.get("skipped") or {}).items():
        lines.append(f"| {what} | skipped: {why} |{' |' * len(names)}")
    lines.append("")
    for p in names:
        own = _get(places, p, "throughput", "hubd_cpu_percent")
        busy = _busy(places, p, hub_cores, "throughput")
        if not isinstance(own, int | float) or not isinstance(busy, float) or math.isnan(own):
            continue
        if own < 90:
            lines.append(f"Throughput ({p}): hubd used {own:.0f}% of its core, so hubd was not what limited the "
                         "rate (the load side on the other core, or other processes on hubd's core): the figure is "
                         "a lower bound of what hubd does on one core.")
        if busy - own >= 5:
            lines.append(f"Throughput ({p}): core {core} was {busy:.0f}% busy, {busy - own:.0f} points of it not "
                         "hubd (other processes on this shared machine, or kernel work).")
    lines.append("The cgroup peak counts what was charged to hubd's cgroup (its own memory, page cache and tmpfs "
                 "pages it wrote); library pages another process loaded first are in its RSS but not charged here.")
    disk = " / ".join(_num(_get(places, "disk", key, "sqlite_full_commit_ms"), 3)
                      for key in ("calibration", "calibration_after"))
    lo, hi = SD_FSYNC_MS
    lines += [f"Every event is committed (synchronous=FULL: an fsync) before hubd posts it. On an SD card "
              f"(assumed, not measured: an fsync typically takes {lo:g}–{hi:g} ms) that commit costs about "
              f"{lo:g}–{hi:g} ms instead of the {disk} ms measured on this disk."]
    return "\n".join(lines)


def _busy(places: dict[str, Any], place: str, cores: list[int], key: str) -> float | None:
    """The mean busy share of `cores` during one measurement (JSON keys are strings)."""
    busy = _get(places, place, key, "busy_percent")
    if not isinstance(busy, dict) or not cores:
        return None
    values = [busy.get(str(c), busy.get(c)) for c in cores]
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return sum(numbers) / len(numbers) if numbers else None


def main(args: argparse.Namespace, calibrate: Calibrate, machine: Machine) -> int:
    started = time.monotonic()
    results = run(args, calibrate, machine)
    return save_and_print(results, started=started, out=args.json, suffix="-pi" + ("-quick" if args.quick else ""),
                          render=markdown)


if __name__ == "__main__":
    print(markdown(json.loads(Path(sys.argv[1]).read_text())))
