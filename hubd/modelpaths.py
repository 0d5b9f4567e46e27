"""Key paths into a pydantic model (pure): how a config key is written (`mqtt.host`, `driver.accounts[0].name`),
which fields are secrets (SecretStr, and so take `<key>_file`), and the closest key to a misspelt one. Imports
nothing of hubd.
"""

from __future__ import annotations

import difflib
import typing
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
