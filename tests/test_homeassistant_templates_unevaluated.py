"""A device's template is never compiled or evaluated in hubd's process, its literal parts included (issue 31).

Jinja folds constant expressions while it compiles (its optimizer, and its code generator through `as_const`
even without the optimizer), which calls filters and tests on literal arguments: a template made only of literals
would run where it is compiled. These tests watch every Python call (`sys.setprofile`) while hubd's side of the
templates takes the red team's literal-only catalogue (tests/literal_templates.py): no `as_const`, no filter or
test, no Jinja compiler or optimizer runs. The render process compiles without folding anything but literals, so
there too a template runs only when it renders, within the render's limits; and what the parse alone can tell
(an unknown filter or test) is still refused with the config.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import jinja2.compiler
import jinja2.filters
import jinja2.optimizer
import jinja2.tests
import pytest
from homeassistant_helpers import make, publish
from jinja2 import nodes
from literal_templates import LITERAL_BOMBS, LITERAL_TRIPWIRES

import hubd.dialects.homeassistant.filters as ha_filters
import hubd.dialects.homeassistant.sandbox as sandbox_module
from hubd.dialects.base import InputRejected
from hubd.dialects.homeassistant.abbreviations import ABBREVIATIONS
from hubd.dialects.homeassistant.discovery import COMPONENTS
from hubd.dialects.homeassistant.renderer import RenderProcess
from hubd.dialects.homeassistant.sandbox import TemplateSandbox
from hubd.dialects.homeassistant.templates import ParseOnlySandbox, Payload, TemplateError, Templates

LITERALS = {**LITERAL_TRIPWIRES, **LITERAL_BOMBS}
# Where a filter or a test runs: Jinja's own, Home Assistant's (hubd's), and the sandbox's bounded wrappers.
FILTER_FILES = {str(Path(m.__file__ or "").resolve()) for m in (jinja2.filters, jinja2.tests, ha_filters)}
COMPILER_FILES = {str(Path(m.__file__ or "").resolve()) for m in (jinja2.compiler, jinja2.optimizer)}
SANDBOX_FILE = str(Path(sandbox_module.__file__ or "").resolve())


class Evaluated(BaseException):
    """Raised from the profiler at the first forbidden call (a BaseException: Jinja's `except Exception` around
    its folding must not swallow it), so a process that folds stops before a bomb goes off."""


class RecordingRenderer(RenderProcess):
    """A render process that is never started: it keeps the requests hubd's side would send."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []

    def render(self, request: dict[str, Any]) -> str:
        self.requests.append(request)
        return "rendered elsewhere"


def _watching(forbidden: Callable[[FrameType], str | None]) -> Callable[..., Any]:
    seen: list[str] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            why = forbidden(frame)
            if why is not None:
                seen.append(why)
                sys.setprofile(None)
                raise Evaluated(why)

    hook.seen = seen  # type: ignore[attr-defined]
    return hook


def _runs(frame: FrameType) -> str | None:
    """A call that evaluates part of a template or compiles it."""
    code = frame.f_code
    where = str(Path(code.co_filename).resolve())
    if code.co_name == "as_const":
        return f"{type(frame.f_locals.get('self')).__name__}.as_const"
    if where in FILTER_FILES or (where == SANDBOX_FILE and code.co_name.startswith("bounded_")):
        return f"the filter or test {code.co_name}"
    if where in COMPILER_FILES:
        return f"Jinja's compiler ({code.co_name})"
    return None


def _folds(frame: FrameType) -> str | None:
    """A call that evaluates part of a template while compiling it (literals are read, nothing else)."""
    code = frame.f_code
    if code.co_name == "as_const" and type(frame.f_locals.get("self")) not in (nodes.Const, nodes.TemplateData):
        return f"{type(frame.f_locals.get('self')).__name__}.as_const"
    where = str(Path(code.co_filename).resolve())
    if where in FILTER_FILES or (where == SANDBOX_FILE and code.co_name.startswith("bounded_")):
        return f"the filter or test {code.co_name}"
    if where == str(Path(jinja2.optimizer.__file__ or "").resolve()):
        return "Jinja's optimizer"
    return None


@pytest.fixture
def watched() -> Iterator[Callable[[Callable[[FrameType], str | None], Callable[[], Any]], list[str]]]:
    def run(forbidden: Callable[[FrameType], str | None], work: Callable[[], Any]) -> list[str]:
        hook = _watching(forbidden)
        sys.setprofile(hook)
        try:
            work()
        except Evaluated:
            pass
        finally:
            sys.setprofile(None)
        return list(hook.seen)  # type: ignore[attr-defined]

    yield run
    sys.setprofile(None)


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_hubds_side_of_a_literal_only_template_runs_no_filter_and_compiles_nothing(
        watched: Callable[..., list[str]], name: str) -> None:
    renderer = RecordingRenderer()
    templates = Templates(renderer)

    def take_it_in() -> None:
        template = templates.compile(LITERALS[name])
        assert templates.render_value(template, Payload('{"a": 1}')) == "rendered elsewhere"
        assert templates.render(template, {"value": 1}) == "rendered elsewhere"

    assert watched(_runs, take_it_in) == []
    assert [r["source"] for r in renderer.requests] == [LITERALS[name]] * 2  # the render process got it, whole


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_the_render_process_compiles_a_literal_only_template_without_running_any_of_it(
        watched: Callable[..., list[str]], name: str) -> None:
    sandbox = TemplateSandbox()
    assert watched(_folds, lambda: sandbox.template(LITERALS[name])) == []


