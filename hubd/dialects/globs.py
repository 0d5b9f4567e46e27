"""The include/exclude and doorbell globs every dialect matches names against (pure): fnmatch patterns,
case-insensitive, compiled once. Imports nothing of hubd.
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
