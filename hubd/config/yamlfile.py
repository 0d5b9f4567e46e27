"""Reading a YAML config file into a pydantic model (hubd's config, the speaker's), problems with YAML lines.

Owns reading the file (UTF-8 text, else a problem naming the line), parsing (safe YAML with merge keys; a tag or
value it cannot read is a reported problem, never a traceback), `${ENV_VAR}` substitution (with the directories a
caller names for an unset `${VAR}/NAME`), `<key>_file` secrets (of the model's SecretStr fields, at any depth; UTF-8
text of at most 64 KiB, as `hubd setup` reads them too; left unread for a command that uses none), did-you-mean for
unknown keys, and the report: one `<key.path>: <problem> (line N)` line per problem, all in one pass, sorted by
line. A value is never quoted back (it may be a secret). Knows no model of its own: the caller passes one. Merge
keys are hubd.config.merge's, key paths and secret fields hubd.config.paths'.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr, ValidationError

from hubd.config.merge import YAML_TAG, MergeError, merged_pairs
from hubd.config.paths import KeyPath, did_you_mean, dotted, is_secret_path, secret_fields
from hubd.errors import ConfigError, HubdError

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_DIR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}/([^$]+)")  # `${VAR}/NAME`: a file in a directory VAR names

MAX_SECRET_FILE_BYTES = 65_536  # a `<key>_file` secret is a line; a bigger file is the wrong one (/dev/urandom)

M = typing.TypeVar("M", bound=BaseModel)
# Problems one key cannot show alone, read from the raw values: (key path, message) each.
CrossChecks = typing.Callable[[dict[str, Any]], list[tuple[KeyPath, str]]]
# An environment variable naming a directory -> where to look for `${VAR}/NAME` when VAR is not set, in order.
DirFallbacks = Mapping[str, Sequence[Path]]


class UnreadSecret(SecretStr):
    """A secret a command did not read because it uses none: asking for its value is a bug, and says so."""

    def get_secret_value(self) -> str:
        """Never the secret: this command did not read it."""
        raise HubdError(f"{self._secret_value}: this command reads no secret, yet asked for this one")


@dataclass(frozen=True, slots=True)
class SecretFile:
    """A `<secret>_file` key: the path as written and where it points now (None, with the problem, if unknown)."""

    key: str  # dotted, e.g. platform.client_secret_file
    written: str
    path: Path | None
    problem: str | None


def read_config_file(path: Path, what: str) -> str:
    """The text of a config file; ConfigError (`<path>: cannot read the <what>: <reason>`) if it cannot be read."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError([f"{path}: cannot read the {what}: {err.strerror}"]) from err
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise ConfigError([f"{path}: the {what} is not UTF-8 text (line {line}); save it as UTF-8 (an editor's "
                           "other encoding, or a non-text file)"]) from None


