"""`doorbells` entries that cannot ring, named (CONTRACT 6): at start, once the devices are known, and on reload.

Every dialect matches the `doorbells` declarations against its devices where it reads them (hubd.dialects.globs
`Selected`, which records each device a declaration named and the events that device announces: zigbee2mqtt's
action values, Home Assistant's device triggers and event types, Tasmota's button and switch actions), and says so
in `Dialect.doorbell_report`. `findings` (pure) turns the dialects' reports into problems: a declaration whose
event the device it names never announces (the warning names the events it does announce), and one that names no
device of any dialect. `DoorbellCheck` (a component) logs each as a warning and lists it under the status page's
problems, once per selection: again after a reload (`say_again`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from hubd.dialects.base import Dialect
from hubd.dialects.globs import DoorbellReport

log = logging.getLogger(__name__)

CHECK_EVERY_S = 2.0
# After start, how long the retained device lists (bridge/devices, discovery configs, Tasmota's) may take to come:
# a declaration that names no device is said only after it.
DEVICES_KNOWN_AFTER_S = 10.0
SUBJECT = "doorbells"


class Notices(Protocol):
    """Where problems are listed for the status page (hubd.outbox.journal.EventJournal)."""

    def noticed(self, subject: str, problem: str, at: float) -> None:
        """Something went wrong for `subject`."""


def findings(reports: Sequence[tuple[str, DoorbellReport]], *, devices_known: bool) -> list[str]:
    """Each declaration that cannot ring, said once: its event never announced by a device it names (by dialect),
    and, once the devices are known, one that names no device at all."""
    out: list[str] = []
    named: set[tuple[str, str]] = set()
    for dialect, report in reports:
        for match in report.matches:
            named.add((match.device_glob, match.event))
            if match.fits():
                continue
            said = f"announces {', '.join(repr(a) for a in match.announces)}" if match.announces else \
                "announces no press at all"
            out.append(f"doorbells entry {{device: {match.device_glob!r}, event: {match.event!r}}}: {dialect} device "
                       f"{match.device!r} never announces {match.event!r}, so it never rings; it {said}")
    if devices_known:
        declared = dict.fromkeys(d for _, report in reports for d in report.declared)
        for glob, event in declared:
            if (glob, event) not in named:
                out.append(f"doorbells entry {{device: {glob!r}, event: {event!r}}} names no device hubd knows (by "
                           "name, identifier or endpointId), so it never rings")
    return list(dict.fromkeys(out))


class DoorbellCheck:
    """Names the `doorbells` entries that cannot ring: logged as warnings and listed under problems, each once per
    selection (`say_again` after a reload)."""

    name = "doorbell-check"

    def __init__(self, dialects: Sequence[Dialect], notices: Notices | None, *,
                 clock: Callable[[], float] = time.monotonic, known_after_s: float = DEVICES_KNOWN_AFTER_S) -> None:
        self._dialects = tuple(dialects)
        self._notices = notices
        self._clock = clock
        self._known_at = clock() + known_after_s
        self._said: set[str] = set()

    async def start(self) -> None:
        """Nothing to prepare: the first check runs with `run`."""

    async def run(self) -> None:
        """Check every few seconds (the reports are a few entries: cheap)."""
        while True:
            self.check()
            await asyncio.sleep(CHECK_EVERY_S)

    async def stop(self) -> None:
        """Nothing to release."""

    def say_again(self) -> None:
        """A reload: every entry that cannot ring is named again, at once (the devices are known by now)."""
        self._said.clear()
        self._known_at = min(self._known_at, self._clock())
        self.check()

    def check(self) -> list[str]:
        """Name what was not named yet; what it named."""
        reports = []
        for dialect in self._dialects:
            try:
                reports.append((dialect.name, dialect.doorbell_report()))
            except Exception:  # one dialect's bug must not stop the check (nor hubd)
                log.exception("the %s dialect failed to report its doorbells", dialect.name)
        new = [f for f in findings(reports, devices_known=self._clock() >= self._known_at) if f not in self._said]
        for problem in new:
            self._said.add(problem)
            log.warning("%s", problem)
            if self._notices is not None:
                self._notices.noticed(SUBJECT, problem, time.time())
        return new
