"""Request bodies as JSON, with the size and nesting bounded before the parser runs.

`json.loads` recurses once per nested array or object and raises RecursionError somewhere past
1,000 levels (how far depends on the stack already in use), and a number of more than 4,300
digits is a ValueError that is not a JSONDecodeError. Both are turned into `JsonBodyInvalid`
with a message a client can act on. Pure.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from hubd.untrusted.depth import too_deep

MAX_DEPTH = 32  # hubd's request bodies nest 3 or 4 levels

class JsonBodyInvalid(ValueError):
    """The body cannot be read as JSON; the text says why and what to send."""


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
