"""A run's results: each measurement recorded (`step`), written to bench/results/*.json and turned into markdown
tables."""

from __future__ import annotations

import json
import math
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.imports import IMPORTS
from bench.imports import label as import_label

NAMES = {"hubd": "hubd", "forwarder": "bare forwarder", "node-red": "Node-RED"}


def _num(value: Any, digits: int = 0) -> str:
    if not isinstance(value, int | float) or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


def _get(results: dict[str, Any], key: str, *path: str) -> Any:
    value: Any = results.get(key)
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _ratio(a: Any, b: Any, *, invert: bool = False) -> str:
    if not all(isinstance(v, int | float) and v == v and v > 0 for v in (a, b)):
        return "–"
    return f"{(b / a if invert else a / b):.2f}×"


def _ran(results: dict[str, Any]) -> bool:
    """Whether a contender ran throughput or latency (`throughput.hubd`, not an import's `throughput.discovery`)."""
    return any(k.startswith(("throughput.", "latency.")) and k.split(".")[1] in NAMES for k in results)


def markdown(results: dict[str, Any]) -> str:
    lines: list[str] = []
    rates = results["params"]["rates"]
    before, after = results.get("calibration_before") or {}, results.get("calibration_after") or {}
    if before:
        lines += [f"Machine speed (before / after the run): a pure-Python loop of 5M additions "
                  f"{before.get('python_loop_5m_s')} / {after.get('python_loop_5m_s', '–')} s; one SQLite commit "
                  f"with synchronous=FULL {before.get('sqlite_full_commit_ms')} / "
                  f"{after.get('sqlite_full_commit_ms', '–')} ms.", ""]
    if _ran(results):  # the contenders' table
        lines += ["| metric | hubd | bare forwarder | Node-RED | hubd vs forwarder | hubd vs Node-RED |",
                  "|---|---:|---:|---:|---:|---:|"]

        def row(label: str, key: str, *path: str, digits: int = 0, lower_better: bool = False) -> None:
            values = [_get(results, key.format(c=c), *path) for c in ("hubd", "forwarder", "node-red")]
            cells = [_num(v, digits) for v in values]
            ratios = [_ratio(values[0], other, invert=lower_better) for other in values[1:]]
            lines.append(f"| {label} | {' | '.join(cells)} | {' | '.join(ratios)} |")

        delivered = [_get(results, f"throughput.{c}") for c in ("hubd", "forwarder", "node-red")]
        cells = [f"{d['received']:,} / {d['events']:,}" if isinstance(d, dict) and "received" in d else "–"
                 for d in delivered]
        lines.append(f"| throughput: delivered / published | {' | '.join(cells)} | | |")
        row("throughput, events/s (first publish → last receipt)", "throughput.{c}", "events_per_s")
        row("throughput, sustained events/s (10th–90th percentile of receipts)", "throughput.{c}",
            "sustained_events_per_s")
        row("CPU s per 1,000 events", "throughput.{c}", "cpu_s_per_1000", digits=3, lower_better=True)
        row("peak RSS during throughput, MiB", "throughput.{c}", "peak_rss_mib", lower_better=True)
        row("RSS idle (devices known), MiB", "{c}.idle_rss_mib", lower_better=True)
        for rate in rates:
            for q in ("p50", "p95", "p99", "max"):
                row(f"latency at {rate:g}/s, {q} ms", f"latency.{{c}}.{rate:g}", f"{q}_ms", digits=1,
                    lower_better=True)
            row(f"latency at {rate:g}/s, CPU s per 1,000 events", f"latency.{{c}}.{rate:g}", "cpu_s_per_1000",
                digits=3, lower_better=True)
        lines.append("")
        lines.append("Throughput rates count the events that arrived; see the delivered row.")
        lines.append("Ratios: throughput as hubd ÷ other; CPU, memory and latency as other ÷ hubd (above 1× means "
                     "hubd is better).")
        lines.append("")
        lines += _stages(results, rates)

    if any(k.startswith(("scale.", "backlog.", "webhook.")) for k in results) or results.get("skipped"):
        lines += ["| hubd scenario | result |", "|---|---:|"]
        for tag in ("off", "on"):
            scale = results.get(f"scale.zeroconf_{tag}")
            if isinstance(scale, dict) and "error" not in scale:
                n = f"{scale['devices']:,}"
                lines.append(f"| scale (zeroconf {tag}): {n} devices, start → ready (/healthz 200), s | "
                             f"{_num(scale['ready_s'], 2)} |")
                lines.append(f"| scale (zeroconf {tag}): start → platform has all {n} devices, s | "
                             f"{_num(scale['all_known_s'], 2)} |")
                lines.append(f"| scale (zeroconf {tag}): RSS at rest with {n} devices, MiB | "
                             f"{_num(scale['rss_at_rest_mib'], 1)} |")
                lines.append(f"| scale (zeroconf {tag}): RSS idle, no devices, MiB | "
                             f"{_num(scale['idle_rss_no_devices_mib'], 1)} |")
            elif isinstance(scale, dict):
                lines.append(f"| scale (zeroconf {tag}) | error: {scale['error'][:120]} |")
        backlog = results.get("backlog.hubd")
        if isinstance(backlog, dict) and "error" not in backlog:
            n = f"{backlog['events']:,}"
            lines += [
                f"| backlog: {n} events into the outbox during the outage, events/s | "
                f"{_num(backlog['ingest_events_per_s'])} |",
                f"| backlog: outage end → first delivery, s | {_num(backlog['first_delivery_after_s'], 2)} |",
                f"| backlog: drain rate, events/s | {_num(backlog['drain_events_per_s'])} |",
                f"| backlog: outage end → all {n} delivered, s | {_num(backlog['drain_total_s'], 1)} |",
                f"| backlog: peak RSS, MiB | {_num(backlog['peak_rss_mib'], 1)} |",
                f"| backlog: delivered / queued | {backlog['received']:,} / {backlog['events']:,} |",
            ]
        elif isinstance(backlog, dict):
            lines.append(f"| backlog | error: {backlog['error'][:120]} |")
        hook = results.get("webhook.hubd")
        if isinstance(hook, dict) and "error" not in hook:
            flood = hook.get("flood", {})
            loaded = hook["events_under_flood"]
            lines += [
                f"| webhook: POST /trigger → speaker command, p50 ms | {_num(hook['trigger_p50_ms'], 1)} |",
                f"| webhook: POST /trigger → speaker command, p99 ms | {_num(hook['trigger_p99_ms'], 1)} |",
                f"| webhook flood: failing calls/s reached (404 + 429) | {_num(flood.get('rate'))} "
                f"({', '.join(f'{k}: {v:,}' for k, v in sorted(flood.get('statuses', {}).items()))}) |",
                f"| events at {hook['flood_event_rate']:g}/s: p99 ms unloaded → under the flood | "
                f"{_num(hook['unloaded_p99_ms'], 1)} → {_num(loaded['p99_ms'], 1)} |",
                f"| events at {hook['flood_event_rate']:g}/s under the flood: p50 / max ms | "
                f"{_num(loaded['p50_ms'], 1)} / {_num(loaded['max_ms'], 1)} |",
            ]
        elif isinstance(hook, dict):
            lines.append(f"| webhook | error: {hook['error'][:120]} |")
        for what, why in results.get("skipped", {}).items():
            lines.append(f"| {what} | skipped: {why} |")
    lines += _imports(results)
    return "\n".join(lines)


