"""The user documentation is true to the repository: README.md and docs/*.md name only files the repository has,
their links and anchors resolve, no string in hubd/ (log lines, help texts, messages) names a file the repository
lacks, and the reference pages cover every config key, display type, interface and command the code has. Pure:
reads files, walks the pydantic models and the argument parser, runs nothing.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from hubd.cli import _parser
from hubd.config.model import HubdConfig

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS_DIR = REPO / "docs"
PAGES = [README, REPO / "CONTRIBUTING.md", *sorted(DOCS_DIR.glob("*.md"))]
# Other files users read that name files and README sections.
USER_FILES = [REPO / "config.example.yaml", REPO / "speaker.example.yaml", *sorted((REPO / "systemd").glob("*"))]

# Files on the user's machine, not in the repository: hubd's config, the speaker's, Home Assistant's, a backup's.
THEIR_FILES = {"config.yaml", "speaker.yaml", "configuration.yaml", "secrets.yaml", "manifest.json"}
# hubd's own MQTT topics under the default base topic look like paths into the package.
TOPICS = ("hubd/device/", "hubd/status")
FILE_SUFFIXES = (".py", ".yaml", ".yml", ".md", ".png", ".service", ".toml", ".json", ".html", ".sql")
# A bare `mosquitto.service` is a systemd unit's name, not a file: bare names need one of these.
BARE_SUFFIXES = tuple(s for s in FILE_SUFFIXES if s != ".service")
NOT_A_PATH = re.compile(r"[\s<>{}*+#$|\[\]()=@,;:'\"\\…]")
TRIM = "`'\"()[]<>,;:!?"


def _top_level() -> set[str]:
    """The repository's top-level names (what a repo-relative path starts with)."""
    skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
    return {p.name for p in REPO.iterdir() if p.name not in skip and not p.name.endswith(".egg-info")} | {
        "hubd", "tests", "docs", "systemd", "simulators", "bench", "tools", ".ci"}


TOP_LEVEL = _top_level()


def _generated() -> list[str]:
    """Directories .gitignore names (outputs such as bench/results/): naming one is not naming a missing file."""
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    return [line.strip().lstrip("/") for line in lines if line.strip().endswith("/")]


GENERATED = _generated()


PACKAGE_DIRS = {p.name for p in (REPO / "hubd").rglob("*") if p.is_dir() and p.name != "__pycache__"}


def repo_path(token: str, *, roots: set[str] | None = None) -> str | None:
    """The repo-relative path `token` names, or None when it is not one (a URL, an absolute system path,
    a placeholder, an MQTT topic, a route, a MIME type, a systemd unit, the user's own file).

    A path with a `/` counts when it starts with one of `roots` (default: the repository's top-level names),
    or, without `roots`, when it ends like a file (`.py`, `.md`, ...): a misspelt directory is a miss too."""
    token = token.strip(TRIM).rstrip(".")
    if not token or "://" in token or token.startswith(("/", "~", "./", "-", "$")) or NOT_A_PATH.search(token):
        return None
    if token.startswith(TOPICS) or any((token.rstrip("/") + "/").startswith(g) for g in GENERATED):
        return None
    if "/" in token:
        first = token.split("/", 1)[0]
        if roots is not None:
            return token if first in roots else None
        return token if first in TOP_LEVEL or token.endswith(FILE_SUFFIXES) else None
    if token.endswith(BARE_SUFFIXES) and token not in THEIR_FILES and re.match(r"^[\w.-]+$", token):
        return token
    return None


def _exists(path: str, relative_to: Path) -> bool:
    return (REPO / path).exists() or (relative_to / path).exists()


