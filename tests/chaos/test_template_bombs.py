"""Templates that try to stall or bloat hubd: none can (issue 23's catalogue and more).

A discovered device's templates are untrusted. Each bomb here is a template real attackers (and the red team)
wrote: a regex that backtracks for ever, loops in loops with nothing in them, filters and operators that would
allocate gigabytes, references nested into an exponential structure and then printed, recursion. Every one ends
as a `TemplateError` with a reason (never another exception, never a hang), hubd's own process does not grow,
and the render process answers the next ordinary template. Then hypothesis composes bombs from the same pieces.
Through a real broker and hubd: the regex bomb of the red team's report, from a discovery config and a state,
leaves /healthz answering and another device's events flowing, and is listed as the entity's problem.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from literal_templates import LITERAL_BOMBS, LITERAL_TRIPWIRES
from mosquitto import publish
from rig import LAMP, Rig, send_until_seen, states_of, wait_devices

from hubd.dialects.homeassistant.templates import Payload, TemplateError, Templates
from simulators.platform_directives import DirectiveClient

BOMBS: dict[str, tuple[str, str]] = {
    # (template, payload)
    "regex_match backtracking": ('{{ value | regex_match("(a+)+$") }}', "a" * 36 + "!"),
    "regex_search backtracking": ('{{ value | regex_search("(a|aa)+$") }}', "a" * 40 + "!"),
    "regex_replace backtracking": ('{{ value | regex_replace("(x+x+)+y", "z") }}', "x" * 40),
    "regex_findall backtracking": ('{{ value | regex_findall("(a*)*b") }}', "a" * 40),
    "match test backtracking": ('{{ value is match("(a+)+$") }}', "a" * 36 + "!"),
    "three nested loops": ("{% for a in 'x' * 3000 %}{% for b in 'x' * 3000 %}{% for c in 'x' * 3000 %}"
                           "{% endfor %}{% endfor %}{% endfor %}", ""),
    "loops over the payload": ("{% for a in value %}{% for b in value %}{% for c in value %}{% endfor %}"
                               "{% endfor %}{% endfor %}", "y" * 60_000),
    "replace amplification": ("{{ ('a' * 60000) | replace('a', 'a' * 60000) | length }}", ""),
    "center": ("{{ value | center(999999999) }}", "x"),
    "indent": ("{{ ('a\\n' * 30000) | indent(30000) }}", ""),
    "format width": ("{{ '%0999999999d' | format(1) }}", ""),
    "percent width": ("{{ '%0999999999d' % 1 }}", ""),
    "str.format width": ("{{ '{:>999999999}'.format(1) }}", ""),
    "join separator": ("{{ ('x' * 60000) | join('y' * 60000) }}", ""),
    "wordwrap": ("{{ ('x' * 60000) | wordwrap(1, wrapstring='y' * 60000) }}", ""),
    "tojson indent": ("{{ value_json | tojson(indent=999999999) }}", "[[[[1]]]]"),
    "concatenation doubling": ("{% set ns = namespace(s='x' * 60000) %}{% for i in range(40) %}"
                               "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}", ""),
    "plus doubling": ("{% set ns = namespace(s='x' * 60000) %}{% for i in range(40) %}"
                      "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}", ""),
    "nested references printed": ("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}"
                                  "{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}", ""),
    "nested references compared": ("{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
                                   "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
                                   "{{ ns.a == ns.b }}", ""),
    "sum of lists": ("{{ ([[1] * 60000] * 60000) | sum(start=[]) | length }}", ""),
    "list repetition": ("{{ ([1] * 60000) * 60000 }}", ""),
    "big powers": ("{{ ((9 ** 100) ** 100) ** 100 }}", ""),
    "squaring in a loop": ("{% set ns = namespace(n=9 ** 99) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}"
                           "{% endfor %}{{ ns.n > 0 }}", ""),
    "round precision": ("{{ value | round(999999999, 'ceil') }}", "1.5"),
    "range": ("{{ range(10 ** 9) | list | length }}", ""),
    "recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", ""),
    "output": ("{% for i in range(10000) %}{{ 'x' * 60 }}{% endfor %}", ""),
}


@pytest.fixture(scope="module")
def templates() -> Any:
    shared = Templates()
    yield shared
    shared.close()


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_each_bomb_is_a_template_error_and_hubd_goes_on(templates: Templates, name: str) -> None:
    source, value = BOMBS[name]
    peak_before = _peak_rss_mib()
    with pytest.raises(TemplateError) as raised:
        templates.render_value(templates.compile(source), Payload(value))
    assert str(raised.value), name
    # hubd's own process: no gigabytes (the red team saw 3.4 GB), at most the payload's few copies.
    assert _peak_rss_mib() - peak_before < 64, name
    # The render process (the same one, or a new one after a kill) answers an ordinary template at once.
    assert templates.render_value(templates.compile("{{ value_json.a }}"), Payload('{"a": 7}')) == "7"
    assert templates.render_value(templates.compile("{{ value_json.a | lower }}"), Payload('{"a": "B"}')) == "b"


def test_a_template_that_ran_past_the_deadline_is_put_aside_not_rendered_again(templates: Templates) -> None:
    bomb = templates.compile('{{ value | regex_match("(b+)+$") }}')
    with pytest.raises(TemplateError, match="took longer"):
        templates.render_value(bomb, Payload("b" * 40 + "!"))
    started = templates.renderer.starts
    began = time.monotonic()
    with pytest.raises(TemplateError, match="skips this template"):
        templates.render_value(bomb, Payload("b" * 40 + "!"))
    assert time.monotonic() - began < 0.1 and templates.renderer.starts == started  # refused at once


def test_command_and_availability_templates_go_through_the_same_guard(templates: Templates) -> None:
    with pytest.raises(TemplateError):
        templates.render(templates.compile("{{ (value * 60000) | replace('1', '1' * 60000) }}"), {"value": "1"})
    assert templates.render(templates.compile('{"position": {{ position }}}'), {"position": 30}) == '{"position": 30}'


FRAGMENTS = st.sampled_from([
    "{{ value | regex_match('(a+)+$') }}", "{% for a in value %}{% for b in value %}{{ '' }}{% endfor %}{% endfor %}",
    "{{ value * 1000 }}", "{{ value | replace('a', value) }}", "{{ value | center(100000) }}",
    "{{ (value ~ value ~ value) | length }}", "{{ value | indent(1000) }}", "{{ [value] * 1000 }}",
    "{{ value | join(value) }}", "{{ value_json | tojson }}", "{{ value | wordwrap(2) }}",
    "{% set ns = namespace(l=[value]) %}{% for i in range(25) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"
    "{{ ns.l | length }}",
])


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(parts=st.lists(FRAGMENTS, min_size=1, max_size=3), size=st.integers(0, 60_000),
       letter=st.sampled_from(["a", "!", "\\n", "%"]))
def test_composed_bombs_render_or_fail_with_a_reason(templates: Templates, parts: list[str], size: int,
                                                     letter: str) -> None:
    payload = Payload(letter * size + "!")
    try:
        text = templates.render_value(templates.compile("".join(parts)), payload)
    except TemplateError as err:
        reason = str(err)
        assert reason  # a reason, never another exception
    else:
        assert len(text) <= 65_536


async def test_the_red_teams_regex_bomb_leaves_hubd_answering_and_other_devices_flowing(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    rig.publish("lamp-1", "config", LAMP, retain=True)
    config = {"name": "Bomb", "uniq_id": "bomb1", "stat_t": "bomb/state", "dev_cla": "temperature",
              "unit_of_meas": "°C", "val_tpl": '{{ value | regex_match("(a+)+$") }}',
              "dev": {"ids": ["bomb-device"], "name": "Bomb"}}
    publish(rig.broker.port, "homeassistant/sensor/bomb/temperature/config", json.dumps(config), retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="bomb-device")  # its config is fine

    latencies: list[float] = []

    async def poll_healthz() -> None:
        while True:
            began = time.monotonic()
            status, _ = await rig.hub.get("/healthz")
            assert status == 200
            latencies.append(time.monotonic() - began)
            await asyncio.sleep(0.05)

    poller = asyncio.create_task(poll_healthz())
    try:
        for i in range(3):
            publish(rig.broker.port, "bomb/state", "a" * 36 + "!")
            rig.publish("lamp-1", "state", {"Switch": "On" if i % 2 == 0 else "Off"})
            await rig.wait_events(i + 1, "ChangeReport", endpoint="lamp-1")
        await rig.hub.wait_for(lambda: _bomb_listed(rig), what="the bomb listed as the entity's problem")
    finally:
        poller.cancel()
        await asyncio.gather(poller, return_exceptions=True)
    assert latencies, "no /healthz answer while the bomb went off"
    log = rig.hub.log()
    assert "Traceback" not in log and log.count("template render process stopped") <= 1
    assert rig.hub.proc is not None and rig.hub.proc.poll() is None


async def _bomb_listed(rig: Rig) -> bool:
    _, status = await rig.hub.get("/api/status")
    return any(p["topic"] == "bomb/state" and "took longer" in p["reason"] for p in status["problems"]["rejected"])


# The red team's literal-only catalogue (issue 31): templates made only of constants, which Jinja would fold while
# compiling them. hubd's process only parses them; each is refused when it renders, in the render process.

@pytest.mark.parametrize("name", sorted(LITERAL_BOMBS))
def test_each_literal_only_bomb_is_refused_when_it_renders_and_hubd_goes_on(templates: Templates, name: str) -> None:
    peak_before = _peak_rss_mib()
    compiled = templates.compile(LITERAL_BOMBS[name])  # parsed only: nothing of it runs here
    with pytest.raises(TemplateError) as raised:
        templates.render_value(compiled, Payload("1"))
    assert str(raised.value), name
    with pytest.raises(TemplateError):
        templates.render(compiled, {"value": 1})  # as a command template
    assert _peak_rss_mib() - peak_before < 64, name
    assert templates.render_value(templates.compile("{{ value_json.a | lower }}"), Payload('{"a": "B"}')) == "b"


LITERAL_FRAGMENTS = st.sampled_from(sorted(LITERAL_BOMBS.values()) + sorted(LITERAL_TRIPWIRES.values()))


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(parts=st.lists(LITERAL_FRAGMENTS, min_size=1, max_size=3), salt=st.integers(0, 10**6))
def test_composed_literal_bombs_render_or_fail_with_a_reason(templates: Templates, parts: list[str],
                                                             salt: int) -> None:
    source = "".join(parts) + f"{{# {salt} #}}"  # a source of its own: never one put aside before
    try:
        text = templates.render_value(templates.compile(source), Payload("1"))
    except TemplateError as err:
        reason = str(err)
        assert reason  # a reason, never another exception
    else:
        assert len(text) <= 65_536 and all(p in LITERAL_TRIPWIRES.values() for p in parts)


# Every *_template field hubd reads, with a literal bomb in it, through a real broker and hubd: (component, the
# field, the config's other keys; "T" stands for the topic whose message makes hubd render the field).
STATE_FIELDS: list[tuple[str, str, dict[str, Any]]] = [
    ("sensor", "value_template", {"stat_t": "T", "dev_cla": "temperature", "unit_of_meas": "°C"}),
    ("binary_sensor", "value_template", {"stat_t": "T"}),
    ("sensor", "availability[].value_template", {"stat_t": "S", "dev_cla": "temperature", "unit_of_meas": "°C",
                                                 "avty": [{"t": "T", "val_tpl": "BOMB"}]}),
    ("sensor", "availability_template", {"stat_t": "S", "dev_cla": "temperature", "unit_of_meas": "°C",
                                         "avty_t": "T"}),
    ("switch", "value_template", {"stat_t": "T", "cmd_t": "C"}),
    ("lock", "value_template", {"stat_t": "T", "cmd_t": "C"}),
    ("siren", "state_value_template", {"stat_t": "T", "cmd_t": "C"}),
    ("light", "state_value_template", {"stat_t": "T", "cmd_t": "C"}),
    ("light", "brightness_value_template", {"stat_t": "S", "cmd_t": "C", "bri_stat_t": "T", "bri_cmd_t": "C2"}),
    ("light", "color_temp_value_template", {"stat_t": "S", "cmd_t": "C", "clr_temp_stat_t": "T",
                                            "clr_temp_cmd_t": "C2"}),
    ("light", "rgb_value_template", {"stat_t": "S", "cmd_t": "C", "rgb_stat_t": "T", "rgb_cmd_t": "C2"}),
    ("light", "hs_value_template", {"stat_t": "S", "cmd_t": "C", "hs_stat_t": "T", "hs_cmd_t": "C2"}),
    ("light", "xy_value_template", {"stat_t": "S", "cmd_t": "C", "xy_stat_t": "T", "xy_cmd_t": "C2"}),
    ("light", "state_template", {"schema": "template", "stat_t": "T", "cmd_t": "C", "cmd_on_tpl": "on",
                                 "cmd_off_tpl": "off"}),
    ("light", "brightness_template", {"schema": "template", "stat_t": "T", "cmd_t": "C", "cmd_on_tpl": "on",
                                      "cmd_off_tpl": "off"}),
    ("light", "color_temp_template", {"schema": "template", "stat_t": "T", "cmd_t": "C", "cmd_on_tpl": "on",
                                      "cmd_off_tpl": "off"}),
    ("light", "red_template", {"schema": "template", "stat_t": "T", "cmd_t": "C", "cmd_on_tpl": "on",
                               "cmd_off_tpl": "off", "g_tpl": "{{ 1 }}", "b_tpl": "{{ 2 }}"}),
    ("cover", "value_template", {"stat_t": "T", "cmd_t": "C"}),
    ("cover", "position_template", {"pos_t": "T", "cmd_t": "C", "set_pos_t": "C2"}),
    ("climate", "mode_state_template", {"mode_stat_t": "T", "mode_cmd_t": "C", "modes": ["off", "heat"]}),
    ("climate", "temperature_state_template", {"temp_stat_t": "T", "temp_cmd_t": "C", "mode_cmd_t": "C2",
                                               "modes": ["off", "heat"]}),
    ("climate", "temperature_low_state_template", {"temp_lo_stat_t": "T", "temp_lo_cmd_t": "C", "mode_cmd_t": "C2",
                                                   "modes": ["off", "heat_cool"]}),
    ("climate", "temperature_high_state_template", {"temp_hi_stat_t": "T", "temp_hi_cmd_t": "C",
                                                    "mode_cmd_t": "C2", "modes": ["off", "heat_cool"]}),
    ("fan", "state_value_template", {"stat_t": "T", "cmd_t": "C"}),
    ("fan", "percentage_value_template", {"stat_t": "S", "cmd_t": "C", "pct_stat_t": "T", "pct_cmd_t": "C2"}),
]
# Command templates: rendered when the platform asks (the directive, its payload), refused in the reply.
COMMAND_FIELDS: list[tuple[str, str, dict[str, Any], str, dict[str, Any] | None]] = [
    ("switch", "command_template", {"cmd_t": "C"}, "Switch.On", None),
    ("siren", "command_off_template", {"cmd_t": "C"}, "Switch.Off", None),
    ("light", "command_on_template", {"schema": "template", "cmd_t": "C", "cmd_off_tpl": "off"}, "Switch.On", None),
    ("light", "brightness_command_template", {"cmd_t": "C", "bri_cmd_t": "C2"}, "Brightness.Set", {"value": 40}),
    ("fan", "command_template", {"cmd_t": "C"}, "Switch.On", None),
]


def _field_config(index: int, component: str, field: str, others: dict[str, Any], bomb: str) -> tuple[str, dict]:
    """A device of its own for one field (its topics under bombs/<index>/), the bomb (a source of its own: no
    other field's put aside) in the field."""
    topics = {"T": f"bombs/{index}/trigger", "S": f"bombs/{index}/state", "C": f"bombs/{index}/set",
              "C2": f"bombs/{index}/set2"}
    source = bomb + f"{{# {field} {index} #}}"
    config: dict[str, Any] = {"name": f"Bomb {index}", "uniq_id": f"bomb{index}",
                              "dev": {"ids": [f"bomb-{index}"], "name": f"Bomb {index}"}}
    for key, value in others.items():
        if key == "avty":
            config[key] = [{"t": topics["T"], "val_tpl": source}]
        else:
            config[key] = topics.get(value, value) if isinstance(value, str) else value
    if field != "availability[].value_template":
        config[field] = source
    return f"homeassistant/{component}/bomb{index}/x/config", config


async def test_a_literal_only_bomb_in_every_template_field_is_refused_and_listed_and_healthz_answers_within_1_s(
        make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    bombs = [LITERAL_BOMBS[name] for name in sorted(LITERAL_BOMBS)]
    fields = [(c, f, o) for c, f, o in STATE_FIELDS] + [(c, f, o) for c, f, o, _, _ in COMMAND_FIELDS]
    unused = len(fields)  # json_attributes_template: a template hubd never reads, accepted and never parsed

    async def bombard() -> None:
        for index, (component, field, others) in enumerate(fields):
            topic, config = _field_config(index, component, field, others, bombs[index % len(bombs)])
            publish(rig.broker.port, topic, json.dumps(config), retain=True)
        topic, config = _field_config(unused, "sensor", "json_attributes_template",
                                      {"stat_t": "S", "json_attr_t": "T", "dev_cla": "temperature",
                                       "unit_of_meas": "°C"}, bombs[0])
        publish(rig.broker.port, topic, json.dumps(config), retain=True)
        bound = await rig.bind()
        await wait_devices(rig, *(f"bomb-{i}" for i in range(len(fields) + 1)))

        for index, (_component, field, _others) in enumerate(STATE_FIELDS):
            trigger = f"bombs/{index}/trigger"

            async def listed(trigger: str = trigger, field: str = field) -> bool:
                publish(rig.broker.port, trigger, "1")  # again until hubd has subscribed to it
                return await _field_listed(rig, trigger, field)

            await rig.hub.wait_for(listed, what=f"the bomb in {field} (bombs/{index}) listed under problems")

        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            for offset, (_component, field, _others, directive, payload) in enumerate(COMMAND_FIELDS):
                reply = await client.control(f"bomb-{len(STATE_FIELDS) + offset}", directive, payload)
                assert not reply.ok and field in (reply.error_message or ""), (field, reply)
                assert "failed" in (reply.error_message or ""), (field, reply)
                await rig.hub.wait_for(lambda field=field, offset=offset: _command_listed(
                    rig, f"bomb-{len(STATE_FIELDS) + offset}", field), what=f"the bomb in {field} listed")

        await send_until_seen(rig, f"bombs/{unused}/state", "21.5", f"bomb-{unused}",
                              lambda d: states_of(d).get("Temperature") == 21.5)

    answers = await _while_healthz_answers_within_1_s(rig, bombard())
    assert answers > 0
    assert rig.hub.proc is not None and rig.hub.proc.poll() is None
    assert "Traceback" not in rig.hub.log()


async def _while_healthz_answers_within_1_s(rig: Rig, work: Coroutine[Any, Any, None]) -> int:
    """Run `work` while /healthz is asked every 50 ms; AssertionError as soon as an answer takes 1 s or is not 200
    (then `work` is cancelled: a hubd whose loop is stalled fails here at once). How many answers came."""
    answers = 0

    async def poll() -> None:
        nonlocal answers
        while True:
            try:
                status, _ = await asyncio.wait_for(rig.hub.get("/healthz"), 1.0)
            except TimeoutError:
                raise AssertionError("/healthz did not answer within 1 s") from None
            assert status == 200, status
            answers += 1
            await asyncio.sleep(0.05)

    poller, worker = asyncio.create_task(poll()), asyncio.create_task(work)
    try:
        await asyncio.wait({poller, worker}, return_when=asyncio.FIRST_COMPLETED)
        if poller.done():
            poller.result()  # the AssertionError
        worker.result()
    finally:
        for task in (poller, worker):
            task.cancel()
        await asyncio.gather(poller, worker, return_exceptions=True)
    return answers


async def _command_listed(rig: Rig, device: str, field: str) -> bool:
    _, status = await rig.hub.get("/api/status")
    return any(f"({device})" in p["subject"] and field in p["problem"] and "failed" in p["problem"]
               for p in status["problems"]["other"])


async def _field_listed(rig: Rig, topic: str, field: str) -> bool:
    _, status = await rig.hub.get("/api/status")
    return any(p["topic"] == topic and "failed" in p["reason"] and
               (field in p["reason"] or field.startswith("availability"))
               for p in status["problems"]["rejected"])


async def test_a_burst_of_distinct_slow_templates_never_holds_healthz_for_a_second(
        make_rig: Callable[..., Any]) -> None:
    """Each render is bounded by the render process's deadline; a burst of different bombs (none yet put aside)
    arriving together is read one after another, and the loop is given back between them."""
    rig: Rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    count = 12
    bomb = LITERAL_BOMBS["regex_replace backtracking"]
    for index in range(count):
        config = {"name": f"Burst {index}", "uniq_id": f"burst{index}", "stat_t": f"burst/{index}/state",
                  "dev": {"ids": [f"burst-{index}"], "name": f"Burst {index}"},
                  "val_tpl": bomb + f"{{# burst {index} #}}"}  # a source of its own: none is put aside by another
        publish(rig.broker.port, f"homeassistant/binary_sensor/burst{index}/x/config", json.dumps(config),
                retain=True)
    await wait_devices(rig, *(f"burst-{i}" for i in range(count)))

    async def burst() -> None:
        for index in range(count):  # retained: read again at once after a render process restart
            publish(rig.broker.port, f"burst/{index}/state", "ON", retain=True)
        for index in range(count):
            await rig.hub.wait_for(lambda index=index: _field_listed(rig, f"burst/{index}/state", "value_template"),
                                   what=f"the bomb of burst/{index} listed under problems")

    answers = await _while_healthz_answers_within_1_s(rig, burst())
    assert answers > 0
    assert rig.hub.proc is not None and rig.hub.proc.poll() is None
