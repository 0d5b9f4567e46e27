"""What the registry tells of the device messages it refuses and of what else goes wrong with devices: a log line
per subject and reason at most once a minute (`hubd.failures.RefusalLog`), the event journal's entries for the
status page (`RejectionObserver`), the invalid-message counter, a burst of doorbell presses, a speaker's failed
command, a command a device's own template could not make, and at debug level one line per device message
saying what it changed.
Given topics, kinds and reasons, not the dialects' inputs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from hubd.devices.changes import Change, describe
from hubd.devices.device import Device
from hubd.devices.model import CommandResult
from hubd.failures import MessageFailures, RefusalLog
from hubd.metrics import Metrics

log = logging.getLogger("hubd.registry")

BURST_PRESSES = 10  # presses of one doorbell within BURST_WINDOW_S: a problem to show
BURST_WINDOW_S = 2.0


class RejectionObserver(Protocol):
    """Told of every device message the registry refuses, and of what else it notices (the event journal,
    `hubd.outbox.journal`); each call O(1)."""

    def rejected(self, topic: str, reason: str, at: float) -> None:
        """A message on `topic` was refused for `reason` (received at `at`)."""

    def noticed(self, subject: str, problem: str, at: float) -> None:
        """Something else went wrong for `subject` (a device's burst of presses)."""


class DeviceProblems:
    """The registry's problems, told: logged (throttled), counted, journaled. `label` names a device in lines."""

    def __init__(self, metrics: Metrics, observer: RejectionObserver | None, label: Callable[[str], str]) -> None:
        self._observer = observer
        self._label = label
        self._invalid = metrics.counter("hubd_device_messages_invalid_total",
                                        "device messages ignored as invalid, by kind", "kind")
        self._failures = MessageFailures(metrics)
        self._refusals = RefusalLog(log)
        self._command_errors = RefusalLog(log, what="failed speaker commands", line="%s: %s%s")
        self._command_refusals = RefusalLog(log, what="commands refused by a device's template", line="%s: %s%s")
        self._presses: dict[str, deque[float]] = {}  # device → when its last presses came (a burst is a problem)

    async def run(self) -> None:
        """Sum up the refusals not logged one by one once their minute is over (the registry's `run()`)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._refusals.run(), name="device-refusals-summed-up")
            group.create_task(self._command_errors.run(), name="command-errors-summed-up")
            group.create_task(self._command_refusals.run(), name="command-refusals-summed-up")

    def rejected(self, kind: str, topic: str, reason: str, retained: bool, at: float) -> None:
        """A dialect refused a message (`kind`: config, state, ...)."""
        self._invalid.inc(label=kind)
        self._refusals.refused(topic, reason, _clear_hint(kind, topic, retained))
        self._journal(topic, reason, at)

    def invalid(self, kind: str, topic: str, err: Exception, at: float) -> str:
        """The registry refused an input (DeviceMessageInvalid); what the trace says of it."""
        self._invalid.inc(label=kind)
        self._refusals.refused(topic, str(err))
        self._journal(topic, str(err), at)
        return str(err)

    def failed(self, kind: str, topic: str, err: Exception, at: float) -> str:
        """hubd failed on an input (a bug): logged with its traceback once, never raised."""
        self._invalid.inc(label=kind)
        self._failures.record(log, topic, "hubd", err)
        self._journal(topic, f"hubd failed on it ({type(err).__name__}: {err})", at)
        return f"hubd failed on it ({type(err).__name__})"

    def command_failed(self, device_id: str, result: CommandResult, at: float) -> None:
        """A speaker's command failed: a problem to show, and to log."""
        what = f"command {result.command_id} failed: {result.message or 'no reason given'}"
        self._command_errors.refused(self._label(device_id), what)
        if self._observer is not None:
            self._observer.noticed(self._label(device_id), what, at)

    def command_refused(self, device_id: str, reason: str, at: float) -> None:
        """A command the device's config could not make (its command template failed): a problem to show, and to
        log."""
        what = f"a command could not be made: {reason}; fix the template in the device's discovery config"
        self._command_refusals.refused(self._label(device_id), what)
        if self._observer is not None:
            self._observer.noticed(self._label(device_id), what, at)

    def pressed(self, device: Device, topic: str, at: float) -> None:
        """Every press is sent; a burst of them (a bouncing button, a flood) is shown as a problem."""
        times = self._presses.get(device.device_id)
        if times is None:
            times = self._presses[device.device_id] = deque(maxlen=BURST_PRESSES)
        times.append(at)
        if len(times) == BURST_PRESSES and times[-1] - times[0] <= BURST_WINDOW_S:
            times.clear()
            if self._observer is not None:
                self._observer.noticed(
                    device.device_id, f"{device.config.displayName}: {BURST_PRESSES} doorbell presses within "
                    f"{BURST_WINDOW_S:g} s (each one is sent to the platform); a button that bounces, or a flood on "
                    f"{topic}?", at)

    def trace(self, topic: str, source: str, changes: Sequence[Change], refused: Sequence[str]) -> None:
        """At debug: one line for a device message, naming each device it changed and how, or why not."""
        said = [describe(c, self._label(c.device_id)) for c in changes]
        said += [f"refused: {why}" for why in refused]
        log.debug("MQTT %s (%s): %s", topic, source or "?", "; ".join(said) or "nothing changed")

    def _journal(self, topic: str, reason: str, at: float) -> None:
        if self._observer is not None:
            self._observer.rejected(topic, reason, at)


def _clear_hint(kind: str, topic: str, retained: bool) -> str:
    """For a refused retained config, how to clear it from the broker (else it comes back at every start)."""
    if kind != "config" or not retained:
        return ""
    quoted = topic.replace("'", "'\\''")
    return (f"; it is retained on the broker: publish a fixed config, or clear it with "
            f"mosquitto_pub -h <broker> -t '{quoted}' -r -n")
