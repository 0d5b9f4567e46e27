"""Every row of the dialect table (`hubd.dialects.enabled.KINDS`) reaches every place that needs a dialect's facts:
its config section (a `DialectConfig` of its own), the prefixes no device command may go under, the labels of the
status and devices pages, `hubd init`'s config and config.example.yaml. Each test walks the table, so a new row is
checked without anyone listing it here. (Its include/exclude reloading: tests/test_config_reload.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hubd_proc import REPO
from rig import LAMP, Rig

from hubd.config.model import DialectConfig, HubdConfig, parse_config
from hubd.dialects.enabled import KINDS, DialectKind, build_dialects, publish_rules, selections
from hubd.errors import ConfigError
from hubd.initconfig import init_config
from hubd.owner.reload import LIVE_KEYS

SECTIONS = [kind for kind in KINDS if kind.section]


def test_the_table_names_each_dialect_once_and_builds_it_in_claim_order_when_enabled() -> None:
    assert len({kind.name for kind in KINDS}) == len(KINDS)
    assert [kind.name for kind in KINDS if not kind.section] == ["native"]  # hubd's own topics: no section
    every = HubdConfig(**{kind.name: {"enabled": True} for kind in SECTIONS})
    assert [d.name for d in build_dialects(every)] == [kind.name for kind in KINDS]
    assert [d.name for d in build_dialects(HubdConfig())] == ["native"]  # every section is off by default


@pytest.mark.parametrize("kind", SECTIONS, ids=[kind.name for kind in SECTIONS])
def test_each_sections_shared_keys_come_from_dialect_config(kind: DialectKind) -> None:
    model = kind.model
    assert model is not None and issubclass(model, DialectConfig)
    section = model()
    assert (section.enabled, section.include, section.exclude) == (False, ["*"], [])
    problems = _problems(f"{kind.name}:\n  enabled: true\n  exclude: ['']\n  bogus: 1\n")
    assert any(p.startswith(f"{kind.name}.exclude: a pattern is empty") for p in problems), problems
    assert any(p.startswith(f"{kind.name}.bogus: unknown key") for p in problems), problems  # extra="forbid"


@pytest.mark.parametrize("kind", SECTIONS, ids=[kind.name for kind in SECTIONS])
def test_each_sections_include_and_exclude_are_live_keys_and_its_selection(kind: DialectKind) -> None:
    assert {f"{kind.name}.include", f"{kind.name}.exclude"} == set(kind.live_keys) <= LIVE_KEYS
    config = HubdConfig(**{kind.name: {"enabled": True, "include": ["Kitchen*"], "exclude": ["*battery*"]}})
    chosen = selections(config)[kind.name]
    assert (chosen.include, chosen.exclude) == (("Kitchen*",), ("*battery*",))
    assert kind.name not in selections(HubdConfig())  # a dialect that is off selects nothing

    running, new = HubdConfig(), config  # a reload: the live keys of the new file, the rest as running
    applied = kind.live(running, new)
    assert applied is not None and (applied.include, applied.exclude, applied.enabled) == \
        (["Kitchen*"], ["*battery*"], False)


@pytest.mark.parametrize("kind", SECTIONS, ids=[kind.name for kind in SECTIONS])
def test_each_rows_prefixes_are_no_place_for_a_device_command(kind: DialectKind) -> None:
    reserved = kind.reserved(HubdConfig())
    assert reserved, f"{kind.name} reserves no topic prefix: where does it read its devices' announcements?"
    rules = publish_rules(HubdConfig())
    for prefix in reserved:
        assert prefix.endswith("/") and prefix in rules.reserved
        assert rules.refusal(f"{prefix}some/device/set") is not None


def test_hubd_init_writes_every_dialects_section_and_the_example_shows_it(tmp_path: Path) -> None:
    written = init_config(tmp_path / "config.yaml")
    text = written.config.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    example = yaml.safe_load((REPO / "config.example.yaml").read_text(encoding="utf-8"))
    for kind in SECTIONS:
        assert kind.init in text and isinstance(data[kind.name]["enabled"], bool), kind.name
        assert kind.model is not None and set(example[kind.name]) == set(kind.model.model_fields), kind.name
    written_sections = HubdConfig.model_validate({kind.name: data[kind.name] for kind in SECTIONS})
    assert all(kind.enabled(written_sections) for kind in SECTIONS)  # a real installation imports every kind


async def test_the_pages_get_each_dialects_labels(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.hub.wait_for(lambda: _listed(rig, "lamp-1"), what="lamp-1 in /api/devices")
    labels = {kind.name: {"label": kind.label, "short": kind.short} for kind in KINDS}
    for path in ("/api/devices", "/api/status"):
        code, body = await rig.hub.get(path)
        assert code == 200 and body["sources"] == labels, path
    code, page = await rig.hub.get("/")
    assert code == 200 and all(kind.label in page for kind in KINDS)  # the page's data block
    assert "const SOURCE" not in page  # no labels of its own


async def _listed(rig: Rig, endpoint: str) -> bool:
    _, body = await rig.hub.get("/api/devices")
    return any(d["endpointId"] == endpoint for d in body["devices"])


def _problems(text: str) -> list[str]:
    try:
        parse_config(text, {})
    except ConfigError as err:
        return list(err.problems)
    return []
