"""The include/exclude and doorbell globs every dialect matches names against (pure): fnmatch patterns,
case-insensitive, compiled once.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable


class Globs:
    """fnmatch patterns, case-insensitive, compiled once."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self._res = [re.compile(fnmatch.translate(p.casefold())) for p in patterns]

    def any(self, names: Iterable[str | None]) -> bool:
        """Whether a pattern matches one of the names (None and empty ones never match)."""
        folded = [n.casefold() for n in names if n]
        return any(r.match(n) for r in self._res for n in folded)


class Selected:
    """A dialect's selection compiled once: which devices it imports (include, then exclude) and which are
    doorbells (`(device glob, event)`, first match wins). Built from the config at start and from each new
    Selection (`Dialect.reconfigure`)."""

    def __init__(self, include: Iterable[str], exclude: Iterable[str], doorbells: Iterable[tuple[str, str]]) -> None:
        self._include = Globs(include)
        self._exclude = Globs(exclude)
        self.doorbells = tuple((Globs([device]), event) for device, event in doorbells)

    def included(self, names: Iterable[str | None]) -> bool:
        """Whether a device (or entity) of these names and identifiers is imported."""
        names = list(names)
        return self._include.any(names) and not self._exclude.any(names)

    def doorbell(self, names: Iterable[str | None]) -> str | None:
        """The event that makes a press of this device a doorbell press, if one is declared for it."""
        names = list(names)
        return next((event for globs, event in self.doorbells if globs.any(names)), None)
