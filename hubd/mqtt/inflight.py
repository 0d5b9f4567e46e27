"""The in-flight record: which device messages hubd was reading when it died, so that a message that kills hubd
costs one restart, not a crash loop that outlasts systemd's start limit.

hubd acknowledges a device message only once what it caused is committed, so a message that kills hubd while it is
being read (a bug, the kernel's OOM killer, systemd's watchdog on a stalled loop) is never acknowledged: the broker
delivers it again at the next start, and a retained one comes at every start anyway. So before the bridge decodes
a step of messages it writes their marks (topic, CRC-32 and length of each payload) to a small file beside the
database, and empties the list once the step is committed. At start, whatever the record names was in flight at
the death:

- one message alone in flight while it was being decoded (where a payload is parsed: where poisons strike): it is
  set aside at its next delivery, after this one death: acknowledged unread, listed under the status page's
  problems with its topic, and so whenever it comes again (a retained one comes at every start) until its content
  changes. hubd cannot tell a poison from a kill from outside (`kill -9`) that lands in that moment: that one
  message is set aside too, listed under problems;
- one message alone in flight after it was decoded (`decoded`: its effects were being committed, the likeliest
  moment for a kill from outside, since decoding takes microseconds and a commit a disk's flush): it is read again,
  alone, in a careful run, and set aside only if hubd dies on it alone a second time. So an ordinary `kill -9`
  loses no state, and a poison that strikes only after its decoding costs two restarts;
- several (a batch), or any number when the machine restarted meanwhile (a power cut is no poison): none is
  blamed, but the run is careful: for CAREFUL_S from its first message it reads every message alone, each with its
  own mark on disk before it is decoded (the broker's queued and retained messages come then). A poison among them
  then dies alone, and is set aside at the next start.

So N poisons cost at most N + 1 restarts in all: one death in a batch, then one alone each (POISONS_WITHIN_START_LIMIT
of them fit the unit's StartLimitBurst). A careful run that dies, in flight or not, makes the next careful too. The
record is rewritten at start, before anything is read: a death before the next step is begun loses no count.

Each message set aside is counted once: the record keeps the marks it counted and their total
(`hubd_mqtt_set_aside_total` starts from it), so a retained copy set aside again at a later start is not counted
again. The marks are the payload's, not the packet id: a broker that restarted meanwhile sends the same message
under another id. A death while a message is still being received (a payload larger than the memory left) comes
before the record knows it: `mqtt.max_message_bytes` and mosquitto's `message_size_limit` bound that.

The file is written with pwrite, fsynced only at start: it must outlive hubd's process (a SIGKILL, the OOM killer,
a crash: the kernel holds what was written), not the machine (a power cut is no poison), and an fsync per batch
would cost an SD card's flush for each. A record hubd cannot write (a full or read-only disk) disables the guard
with one warning; messages still flow.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

Mark = tuple[str, int, int]  # topic, CRC-32 of the payload, its length
DEATHS_TO_SET_ASIDE = 1
MAX_SUSPECTS = 10_000
# After a death in a batch, every message of the run's first minute is read alone.
CAREFUL_S = 60.0
# Poisons that fit systemd's start limit: N of them cost at most N + 1 restarts, N + 2 starts (tests check the unit).
POISONS_WITHIN_START_LIMIT = 5


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
        """A message hubd died on: acknowledged unread, never read again."""
        return self.deaths >= DEATHS_TO_SET_ASIDE


class InflightRecord:
    """The record file, the messages it names as set aside (mark → deaths), and whether this run is careful."""

    def __init__(self, path: Path | None, monotonic: Callable[[], float] = time.monotonic,
                 boot_id: str | None = None) -> None:
        self._path = path
        self._monotonic = monotonic
        self._boot = _boot_id() if boot_id is None else boot_id
        self._fd: int | None = None
        self._broken = path is None
        self.suspects: dict[Mark, int] = {}  # messages hubd died on alone: set aside whenever they come
        self.set_aside_total = 0  # distinct messages ever set aside (what the metric counts)
        self._counted: set[Mark] = set()  # suspects set aside (and counted) already
        self.careful = False  # every message read alone (after a death in a batch), until `_careful_until`
        self._careful_until: float | None = None
        self._current: dict[Mark, int] = {}  # the step being read: mark → deaths so far
        self._decoded = False  # the step being read is decoded: its effects are being committed
        self._after_decode: set[Mark] = set()  # died on alone after decoding it once: set aside if it happens again
        self._tail_json: str | None = None  # all but `inflight` as the record writes it, until it changes

    def load(self) -> None:
        """Read what the last run left, count the death it names, and write that down before anything is read."""
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
        suspects = {m: d for m, d in _marks(data.get("suspects")) if d > 0}
        died = _marks(data.get("inflight"))
        after_decode = {m for m, _ in _marks([[*item, 0] for item in _list(data.get("after_decode"))])}
        boot = data.get("boot")
        rebooted = bool(self._boot) and isinstance(boot, str) and bool(boot) and boot != self._boot
        first_after_decode = False
        if len(died) == 1 and not rebooted:  # alone in flight: it killed hubd (or hubd died reading it: the same)
            found, deaths = died[0]
            if data.get("decoded") is True and found not in after_decode:
                after_decode.add(found)  # decoded already: most likely a kill from outside; read alone once more
                first_after_decode = True
            else:
                after_decode.discard(found)
                suspects[found] = max(suspects.get(found, 0), deaths) + 1
        self._after_decode = set(list(after_decode)[-MAX_SUSPECTS:])
        self.suspects = dict(list(suspects.items())[-MAX_SUSPECTS:])
        self._counted = {m for m, _ in _marks([[*item, 0] for item in _list(data.get("counted"))])
                         if m in self.suspects}
        total = data.get("total")
        self.set_aside_total = max(total if isinstance(total, int) and not isinstance(total, bool) else 0,
                                   len(self._counted))
        self.careful = bool(died) or data.get("careful") is True
        self._tail_json = None
        self._write(sync=True)
        if first_after_decode:
            log.warning("hubd stopped while committing what one device message caused (%s, %d bytes), after reading "
                        "it; it is read again, alone, and set aside only if hubd stops on it again", died[0][0][0],
                        died[0][0][2])
        elif rebooted and died:
            log.warning("the machine restarted while hubd read %d device message(s): no poison; for its first %d s "
                        "of messages hubd reads each alone", len(died), CAREFUL_S)
        elif len(died) == 1:
            log.warning("hubd stopped while reading one device message (%s, %d bytes); it is set aside unread when "
                        "it comes again", died[0][0][0], died[0][0][2])
        elif died:
            log.warning("hubd stopped while reading %d device messages (%s); for its first %d s of messages hubd "
                        "now reads each alone, and one it stops on is set aside at the next start", len(died),
                        ", ".join(sorted({m[0] for m, _ in died})[:5]), CAREFUL_S)

    def plan(self, messages: Sequence[M]) -> list[Step[M]]:
        """The batch in steps, in order: runs of ordinary messages, each message alone in a careful run, a
        message hubd died on alone set aside."""
        careful = self._still_careful()
        if not self.suspects and not careful:
            return [Step(tuple(messages))] if messages else []
        steps: list[Step[M]] = []
        run: list[M] = []
        for message in messages:
            deaths = self.suspects.get(mark(message)) if self.suspects else None
            if deaths is None and not careful:
                run.append(message)
                continue
            if run:
                steps.append(Step(tuple(run)))
                run = []
            steps.append(Step((message,), deaths or 0))
        if run:
            steps.append(Step(tuple(run)))
        return steps

    def begin(self, step: Step[Any]) -> None:
        """Before its messages are decoded: note them as in flight."""
        self._current = {mark(m): step.deaths for m in step.messages}
        self._decoded = False
        self._write()

    def decoded(self, step: Step[Any]) -> None:
        """Its messages are decoded; their effects are being committed (a death now is most likely not theirs)."""
        self._decoded = True
        self._write()

    def end(self, step: Step[Any]) -> None:
        """Its effects are committed: nothing is in flight. One set aside stays set aside (a retained message comes
        at every start) until its content changes."""
        if self._after_decode and not self._after_decode.isdisjoint(self._current):
            self._after_decode -= set(self._current)  # read and committed again: no poison after all
            self._tail_json = None
        self._current = {}
        self._decoded = False
        self._write()

    def first_set_aside(self, message: _Message) -> bool:
        """Whether this message is set aside for the first time (to be counted); noted with the step's end."""
        found = mark(message)
        if found in self._counted:
            return False
        self._counted.add(found)
        self.set_aside_total += 1
        self._tail_json = None
        return True

    def cancelled(self) -> None:
        """The step begun was cancelled (hubd stops): it is no longer in flight, and no death."""
        self._current = {}
        self._decoded = False
        self._write()

    def close(self) -> None:
        """Release the file (a clean stop: nothing is in flight)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _still_careful(self) -> bool:
        """A careful run reads every message alone for CAREFUL_S from its first."""
        if not self.careful:
            return False
        now = self._monotonic()
        if self._careful_until is None:
            self._careful_until = now + CAREFUL_S
        elif now >= self._careful_until:
            self.careful = False
            self._tail_json = None
            log.info("hubd read every device message alone for %d s after it stopped on several; batches again",
                     CAREFUL_S)
        return self.careful

    def _write(self, sync: bool = False) -> None:
        if self._broken:
            return
        if not self._current and not self.suspects and not self.careful and not self.set_aside_total \
                and not self._after_decode:
            body = b""
        else:
            if self._tail_json is None:
                self._tail_json = (f'"suspects":{_json([[*m, d] for m, d in self.suspects.items()])},'
                                   f'"counted":{_json([list(m) for m in self._counted])},'
                                   f'"after_decode":{_json([list(m) for m in self._after_decode])},'
                                   f'"total":{self.set_aside_total},"careful":{_json(self.careful)},'
                                   f'"boot":{_json(self._boot)}')
            inflight = _json([[*m, d] for m, d in self._current.items()])
            body = f'{{"inflight":{inflight},"decoded":{_json(self._decoded)},{self._tail_json}}}'.encode()
        try:
            if self._fd is None:
                assert self._path is not None
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.pwrite(self._fd, body, 0)
            os.ftruncate(self._fd, len(body))
            if sync:
                os.fsync(self._fd)
        except OSError as err:
            self._broken = True
            log.warning("cannot write the in-flight record %s (%s): a message that stops hubd would be read again "
                        "at every start; free the disk and restart hubd", self._path, err)


def _boot_id() -> str:
    """This boot's id (Linux): a record from another boot names a machine's restart (a power cut), not a poison."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _parse(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        log.warning("the in-flight record is damaged; starting without it")
        return {}
    return data if isinstance(data, dict) else {}


def _list(items: Any) -> list[Any]:
    return [item for item in items if isinstance(item, list)] if isinstance(items, list) else []


def _marks(items: Any) -> list[tuple[Mark, int]]:
    out: list[tuple[Mark, int]] = []
    for item in _list(items):
        if len(item) == 4 and isinstance(item[0], str) and \
                all(isinstance(n, int) and not isinstance(n, bool) for n in item[1:]):
            out.append(((item[0], item[1], item[2]), item[3]))
    return out
