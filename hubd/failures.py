"""Per-message problems, logged without a flood: failures hubd did not expect, and refused device messages.

The bridge (a dialect that raises) and the registry (an input it fails on) catch any exception per message,
so one message never stops the others nor hubd. Each failure is one ERROR line with the topic; the traceback
comes with the first failure of each exception type only (`MessageFailures`). A refused message (bad payload,
unknown device) is one WARNING line per topic and reason per minute, and at most REFUSALS_PER_MINUTE lines a
minute in all; what was left out is counted and summed up in one line once its minute is over (`RefusalLog.run`,
which each owner of a RefusalLog runs from its own `run()`: the registry, the webhook), not only at the next
refusal, which may come hours later: 50,000 refused messages are a few lines, not 50,000. The status page keeps
every count.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from hubd.metrics import Metrics

REFUSAL_WINDOW_S = 60.0
REFUSALS_PER_MINUTE = 60
MAX_KEYS = 10_000
# While something waits to be summed up, how often `RefusalLog.run` reads the log's clock (its own: a test's, say,
# not the loop's) to see whether the minute is over.
SUMMARY_CHECK_S = 1.0


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


class RefusalLog:
    """WARNING lines for refusals: one per subject and reason per minute, at most REFUSALS_PER_MINUTE a minute in
    all; the rest counted and summed up by `flush()`, which `run()` calls once their minute is over. `what` names them
    in the summary ("refused device messages", "refused webhook calls"); `line` is the format of one line (subject,
    reason, hint)."""

    def __init__(self, log: logging.Logger, *, what: str = "refused device messages",
                 line: str = "ignored message on %s: %s%s", clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._what = what
        self._line = line
        self._clock = clock
        self._keys: OrderedDict[tuple[str, str], float] = OrderedDict()  # (subject, reason) → when it was logged
        self._window_start = clock()
        self._lines = 0
        self._quiet: OrderedDict[str, int] = OrderedDict()  # subject → refusals not logged since the last flush
        self._quiet_total = 0
        self._quiet_subjects = 0  # distinct subjects among them (counted past MAX_KEYS too)
        self._left_out = asyncio.Event()  # set while refusals wait to be summed up

    def refused(self, subject: str, reason: str, hint: str = "") -> None:
        """One refusal: logged unless the same subject and reason was within the minute, or the minute's lines are
        used up."""
        now = self._clock()
        if now - self._window_start >= REFUSAL_WINDOW_S:
            self.flush()
        key = (subject, reason)
        logged = self._keys.get(key)
        if (logged is not None and now - logged < REFUSAL_WINDOW_S) or self._lines >= REFUSALS_PER_MINUTE:
            self._quiet_total += 1
            count = self._quiet.get(subject)
            if count is None:
                self._quiet_subjects += 1
                if len(self._quiet) >= MAX_KEYS:
                    self._quiet.popitem(last=False)
            self._quiet[subject] = (count or 0) + 1
            self._left_out.set()
            return
        self._lines += 1
        self._keys[key] = now
        self._keys.move_to_end(key)
        if len(self._keys) > MAX_KEYS:
            self._keys.popitem(last=False)
        self._log.warning(self._line, subject, reason, hint)

    def flush(self) -> None:
        """Sum up what was not logged since the last flush (one line), and start a new minute."""
        if self._quiet_total:
            busiest = sorted(self._quiet.items(), key=lambda item: -item[1])[:3]
            self._log.warning("%d more %s on %d topic(s) not logged one by one (most on %s); the status page's "
                              "Problems counts them all", self._quiet_total, self._what, self._quiet_subjects,
                              ", ".join(f"{subject} ({count})" for subject, count in busiest))
        self._quiet = OrderedDict()
        self._quiet_total = self._quiet_subjects = 0
        self._left_out.clear()
        self._window_start = self._clock()
        self._lines = 0

    async def run(self) -> None:
        """Sum up what was left out once its minute is over, without waiting for another refusal; its owner runs
        this from its own `run()`. While nothing is left out it sleeps without waking."""
        while True:
            await self._left_out.wait()
            wait = self._window_start + REFUSAL_WINDOW_S - self._clock()
            if wait > 0:
                await asyncio.sleep(min(wait, SUMMARY_CHECK_S))
            else:
                self.flush()
