"""Counters and gauges rendered in the Prometheus text format for GET /metrics.

One `Metrics` object is built in app.py and handed to the components that count things.
"""

from __future__ import annotations

from collections.abc import Callable

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


class Metrics:
    """The registry."""

    def __init__(self) -> None:
        self._items: dict[str, Counter | Gauge] = {}

    def counter(self, name: str, help_text: str, label: str | tuple[str, ...] | None = None) -> Counter:
        """Create (or return the existing) counter."""
        existing = self._items.get(name)
        if isinstance(existing, Counter):
            return existing
        counter = Counter(name, help_text, label)
        self._items[name] = counter
        return counter

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
