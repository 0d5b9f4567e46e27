"""The in-flight record: which device messages hubd was reading when it died, so that one message cannot kill it
at every start.

hubd acknowledges a device message only once what it caused is committed, so a message that kills hubd while it is
being read (a bug, the kernel's OOM killer, systemd's watchdog on a stalled loop) is never acknowledged: the broker
delivers it again at the next start, before anything else, and hubd dies again, until systemd gives up. So the
bridge writes the marks of a batch (topic, CRC-32 and length of each payload) to a small file beside the database
before it decodes them, and empties it once the batch is committed. A record still full at start names the messages
hubd died on. `plan` then reads each of them alone when it comes again; a message hubd died on twice while it was
the only one in flight is not read again: it is acknowledged and set aside (listed under the status page's problems
with its topic), and so it is whenever it comes again (a retained one comes at every start) until its content
changes. A death with several messages in flight (hubd killed from outside at some moment, a power-cut restart) only
makes each a suspect, read alone in the next run only: it counts against none of them. The marks are the payload's,
not the packet id: a broker that restarted meanwhile sends the same message under another id. A death while the
message is still being received (a payload larger than the memory left) comes before the record knows it:
mosquitto's `message_size_limit` bounds that.

The file is written without fsync: it must outlive hubd's process, not the machine (a power cut is no poison).
A record hubd cannot write (a full or read-only disk) disables the guard with one warning; messages still flow.
Imports nothing of hubd.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

Mark = tuple[str, int, int]  # topic, CRC-32 of the payload, its length
DEATHS_TO_SET_ASIDE = 2
MAX_SUSPECTS = 10_000


class _Message(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def payload(self) -> bytes: ...


def mark(message: _Message) -> Mark:
    """What identifies a message's content across deliveries."""
    return (message.topic, zlib.crc32(message.payload), len(message.payload))


M = TypeVar("M", bound=_Message)


@dataclass(frozen=True, slots=True)
class Step(Generic[M]):
    """Part of a batch: messages to read together, or one to set aside unread (`deaths` > 0)."""

    messages: tuple[M, ...]
    deaths: int = 0  # how often hubd died with it alone in flight: set aside when DEATHS_TO_SET_ASIDE or more

    @property
    def set_aside(self) -> bool:
        """A message hubd died on too often to read again."""
        return self.deaths >= DEATHS_TO_SET_ASIDE


class InflightRecord:
    """The record file and the suspects it named at start (marks of messages hubd died with, and how often)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._fd: int | None = None
        self._broken = path is None
        self.suspects: dict[Mark, int] = {}
        self._current: dict[Mark, int] = {}  # the batch being read: mark → deaths so far
        self._suspects_json: str | None = None  # `suspects` as the record writes them, until they change

    def load(self) -> None:
        """Read what the last run left: every message it was reading when it died becomes a suspect."""
        if self._path is None:
            return
        try:
            text = self._path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as err:
            log.warning("cannot read the in-flight record %s (%s); starting without it", self._path, err)
            return
        data = _parse(text)
        # A suspect that only ever died in a batch had the last run to come again: it is kept no longer (a QoS 0
        # message or a changed reading never comes again the same). One that stopped hubd alone is kept.
        suspects = {m: d for m, d in _marks(data.get("suspects")) if d > 0}
        died = _marks(data.get("inflight"))
        for found, deaths in died:
            # A death counts against a message only when it was the only one in flight: a death in a batch of
            # several (hubd killed from outside, a power-cut restart, any of them) makes each a suspect, read alone.
            suspects[found] = max(suspects.get(found, 0), deaths) + (1 if len(died) == 1 else 0)
        self.suspects = dict(list(suspects.items())[-MAX_SUSPECTS:])
        self._suspects_json = None
        if died:
            log.warning("hubd stopped while reading %d device message(s) (%s); each is read alone when it comes "
                        "again, and one hubd stops on %d times is set aside unread", len(died),
                        ", ".join(sorted({m[0] for m, _ in died})[:5]), DEATHS_TO_SET_ASIDE)

    def plan(self, messages: Sequence[M]) -> list[Step[M]]:
        """The batch in steps, in order: runs of ordinary messages, each suspect alone (or set aside)."""
        if not self.suspects:
            return [Step(tuple(messages))] if messages else []
        steps: list[Step[M]] = []
        run: list[M] = []
        for message in messages:
            deaths = self.suspects.get(mark(message))
            if deaths is None:
                run.append(message)
                continue
            if run:
                steps.append(Step(tuple(run)))
                run = []
            steps.append(Step((message,), deaths))
        if run:
            steps.append(Step(tuple(run)))
        return steps

    def begin(self, step: Step[Any]) -> None:
        """Before its messages are read: note them as in flight (and the suspects still to come)."""
        self._current = {mark(m): step.deaths for m in step.messages}
        self._write()

    def end(self, step: Step[Any]) -> None:
        """Its effects are committed: nothing is in flight. A suspect read without dying is cleared; one set aside
        stays (a retained message comes at every start, and is set aside again) until its content changes."""
        for found, deaths in self._current.items():
            if deaths < DEATHS_TO_SET_ASIDE and self.suspects.pop(found, None) is not None:
                self._suspects_json = None
        self._current = {}
        self._write()

    def cancelled(self) -> None:
        """The step begun was cancelled (hubd stops): it is no longer in flight, and no death."""
        self._current = {}
        self._write()

    def close(self) -> None:
        """Release the file (a clean stop: nothing is in flight)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self) -> None:
        if self._broken:
            return
        if not self._current and not self.suspects:
            body = b""
        else:
            if self._suspects_json is None:
                self._suspects_json = _json([[*m, d] for m, d in self.suspects.items()])
            inflight = _json([[*m, d] for m, d in self._current.items()])
            body = f'{{"inflight":{inflight},"suspects":{self._suspects_json}}}'.encode()
        try:
            if self._fd is None:
                assert self._path is not None
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.pwrite(self._fd, body, 0)
            os.ftruncate(self._fd, len(body))
        except OSError as err:
            self._broken = True
            log.warning("cannot write the in-flight record %s (%s): a message that stops hubd would be read again "
                        "at every start; free the disk and restart hubd", self._path, err)


def _json(items: list[list[Any]]) -> str:
    return json.dumps(items, ensure_ascii=False, separators=(",", ":"))


def _parse(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        log.warning("the in-flight record is damaged; starting without it")
        return {}
    return data if isinstance(data, dict) else {}


def _marks(items: Any) -> list[tuple[Mark, int]]:
    out: list[tuple[Mark, int]] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, list) and len(item) == 4 and isinstance(item[0], str) and \
                all(isinstance(n, int) and not isinstance(n, bool) for n in item[1:]):
            out.append(((item[0], item[1], item[2]), item[3]))
    return out