def test_the_render_process_renders_what_it_did_not_fold() -> None:
    sandbox = TemplateSandbox()
    expected = {"a filter": "A", "a test": "True", "a filter's argument": "a", "an inline if": "A",
                "a concatenation": "aB", "an autoescape value": "x"}
    assert {name: sandbox.run(sandbox.template(LITERAL_TRIPWIRES[name]), {}) for name in expected} == expected
    assert sandbox.run(sandbox.template("{{ 1 + 2 }} and {{ 'x' }}{% autoescape false %}<{% endautoescape %}"),
                       {}) == "3 and x<"


def test_hubds_process_has_no_compiler_for_a_devices_template() -> None:
    with pytest.raises(RuntimeError, match="never compiles"):
        ParseOnlySandbox().from_string("{{ 1 }}")


def test_an_unknown_filter_or_test_is_still_refused_with_the_config_and_one_behind_an_if_when_it_runs() -> None:
    templates = Templates(RecordingRenderer())
    with pytest.raises(TemplateError, match="No filter named 'frobnicate'"):
        templates.compile("{{ value | frobnicate }}")
    with pytest.raises(TemplateError, match="No test named 'frobnicated'"):
        templates.compile("{% for x in value %}{{ x is frobnicated }}{% endfor %}")
    # Jinja's compiler lets these through to the render (where they fail only if reached): so does hubd.
    templates.compile("{% if value == 'x' %}{{ value | frobnicate }}{% endif %}")
    templates.compile("{{ value | frobnicate if value == 'x' else value }}")


def test_a_failing_availability_template_is_listed_as_the_messages_problem() -> None:
    dialect = make()
    try:
        config = {"name": "Probe", "uniq_id": "probe1", "stat_t": "probe/state", "dev_cla": "temperature",
                  "unit_of_meas": "°C", "avty": [{"t": "probe/avail",
                                                  "val_tpl": LITERAL_BOMBS["regex_match backtracking"]}],
                  "dev": {"ids": ["probe-device"], "name": "Probe"}}
        publish(dialect, "homeassistant/sensor/probe/temperature/config", config, retained=True)
        out = publish(dialect, "probe/avail", "online")
        rejected = [i for i in out if isinstance(i, InputRejected)]
        assert len(rejected) == 1 and "availability template" in rejected[0].reason \
            and "took longer" in rejected[0].reason, out
    finally:
        dialect.templates.close()


TEMPLATE_KEYS = sorted({key for key in ABBREVIATIONS.values() if key.endswith("_template")})
TOPIC_KEYS = sorted({key for key in ABBREVIATIONS.values() if key.endswith("_topic")})


def _everything_config(component: str, index: int, schema: str | None) -> tuple[str, dict[str, Any]]:
    """One entity config with every topic key Home Assistant has (each its own topic under t/<index>/) and every
    *_template key, each a literal-only tripwire of its own; the entity uses what its component reads."""
    config: dict[str, Any] = {"name": f"Everything {index}", "unique_id": f"everything{index}",
                              "device": {"identifiers": [f"everything-{index}"], "name": f"Everything {index}"},
                              "modes": ["off", "heat", "heat_cool"]}
    if schema is not None:
        config["schema"] = schema
    for key in TOPIC_KEYS:
        config[key] = f"t/{index}/{key}"
    tripwires = sorted(LITERAL_TRIPWIRES.values())
    for number, key in enumerate(TEMPLATE_KEYS):
        config[key] = tripwires[number % len(tripwires)] + f"{{# {key} #}}"
    config["availability"] = [{"topic": f"t/{index}/availability_list", "value_template": config[TEMPLATE_KEYS[0]]}]
    return f"homeassistant/{component}/everything{index}/x/config", config


def test_every_template_field_of_every_component_is_only_parsed_in_hubds_process(
        watched: Callable[..., list[str]]) -> None:
    """Configs, then a message on every topic they name: whatever each component reads of its *_template keys
    (value, state, availability, command templates) is parsed here and rendered in the render process only."""
    dialect = make()
    cases = [(c, None) for c in sorted(COMPONENTS) if c != "light"] + \
        [("light", "default"), ("light", "json"), ("light", "template")]
    try:
        dialect.templates.prepare()

        def take_it_in() -> None:
            for index, (component, schema) in enumerate(cases):
                topic, config = _everything_config(component, index, schema)
                publish(dialect, topic, config, retained=True)
            for index in range(len(cases)):
                for topic in [f"t/{index}/{key}" for key in TOPIC_KEYS] + [f"t/{index}/availability_list"]:
                    if dialect.claims(topic):
                        publish(dialect, topic, "1")

        assert watched(_runs, take_it_in) == []
        assert dialect.templates.compiles >= 20  # the components' own keys, parsed (not all the keys)
        assert dialect.templates.renderer.stats()["renders"] >= 20  # and rendered, in the render process
    finally:
        dialect.templates.close()
