"""Per-message failures hubd did not expect (a bug for one message): counted, and logged without a flood.

The bridge (a dialect that raises) and the registry (an input it fails on) catch any exception per message,
so one message never stops the others nor hubd. Each failure is one ERROR line with the topic; the traceback
comes with the first failure of each exception type only. Imports only hubd.metrics.
"""

from __future__ import annotations

import logging

from hubd.metrics import Metrics


class MessageFailures:
    """Counts unexpected per-message failures by exception type and logs each, the first of a type in full."""

    def __init__(self, metrics: Metrics) -> None:
        self._count = metrics.counter("hubd_device_messages_failed_total",
                                      "device messages hubd failed on unexpectedly (a bug), by exception", "error")
        self._traced: set[str] = set()  # exception types whose traceback was logged once

    def record(self, log: logging.Logger, topic: str, who: str, err: Exception) -> None:
        """One failure of `who` ("hubd", "the zigbee2mqtt dialect") on the message on `topic`."""
        kind = type(err).__name__
        self._count.inc(label=kind)
        first = kind not in self._traced
        self._traced.add(kind)
        log.error("ignored message on %s: %s failed on it (%s: %s)%s", topic, who, kind, str(err)[:200],
                  "" if first else "; the traceback was logged for the first such failure", exc_info=first)
