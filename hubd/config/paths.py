"""Key paths into a pydantic model (pure): how a config key is written (`mqtt.host`, `driver.accounts[0].name`),
which fields are secrets (SecretStr, and so take `<key>_file`) and where they are in a file's values, and the
closest key to a misspelt one.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, SecretStr

KeyPath = tuple[str | int, ...]


def is_secret_path(model: type[BaseModel], path: KeyPath) -> bool:
    """True if `path` names a secret field of `model` (one that also takes `<key>_file`)."""
    annotation: Any = model
    for part in path:
        if isinstance(part, int):
            annotation = list_item(annotation)
            continue
        sub = model_of(annotation)
        if sub is None or part not in sub.model_fields:
            return False
        annotation = sub.model_fields[part].annotation
    return is_secret(annotation)


def secret_fields(model: type[BaseModel], data: dict[str, Any],
                  path: KeyPath = ()) -> Iterator[tuple[dict[str, Any], KeyPath, str]]:
    """Each secret field of `model` where a file's values (`data`, at `path`) may hold it: the mapping it goes
    in, that mapping's key path and the field's name; at any depth (a nested model's mapping, each mapping in a
    list of them), whether the mapping holds the field or not. A caller may change the mapping it is given."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if is_secret(annotation):
            yield data, path, name
        value = data.get(name)
        sub = model_of(annotation)
        if sub is not None and isinstance(value, dict):
            yield from secret_fields(sub, value, (*path, name))
        item_model = model_of(list_item(annotation))
        if item_model is not None and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from secret_fields(item_model, item, (*path, name, i))


def is_secret(annotation: Any) -> bool:
    return annotation is SecretStr or SecretStr in typing.get_args(annotation)


def did_you_mean(model: type[BaseModel], loc: KeyPath, error: Any) -> str:
    """For an unknown key, the closest key that exists there: `mqtt.hots` -> "; did you mean `host`?"."""
    if error["type"] != "extra_forbidden" or not loc or not isinstance(loc[-1], str):
        return ""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if current is None:
            return ""
        if isinstance(part, int):
            continue  # a list's item: its model was taken with the list's field
        field = current.model_fields.get(part)
        if field is None:
            return ""
        current = model_of(field.annotation) or model_of(list_item(field.annotation))
    if current is None:
        return ""
    close = difflib.get_close_matches(loc[-1], list(current.model_fields), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def list_item(annotation: Any) -> Any:
    if typing.get_origin(annotation) is list:
        args = typing.get_args(annotation)
        return args[0] if args else None
    return None


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "<top>"
