"""The include/exclude and doorbell globs every dialect matches names against (pure): fnmatch patterns,
case-insensitive, compiled once.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass


class Globs:
    """fnmatch patterns, case-insensitive, compiled once."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self._res = [re.compile(fnmatch.translate(p.casefold())) for p in patterns]

    def any(self, names: Iterable[str | None]) -> bool:
        """Whether a pattern matches one of the names (None and empty ones never match)."""
        folded = [n.casefold() for n in names if n]
        return any(r.match(n) for r in self._res for n in folded)


@dataclass(frozen=True, slots=True)
class DoorbellMatch:
    """A `doorbells` declaration that matched a device: the device's name and the events it announces (() when it
    takes any event; None when it announces no press at all)."""

    device_glob: str
    event: str
    device: str
    announces: tuple[str, ...] | None

    def fits(self) -> bool:
        """Whether the declared event is one the device announces (any, when it names none)."""
        return self.announces is not None and (not self.announces or self.event.casefold() in
                                               {a.casefold() for a in self.announces})


@dataclass(frozen=True, slots=True)
class DoorbellReport:
    """A dialect's `doorbells` declarations (device glob, event) and the devices they matched so far."""

    declared: tuple[tuple[str, str], ...] = ()
    matches: tuple[DoorbellMatch, ...] = ()


class Selected:
    """A dialect's selection compiled once: which devices it imports (include, then exclude) and which are
    doorbells (`(device glob, event)`, first match wins). Built from the config at start and from each new
    Selection (`Dialect.reconfigure`)."""

    def __init__(self, include: Iterable[str], exclude: Iterable[str], doorbells: Iterable[tuple[str, str]]) -> None:
        self._include = Globs(include)
        self._exclude = Globs(exclude)
        self.declared = tuple(doorbells)
        self.doorbells = tuple((Globs([device]), event) for device, event in self.declared)
        self._matches: dict[tuple[str, int], DoorbellMatch] = {}  # by device (its key) and declaration

    def included(self, names: Iterable[str | None]) -> bool:
        """Whether a device (or entity) of these names and identifiers is imported."""
        names = list(names)
        return self._include.any(names) and not self._exclude.any(names)

    def doorbell(self, names: Iterable[str | None], *, device: str | None = None,
                 announces: tuple[str, ...] | None = (), key: str | None = None) -> str | None:
        """The event that makes a press of this device a doorbell press, if one is declared for it; with `device`
        (its name), `announces` (the events it announces, DoorbellMatch's) and `key` (its identity), the match is
        recorded for `report`."""
        names = list(names)
        for index, (globs, event) in enumerate(self.doorbells):
            if globs.any(names):
                if device is not None:
                    self.record(index, device, announces, key)
                return event
        return None

    def record(self, index: int, device: str, announces: tuple[str, ...] | None, key: str | None = None) -> None:
        """Declaration `index` matched `device` (its name; `key`, its identity, when a name may change as its
        entities come), which announces these events (for `report`)."""
        glob, event = self.declared[index]
        self._matches[(key or device, index)] = DoorbellMatch(glob, event, device, announces)

    def report(self) -> DoorbellReport:
        """The declarations and the devices they matched (the dialect's `doorbell_report`)."""
        return DoorbellReport(self.declared, tuple(self._matches[k] for k in sorted(self._matches)))
