"""Home Assistant's templates for discovered devices: Jinja2 in an immutable sandbox, compiled once.

`Templates` compiles a template's source once (a cache by source text, so the ten entities of a zigbee2mqtt
device that share `{{ value_json.state }}` share one compiled template) and renders it with `value` and
`value_json` (only when the payload is JSON, as Home Assistant does) or a command's variables. It offers the
filters, tests and functions real producers' templates use: float, int, round, default, is_defined, iif,
from_json, to_json, regex_*, as_timestamp, zip, namespace, `{% continue %}` and the rest.

A template runs within limits: a time budget checked on every call, attribute and item access, a bounded
`range`, a bounded output, and no repeating of strings or lists into huge ones. Whatever goes wrong is a
`TemplateError` with one line saying why; nothing else escapes. Imports nothing of hubd.
"""

from __future__ import annotations

import base64
import json
import math
import re
import statistics
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_SOURCE_CHARS = 16_384
MAX_OUTPUT_CHARS = 65_536
MAX_RANGE_ITEMS = 10_000  # all range() calls of one render together
MAX_CACHED = 4_096
RENDER_BUDGET_S = 0.25  # a real template renders in well under a millisecond
_NO_DEFAULT: Any = object()


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


class Templates:
    """Compiles and renders templates in one sandbox; `compiles` counts the sources actually compiled."""

    def __init__(self) -> None:
        self.compiles = 0
        self._env = _Sandbox()
        self._cache: OrderedDict[str, jinja2.Template] = OrderedDict()

    def compile(self, source: str) -> jinja2.Template:
        """The compiled template (from the cache when the same source was compiled before)."""
        found = self._cache.get(source)
        if found is not None:
            self._cache.move_to_end(source)
            return found
        if len(source) > MAX_SOURCE_CHARS:
            raise TemplateError(f"the template has {len(source)} characters; at most {MAX_SOURCE_CHARS}")
        try:
            compiled = self._env.from_string(source)
        except jinja2.TemplateSyntaxError as err:
            raise TemplateError(f"not a valid template (line {err.lineno}: {err.message})") from err
        except (RecursionError, MemoryError) as err:
            raise TemplateError("the template is nested too deeply") from err
        self.compiles += 1
        self._cache[source] = compiled
        if len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)
        return compiled

    def render_value(self, template: jinja2.Template, payload: Payload) -> str:
        """A value template's result for a payload (`value`, and `value_json` when the payload is JSON)."""
        return self.render(template, {"value": payload.text, "value_json": payload.json})

    def render(self, template: jinja2.Template, variables: Mapping[str, Any]) -> str:
        """The template's text output with these variables, stripped like Home Assistant's."""
        return self._env.run(template, variables).strip()


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
        self.filters.update(_FILTERS)
        self.tests.update(_TESTS)
        self.globals.update(_GLOBALS)
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


def _fail(name: str, value: Any) -> Any:
    raise ValueError(f"{name} got invalid input {value!r} and no default was given")


def _float(value: Any, default: Any = _NO_DEFAULT) -> Any:
    try:
        return float(value)
    except (ValueError, TypeError):
        return _fail("float", value) if default is _NO_DEFAULT else default


def _int(value: Any, default: Any = _NO_DEFAULT, base: int = 10) -> Any:
    try:
        if isinstance(value, str) and base != 10:
            return int(value, base)
        return int(float(value)) if isinstance(value, str) else int(value)
    except (ValueError, TypeError, OverflowError):
        return _fail("int", value) if default is _NO_DEFAULT else default


def _bool(value: Any, default: Any = _NO_DEFAULT) -> Any:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on", "enable"):
        return True
    if text in ("0", "false", "no", "off", "disable"):
        return False
    return _fail("bool", value) if default is _NO_DEFAULT else default


def _round(value: Any, precision: int = 0, method: str = "common", default: Any = _NO_DEFAULT) -> Any:
    try:
        number = float(value)
    except (ValueError, TypeError):
        return _fail("round", value) if default is _NO_DEFAULT else default
    if method == "ceil":
        number = math.ceil(number * 10**precision) / 10**precision
    elif method == "floor":
        number = math.floor(number * 10**precision) / 10**precision
    elif method == "half":
        number = round(number * 2) / 2.0
    else:
        number = round(number, precision)
    return int(number) if precision == 0 and method != "half" else number


def _arith(name: str, op: Callable[[float, float], float]) -> Callable[..., Any]:
    def apply(value: Any, amount: Any, default: Any = _NO_DEFAULT) -> Any:
        try:
            return op(float(value), float(amount))
        except (ValueError, TypeError):
            return _fail(name, value) if default is _NO_DEFAULT else default
    return apply


def _log(value: Any, base: float = math.e, default: Any = _NO_DEFAULT) -> Any:
    try:
        return math.log(float(value), float(base))
    except (ValueError, TypeError, ZeroDivisionError):
        return _fail("log", value) if default is _NO_DEFAULT else default


def _is_defined(value: Any) -> Any:
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()
    return value


def _iif(value: Any, if_true: Any = True, if_false: Any = False, if_none: Any = _NO_DEFAULT) -> Any:
    if value is None and if_none is not _NO_DEFAULT:
        return if_none
    return if_true if value else if_false


def _from_json(value: Any, default: Any = _NO_DEFAULT) -> Any:
    try:
        return json.loads(value)
    except (ValueError, TypeError):
        return _fail("from_json", value) if default is _NO_DEFAULT else default