FENCE = re.compile(r"^( *)(```|~~~)[^\n]*\n(.*?)^\1\2[ \t]*$", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def split_markdown(text: str) -> tuple[list[str], list[str], str]:
    """(fenced code blocks, inline code spans, the prose with both taken out)."""
    blocks = [m.group(3) for m in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    spans = [m.group(2) for m in INLINE_CODE.finditer(prose)]
    prose = INLINE_CODE.sub("", prose)
    return blocks, spans, prose


def named_paths(text: str) -> list[str]:
    """Every repo path a Markdown text names in code: inline spans and the words of code blocks."""
    blocks, spans, _ = split_markdown(text)
    words = [w for block in blocks for w in block.split()] + [w for span in spans for w in span.split()]
    return [p for p in (repo_path(w) for w in words) if p]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[`*]", "", text)  # code and emphasis marks are not in the rendered text
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path, text: str | None = None) -> set[str]:
    """The anchors of a Markdown file's headings (a repeated heading gets -1, -2, ...)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8") if text is None else text)
    seen: dict[str, int] = {}
    out: set[str] = set()
    for match in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE):
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path, text: str | None = None) -> list[str]:
    """Every relative link (file, and anchor where there is one) of a Markdown file that does not resolve."""
    text = path.read_text(encoding="utf-8") if text is None else text
    _, _, prose = split_markdown(text)
    out = []
    for target in LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        if not file_part:  # a heading of this page
            if anchor not in anchors(path, text):
                out.append(f"{target}: no such heading here")
            continue
        file = (path.parent / file_part).resolve()
        if not file.exists():
            out.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            out.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    return out


def missing_paths(path: Path, text: str | None = None) -> list[str]:
    """The repo paths a Markdown file names in code that the repository does not have."""
    text = path.read_text(encoding="utf-8") if text is None else text
    return sorted({p for p in named_paths(text) if not _exists(p, path.parent)})


# --- (a) README.md and docs/*.md ---------------------------------------------------------------------------------


def test_the_guide_and_the_reference_exist() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "configuration.md", "mqtt.md", "devices.md", "http.md", "cli.md", "speaker.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_file_named_exists(page: Path) -> None:
    assert missing_paths(page) == []


@pytest.mark.parametrize("file", USER_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_example_configs_and_units_name_existing_files_and_readme_sections(file: Path) -> None:
    text = file.read_text(encoding="utf-8")
    missing = sorted({p for p in (repo_path(w) for w in text.split()) if p and not _exists(p, file.parent)})
    assert missing == []
    assert missing_sections(text) == []


def missing_sections(text: str) -> list[str]:
    """README sections a text points at (`see README.md, "Raspberry Pi (systemd)"`) that README.md lacks."""
    have = anchors(README)
    return [name for name in re.findall(r"README(?:\.md)?,?\s+\"([^\"]+)\"", text) if slug(name) not in have]


def test_the_checks_catch_a_miss() -> None:
    """The checkers themselves: a bogus link, anchor, path or section is reported, a good one is not."""
    page = DOCS_DIR / "probe.md"
    text = ("[ok](http.md) [bad](nowhere.md) [bad anchor](http.md#no-such-heading) [ok anchor](#probe)\n"
            "# Probe\n`systemd/hubd.service` `tools/no_such_script.py` `SPEC.md` `config.yaml` `/etc/hubd/x.yaml`\n"
            "```sh\nsudo install -m 0644 systemd/no-such.service /etc/systemd/system/\n"
            "mosquitto_pub -t hubd/device/lamp-1/state -m x\n```\n")
    assert broken_links(page, text) == ["nowhere.md: no such file",
                                        "http.md#no-such-heading: no heading #no-such-heading in docs/http.md"]
    assert missing_paths(page, text) == ["SPEC.md", "systemd/no-such.service", "tools/no_such_script.py"]
    assert missing_sections('see README.md, "No Such Section"') == ["No Such Section"]
    assert missing_sections('see README.md, "Raspberry Pi (systemd)"') == []
    assert repo_path("B/device/ID/config") is None and repo_path("https://x.example/a.md") is None
    assert repo_path("application/json") is None and repo_path("10/8") is None


# --- (b) strings in hubd/: log lines, help texts, error messages -------------------------------------------------


def hubd_strings(package: str = "hubd") -> Iterator[tuple[str, int, str]]:
    """(file, line, text) of every string constant (docstrings too) in a package, f-string parts included."""
    for file in sorted((REPO / package).rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield str(file.relative_to(REPO)), node.lineno, node.value


PACKAGE_FILES = [str(p.relative_to(REPO)) for p in (REPO / "hubd").rglob("*") if p.is_file()]
# MQTT topics that begin with a package folder's name: Tasmota's discovery prefix is no path to hubd/dialects/tasmota.
TOPICS_NOT_PATHS = frozenset({"tasmota/discovery"})


def missing_in_code(text: str) -> list[str]:
    """The files a string in hubd/ names that the repository lacks. A path may be repo-relative
    (`docs/configuration.md`) or package-relative (`status/routes.py`, `app.py`, a packaged
    `templates/status.html`); a path into another project (`esphome/components/...`) is not ours."""
    out = []
    for word in text.split():
        path = repo_path(word, roots=TOP_LEVEL | PACKAGE_DIRS)
        if path and path not in TOPICS_NOT_PATHS and not (REPO / path).exists() \
                and not any(f.endswith("/" + path) for f in PACKAGE_FILES):
            out.append(path)
    return out


def test_no_string_in_hubd_names_a_missing_file() -> None:
    missing = [f"{file}:{line}: {path}" for file, line, text in hubd_strings() for path in missing_in_code(text)]
    assert missing == []


def test_no_string_or_help_of_the_simulators_names_a_missing_file() -> None:
    strings = [f"{file}:{line}: {path}" for file, line, text in hubd_strings("simulators")
               for path in missing_in_code(text)]
    helps = []
    for command in (["platform"], ["platform", "serve"], ["platform", "bind"], ["platform", "control"],
                    ["devices"], ["speaker"], ["discovery"], ["zigbee2mqtt"]):
        done = subprocess.run([sys.executable, "-m", "simulators", *command, "--help"], capture_output=True,
                              text=True, cwd=REPO, timeout=60, check=False)
        assert done.returncode == 0, (command, done.stderr)
        helps += [f"python -m simulators {' '.join(command)} --help: {path}" for path in missing_in_code(done.stdout)]
    assert strings + helps == []


def test_the_string_check_catches_a_miss() -> None:
    text = ("see CONTRACT.md section 4, or docs/no-such-page.md, web/no_such.py, README.md; config.example.yaml "
            "has every key; app.py and templates/status.html are the package's; esphome/components/x.py not")
    assert missing_in_code(text) == ["CONTRACT.md", "docs/no-such-page.md", "web/no_such.py"]


# --- (c) every config key ------------------------------------------------------------------------------------------


def _model(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def config_keys(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, bool]]:
    """(dotted key, is a secret) for every field, `[]` marking a list's items: `driver.accounts[].username`."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        secret = annotation is SecretStr or SecretStr in typing.get_args(annotation)
        sub = _model(annotation)
        if sub is None:  # a section is a heading, not a key
            yield key, secret
        if sub is not None:
            yield from config_keys(sub, f"{key}.")
        elif typing.get_origin(annotation) is list and (item := _model(typing.get_args(annotation)[0])):
            yield from config_keys(item, f"{key}[].")


def _in_example(example: str, key: str, secret: bool) -> bool:
    """Whether the example file shows `key` (commented out counts) in its section."""
    parts = key.replace("[]", "").split(".")
    section, leaf = parts[0], parts[-1]
    match = re.search(rf"^(# ?)?{re.escape(section)}:.*?(?=^[a-z_]+:|\Z)", example, re.MULTILINE | re.DOTALL)
    if match is None:
        return False
    names = [leaf, f"{leaf}_file"] if secret else [leaf]
    if len(parts) == 1:
        return True
    return any(re.search(rf"^[ \t]*(#[ \t]*)?(-[ \t]+)?{re.escape(n)}:", match.group(0), re.MULTILINE)
               for n in names)


HUBD_KEYS = list(config_keys(HubdConfig))


def test_the_config_walk_sees_every_section() -> None:
    keys = {key for key, _ in HUBD_KEYS}
    assert {"log.events", "driver.accounts[].password", "doorbells[].event", "http.local_port"} <= keys


@pytest.mark.parametrize(("key", "secret"), HUBD_KEYS, ids=[k for k, _ in HUBD_KEYS])
def test_every_config_key_is_documented(key: str, secret: bool) -> None:
    reference = (DOCS_DIR / "configuration.md").read_text(encoding="utf-8")
    assert f"`{key}`" in reference, f"docs/configuration.md does not describe `{key}`"
    if secret:
        assert f"`{key}_file`" in reference, f"docs/configuration.md does not describe `{key}_file`"
    example = (REPO / "config.example.yaml").read_text(encoding="utf-8")
    assert _in_example(example, key, secret), f"config.example.yaml does not show {key}"


def _speaker_keys() -> list[tuple[str, bool]]:
    from hubd.speaker.config import SpeakerConfig

    # mqtt.* is hubd's own model (docs/speaker.md points there); log.events means nothing to the agent.
    return [(k, s) for k, s in config_keys(SpeakerConfig) if not k.startswith("mqtt") and k != "log.events"]


@pytest.mark.parametrize(("key", "secret"), _speaker_keys(), ids=[k for k, _ in _speaker_keys()])
def test_every_speaker_key_is_documented(key: str, secret: bool) -> None:
    reference = (DOCS_DIR / "speaker.md").read_text(encoding="utf-8")
    assert f"`{key}`" in reference, f"docs/speaker.md does not describe `{key}`"
    example = (REPO / "speaker.example.yaml").read_text(encoding="utf-8")
    assert _in_example(example, key, secret), f"speaker.example.yaml does not show {key}"


# --- (d) display types and interfaces -----------------------------------------------------------------------------


def defined_in_hubd(name: str) -> Any:
    """The module-level constant `name`, wherever in hubd/ it is defined (modules move; the constant stays)."""
    for file in sorted((REPO / "hubd").rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                module = ".".join(file.relative_to(REPO).with_suffix("").parts)
                return getattr(importlib.import_module(module), name)
    raise AssertionError(f"no module in hubd/ defines {name}")


def table_rows(page: Path, heading: str) -> list[list[str]]:
    """The cells of the first table under `## heading`, header and rule left out."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    rows = [line for line in text[start:end if end != -1 else None].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def test_every_display_type_is_listed() -> None:
    display_types = defined_in_hubd("DISPLAY_TYPES")
    rows = table_rows(DOCS_DIR / "devices.md", "Display types")
    listed = [re.fullmatch(r"`(\w+)`", row[0]).group(1) for row in rows]  # type: ignore[union-attr]
    assert sorted(listed) == sorted(display_types)
    assert len(display_types) == 41 and "41 display types" in (DOCS_DIR / "devices.md").read_text(encoding="utf-8")


def test_every_interface_is_listed_with_its_operations() -> None:
    interfaces = defined_in_hubd("INTERFACES")
    rows = table_rows(DOCS_DIR / "devices.md", "Interfaces")
    listed = {row[0].strip("`"): set(re.findall(r"`(\w+)`", row[2])) for row in rows}
    assert set(listed) == set(interfaces)
    for name, interface in interfaces.items():
        assert listed[name] == set(interface.operations), name
    assert len(interfaces) == 17 and "17 interfaces" in (DOCS_DIR / "devices.md").read_text(encoding="utf-8")


# --- (e) commands ---------------------------------------------------------------------------------------------------


def _subcommands() -> list[str]:
    """`run`, `tokens list`, ...: every command and action of `hubd`."""
    out: list[str] = []

    def walk(parser: Any, prefix: str) -> None:
        for action in parser._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                for name, sub in action.choices.items():
                    out.append(f"{prefix}{name}")
                    walk(sub, f"{prefix}{name} ")

    walk(_parser(), "")
    return out


def test_every_command_is_in_the_cli_reference() -> None:
    reference = (DOCS_DIR / "cli.md").read_text(encoding="utf-8")
    missing = [c for c in _subcommands() if not re.search(rf"hubd {re.escape(c)}\b", reference)]
    assert missing == []


def shown_commands(text: str) -> list[str]:
    """The `hubd ...` commands a page shows: its sh blocks' lines and inline spans (also for the README)."""
    found: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] == ["sudo"]:
                words = words[1:]
            if len(words) > 1 and (words[0] == "hubd" or words[0].endswith("/bin/hubd")):
                found.append(shlex.join(["hubd", *shlex.split(" ".join(words[1:]))]))
    for span in re.findall(r"`(hubd [^`]+)`", text):
        # [optional parts] are typed with their content; of a|b|c alternatives, the first
        found.append(re.sub(r"([^\s|]+)(?:\|[^\s|]+)+", r"\1", span.replace("[", "").replace("]", "")))
    return found


DOC_COMMANDS = sorted({c for page in PAGES[1:] for c in shown_commands(page.read_text(encoding="utf-8"))})


@pytest.mark.parametrize("command", DOC_COMMANDS)
def test_every_command_the_docs_show_parses(command: str) -> None:
    words = shlex.split(command)[1:]
    if " ".join(words) in _subcommands():
        return  # the name of a command (`hubd webhook`, `hubd check-driver`), not an invocation
    try:
        args = _parser().parse_args(words)
    except SystemExit as exit_:
        if exit_.code == 0:  # --help, --version
            return
        pytest.fail(f"docs/ show `{command}`, which hubd refuses (exit {exit_.code})")
    assert getattr(args, "handler", None) is not None, command


def _readme_section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_readme_has_two_commands_and_ci_runs_the_test_command() -> None:
    section = _readme_section("Two commands on a fresh machine")
    blocks = [block.split("\n", 1)[1].strip() for block in section.split("```sh")[1:]]
    commands = [block.split("```")[0].strip() for block in blocks]
    assert len(commands) == 2, commands
    demo, tests = commands
    # A fresh Debian 12 / Raspberry Pi OS refuses `pip install` outside a venv (externally managed).
    for command in commands:
        assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && "), command
    assert demo.endswith("hubd demo") and "python -m pytest" in tests
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert tests in ci_lines, f"{tests!r} is not a line of .ci/run"


def test_the_readme_shows_what_hubd_init_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hubd.cli import main

    root = tmp_path / "root"
    config, credstore = root / "etc" / "hubd" / "config.yaml", root / "etc" / "credstore"
    config.parent.mkdir(parents=True)
    assert main(["init", "-c", str(config), "--secrets-dir", str(credstore),
                 "--storage", "/var/lib/hubd/hubd.db"]) == 0
    printed = [line.replace(str(root), "") for line in capsys.readouterr().out.splitlines()]
    # Under /etc the secrets are in a credential store hubd looks in by itself: no CREDENTIALS_DIRECTORY to set.
    printed[-1] = re.sub(r"^  \S+=\S+ ", "  ", printed[-1])
    manual = (DOCS_DIR / "systemd.md").read_text()  # the install by hand, without the package
    shown = [line.removeprefix("# ") for line in manual.splitlines()
             if line.startswith("# ") and any(line[2:].startswith(p) for p in ("wrote ", "next: ", "  hubd "))]
    assert shown == printed


def test_systemd_unit_and_the_install_by_hand_agree() -> None:
    unit = (REPO / "systemd" / "hubd.service").read_text()
    text = (DOCS_DIR / "systemd.md").read_text()
    start = text.index("\n## Installing by hand (without the package)\n")
    section = text[start:text.index("\n## ", start + 1)]
    credentials = [line.split("=", 1)[1].strip() for line in unit.splitlines() if line.startswith("LoadCredential=")]
    assert credentials, "the unit loads no credentials"
    for name in credentials:
        # The install by hand puts each credential's file where the unit loads it from, the config points at it.
        assert f"/etc/credstore/{name}" in section, name
        assert f"${{CREDENTIALS_DIRECTORY}}/{name}" in section, name
    assert "DynamicUser=yes" in unit
    # DynamicUser: a uid that exists only while hubd runs, so /etc/hubd must be world-readable.
    assert "install -d -m 0755 /etc/hubd" in section and "install -m 0644" in section
    assert "0750" not in section and "0640" not in section
