"""The filters, tests and global functions Home Assistant adds to Jinja, as its templates use them.

float, int, bool, round, multiply, add, log, is_defined, iif, from_json, to_json, regex_*, as_datetime,
as_timestamp, timestamp_*, is_number, contains, bitwise_*, average, slugify, ordinal, base64_*, zip, now and the
rest, each failing as Home Assistant's does: without a `default`, an input it cannot read raises ValueError
(the sandbox turns it into a TemplateError). Pure functions; `hubd.dialects.homeassistant.templates` registers
them in its sandbox.
"""

from __future__ import annotations

import base64
import json
import math
import re
import statistics
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import jinja2

_NO_DEFAULT: Any = object()
MAX_ROUND_PRECISION = 100  # 10 ** precision is computed exactly: a precision of a billion would never finish


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
    if isinstance(precision, bool) or not isinstance(precision, int) or abs(precision) > MAX_ROUND_PRECISION:
        raise ValueError(f"round: precision {precision!r} is not a whole number from -{MAX_ROUND_PRECISION} to "
                         f"{MAX_ROUND_PRECISION}")
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


FILTERS: dict[str, Callable[..., Any]] = {
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
TESTS: dict[str, Callable[..., bool]] = {
    "is_number": _is_number, "contains": _contains, "match": _regex_match, "search": _regex_search,
    "list": lambda value: isinstance(value, list), "set": lambda value: isinstance(value, set),
    "tuple": lambda value: isinstance(value, tuple), "datetime": lambda value: isinstance(value, datetime),
}
GLOBALS: dict[str, Any] = {
    "float": _float, "int": _int, "bool": _bool, "iif": _iif, "as_datetime": _as_datetime,
    "as_timestamp": _as_timestamp, "is_number": _is_number, "log": _log, "average": _average, "zip": _zip,
    "now": lambda: datetime.now(UTC).astimezone(), "utcnow": lambda: datetime.now(UTC),
    "min": min, "max": max, "pi": math.pi, "e": math.e, "tau": math.tau,
}
