"""Request bodies as JSON, with the size and nesting bounded before the parser runs.

`json.loads` recurses once per nested array or object and raises RecursionError somewhere past
1,000 levels (how far depends on the stack already in use), and a number of more than 4,300
digits is a ValueError that is not a JSONDecodeError. Both are turned into `JsonBodyInvalid`
with a message a client can act on. Pure: imports nothing from hubd.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

MAX_DEPTH = 32  # hubd's request bodies nest 3 or 4 levels

# A JSON string (skipped whole, so brackets inside it do not count) or one bracket. The closing quote
# is optional: an unterminated string runs to the end, so no position is scanned twice.
_NESTING_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


class JsonBodyInvalid(ValueError):
    """The body cannot be read as JSON; the text says why and what to send."""


def too_deep(raw: bytes, max_depth: int) -> bool:
    """Whether arrays and objects nest more than `max_depth` levels deep in `raw` (read as JSON text).

    Linear, and cheap on a body with few brackets: one with at most `max_depth` of them is not scanned.
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


def load_json(raw: bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """The decoded body (UTF-8, a byte order mark allowed), or JsonBodyInvalid: too large, too deep, not JSON.

    The message says what is wrong, not what to send: the caller adds that.
    """
    if len(raw) > max_bytes:
        raise JsonBodyInvalid(f"the body is {len(raw)} bytes, more than the {max_bytes} allowed")
    if too_deep(raw, max_depth):
        raise JsonBodyInvalid(f"the body nests arrays or objects more than {max_depth} levels deep")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise JsonBodyInvalid(f"the body is not UTF-8 (byte {err.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise JsonBodyInvalid(f"the body is not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") \
            from None
    except ValueError:  # an integer too long to convert (sys.get_int_max_str_digits)
        raise JsonBodyInvalid(f"the body holds a number of more than {sys.get_int_max_str_digits()} digits") \
            from None
    except RecursionError:  # not expected after the depth check; kept so that it can never become a 500
        raise JsonBodyInvalid(f"the body nests arrays or objects more than {max_depth} levels deep") from None
