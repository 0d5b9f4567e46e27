"""Counters, gauges and histograms rendered in the Prometheus text format for GET /metrics.

One `Metrics` object is built in app.py and handed to the components that count things.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

LabelValue = str | tuple[str, ...]


class Counter:
    """A monotonically increasing number, optionally split by one label or several.

    `label` names the label (`"result"`) or labels (`("command", "result")`); `inc` and `get` then take
    one value, or a tuple of values in the same order.
    """

    def __init__(self, name: str, help_text: str, label: str | tuple[str, ...] | None = None) -> None:
        self.name = name
        self.help = help_text
        self.label = label
        self._names: tuple[str, ...] = () if label is None else (label,) if isinstance(label, str) else label
        self._values: dict[tuple[str, ...], float] = {}

    def _key(self, label: LabelValue) -> tuple[str, ...]:
        if not self._names:
            return ()  # a counter without labels has one value
        key = (label,) if isinstance(label, str) else label
        if len(key) != len(self._names):
            raise ValueError(f"{self.name} takes {len(self._names)} label values ({', '.join(self._names)})")
        return key

    def inc(self, value: float = 1.0, label: LabelValue = "") -> None:
        """Add to the counter (for the given label value or values)."""
        key = self._key(label)
        self._values[key] = self._values.get(key, 0.0) + value

    def get(self, label: LabelValue = "") -> float:
        """The current value for a label value (or values)."""
        return self._values.get(self._key(label), 0.0)

    def render(self) -> list[str]:
        """Prometheus exposition lines."""
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        if not self._values and not self._names:
            lines.append(f"{self.name} 0")
        for key, value in sorted(self._values.items()):
            pairs = ",".join(f'{name}="{_escape(v)}"' for name, v in zip(self._names, key, strict=True))
            suffix = f"{{{pairs}}}" if pairs else ""
            lines.append(f"{self.name}{suffix} {_number(value)}")
        return lines


class Gauge:
    """A value read at scrape time."""

    def __init__(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        self.name = name
        self.help = help_text
        self._read = read

    def render(self) -> list[str]:
        """Prometheus exposition lines."""
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge", f"{self.name} {_number(self._read())}"]


class Histogram:
    """How many observations fell at or below each bucket bound, their sum and count, per value of one label.

    Observing is a bisect and two additions: cheap enough for every event.
    """

    def __init__(self, name: str, help_text: str, label: str, buckets: Sequence[float]) -> None:
        if list(buckets) != sorted(set(buckets)) or not buckets:
            raise ValueError(f"{name}: bucket bounds must be distinct and increasing")
        self.name = name
        self.help = help_text
        self.label = label
        self.buckets = tuple(buckets)
        self._series: dict[str, tuple[list[int], list[float]]] = {}  # value -> (per-bucket counts + inf, [sum])

    def observe(self, value: float, label: str) -> None:
        """Count one observation (seconds, for a latency) under a label value."""
        series = self._series.get(label)
        if series is None:
            series = self._series[label] = ([0] * (len(self.buckets) + 1), [0.0])
        series[0][bisect.bisect_left(self.buckets, value)] += 1
        series[1][0] += value

    def count(self, label: str) -> int:
        """Observations under a label value."""
        series = self._series.get(label)
        return 0 if series is None else sum(series[0])

    def render(self) -> list[str]:
        """Prometheus exposition lines: cumulative `_bucket`s with `le`, then `_sum` and `_count`."""
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for value, (counts, total) in sorted(self._series.items()):
            pair = f'{self.label}="{_escape(value)}"'
            running = 0
            for bound, count in zip((*map(_number, self.buckets), "+Inf"), counts, strict=True):
                running += count
                lines.append(f'{self.name}_bucket{{{pair},le="{bound}"}} {running}')
            lines.append(f"{self.name}_sum{{{pair}}} {_number(total[0])}")
            lines.append(f"{self.name}_count{{{pair}}} {running}")
        return lines


class Metrics:
    """The registry."""

    def __init__(self) -> None:
        self._items: dict[str, Counter | Gauge | Histogram] = {}

    def counter(self, name: str, help_text: str, label: str | tuple[str, ...] | None = None) -> Counter:
        """Create (or return the existing) counter."""
        existing = self._items.get(name)
        if isinstance(existing, Counter):
            return existing
        counter = Counter(name, help_text, label)
        self._items[name] = counter
        return counter

    def histogram(self, name: str, help_text: str, label: str, buckets: Sequence[float]) -> Histogram:
        """Create (or return the existing) histogram."""
        existing = self._items.get(name)
        if isinstance(existing, Histogram):
            return existing
        histogram = Histogram(name, help_text, label, buckets)
        self._items[name] = histogram
        return histogram

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> Gauge:
        """Register a gauge read at scrape time (replaces one of the same name)."""
        gauge = Gauge(name, help_text, read)
        self._items[name] = gauge
        return gauge

    def render(self) -> str:
        """The whole text exposition."""
        lines: list[str] = []
        for name in sorted(self._items):
            lines.extend(self._items[name].render())
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


# Where a device event's time goes, from the MQTT message to the platform's answer (`hubd_event_stage_seconds`).
EVENT_STAGES = "hubd_event_stage_seconds"
EVENT_STAGE_HELP = ("seconds a device event spent in each stage: mqtt_to_commit (received until its batch was "
                    "committed), commit_to_post (until its POST began), post (the POST until the platform's answer)")
EVENT_STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25,
                       0.5, 1.0, 2.5, 5.0, 10.0)


def event_stages(metrics: Metrics) -> Histogram:
    """The one histogram of event stages, shared by the MQTT bridge and the outbox sender."""
    return metrics.histogram(EVENT_STAGES, EVENT_STAGE_HELP, "stage", EVENT_STAGE_BUCKETS)