GOAL = 0.7  # each import's throughput ÷ the native topics' of the same run (issue 19)


def _imports(results: dict[str, Any]) -> list[str]:
    """hubd's device imports next to its native topics, from the same run (bench.imports)."""
    present = [name for name in IMPORTS if any(k.startswith((f"{name}.", f"throughput.{name}")) for k in results)]
    if not present:
        return []
    columns = ("hubd", *IMPORTS)  # "throughput.hubd" etc.: hubd on its own topics
    lines = ["", f"| hubd, devices imported | native topics | {' | '.join(import_label(n) for n in IMPORTS)} | "
                 f"{' | '.join(n + ' ÷ native' for n in IMPORTS)} |",
             "|---|---:|" + "---:|" * (2 * len(IMPORTS))]
    blank = " |" * len(IMPORTS)

    def row(label: str, key: str, *path: str, digits: int = 0) -> None:
        values = [_get(results, key.format(c=c), *path) for c in columns]
        cells = [_num(v, digits) for v in values]
        ratios = [_ratio(other, values[0]) for other in values[1:]]
        lines.append(f"| {label} | {' | '.join(cells)} | {' | '.join(ratios)} |")

    for name in IMPORTS:
        ready = results.get(f"{name}.ready")
        if isinstance(ready, dict) and "error" in ready:
            lines.append(f"| {name} | error: {str(ready['error'])[:120]} |{blank * 2}")
    params = results.get("params", {})
    devices = [params.get("devices") if results.get("throughput.hubd") else None,
               *(_get(results, f"{n}.ready", "endpoints") for n in IMPORTS)]
    lines.append(f"| devices (platform endpoints) | {' | '.join(_num(d) for d in devices)} |{blank}")
    row("retained configs published → platform has every endpoint, s", "{c}.ready", "configs_to_all_endpoints_s",
        digits=2)
    delivered = [_get(results, f"throughput.{c}") for c in columns]
    cells = [f"{d['received']:,} / {d['events']:,}" if isinstance(d, dict) and "received" in d else "–"
             for d in delivered]
    lines.append(f"| throughput: delivered / published | {' | '.join(cells)} |{blank}")
    row("throughput: offered (publish calls/s by the bench)", "throughput.{c}", "publish_rate")
    row("throughput, events/s (first publish → last receipt)", "throughput.{c}", "events_per_s")
    row("throughput, sustained events/s (10th–90th percentile of receipts)", "throughput.{c}",
        "sustained_events_per_s")
    row("CPU s per 1,000 events", "throughput.{c}", "cpu_s_per_1000", digits=3)
    decode = [next((v for n in IMPORTS if isinstance(v := _get(results, f"{n}.ready", "native_decode_us_per_state"),
                                                     int | float)), None),
              *(_get(results, f"{n}.ready", "decode_us_per_state") for n in IMPORTS)]
    lines.append(f"| the dialect's decode alone (in-process, bench.imports.decode_costs), µs per state | "
                 f"{' | '.join(_num(v, 1) for v in decode)} | {' | '.join(_ratio(v, decode[0]) for v in decode[1:])} |")
    row("peak RSS during throughput, MiB", "throughput.{c}", "peak_rss_mib")
    row("RSS idle (devices known), MiB", "{c}.idle_rss_mib")
    rates = params.get("rates", [])
    for rate in rates:
        for q in ("p50", "p99"):
            row(f"latency at {rate:g}/s, {q} ms", f"latency.{{c}}.{rate:g}", f"{q}_ms", digits=1)
        row(f"latency at {rate:g}/s, CPU s per 1,000 events", f"latency.{{c}}.{rate:g}", "cpu_s_per_1000", digits=3)
    problems = []
    for c in columns:
        found = results.get(f"{c}.problems")
        problems.append(_num(sum(found.values())) if isinstance(found, dict) else "–")
    lines.append(f"| messages hubd rejected, failed on or ignored (whole scenario) | {' | '.join(problems)} |{blank}")
    lines += ["", "Ratios here are import ÷ native for every row: for throughput higher is better (goal: "
              "≥ 0.70×), for CPU, memory, time and latency lower is better."]
    native_rate = _get(results, "throughput.hubd", "events_per_s")
    goal = []
    for name in IMPORTS:
        rate = _get(results, f"throughput.{name}", "events_per_s")
        if all(isinstance(v, int | float) and v > 0 for v in (rate, native_rate)):
            ratio = math.floor(rate / native_rate * 1000) / 1000  # not rounded up to the goal
            goal.append(f"{name} {ratio:.3f}× ({'met' if rate >= GOAL * native_rate else 'missed'})")
    if goal:
        lines.append(f"Goal: each import ≥ {GOAL:.2f}× the native throughput (first publish → last receipt): "
                     f"{'; '.join(goal)}.")
    return lines


