"""Home Assistant's templates for discovered devices: Jinja2 in an immutable sandbox, compiled once.

`Templates` compiles a template's source once (a cache by source text, so the ten entities of a zigbee2mqtt
device that share `{{ value_json.state }}` share one compiled template) and renders it with `value` and
`value_json` (only when the payload is JSON, as Home Assistant does) or a command's variables. It offers the
filters, tests and functions real producers' templates use: float, int, round, default, is_defined, iif,
from_json, to_json, regex_*, as_timestamp, zip, namespace, `{% continue %}` and the rest.

Rendering is on every state message, so it is kept cheap. A template renders from its own flat copy of the
sandbox's globals (Jinja's default, a ChainMap over the environment's, cost more than the rest of a small
render). And the commonest value templates, one expression of `value` or `value_json` read through keys,
attributes, indexes and the pure number filters (`{{ value_json.temperature }}`, `{{ value_json["x"] }}`,
`{{ value | float | round(1) }}`), are read directly from Jinja's parse of them (`_Sandbox.direct`): the same
operations Jinja's compiled code does, on plain JSON values only (dict keys and list items, never an attribute:
less than the sandbox allows). Anything else (a value that is not a plain JSON value, a key that is missing, a
filter that raises, an output too long) makes the direct reading step aside for Jinja's own render of that
message, so results and errors are Jinja's in every case.

A template runs within limits: a time budget checked on every call, attribute and item access, a bounded
`range`, a bounded output, and no repeating of strings or lists into huge ones. Whatever goes wrong is a
`TemplateError` with one line saying why; nothing else escapes. Imports nothing of hubd.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from hubd.dialects.homeassistant.filters import FILTERS, GLOBALS, TESTS

MAX_SOURCE_CHARS = 16_384
MAX_OUTPUT_CHARS = 65_536
MAX_RANGE_ITEMS = 10_000  # all range() calls of one render together
MAX_CACHED = 4_096
RENDER_BUDGET_S = 0.25  # a real template renders in well under a millisecond


class TemplateError(Exception):
    """A template that does not compile or fails to render (the text says why)."""


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
            try:
                self._json = json.loads(self.text) if self.text[:1] in "{[\"-0123456789tfn" else _UNDEFINED
            except (ValueError, RecursionError):
                self._json = _UNDEFINED
        return self._json


class Compiled:
    """One compiled template: Jinja's, and its direct reading when it is one of the commonest value templates."""

    __slots__ = ("direct", "jinja", "source")

    def __init__(self, source: str, jinja: jinja2.Template, direct: Callable[[Payload], str | None] | None) -> None:
        self.source = source
        self.jinja = jinja
        self.direct = direct  # the value template's text, or None to let Jinja render this payload

    def __repr__(self) -> str:
        return f"<Compiled {self.source!r}{' (direct)' if self.direct is not None else ''}>"


class Templates:
    """Compiles and renders templates in one sandbox; `compiles` counts the sources actually compiled."""

    def __init__(self) -> None:
        self.compiles = 0
        self._env = _Sandbox()
        self._cache: OrderedDict[str, Compiled] = OrderedDict()

    def compile(self, source: str) -> Compiled:
        """The compiled template (from the cache when the same source was compiled before)."""
        found = self._cache.get(source)
        if found is not None:
            self._cache.move_to_end(source)
            return found
        if len(source) > MAX_SOURCE_CHARS:
            raise TemplateError(f"the template has {len(source)} characters; at most {MAX_SOURCE_CHARS}")
        try:
            tree = self._env.parse(source)  # parsed once: the direct reading is read off it before it compiles
            direct = self._env.direct(tree)
            template = self._env.from_string(tree)
        except jinja2.TemplateSyntaxError as err:
            raise TemplateError(f"not a valid template (line {err.lineno}: {err.message})") from err
        except (RecursionError, MemoryError) as err:
            raise TemplateError("the template is nested too deeply") from err
        _flatten_globals(template)
        compiled = Compiled(source, template, direct)
        self.compiles += 1
        self._cache[source] = compiled
        if len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)
        return compiled

    def render_value(self, template: Compiled, payload: Payload) -> str:
        """A value template's result for a payload (`value`, and `value_json` when the payload is JSON)."""
        if template.direct is not None:
            text = template.direct(payload)
            if text is not None:
                return text
        return self.render(template, {"value": payload.text, "value_json": payload.json})

    def render(self, template: Compiled, variables: Mapping[str, Any]) -> str:
        """The template's text output with these variables, stripped like Home Assistant's (Jinja renders it)."""
        return self._env.run(template.jinja, variables).strip()


def _flatten_globals(template: jinja2.Template) -> None:
    """Give the template a flat copy of its globals (the same names and values).

    Jinja gives each template a ChainMap over the environment's globals and copies it into a new dict on every
    render, key by key through the ChainMap; a plain dict is copied in one step. The sandbox's globals are set
    once, before any template is compiled. Only the documented `Template.globals` is replaced, never changed in
    place (Jinja asks not to modify it: it is shared); should a Jinja release not allow that, the template
    keeps its ChainMap and renders as before.
    """
    with contextlib.suppress(AttributeError, TypeError):
        template.globals = dict(template.globals)


