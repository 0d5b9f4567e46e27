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
