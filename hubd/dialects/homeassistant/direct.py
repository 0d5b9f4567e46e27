"""The direct reading of the commonest value templates, in hubd's process: no Jinja, no render process.

`{{ value_json.temperature }}`, `{{ value_json["x"] }}`, `{{ value | float | round(1) }}`,
`{{ value_json.tempc | is_defined }}`, `{{ value_json.x | default(0) }}`: one expression of `value` or `value_json`
read through keys, attributes and indexes by constants, hubd's pure number filters and Jinja's `default` with
constant arguments (`direct_reader`, from Jinja's parse of the template). It does the same operations Jinja's
compiled code does, on plain JSON values only (dict keys and list items, never an attribute: less than the sandbox
allows), and steps aside (None) for anything else: a value that is not a plain JSON value, a key that is missing,
a filter that raises, an output too long; Jinja then renders that message in the render process, so results and
errors are Jinja's in every case. Nothing it does can run long or allocate much: a payload is at most 64 KiB and
every step is a lookup or a number filter on one value (`round` bounds its precision). Building a reader
evaluates nothing of the template: it walks the parse and keeps the values of its literal nodes as they are
(never Jinja's `as_const`, which would call filters and operators on constant arguments); its filters run only on
a payload's value, when a message comes.

`Payload` is one MQTT payload as templates see it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import jinja2
import jinja2.filters
from jinja2 import nodes

from hubd.dialects.homeassistant.filters import FILTERS
from hubd.dialects.homeassistant.sandbox import MAX_OUTPUT_CHARS, payload_json


class Payload:
    """One MQTT payload as templates see it: the text, and its JSON parsed once, on first use."""

    __slots__ = ("_json", "_parsed", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._parsed = False
        self._json: Any = None

    @property
    def json(self) -> Any:
        """The payload parsed as JSON, or jinja2's Undefined when it is not JSON (like Home Assistant)."""
        if not self._parsed:
            self._parsed = True
            self._json = payload_json(self.text)
        return self._json


DirectReader = Callable[[Payload], "str | None"]


def direct_reader(tree: nodes.Template, filters: Mapping[str, Callable[..., Any]]) -> DirectReader | None:
    """The direct reading of a value template's parse when it is one expression `_reader` knows, else None.

    Reads the tree only (the readers keep constants, never nodes). `filters` are the sandbox's: a name that is
    not hubd's own pure filter there is never read directly."""
    try:
        body = tree.body
        if len(body) != 1 or type(body[0]) is not nodes.Output:
            return None
        parts = body[0].nodes
        texts = [n for n in parts if type(n) is nodes.TemplateData]
        if len(parts) != len(texts) + 1 or any(n.data.strip() for n in texts):
            return None  # not one expression with at most whitespace around it (the result is stripped)
        reader = _reader(next(n for n in parts if type(n) is not nodes.TemplateData), filters)
        padding = sum(len(n.data) for n in texts)
    except Exception:  # a tree of another shape (another Jinja release): Jinja renders it
        return None
    if reader is None:
        return None

    def direct(payload: Payload) -> str | None:
        try:
            value = reader(payload)
            if type(value) not in _PLAIN:
                return None
            text = str(value)  # what Jinja's compiled `{{ ... }}` yields (autoescape off, no finalize)
        except Exception:  # Jinja renders it, and says what is wrong
            return None
        return None if len(text) + padding > MAX_OUTPUT_CHARS else text.strip()

    return direct


# What a direct reading handles: the values json.loads makes (exact types), and hubd's own filters that are pure
# functions of their arguments. Jinja's compiled code calls a filter as `f(value, *args, **kwargs)`, reads
# `a.b` as the sandbox's getattr (for a dict without such an attribute: a["b"]) and `a["b"]`/`a[0]` as its
# getitem (a["b"] when that succeeds), and yields `str(result)`: a direct reading does the same, and steps aside
# (raises) for anything else: a missing key, another type, a filter that fails.
_PLAIN = frozenset({str, int, float, bool, type(None), dict, list})
_DIRECT_FILTERS = frozenset({"float", "int", "round", "multiply", "add", "bool", "is_defined"})
_DEFAULT_FILTERS = ("default", "d")  # Jinja's own: the value, or a constant where a key is missing
_Reader = Callable[[Payload], Any]


class _Aside(Exception):
    """A value the direct reading is not sure to treat as Jinja does: Jinja renders the message."""