class _DictGlobal:
    """`dict` in templates: Python's dict, and `dict.from_keys(pairs)` that zigbee2mqtt's event templates use."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    @staticmethod
    def from_keys(pairs: Iterable[Any]) -> dict[Any, Any]:
        return {pair[0]: pair[1] for pair in pairs}


class _Sandbox(ImmutableSandboxedEnvironment):
    """The sandbox with Home Assistant's additions and the limits of one render."""

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self) -> None:
        super().__init__(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"], autoescape=False,
                         undefined=jinja2.Undefined)
        self._deadline = math.inf
        self._range_left = MAX_RANGE_ITEMS
        self.filters.update(FILTERS)
        self.tests.update(TESTS)
        self.globals.update(GLOBALS)
        self.globals["range"] = self._range
        self.globals["dict"] = _DictGlobal()

    def run(self, template: jinja2.Template, variables: Mapping[str, Any]) -> str:
        """Render within the budget; every failure becomes a TemplateError."""
        self._deadline = time.monotonic() + RENDER_BUDGET_S
        self._range_left = MAX_RANGE_ITEMS
        out: list[str] = []
        size = 0
        try:
            for chunk in template.generate(variables):
                size += len(chunk)
                if size > MAX_OUTPUT_CHARS:
                    raise TemplateError(f"the output passed {MAX_OUTPUT_CHARS} characters")
                out.append(chunk)
        except TemplateError:
            raise
        except SecurityError as err:
            raise TemplateError(f"not allowed in a template: {err}") from err
        except jinja2.UndefinedError as err:
            raise TemplateError(f"{err.message or err}") from err
        except jinja2.TemplateError as err:
            raise TemplateError(str(err)) from err
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError, re.error,
                RecursionError, MemoryError, OverflowError) as err:
            raise TemplateError(f"{type(err).__name__}: {err}") from err
        finally:
            self._deadline = math.inf
        return "".join(out)

    def direct(self, tree: nodes.Template) -> Callable[[Payload], str | None] | None:
        """The direct reading of a value template (its parse) that is one expression `_reader` knows, else None.

        Reads the tree only (the readers keep constants, never nodes), so the tree can be compiled afterwards."""
        if getattr(self, "finalize", None) is not None or getattr(self, "autoescape", True) is not False:
            return None  # then `{{ x }}` is not str(x)
        try:
            body = tree.body
            if len(body) != 1 or type(body[0]) is not nodes.Output:
                return None
            parts = body[0].nodes
            texts = [n for n in parts if type(n) is nodes.TemplateData]
            if len(parts) != len(texts) + 1 or any(n.data.strip() for n in texts):
                return None  # not one expression with at most whitespace around it (the result is stripped)
            reader = _reader(next(n for n in parts if type(n) is not nodes.TemplateData), self.filters)
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

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        self._check_time()
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        self._check_time()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self._check_time()
        return super().getitem(obj, argument)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self._check_time()
        if operator == "**" and isinstance(right, int | float) and abs(right) > 100:
            raise SecurityError("an exponent above 100")
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(times, int) and \
                        len(seq) * times > MAX_OUTPUT_CHARS:
                    raise SecurityError(f"repeating a sequence past {MAX_OUTPUT_CHARS} items")
        return super().call_binop(context, operator, left, right)

    def _range(self, *args: int) -> range:
        items = range(*args)
        self._range_left -= len(items)
        if self._range_left < 0:
            raise SecurityError(f"range() past {MAX_RANGE_ITEMS} items in one render")
        return items

    def _check_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise TemplateError(f"took longer than {RENDER_BUDGET_S} s")


_UNDEFINED = jinja2.Undefined(name="value_json", hint="the payload is not JSON")

# What a direct reading handles: the values json.loads makes (exact types), and hubd's own filters that are pure
# functions of their arguments. Jinja's compiled code calls a filter as `f(value, *args, **kwargs)`, reads
# `a.b` as the sandbox's getattr (for a dict without such an attribute: a["b"]) and `a["b"]`/`a[0]` as its
# getitem (a["b"] when that succeeds), and yields `str(result)`: a direct reading does the same, and steps aside
# (raises) for anything else: a missing key, another type, a filter that fails.
_PLAIN = frozenset({str, int, float, bool, type(None), dict, list})
_DIRECT_FILTERS = frozenset({"float", "int", "round", "multiply", "add", "bool"})
_Reader = Callable[[Payload], Any]


class _Aside(Exception):
    """A value the direct reading is not sure to treat as Jinja does: Jinja renders the message."""


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


def _read_key(inner: _Reader, key: Any, types: tuple[type, ...]) -> _Reader:
    """`inner`'s value[key], for a value of one of these exact types."""
    def read(payload: Payload) -> Any:
        found = inner(payload)
        if type(found) not in types:
            raise _Aside
        return found[key]

    return read


def _read_filtered(inner: _Reader, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Reader:
    """`inner`'s value through a filter, called as Jinja's compiled code calls it."""
    def read(payload: Payload) -> Any:
        return func(inner(payload), *args, **kwargs)

    return read
