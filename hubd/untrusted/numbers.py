"""Whole numbers written in text someone else gave (a topic level, an id on a command line, a URL's port).

Not `str.isdigit` and `int`: "²" is a digit to `isdigit` and `int` refuses it (a ValueError where a check was
meant), and "١٨٨٣" is 1883 to `int` though no MQTT topic, URL or id of hubd's writes it so.
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"[0-9]+")
_CANONICAL = re.compile(r"0|[1-9][0-9]*")


def ascii_int(text: str, *, max_digits: int = 18, leading_zeros: bool = True) -> int | None:
    """The number `text` is, written in ASCII digits only (at most `max_digits` of them; with `leading_zeros` False,
    none: where `01` would be a second name of 1, or YAML reads `0777` as octal); None if it is not one."""
    if len(text) > max_digits or (_DIGITS if leading_zeros else _CANONICAL).fullmatch(text) is None:
        return None
    return int(text)
