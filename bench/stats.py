"""Small statistics helpers for the bench (no numpy)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (NaN when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(latencies_s: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99 and max in milliseconds, and the sample count."""
    values = sorted(latencies_s)
    return {
        "n": float(len(values)),
        "p50_ms": percentile(values, 50) * 1000,
        "p95_ms": percentile(values, 95) * 1000,
        "p99_ms": percentile(values, 99) * 1000,
        "max_ms": (values[-1] * 1000) if values else math.nan,
    }


def sustained_rate(times: Sequence[float], low: float = 0.1, high: float = 0.9) -> float:
    """Events/s between the low and high fractions of receipts (drops the ramp-up and the tail)."""
    values = sorted(times)
    if len(values) < 10:
        return math.nan
    i, j = int(len(values) * low), int(len(values) * high) - 1
    span = values[j] - values[i]
    return (j - i) / span if span > 0 else math.nan


# A Prometheus histogram's series: label value -> (cumulative counts per upper bound, sum, count).
Histogram = dict[str, tuple[list[tuple[float, float]], float, float]]


def read_histogram(text: str, name: str) -> Histogram:
    """One histogram (one label) from a /metrics text."""
    out: Histogram = {}
    for line in text.splitlines():
        if not line.startswith(name + "_"):
            continue
        head, _, value = line.rpartition(" ")
        kind, _, labels = head[len(name) + 1:].partition("{")
        pairs = dict(part.split("=", 1) for part in labels.rstrip("}").split(",") if "=" in part)
        label = next((v.strip('"') for k, v in pairs.items() if k != "le"), "")
        buckets, total, count = out.get(label, ([], 0.0, 0.0))
        if kind == "bucket":
            le = pairs["le"].strip('"')
            buckets.append((math.inf if le == "+Inf" else float(le), float(value)))
        elif kind == "sum":
            total = float(value)
        elif kind == "count":
            count = float(value)
        out[label] = (buckets, total, count)
    return out


def histogram_delta(before: Histogram, after: Histogram) -> dict[str, dict[str, float]]:
    """Per label, what was observed between two reads: count, mean and the p50/p99 bucket bounds (ms)."""
    out: dict[str, dict[str, float]] = {}
    for label, (buckets, total, count) in after.items():
        old_buckets, old_total, old_count = before.get(label, ([], 0.0, 0.0))
        n = count - old_count
        if n <= 0:
            continue
        old = dict(old_buckets)
        cumulative = [(le, cum - old.get(le, 0.0)) for le, cum in buckets]

        def bound(q: float, cumulative: list[tuple[float, float]] = cumulative, n: float = n) -> float:
            return next((le * 1000 for le, cum in cumulative if cum >= q * n), math.inf)

        out[label] = {"n": n, "mean_ms": (total - old_total) / n * 1000, "p50_le_ms": bound(0.5),
                      "p99_le_ms": bound(0.99)}
    return out