def parse_yaml_model(model: type[M], text: str, env: Mapping[str, str], source: str, *, top_level: str,
                     example: str, cross_checks: CrossChecks | None = None, read_secrets: bool = True,
                     dir_fallbacks: DirFallbacks | None = None) -> M:
    """YAML text validated against `model` (hubd's config, the speaker's): ConfigError with one
    `<key.path>: <problem> (line N)` line per problem, all in one pass; `example` is the file naming every key.

    `read_secrets=False` (a command that uses no secret): secrets and their `_file` keys are neither read nor
    checked (an unset `${VAR}` in them is no problem); each becomes an `UnreadSecret`."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError([f"{source}: not valid YAML: {getattr(err, 'problem', err)}{where}"]) from err
    lines: dict[KeyPath, int] = {}
    problems = _Problems()
    reader = _YamlReader(model, env, lines, problems, read_secrets=read_secrets, dir_fallbacks=dir_fallbacks)
    data = {} if node is None else reader.read(node, ())
    if data is None and problems.lines():
        raise ConfigError(problems.lines())
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: the top level must be a mapping of {top_level}"])
    _read_secret_files(model, data, lines, problems, read=read_secrets)
    config: M | None = None
    try:
        config = model.model_validate(data)
    except ValidationError as err:
        for error in err.errors():
            loc = _loc(error)
            if not any(loc[:n] in problems.paths for n in range(1, len(loc) + 1)):
                problems.add(loc, _message(error, example) + did_you_mean(model, loc, error),
                             _line(loc, lines))
    for loc, message in cross_checks(data) if cross_checks is not None else ():
        if loc not in problems.paths:
            problems.add(loc, message, _line(loc, lines))
    found = problems.lines()
    if found or config is None:
        raise ConfigError(found)
    return config


class _Problems:
    """Everything wrong with one file, reported in one pass, sorted by line."""

    def __init__(self) -> None:
        self._items: list[tuple[int, str]] = []
        self.paths: set[KeyPath] = set()  # keys whose problem is reported: pydantic's follow-up errors are not

    def add(self, path: KeyPath, message: str, line: int | None) -> None:
        where = f" (line {line})" if line is not None else ""
        self._items.append((line if line is not None else 1 << 30, f"{dotted(path)}: {message}{where}"))
        self.paths.add(path)

    def lines(self) -> list[str]:
        return [text for _, text in sorted(self._items, key=lambda item: item[0])]


class _YamlReader:
    """Turns composed YAML nodes into Python values, noting each key's line and reporting what it cannot read.

    Substitutes `${ENV_VAR}`, applies merge keys (`<<: *anchor`), and never lets the YAML library's own
    error text through for a value: it may quote the value, and the value may be a secret.
    """

    def __init__(self, model: type[BaseModel], env: Mapping[str, str], lines: dict[KeyPath, int],
                 problems: _Problems, *, read_secrets: bool = True, dir_fallbacks: DirFallbacks | None = None) -> None:
        self._model = model
        self._loader = yaml.SafeLoader("")
        self._env = env
        self._lines = lines
        self._problems = problems
        self._read_secrets = read_secrets
        self._fallbacks = dir_fallbacks or {}

    def read(self, node: yaml.Node, path: KeyPath) -> Any:
        """The node's value; None (and a problem reported at `path`) if it cannot be read."""
        self._lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != YAML_TAG + "seq":
                self._bad_tag(node, path)
                return None
            return [self.read(item, (*path, i)) for i, item in enumerate(node.value)]
        assert isinstance(node, yaml.ScalarNode)  # the third and last kind of node
        value = self._scalar(node, path)
        if isinstance(value, str) and "${" in value:
            if not self._read_secrets and _names_secret(self._model, path):
                return value  # left as written: this command reads no secret, so it need not find one
            value, unset = expand(value, self._env, self._fallbacks)
            for problem in unset:
                self._problems.add(path, problem, self._lines[path])
        return None if value is _UNREADABLE else value

    def _mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any] | None:
        if node.tag != YAML_TAG + "map":
            self._bad_tag(node, path)
            return None
        written_here = {id(key) for key, _ in node.value if key.tag != YAML_TAG + "merge"}
        try:
            pairs = merged_pairs(node)  # the merged keys first, then this mapping's own
        except MergeError as err:
            self._problems.add(path, "cannot merge this: `<<:` takes a mapping or a list of mappings, e.g. "
                               "`<<: *anchor`", err.line)
            return None
        out: dict[str, Any] = {}
        own: set[str] = set()  # keys written in this mapping, not merged in: a merged key may be overridden
        for key_node, value_node in pairs:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                self._problems.add(path, "a key must be a name, not a mapping or a list", key_line)
                continue
            key_value = self._scalar(key_node, path)
            if key_value is _UNREADABLE:
                continue
            key = str(key_value)
            if id(key_node) in written_here:
                if key in own:
                    self._problems.add((*path, key), f"duplicate key: already given on line "
                                       f"{self._lines[(*path, key)]}; keep one", key_line)
                    continue
                own.add(key)
            out[key] = self.read(value_node, (*path, key))
            self._lines[(*path, key)] = key_line
        return out

    def _scalar(self, node: yaml.ScalarNode, path: KeyPath) -> Any:
        """The scalar's value, or _UNREADABLE once its problem is reported."""
        line = node.start_mark.line + 1
        if node.tag not in self._loader.yaml_constructors:
            self._problems.add(path, _unknown_tag(self._model, node.tag, path), line)
            return _UNREADABLE
        try:
            return self._loader.construct_object(node)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError):
            kind = node.tag.removeprefix(YAML_TAG)
            name = _TAG_NAMES.get(kind, kind)
            implicit = node.style is None and self._loader.resolve(  # type: ignore[no-untyped-call]
                yaml.ScalarNode, node.value, (True, False))
            if implicit == node.tag:
                problem = f"it looks like {name} but is not a valid one; put it in quotes if it is text"
            else:
                problem = f"it is tagged !!{kind} but is not {name}; fix the value or remove the tag"
            self._problems.add(path, f"cannot read this value ({problem})", line)
            return _UNREADABLE

    def _bad_tag(self, node: yaml.Node, path: KeyPath) -> None:
        tag = node.tag
        if tag.startswith(YAML_TAG):
            problem = f"cannot read this value (!!{tag.removeprefix(YAML_TAG)} is not supported here; " \
                      "write a plain mapping or list)"
        else:
            problem = _unknown_tag(self._model, tag, path)
        self._problems.add(path, problem, node.start_mark.line + 1)


