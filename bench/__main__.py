"""`python -m bench`: run hubd's benchmark suite (see BENCHMARKS.md) and print a markdown table.

Starts its own mosquitto, the strict platform simulator (bench.receiver) and, one after the other, hubd,
the bare forwarder and Node-RED; runs the scenarios; then hubd with its device imports (Home Assistant
discovery, zigbee2mqtt: bench.imports); writes bench/results/<time>.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench import imports, pi, scenarios
from bench.profile import profile_hubd
from bench.report import markdown, save_and_print, step
from bench.rig import node_red_missing
from bench.scenarios import Contender, Params, Rig

SCENARIOS = ("throughput", "latency", "scale", "backlog", "webhook", *imports.IMPORTS)
# The scenarios that run against every contender (the others are hubd's alone).
PER_CONTENDER = frozenset({"throughput", "latency", "backlog", "webhook"})
CONTENDERS = ("hubd", "forwarder", "node-red")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="everything small: about a minute")
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated subset of {SCENARIOS}")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"comma-separated subset of {CONTENDERS}")
    parser.add_argument("--devices", type=int,
                        help="devices publishing in throughput/latency/backlog and imported in discovery/zigbee2mqtt "
                             "[1000]")
    parser.add_argument("--events", type=int, help="events in the throughput runs (native and imports) [30000]")
    parser.add_argument("--rates", help="comma-separated fixed rates for the latency scenario [100,1000]")
    parser.add_argument("--latency-seconds", type=float, help="seconds per latency rate [10]")
    parser.add_argument("--scale-devices", type=int, help="devices with retained configs in the scale scenario [10000]")
    parser.add_argument("--backlog-events", type=int, help="events queued during the outage [50000]")
    parser.add_argument("--webhook-calls", type=int, help="sequential webhook calls timed [100]")
    parser.add_argument("--flood-rate", type=float, help="failing webhook calls per second [2000]")
    parser.add_argument("--flood-seconds", type=float, help="how long the flood lasts [10]")
    parser.add_argument("--flood-event-rate", type=float, help="event rate measured during the flood [1000]")
    parser.add_argument("--synchronous", choices=("full", "normal"), default="full",
                        help="hubd's storage.synchronous [full: the default, every commit on disk]")
    parser.add_argument("--scale-zeroconf", choices=("both", "off", "on"), default="both",
                        help="run the scale scenario with zeroconf off, on, or both [both]")
    parser.add_argument("--profile", type=Path, metavar="OUT",
                        help="instead of the scenarios: py-spy hubd during a throughput run; write OUT.txt (raw) "
                             "and print the top costs (with --only discovery or --only zigbee2mqtt: that import's "
                             "throughput run)")
    parser.add_argument("--profile-rate", type=float, metavar="N",
                        help="with --profile: profile a latency run at N events/s instead of the throughput run")
    parser.add_argument("--json", type=Path, help="where to write the results [bench/results/<time>.json]")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, databases)")
    parser.add_argument("--pi", action="store_true",
                        help="instead of the scenarios: the Raspberry-Pi-class profile (bench/pi.py): hubd on one "
                             "core with 256 MiB, the database on tmpfs and on disk; about 2 minutes (--quick: under "
                             "1); uses --devices [1000], --events [20000], --rates [100,1000], --latency-seconds [10], "
                             "--synchronous, --json, --keep")
    return parser.parse_args(argv)


def params_from(args: argparse.Namespace) -> Params:
    quick = args.quick

    def pick(value: Any, full: Any, small: Any) -> Any:
        return value if value is not None else (small if quick else full)

    rates = tuple(float(r) for r in pick(args.rates, "100,1000", "100,1000").split(","))
    return Params(
        devices=pick(args.devices, 1000, 200),
        throughput_events=pick(args.events, 30_000, 5_000),
        rates=rates,
        latency_s=pick(args.latency_seconds, 10.0, 3.0),
        scale_devices=pick(args.scale_devices, 10_000, 2_000),
        backlog_events=pick(args.backlog_events, 50_000, 5_000),
        webhook_calls=pick(args.webhook_calls, 100, 20),
        flood_rate=pick(args.flood_rate, 2000.0, 2000.0),
        flood_s=pick(args.flood_seconds, 10.0, 4.0),
        flood_event_rate=pick(args.flood_event_rate, 1000.0, 1000.0),
        synchronous=args.synchronous,
    )


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions: dict[str, str] = {}
    mosquitto = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    for tool, argv in {"mosquitto": [mosquitto, "-h"], "node": ["node", "--version"]}.items():
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
            versions[tool] = (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            pass
    return {"cores": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "platform": platform.platform(), "memory_mib": _mem_total_mib(), **versions}


def calibrate(workdir: Path) -> dict[str, float]:
    """How fast this machine is right now: a shared VM's speed varies from hour to hour, so every run records
    it (before and after) and runs are compared through it, never by their raw numbers alone."""
    started = time.perf_counter()
    total = 0
    for i in range(5_000_000):
        total += i
    python_s = time.perf_counter() - started
    path = workdir / "calibrate.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (x INTEGER)")
        commits = 200
        started = time.perf_counter()
        for i in range(commits):
            conn.execute("BEGIN")
            conn.execute("INSERT INTO t VALUES (?)", (i,))
            conn.execute("COMMIT")
        commit_ms = (time.perf_counter() - started) / commits * 1000
    finally:
        conn.close()
        path.unlink(missing_ok=True)
    return {"python_loop_5m_s": round(python_s, 3), "sqlite_full_commit_ms": round(commit_ms, 3)}


def _mem_total_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    params = params_from(args)
    only = set(args.only.split(","))
    contenders = [c for c in args.contenders.split(",") if c]
    workdir = Path(tempfile.mkdtemp(prefix="hubd-bench-"))
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "quick": args.quick, "params": params.__dict__, "machine": machine(),
                               "workdir": str(workdir), "skipped": {}}
    results["calibration_before"] = calibrate(workdir)
    rig = Rig.start(workdir, params)
    try:
        if args.profile:
            target = only & set(imports.IMPORTS)
            if len(target) == 1 and only == target:
                start = imports.starter(target.pop())
                results["profile"] = profile_hubd(rig, args.profile, args.profile_rate, start)
            else:
                results["profile"] = profile_hubd(rig, args.profile, args.profile_rate)
            return results
        if only & PER_CONTENDER:
            for name in contenders:
                _run_contender(rig, name, only, results)
        if "scale" in only and "hubd" in contenders:
            modes = {"both": (False, True), "off": (False,), "on": (True,)}[args.scale_zeroconf]
            for zeroconf in modes:
                step(results, f"scale.zeroconf_{'on' if zeroconf else 'off'}",
                      lambda zeroconf=zeroconf: scenarios.scale(rig, zeroconf=zeroconf))  # type: ignore[misc]
        for name in imports.IMPORTS:
            if name in only and "hubd" in contenders:
                _run_import(rig, name, results)
            elif name in only:
                results["skipped"][name] = "hubd is not among --contenders"
    finally:
        rig.stop()
        results["calibration_after"] = calibrate(workdir)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return results


def _run_contender(rig: Rig, name: str, only: set[str], results: dict[str, Any]) -> None:
    if name == "node-red" and (why := node_red_missing()):
        results["skipped"]["node-red"] = why
        print(f"[bench] skipping Node-RED: {why}", flush=True)
        return
    hub = None
    who: Contender
    print(f"[bench] starting {name}", flush=True)
    try:
        if name == "hubd":
            who, hub = scenarios.start_hubd(rig)
        elif name == "forwarder":
            who = scenarios.start_forwarder(rig)
        else:
            who = scenarios.start_node_red(rig)
    except Exception as err:  # e.g. npm cannot reach its registry: the others still run
        traceback.print_exc()
        results["skipped"][name] = f"could not start: {type(err).__name__}: {err}"
        return
    try:
        results[f"{name}.idle_rss_mib"] = who.stats().rss_mib
        if "throughput" in only:
            step(results, f"throughput.{name}", lambda: scenarios.throughput(rig, who))
        if "latency" in only or "webhook" in only:
            for rate in rig.params.rates:
                step(results, f"latency.{name}.{rate:g}", lambda rate=rate: scenarios.latency(rig, who, rate))  # type: ignore[misc]
        if hub is not None and "backlog" in only:
            step(results, "backlog.hubd", lambda: scenarios.backlog(rig, who, hub))
        if hub is not None and "webhook" in only:
            unloaded = results.get(f"latency.hubd.{rig.params.flood_event_rate:g}", {}).get("p99_ms", float("nan"))
            step(results, "webhook.hubd", lambda: scenarios.webhook(rig, who, hub, unloaded))
        results[f"{name}.rss_after_mib"] = who.stats().rss_mib
    finally:
        who.proc.stop()


def _run_import(rig: Rig, name: str, results: dict[str, Any]) -> None:
    """hubd importing devices through one dialect: ready time, then throughput and latency as for native topics."""
    print(f"[bench] starting hubd with the {name} import", flush=True)
    holder: list[imports.Imported] = []

    def begin() -> dict[str, Any]:
        holder.append(imports.start(rig, name))
        return holder[0].ready

    step(results, f"{name}.ready", begin)
    if not holder:
        return
    started = holder[0]
    who, hub = started.who, started.hub
    try:
        results[f"{name}.idle_rss_mib"] = who.stats().rss_mib
        step(results, f"throughput.{name}", lambda: scenarios.throughput(rig, who))
        for rate in rig.params.rates:
            step(results, f"latency.{name}.{rate:g}", lambda rate=rate: scenarios.latency(rig, who, rate))  # type: ignore[misc]
        results[f"{name}.rss_after_mib"] = who.stats().rss_mib
        results[f"{name}.problems"] = imports.problems(hub)
    finally:
        hub.stop()
        imports.clear(rig, started.fleet)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.pi:
        return pi.main(args, calibrate, machine)
    started = time.monotonic()
    results = run(args)
    return save_and_print(results, started=started, out=args.json, suffix="-quick" if args.quick else "",
                          render=markdown)


if __name__ == "__main__":
    sys.exit(main())
