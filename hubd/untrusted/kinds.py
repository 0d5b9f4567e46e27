"""How error messages name the JSON type a value has ("a string", "an array", ...)."""

from __future__ import annotations


def json_kind(value: object) -> str:
    """The JSON type of a decoded value, with its article, for messages like "must be a string, not a number"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