if __name__ == "__main__":
    import json
    import sys

    print(markdown(json.loads(open(sys.argv[1]).read())))  # noqa: SIM115


# hubd_event_stage_seconds's stages, in the order an event crosses them.
STAGE_NAMES = (("mqtt_to_commit", "MQTT message in → its batch committed (fsync included)"),
               ("commit_to_post", "committed → POST begins"),
               ("post", "POST → the platform's answer"))


def _stages(results: dict[str, Any], rates: list[float]) -> list[str]:
    """Where a hubd event's time went at each fixed rate (its stage histogram; percentiles are bucket bounds)."""
    lines: list[str] = []
    for rate in rates:
        stages = _get(results, f"latency.hubd.{rate:g}", "stages")
        if not isinstance(stages, dict) or not stages:
            continue
        if not lines:
            lines += ["| hubd: where an event's time goes | rate | events | mean ms | p50 ≤ ms | p99 ≤ ms |",
                      "|---|---:|---:|---:|---:|---:|"]
        for stage, label in STAGE_NAMES:
            got = stages.get(stage)
            if isinstance(got, dict):
                lines.append(f"| {label} | {rate:g}/s | {_num(got['n'], 0)} | {_num(got['mean_ms'], 2)} | "
                             f"{_num(got['p50_le_ms'], 2)} | {_num(got['p99_le_ms'], 2)} |")
    if lines:
        lines += ["", "Stages from hubd's own `hubd_event_stage_seconds` histogram (/metrics): means are exact; "
                  "percentiles are the upper bound of the bucket they fall in.", ""]
    return lines


def save_and_print(results: dict[str, Any], *, started: float, out: Path | None, suffix: str,
                   render: Callable[[dict[str, Any]], str]) -> int:
    """Record the run's duration, write the results (to `out`, or bench/results/<time><suffix>.json) and print
    them as markdown; the exit code."""
    results["duration_s"] = time.monotonic() - started
    path = out or Path(__file__).resolve().parent / "results" / f"{time.strftime('%Y%m%d-%H%M%S')}{suffix}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print()
    print(render(results))
    print(f"\nresults: {path} ({results['duration_s']:.0f} s)")
    return 0


def step(results: dict[str, Any], key: str, run: Callable[[], Any], *, label: str = "") -> Any:
    """Run one measurement and record it under `key`; a failure is recorded (and printed) instead of ending the
    whole run (e.g. hubd killed by a memory limit)."""
    name = f"{label}{key}"
    print(f"[bench] {name} ...", flush=True)
    started = time.monotonic()
    try:
        value = run()
    except Exception as err:
        traceback.print_exc()
        value = {"error": f"{type(err).__name__}: {err}"}
    print(f"[bench] {name}: {json.dumps(value, default=str)[:400]} ({time.monotonic() - started:.1f} s)", flush=True)
    results[key] = value
    return value
