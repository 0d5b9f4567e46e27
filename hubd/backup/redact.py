"""The config's inline secrets in a backup made without --with-secrets (pure text work): each value of a secret
field (SecretStr: the client secret, the broker password, the accounts' passwords or their hashes) written in the
config file itself is replaced by `REDACTED`, the rest of the file (comments, order, `_file` keys, `${VAR}`
references, which hold no secret) left as it was; and on restore, the redacted keys found again and, where the
config being replaced holds them inline, filled back in.

`REDACTED` holds `hubd.config.model.PLACEHOLDER`, so a config restored with it unfilled does not check (hubd run,
check-config and doctor name each key to fill in) rather than starting with a wrong secret.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import yaml
from pydantic import BaseModel

from hubd.config.merge import YAML_TAG, MergeError, merged_pairs
from hubd.config.model import PLACEHOLDER, HubdConfig
from hubd.config.paths import KeyPath, dotted, is_secret, list_item, model_of

REDACTED = f"{PLACEHOLDER}-redacted-by-hubd-backup"
_ONLY_ENV_RE = re.compile(r"^(\$\{[A-Za-z_][A-Za-z0-9_]*\}\s*)+$")  # `${VAR}`: the secret is elsewhere


@dataclass(frozen=True, slots=True)
class InlineSecret:
    """A secret field's value written in the config file: its key path, the value, and where it is in the text."""

    path: KeyPath
    value: str
    start: int
    end: int
    match: KeyPath  # `path` with a list entry's index replaced by its `username` (accounts may be reordered)

    @property
    def key(self) -> str:
        """`platform.client_secret`, `driver.accounts[0].password`."""
        return dotted(self.path)


def redact(text: str) -> tuple[str, list[str]]:
    """`text` with each inline secret replaced by REDACTED, and the keys redacted (none: `text` as it was)."""
    found = [s for s in inline_secrets(text) if s.value != REDACTED]
    return _replace(text, {(s.start, s.end): REDACTED for s in found}), list(dict.fromkeys(s.key for s in found))


def fill_in(text: str, current: str | None) -> tuple[str, list[str]]:
    """`text` (a config redact() made) with each REDACTED value that `current` (the config it replaces, if any)
    holds inline put back; and the keys still REDACTED, to fill in by hand."""
    known = {} if current is None else {s.match: s.value for s in inline_secrets(current) if s.value != REDACTED}
    redacted = [s for s in inline_secrets(text) if s.value == REDACTED]
    filled = {(s.start, s.end): known[s.match] for s in redacted if s.match in known}
    left = [s.key for s in redacted if s.match not in known]
    return _replace(text, filled), list(dict.fromkeys(left))


def inline_secrets(text: str) -> list[InlineSecret]:
    """Every secret field's value written in `text` (a YAML config of hubd), merge keys followed, each once;
    none where the YAML cannot be read (the config check says why)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return []
    if not isinstance(node, yaml.MappingNode):
        return []
    seen: set[int] = set()
    out: list[InlineSecret] = []
    try:
        for path, match, scalar in _secret_nodes(HubdConfig, node, (), ()):
            if id(scalar) in seen:
                continue
            seen.add(id(scalar))
            value = str(scalar.value)
            if scalar.tag == YAML_TAG + "null" or not value.strip() or _ONLY_ENV_RE.match(value):
                continue
            out.append(InlineSecret(path, value, scalar.start_mark.index, scalar.end_mark.index, match))
    except MergeError:
        return []
    return out


def _secret_nodes(model: type[BaseModel], node: yaml.MappingNode, path: KeyPath,
                  match: KeyPath) -> Iterator[tuple[KeyPath, KeyPath, yaml.ScalarNode]]:
    for key_node, value_node in merged_pairs(node):
        name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(name, str) or name not in model.model_fields:
            continue
        annotation = model.model_fields[name].annotation
        if is_secret(annotation):
            if isinstance(value_node, yaml.ScalarNode):
                yield (*path, name), (*match, name), value_node
            continue
        sub = model_of(annotation)
        if sub is not None and isinstance(value_node, yaml.MappingNode):
            yield from _secret_nodes(sub, value_node, (*path, name), (*match, name))
        item = model_of(list_item(annotation))
        if item is not None and isinstance(value_node, yaml.SequenceNode):
            for i, entry in enumerate(value_node.value):
                if isinstance(entry, yaml.MappingNode):
                    yield from _secret_nodes(item, entry, (*path, name, i), (*match, name, _entry_name(entry, i)))


def _entry_name(entry: yaml.MappingNode, index: int) -> str | int:
    """A list entry as a restore matches it: `username=NAME` where it has one, else its index."""
    for key_node, value_node in merged_pairs(entry):
        if getattr(key_node, "value", None) == "username" and isinstance(value_node, yaml.ScalarNode):
            return f"username={value_node.value}"
    return index


def _replace(text: str, spans: dict[tuple[int, int], str]) -> str:
    """`text` with each (start, end) span replaced by its value as a double-quoted YAML scalar (JSON's string
    syntax is YAML's); a block scalar's span ends after its line break, which is kept."""
    for (start, end), value in sorted(spans.items(), reverse=True):
        tail = "\n" if text[start:end].endswith("\n") else ""
        text = text[:start] + json.dumps(value) + tail + text[end:]
    return text
