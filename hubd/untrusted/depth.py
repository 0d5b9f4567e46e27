"""How deep JSON nests, found before a parser recurses into it (pure.

`json.loads` recurses once per nested array or object and raises RecursionError somewhere past 1,000
levels. Every reader of outside JSON (device payloads, request bodies) asks `too_deep` first.
"""

from __future__ import annotations

import re

# A JSON string (skipped whole, so brackets inside it do not count) or one bracket. An unterminated string
# runs to the end: a scan that failed there and restarted at the next quote would take quadratic time.
_NESTING_RE = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)


def too_deep(raw: bytes, max_depth: int) -> bool:
    """Whether arrays and objects nest more than `max_depth` levels deep in `raw` (UTF-8 JSON text).

    Linear, and cheap on real payloads: one with at most `max_depth` brackets in all is not scanned.
    """
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return False
    depth = 0
    for match in _NESTING_RE.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False