def _to_json(value: Any, ensure_ascii: bool = False, pretty_print: bool = False, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=2 if pretty_print else None, sort_keys=sort_keys)


def _regex(flags: bool) -> int:
    return re.IGNORECASE if flags else 0


def _regex_match(value: Any, find: str = "", ignorecase: bool = False) -> bool:
    return bool(re.match(find, str(value), _regex(ignorecase)))


def _regex_search(value: Any, find: str = "", ignorecase: bool = False) -> bool:
    return bool(re.search(find, str(value), _regex(ignorecase)))


def _regex_replace(value: Any = "", find: str = "", replace: str = "", ignorecase: bool = False) -> str:
    return re.sub(find, replace, str(value), flags=_regex(ignorecase))


def _regex_findall(value: Any, find: str = "", ignorecase: bool = False) -> list[Any]:
    return re.findall(find, str(value), _regex(ignorecase))


def _regex_findall_index(value: Any, find: str = "", index: int = 0, ignorecase: bool = False) -> Any:
    return re.findall(find, str(value), _regex(ignorecase))[index]


def _as_datetime(value: Any, default: Any = _NO_DEFAULT) -> Any:
    if isinstance(value, datetime):
        return value
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, tz=UTC)
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (ValueError, TypeError, OverflowError, OSError):
        return None if default is _NO_DEFAULT else default


def _as_timestamp(value: Any, default: Any = _NO_DEFAULT) -> Any:
    moment = _as_datetime(value, None)
    if moment is None:
        return _fail("as_timestamp", value) if default is _NO_DEFAULT else default
    return moment.timestamp()


def _timestamp_custom(value: Any, format_string: str = "%Y-%m-%d %H:%M:%S", local: bool = True,
                      default: Any = _NO_DEFAULT) -> Any:
    try:
        moment = datetime.fromtimestamp(float(value), tz=UTC)
    except (ValueError, TypeError, OverflowError, OSError):
        return _fail("timestamp_custom", value) if default is _NO_DEFAULT else default
    return (moment.astimezone() if local else moment).strftime(format_string)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except (ValueError, TypeError):
        return False


def _contains(value: Any, item: Any) -> bool:
    return isinstance(value, str | list | tuple | set | frozenset | dict) and item in value


def _bitwise(op: Callable[[int, int], int]) -> Callable[[Any, Any], int]:
    return lambda value, other: op(int(value), int(other))


def _average(*args: Any, default: Any = _NO_DEFAULT) -> Any:
    values = list(args[0]) if len(args) == 1 and isinstance(args[0], Iterable) else list(args)
    try:
        return statistics.fmean(float(v) for v in values)
    except (ValueError, TypeError, statistics.StatisticsError):
        return _fail("average", values) if default is _NO_DEFAULT else default


def _slugify(value: Any, separator: str = "_") -> str:
    return re.sub(r"[^a-z0-9]+", separator, str(value).lower()).strip(separator)


def _ordinal(value: Any) -> str:
    number = int(value)
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _zip(*iterables: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    return zip(*iterables, strict=False)


_FILTERS: dict[str, Callable[..., Any]] = {
    "float": _float, "int": _int, "bool": _bool, "round": _round, "multiply": _arith("multiply", lambda a, b: a * b),
    "add": _arith("add", lambda a, b: a + b), "log": _log, "is_defined": _is_defined, "iif": _iif,
    "from_json": _from_json, "to_json": _to_json, "regex_match": _regex_match, "regex_search": _regex_search,
    "regex_replace": _regex_replace, "regex_findall": _regex_findall, "regex_findall_index": _regex_findall_index,
    "as_datetime": _as_datetime, "as_timestamp": _as_timestamp, "timestamp_custom": _timestamp_custom,
    "timestamp_local": lambda value, default=_NO_DEFAULT: _timestamp_custom(value, "%Y-%m-%dT%H:%M:%S%z", True,
                                                                             default),
    "timestamp_utc": lambda value, default=_NO_DEFAULT: _timestamp_custom(value, "%Y-%m-%dT%H:%M:%S+00:00", False,
                                                                           default), "is_number": _is_number,
    "contains": _contains, "bitwise_and": _bitwise(lambda a, b: a & b), "bitwise_or": _bitwise(lambda a, b: a | b),
    "bitwise_xor": _bitwise(lambda a, b: a ^ b), "average": _average, "slugify": _slugify, "ordinal": _ordinal,
    "ord": lambda value: ord(str(value)[0]), "sqrt": lambda value: math.sqrt(float(value)),
    "base64_encode": lambda value: base64.b64encode(str(value).encode()).decode(),
    "base64_decode": lambda value: base64.b64decode(str(value)).decode("utf-8", "replace"),
}
_TESTS: dict[str, Callable[..., bool]] = {
    "is_number": _is_number, "contains": _contains, "match": _regex_match, "search": _regex_search,
    "list": lambda value: isinstance(value, list), "set": lambda value: isinstance(value, set),
    "tuple": lambda value: isinstance(value, tuple), "datetime": lambda value: isinstance(value, datetime),
}
_GLOBALS: dict[str, Any] = {
    "float": _float, "int": _int, "bool": _bool, "iif": _iif, "as_datetime": _as_datetime,
    "as_timestamp": _as_timestamp, "is_number": _is_number, "log": _log, "average": _average, "zip": _zip,
    "now": lambda: datetime.now(UTC).astimezone(), "utcnow": lambda: datetime.now(UTC),
    "min": min, "max": max, "pi": math.pi, "e": math.e, "tau": math.tau,
}