class _Missing(Exception):
    """The last key, attribute or index read is not there: Jinja's Undefined, which `default` replaces."""


def _value(payload: Payload) -> Any:
    return payload.text


def _value_json(payload: Payload) -> Any:
    found = payload.json
    if type(found) not in _PLAIN:  # not JSON: Jinja's Undefined
        raise _Aside
    return found


def _reader(node: nodes.Node, filters: Mapping[str, Callable[..., Any]]) -> _Reader | None:
    """A function giving the expression's value for a payload, or None when it is not one a direct reading does:
    `value` or `value_json`, then keys, attributes and indexes by constants, then the pure filters with constant
    arguments."""
    if type(node) is nodes.Name:
        return {"value": _value, "value_json": _value_json}.get(node.name) if node.ctx == "load" else None
    if type(node) is nodes.Getattr:
        inner = _reader(node.node, filters)
        if inner is None or node.ctx != "load" or type(node.attr) is not str or hasattr({}, node.attr):
            return None  # the sandbox's getattr reads a dict's own attribute first (`items`, `keys`, ...)
        return _read_key(inner, node.attr, (dict,))
    if type(node) is nodes.Getitem:
        inner = _reader(node.node, filters)
        arg = node.arg
        if inner is None or node.ctx != "load" or type(arg) is not nodes.Const or type(arg.value) not in (str, int):
            return None
        return _read_key(inner, arg.value, (dict, list))
    if type(node) is nodes.Filter and node.name in _DEFAULT_FILTERS:
        return _default_reader(node, filters)
    if type(node) is nodes.Filter:
        func = filters.get(node.name)
        if func is None or node.name not in _DIRECT_FILTERS or func is not FILTERS[node.name] or node.node is None \
                or node.dyn_args is not None or node.dyn_kwargs is not None:
            return None
        args: list[Any] = []
        for arg in node.args:
            if type(arg) is not nodes.Const:
                return None
            args.append(arg.value)
        kwargs: dict[str, Any] = {}
        for pair in node.kwargs:
            keyword: Any = pair  # a Keyword in Jinja's parse (its annotation says Pair)
            if type(keyword) is not nodes.Keyword or type(keyword.value) is not nodes.Const:
                return None
            kwargs[keyword.key] = keyword.value.value
        inner = _reader(node.node, filters)
        return None if inner is None else _read_filtered(inner, func, tuple(args), kwargs)
    return None


def _default_reader(node: nodes.Filter, filters: Mapping[str, Callable[..., Any]]) -> _Reader | None:
    """`x | default(value, boolean)` with constant arguments, where `x` is a reading: Jinja's own filter."""
    if filters.get(node.name) is not jinja2.filters.FILTERS["default"] or node.node is None \
            or node.dyn_args is not None or node.dyn_kwargs is not None or node.kwargs \
            or len(node.args) > 2 or any(type(a) is not nodes.Const for a in node.args):
        return None
    values = [cast(nodes.Const, a).value for a in node.args]
    fallback = values[0] if values else ""
    boolean = values[1] if len(values) > 1 else False
    if type(fallback) not in _PLAIN or type(boolean) is not bool:
        return None
    inner = _reader(node.node, filters)
    if inner is None:
        return None

    def read(payload: Payload) -> Any:
        try:
            value = inner(payload)
        except _Missing:
            return fallback
        return fallback if boolean and not value else value

    return read


def _read_key(inner: _Reader, key: Any, types: tuple[type, ...]) -> _Reader:
    """`inner`'s value[key], for a value of one of these exact types; _Missing when there is no such key (Jinja's
    Undefined), and stepping aside when `inner` itself was missing (Undefined's attribute is Jinja's error)."""
    def read(payload: Payload) -> Any:
        try:
            found = inner(payload)
        except _Missing:
            raise _Aside from None
        if type(found) not in types:
            raise _Aside
        try:
            return found[key]
        except (KeyError, IndexError, TypeError):
            if isinstance(key, str) and hasattr(found, key):
                raise _Aside from None  # Jinja's getitem then reads the attribute (`value_json['items']`)
            raise _Missing from None

    return read


def _read_filtered(inner: _Reader, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Reader:
    """`inner`'s value through a filter, called as Jinja's compiled code calls it."""
    def read(payload: Payload) -> Any:
        return func(inner(payload), *args, **kwargs)

    return read