def expand(value: str, env: Mapping[str, str], fallbacks: DirFallbacks | None = None) -> tuple[str, list[str]]:
    """`value` with each `${VAR}` replaced, and one problem per VAR that is not set. A whole value `${VAR}/NAME`
    whose VAR is not set but has fallbacks is the first `DIR/NAME` that exists, DIR taken from them in order."""
    whole = _DIR_RE.fullmatch(value)
    if whole is not None and whole.group(1) not in env and fallbacks and fallbacks.get(whole.group(1)):
        name, rest = whole.group(1), whole.group(2)
        unsearchable: list[str] = []
        for directory in fallbacks[name]:
            try:
                os.stat(directory / rest)
            except PermissionError:
                unsearchable.append(str(directory))
            except OSError:
                continue
            else:
                return str(directory / rest), []
        looked = ", ".join(str(d) for d in fallbacks[name])
        denied = (f"; hubd may not look into {', '.join(unsearchable)} (run the command as root, e.g. with sudo)"
                  if unsearchable else "")
        return "", [f"environment variable {name} is not set, and {rest} is in none of the directories hubd looks "
                    f"in instead ({looked}){denied}{_unset_hint(name)}"]
    problems: list[str] = []

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in env:
            return env[name]
        problems.append(f"environment variable {name} is not set{_unset_hint(name)}")
        return ""

    return _ENV_RE.sub(one, value), problems


def _unset_hint(name: str) -> str:
    if name != "CREDENTIALS_DIRECTORY":
        return ""
    return ("; systemd sets it for the unit, by hand set it to the directory of the secret files, e.g. "
            "`CREDENTIALS_DIRECTORY=/etc/credstore hubd ...`")


