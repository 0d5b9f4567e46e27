"""ARCHITECTURE.md is true to the code: every `hubd/...` path and `hubd.x.y` name it gives exists, every module
under hubd/ is named in it, its floors table is the one the imports make, and its links and other files
resolve. Pure: reads files and parses them, imports no hubd module.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from test_docs import broken_links, missing_paths

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hubd"
ARCHITECTURE = REPO / "ARCHITECTURE.md"

# `hubd/mqtt/bridge.py`, `hubd/dialects/`: a path into the package (not hubd's MQTT topics, `hubd/device/...`,
# nor a pattern such as `hubd/dialects/<name>.py` or `hubd/store/migrations/NNNN_*.sql`).
PATH = re.compile(r"(?<![\w./-])hubd/[^\s`'\"()\[\],;|]*")
PATTERN = re.compile(r"[<>{}*]")
# `hubd.outbox.writer`, `hubd.events.BARRIER_LANE`; not `systemd/hubd.service` nor a sentence's last "hubd.".
DOTTED = re.compile(r"(?<![\w./-])hubd(?:\.\w+)+")
TOPICS = ("hubd/device/",)
FLOORS_HEADING = "The floors"


def _text() -> str:
    return ARCHITECTURE.read_text(encoding="utf-8")


def module_files() -> list[Path]:
    """Every module of the package, `__init__.py` and `__main__.py` aside."""
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py") and "__pycache__" not in p.parts)


def named_paths(text: str) -> set[str]:
    """The package paths the text names (trailing punctuation off)."""
    out = set()
    for match in PATH.finditer(text):
        path = match.group(0).rstrip(".,;:")
        if not path.startswith(TOPICS) and not PATTERN.search(path):
            out.add(path)
    return out


def named_modules(text: str) -> set[str]:
    return {m.group(0) for m in DOTTED.finditer(text)}


def _module_file(parts: list[str]) -> Path | None:
    base = REPO.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defined(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names a module or class body defines (functions, classes, assignments, imports), with the statement."""
    out: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            out.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(((a.asname or a.name).split(".")[0], node) for a in node.names)
    return out


