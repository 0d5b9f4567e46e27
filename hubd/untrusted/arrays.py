"""A JSON array read one element at a time, within a memory budget (pure.

`json.loads` builds a whole document before anyone can count it: `[{},{},...]` of 16 MiB is 5.6 million dicts,
several hundred MiB. `array_items` decodes the UTF-8 bytes a window at a time (so the text held is a window, not a
second copy of the document, which would be four times its size with one emoji in it) and yields each element as
`json.JSONDecoder.raw_decode` reads it: a caller that stops at its cap never materialises more than the elements
it took. Element by element it is as fast as json.loads, in C.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import Any

WINDOW_BYTES = 256 * 1024
_WHITESPACE = " \t\n\r"
_NUMBER_CHARS = frozenset("0123456789.eE+-")
_KINDS = {"{": "dict", '"': "str", "t": "bool", "f": "bool", "n": "NoneType"}


class NotAnArray(ValueError):
    """The document is JSON of another kind (`kind`: dict, str, int, ...), or not JSON at all."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"a {kind}, not a JSON array")
        self.kind = kind


def array_items(data: bytes) -> Iterator[Any]:
    """Each element of the JSON array `data` (UTF-8), in order, decoded as it is reached.

    Raises NotAnArray when `data` is no array, ValueError (json.JSONDecodeError, UnicodeDecodeError) where it is
    not well-formed, RecursionError for an element nested past Python's limit: possibly after some elements.
    """
    reader = _Window(data)
    decoder = json.JSONDecoder()
    first = reader.next_char()
    if first != "[":
        raise NotAnArray(_KINDS.get(first, "number" if first and first in "-0123456789" else "text"))
    if reader.peek_char() == "]":
        reader.take(1)
        reader.end()
        return
    while True:
        reader.skip_whitespace()
        while True:
            try:
                item, end = decoder.raw_decode(reader.text, reader.pos)
            except json.JSONDecodeError:
                if reader.more():  # the element runs past the window: widen it and read it again
                    continue
                raise
            if isinstance(item, int | float) and reader.cut_at(end) and reader.more():
                continue  # a number that may go on in the next window ("12" of "12.5")
            break
        reader.pos = end
        yield item
        separator = reader.next_char()
        if separator == "]":
            reader.end()
            return
        if separator != ",":
            raise json.JSONDecodeError("expected ',' or ']' after an array element", reader.text, reader.pos)


class _Window:
    """The decoded text of part of `data`: `text[pos:]` is what is left to read of it."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._offset = 0  # bytes of `data` decoded so far
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0

    def more(self) -> bool:
        """Decode more of `data` onto the window (at least as much as it holds, so re-reading a long element
        costs linear time in all); False once everything is decoded."""
        if self._offset >= len(self._data):
            return False
        size = max(WINDOW_BYTES, len(self.text) - self.pos)
        chunk = self._data[self._offset:self._offset + size]
        self._offset += len(chunk)
        final = self._offset >= len(self._data)
        self.text = self.text[self.pos:] + self._decoder.decode(chunk, final)
        self.pos = 0
        return True

    def cut_at(self, end: int) -> bool:
        """Whether the window ends in the run of number characters that starts at `end`."""
        text = self.text
        while end < len(text) and text[end] in _NUMBER_CHARS:
            end += 1
        return end == len(text)

    def skip_whitespace(self) -> None:
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.text) or not self.more():
                return

    def peek_char(self) -> str:
        self.skip_whitespace()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def next_char(self) -> str:
        char = self.peek_char()
        self.pos += len(char)
        return char

    def take(self, count: int) -> None:
        self.pos += count

    def end(self) -> None:
        """Only whitespace may follow the array."""
        if self.peek_char():
            raise json.JSONDecodeError("extra data after the array", self.text, self.pos)