def secret_files(model: type[BaseModel], text: str, env: Mapping[str, str],
                 fallbacks: DirFallbacks | None = None) -> list[SecretFile]:
    """Every `<secret>_file` key of a YAML text of `model` (at any depth), with where it points; YAML that
    cannot be read names none (parsing it reports why)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return []
    reader = _YamlReader(model, env, {}, _Problems(), read_secrets=False)
    data = None if node is None else reader.read(node, ())
    found: list[SecretFile] = []
    for mapping, path, name in secret_fields(model, data if isinstance(data, dict) else {}):
        written = mapping.get(f"{name}_file")
        if not isinstance(written, str):
            continue
        expanded, problems = expand(written, env, fallbacks)
        found.append(SecretFile(dotted((*path, f"{name}_file")), written, None if problems else Path(expanded),
                                problems[0] if problems else None))
    return found


def _names_secret(model: type[BaseModel], path: KeyPath) -> bool:
    """True if `path` is a secret field of `model` or its `<key>_file` key."""
    last = path[-1] if path else None
    if isinstance(last, str) and last.endswith("_file") and is_secret_path(model, (*path[:-1], last[:-5])):
        return True
    return is_secret_path(model, path)


_TAG_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "timestamp": "a date",
              "binary": "base64 data", "null": "null"}
_UNREADABLE = object()


def _unknown_tag(model: type[BaseModel], tag: str, path: KeyPath) -> str:
    """What to say about a YAML tag hubd does not read (Home Assistant's own ones get their equivalent)."""
    shown = f"!!{tag.removeprefix(YAML_TAG)}" if tag.startswith(YAML_TAG) else tag
    if tag == "!secret":
        key = path[-1] if path and isinstance(path[-1], str) else None
        as_file = f"`{key}_file: /path/to/file` or " if key is not None and is_secret_path(model, path) else ""
        return f"!secret is Home Assistant syntax (hubd has no secrets.yaml); use {as_file}`${{ENV_VAR}}`"
    if tag == "!env_var":
        return "!env_var is Home Assistant syntax; write `${ENV_VAR}` instead"
    if tag.startswith("!include"):
        return f"{shown} is Home Assistant syntax; hubd reads one file: write the values here"
    return f"unknown YAML tag {shown}; remove it (hubd reads plain YAML values, with `${{ENV_VAR}}`)"


def _read_secret_files(
    model: type[BaseModel], data: dict[str, Any], lines: dict[KeyPath, int], problems: _Problems, *, read: bool = True,
) -> None:
    """Replace every `<secret>_file: PATH` (of a SecretStr field, at any depth) by the file's content; with
    `read=False`, every secret (from a file or not) by an UnreadSecret."""
    for mapping, path, name in secret_fields(model, data):
        if f"{name}_file" in mapping or (not read and name in mapping):
            _read_secret_file(mapping, path, name, lines, problems, read=read)


def _read_secret_file(
    data: dict[str, Any], path: KeyPath, name: str, lines: dict[KeyPath, int], problems: _Problems, *, read: bool,
) -> None:
    key = f"{name}_file"
    file_path, value_path = (*path, key), (*path, name)
    given = data.pop(key, None)
    if given is not None and name in data:
        problems.add(file_path, f"give either {dotted(value_path)} or {dotted(file_path)}, not both",
                     lines.get(file_path))
        return
    if not read:
        data[name] = UnreadSecret(dotted(value_path))
        lines.setdefault(value_path, lines.get(file_path, 0))
        return
    if file_path in problems.paths:  # an unset ${ENV_VAR} in the path: reported already
        problems.paths.add(value_path)  # and not again as "field required"
        return
    try:
        data[name] = read_secret_file(Path(str(given)))
    except ValueError as err:
        problems.add(file_path, str(err), lines.get(file_path))
        problems.paths.add(value_path)
        return
    lines[value_path] = lines.get(file_path, 0)


def read_secret_file(path: Path) -> str:
    """A `<key>_file` secret: the file's UTF-8 text, its trailing line break aside. ValueError naming the file and the
    fix (never quoting its content) where it cannot be read, is not UTF-8 or is over MAX_SECRET_FILE_BYTES."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror or err}") from None
    if len(raw) > MAX_SECRET_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_SECRET_FILE_BYTES} bytes; a secret's file holds the secret alone, on "
                         "one line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text (byte {err.start + 1} is not); write the secret as text") \
            from None
    return text.rstrip("\r\n")


def _loc(error: Any) -> KeyPath:
    return tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))


def _message(error: Any, example: str = "config.example.yaml") -> str:
    message: str = error["msg"]
    if error["type"] == "extra_forbidden":
        return f"unknown key (check the spelling; see {example} for every key)"
    if message.startswith("Value error, "):
        return message[len("Value error, "):]
    return message


def _line(loc: KeyPath, lines: dict[KeyPath, int]) -> int | None:
    probe = loc
    while probe:
        if probe in lines:
            return lines[probe]
        probe = probe[:-1]
    return None