def unresolved(dotted: str) -> str | None:
    """Why `hubd.a.b.Name.attr` names nothing in the package, or None: the longest prefix that is a module or
    package, then names defined in it (and, for a class, in its body)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        file = _module_file(parts[:cut])
        if file is not None:
            break
    else:
        return "no such module"
    body: list[ast.stmt] = ast.parse(file.read_text(encoding="utf-8")).body
    for name in parts[cut:]:
        found = _defined(body).get(name)
        if found is None:
            return f"{'.'.join(parts[:cut])} defines no {name}"
        if not isinstance(found, ast.ClassDef):
            return None  # an attribute of a value: beyond what a parse can tell
        body = found.body
    return None


# --- the floors: recomputed from the imports -------------------------------------------------------------------


def room(module: str) -> str:
    """A subpackage is one room (`hubd/dialects/`), a top-level module another (`hubd/registry.py`)."""
    parts = module.split(".")
    if len(parts) >= 2 and (PACKAGE / parts[1]).is_dir():
        return f"hubd/{parts[1]}/"
    return "/".join(parts) + ".py" if len(parts) > 1 else "hubd/__init__.py"


def _module_name(file: Path) -> str:
    parts = file.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports() -> dict[str, set[str]]:
    """Module -> the hubd modules it imports: every `import hubd...` and `from hubd... import`, at any depth of
    the file (inside functions, under TYPE_CHECKING too); `from hubd.x import name` is an import of hubd.x."""
    edges: dict[str, set[str]] = {}
    for file in sorted(PACKAGE.rglob("*.py")):
        here = _module_name(file)
        edges.setdefault(here, set())
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] != "hubd" or target == "hubd.__version__":
                    continue
                module = target if _module_file(target.split(".")) else target.rsplit(".", 1)[0]
                if module != here:
                    edges[here].add(module)
    return edges


def room_imports() -> dict[str, set[str]]:
    """Room -> the other rooms it imports."""
    edges: dict[str, set[str]] = {}
    for module, targets in module_imports().items():
        here = room(module)
        edges.setdefault(here, set()).update(room(t) for t in targets if room(t) != here)
    return edges


def levels(edges: dict[str, set[str]]) -> dict[str, int]:
    """Node -> 1 for a node that imports nothing, else one above the highest node it imports; a cycle fails."""

    @functools.cache
    def level(name: str, path: tuple[str, ...] = ()) -> int:
        assert name not in path, f"these import each other: {' -> '.join((*path, name))}"
        return 1 + max((level(other, (*path, name)) for other in edges.get(name, ())), default=0)

    return {name: level(name) for name in edges}


def floors() -> dict[str, int]:
    """Room -> floor."""
    return levels(room_imports())


def documented_floors(text: str) -> dict[str, int]:
    """Room -> floor, from the first table under `## The floors`."""
    start = text.index(f"\n## {FLOORS_HEADING}\n")
    end = text.find("\n## ", start + 1)
    out: dict[str, int] = {}
    for line in text[start:end if end != -1 else None].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) >= 2 and cells[0].isdigit():
            out.update((name, int(cells[0])) for name in re.findall(r"`(hubd/[^`]+)`", cells[1]))
    return out


# --- the tests ------------------------------------------------------------------------------------------------


def test_every_path_named_exists() -> None:
    missing = sorted(p for p in named_paths(_text()) if not (REPO / p).exists())
    assert missing == []


def test_every_dotted_name_resolves() -> None:
    wrong = sorted(f"{name}: {why}" for name in named_modules(_text()) if (why := unresolved(name)))
    assert wrong == []


def test_every_module_is_named() -> None:
    text = _text()
    paths, modules = named_paths(text), named_modules(text)
    unnamed = [str(f.relative_to(REPO)) for f in module_files()
               if str(f.relative_to(REPO)) not in paths and _module_name(f) not in modules]
    assert unnamed == [], "ARCHITECTURE.md does not name these modules"


def test_the_floors_table_is_the_import_graph() -> None:
    text = _text()
    computed = floors()
    assert documented_floors(text) == computed
    top = max(computed.values())
    assert f"{top} floors" in text, f"ARCHITECTURE.md should say the import graph has {top} floors"


def test_no_module_imports_another_that_imports_it_back() -> None:
    """The page says the modules inside a package import each other downward too: no cycle of modules."""
    assert levels(module_imports())


def test_links_and_other_files_resolve() -> None:
    text = _text()
    assert broken_links(ARCHITECTURE) == []
    assert missing_paths(ARCHITECTURE) == []
    # Prose too: a Markdown file named anywhere (`SPEC.md`, `docs/x.md`) must be the repository's.
    pages = {w.strip("`'\"()[],.;:") for w in re.findall(r"[\w./-]+\.md\b", text)}
    assert sorted(p for p in pages if not (REPO / p).exists()) == []


def test_the_checks_catch_a_miss() -> None:
    text = ("`hubd/mqtt/bridge.py` `hubd/no_such.py`, hubd.outbox.writer.OutboxWriter, hubd.outbox.writer.Nope, "
            "hubd.nowhere, `hubd/device/lamp/state`, `hubd/dialects/<name>.py`, systemd/hubd.service, and hubd.")
    assert sorted(p for p in named_paths(text) if not (REPO / p).exists()) == ["hubd/no_such.py"]
    assert sorted(n for n in named_modules(text) if unresolved(n)) == ["hubd.nowhere", "hubd.outbox.writer.Nope"]
    assert unresolved("hubd.lifecycle.Supervisor.run") is None
    assert room("hubd.dialects.native.dialect") == "hubd/dialects/" and room("hubd.registry") == "hubd/registry.py"


# --- the dialects' seam ---------------------------------------------------------------------------------------

DIALECTS = PACKAGE / "dialects"


def dialect_folders() -> set[str]:
    """The dialects' own folders (`native`, `homeassistant`, ...): each a package under hubd/dialects/."""
    return {p.name for p in DIALECTS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}


def _dialect_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) >= 3 and parts[:2] == ["hubd", "dialects"] and parts[2] in dialect_folders() else None


def test_no_dialect_imports_another() -> None:
    crossings = sorted(f"{module} imports {target}" for module, targets in module_imports().items()
                       for target in targets
                       if _dialect_of(module) and _dialect_of(target) not in (None, _dialect_of(module)))
    assert not crossings, crossings


def test_nothing_after_the_seam_imports_a_dialect() -> None:
    """Outside hubd/dialects/ only the seam and the shared parts are imported (`hubd.dialects.base`, the commands,
    the table); a dialect's own folder is imported by the table alone (`hubd/dialects/enabled.py`), when enabled."""
    table = "hubd.dialects.enabled"
    leaks = sorted(f"{module} imports {target}" for module, targets in module_imports().items()
                   for target in targets
                   if _dialect_of(target) and not _dialect_of(module) and module != table)
    assert not leaks, leaks


def test_every_dialect_folder_is_a_row_of_the_table() -> None:
    table = (DIALECTS / "enabled.py").read_text(encoding="utf-8")
    missing = sorted(name for name in dialect_folders() if f"hubd.dialects.{name}." not in table)
    assert not missing, f"dialect folders the table does not build: {missing}"


def test_the_seam_checks_tell_a_dialect_from_the_shared_parts() -> None:
    assert {"native", "homeassistant", "zigbee2mqtt", "tasmota"} <= dialect_folders()
    assert _dialect_of("hubd.dialects.tasmota.dialect") == "tasmota"
    assert _dialect_of("hubd.dialects.base") is None
    assert _dialect_of("hubd.registry") is None
