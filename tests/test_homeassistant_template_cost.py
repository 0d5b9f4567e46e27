"""What a discovered entity's value template costs per message: compiled once per distinct template source, never
per message (counted at Jinja itself), and the direct reading of the commonest templates gives exactly what
Jinja's own render gives, errors included. Pure: no broker; nothing timed."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import jinja2
import pytest
from dialect_helpers import calls_made
from homeassistant_helpers import NOW, make, raw, routes, states

from hubd.dialects.base import ConfigReceived, DeviceInput, InputRejected
from hubd.dialects.homeassistant.dialect import HomeAssistantDialect
from hubd.dialects.homeassistant.templates import Payload, TemplateError, Templates

ROUND = "{{ value | float | round(1) }}"  # ESPHome's
KEY = '{{ value_json["temperature"] }}'  # zigbee2mqtt's discovery
STATE = "{{ value_json.state }}"  # zigbee2mqtt's availability
SCALED = "{{ (value_json.temperature | float) * 0.1 }}"  # one Jinja itself renders (arithmetic)


@pytest.fixture
def jinja_work(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts every parse and compile any Jinja environment does (the sandbox's included)."""
    counts: Counter[str] = Counter()
    for name in ("parse", "compile", "compile_expression", "from_string"):
        original = getattr(jinja2.Environment, name)

        def spy(self: jinja2.Environment, *args: Any, __name: str = name, __original: Any = original,
                **kwargs: Any) -> Any:
            counts[__name] += 1
            return __original(self, *args, **kwargs)

        monkeypatch.setattr(jinja2.Environment, name, spy)
    return counts


def _configs(devices: int) -> list[tuple[str, bytes]]:
    """Sensors as the bench's discovery scenario announces them, a third each of three value templates."""
    out: list[tuple[str, bytes]] = []
    for i in range(devices):
        kind = i % 3
        config: dict[str, Any] = {
            "name": f"Sensor {i}", "device_class": "temperature", "unit_of_measurement": "°C",
            "state_topic": f"sensors/{i}/state", "unique_id": f"sensor{i}",
            "value_template": (ROUND, KEY, SCALED)[kind],
            "device": {"identifiers": [f"dev{i}"], "name": f"Device {i}"},
        }
        if kind:
            config["availability"] = [{"topic": "z2m/bridge/state", "value_template": STATE}]
        out.append((f"homeassistant/sensor/dev{i}/temperature/config", raw(config)))
    return [*out, ("z2m/bridge/state", b'{"state":"online"}')]  # read once an entity reads that topic


def _state(i: int, value: int) -> tuple[str, bytes]:
    payload = str(value) if i % 3 == 0 else json.dumps({"temperature": value})
    return f"sensors/{i}/state", payload.encode()


def _decode(dialect: HomeAssistantDialect, messages: list[tuple[str, bytes]], *, retained: bool) -> list[DeviceInput]:
    out: list[DeviceInput] = []
    for topic, payload in messages:
        assert dialect.claims(topic), topic
        out += dialect.decode(topic, payload, NOW, retained)
    return out


def test_each_template_source_is_compiled_once_and_no_state_message_compiles(jinja_work: Counter[str]) -> None:
    devices = 300
    dialect = make()
    announced = _decode(dialect, _configs(devices), retained=True)

    assert sum(isinstance(i, ConfigReceived) for i in announced) == devices
    assert dialect.templates.compiles == 4  # three value templates and the availability one, for 300 entities
    assert jinja_work["parse"] == 4  # in hubd's process: parsed (and compiled once to check it) on configs only
    after_configs = dict(jinja_work)

    values = [_decode(dialect, [_state(i, 200 + 10 * round_ + i) for i in range(devices)], retained=False)
              for round_ in range(5)]
    assert jinja_work == after_configs  # 1,500 state messages: no parse, no compile in hubd's process
    assert dialect.templates.renderer.stats()["compiled"] == 1  # SCALED, in the render process, compiled once
    assert not [i for batch in values for i in batch if isinstance(i, InputRejected)]
    last = states(values[-1])
    assert (last["dev0"], last["dev1"], last["dev2"]) == ({"Temperature": 240.0}, {"Temperature": 241.0},
                                                          {"Temperature": 24.2})

    _decode(dialect, _configs(devices), retained=True)  # the retained configs again (a reconnect)
    assert jinja_work == after_configs and dialect.templates.compiles == 4


def test_entities_restored_after_a_restart_compile_each_source_once(jinja_work: Counter[str]) -> None:
    inputs = _decode(make(), _configs(30), retained=True)
    before = jinja_work["parse"]

    dialect = make()
    dialect.restore(routes(inputs))
    _decode(dialect, [_state(i, 300 + i) for i in range(30)] * 3, retained=False)

    assert dialect.templates.compiles == 4  # the routes keep the value and availability templates
    assert jinja_work["parse"] - before == 4
    assert dialect.templates.renderer.stats()["compiled"] == 1


def test_a_state_costs_the_same_with_ten_entities_as_with_a_thousand() -> None:
    def work(devices: int) -> int:
        dialect = make()
        _decode(dialect, _configs(devices), retained=True)
        _decode(dialect, [_state(i, 100) for i in (6, 7, 8)], retained=False)
        found: list[DeviceInput] = []
        calls = sum(calls_made(lambda i=i: found.extend(_decode(dialect, [_state(i, 200)], retained=False)))
                    for i in (6, 7, 8))
        assert states(found) == {"dev6": {"Temperature": 200.0}, "dev7": {"Temperature": 200.0},
                                 "dev8": {"Temperature": 20.0}}
        return calls

    assert work(10) == work(1_000)  # nothing per message is proportional to the number of entities


def test_common_value_templates_are_read_directly() -> None:
    templates = Templates()
    direct = [ROUND, KEY, STATE, "{{ value }}", "{{value_json.temperature}}", " {{ value_json['a'][0] }}\n",
              "{{ value | int(default=7) }}", "{{ value_json.x | multiply(0.1) | round(2) }}", "{{ value_json }}",
              "{{ value_json.x | round(1, method='floor', default=none) }}", "{{ value_json.tempc | is_defined }}",
              "{{ value_json.x | default(0) }}", "{{ value_json.x | d('') | float }}"]
    jinja = [SCALED, "{{ value_json.items }}", "{{ value_json.__class__ }}", "{{ value_json.a | lower }}",
             "{{ value_json[value] }}", "{{ value_json.a }} °C", "{% if value %}{{ value }}{% endif %}",
             "{{ value | float(-1) }}", "{{ value_json.x | round(value_json.digits) }}"]

    assert [s for s in direct if templates.compile(s).direct is None] == []
    assert [s for s in jinja if templates.compile(s).direct is not None] == []


# Templates a direct reading takes, those it leaves to Jinja, and payloads of every kind: JSON of each type,
# missing keys, not JSON at all, values a filter refuses, an output past the limit.
EQUIVALENCE_TEMPLATES = [
    "{{ value }}", "{{ value_json }}", KEY, "{{ value_json.temperature }}", STATE, "  {{ value_json.state }}  \n",
    "{{ value_json.a.b }}", "{{ value_json['ENERGY'].Total }}", "{{ value_json[0] }}", "{{ value_json[-1] }}",
    "{{ value_json.list[1] }}", '{{ value_json["items"] }}', "{{ value_json.items }}", "{{ value_json.__class__ }}",
    "{{ value_json.get }}", ROUND, "{{ value | float }}", "{{ value | int }}", "{{ value | int(default=7) }}",
    "{{ value_json.temperature | float(0) }}", "{{ value_json.temperature | round(1, 'floor') }}",
    "{{ value_json.temperature | int(base=16) }}", "{{ value_json.temperature | multiply(0.1) }}",
    "{{ value_json.temperature | add(1) | round }}", "{{ value_json.on | bool }}", "{{ value_json.on | bool(none) }}",
    "{{ value_json.temperature | float | round(1) }}", SCALED, "{{ value_json.temperature | default(0) }}",
    "{{ value_json.a.b | default('x') }}", "{{ value_json[5] | default('none') }}", "{{ value_json.list[1] | d(7) }}",
    "{{ value_json.temperature | default(0, true) }}", "{{ value_json.temperature | is_defined }}",
    "{{ value_json.temperature | default(0) | float }}", "{{ value_json['items'] | default(2) }}",
    "{{ value_json | default('not json') }}", "{{ value | default('empty', true) }}",
]
EQUIVALENCE_PAYLOADS = [
    "", " ", "21.56", "-3", "  7 ", "hot", "0x1f", "nan", "inf", "1e400", "true", "null", '"text"', "{not json",
    "[1, 2, 3]", "[]", '{"temperature": 21.5}', '{"temperature": "21.5"}', '{"temperature": "ff"}',
    '{"temperature": null}', '{"temperature": true}', '{"temperature": [1, 2]}', '{"temperature": {"a": 1}}',
    '{"temperature": 1e400}', '{"temperature": -0.05}', '{"temperature": 12345678901234567890}',
    '{"items": 3, "a": {"b": 2}}', '{"a": {"b": null}}', '{"a": [1]}', '{"list": [4, 5]}', '{"list": {"1": 2}}',
    '{"state": "online"}', '{"state": " offline "}', '{"ENERGY": {"Total": 1.5}}', '{"on": "ON"}', '{"on": "maybe"}',
    '{"get": 1}', '{"__class__": 1}', '{"temperature": "' + "x" * 70_000 + '"}', json.dumps(list(range(20_000))),
]


def _outcome(render: Callable[..., str], *args: Any) -> tuple[str, str]:
    """What a render gave; an object's address (`<built-in method items of dict object at 0x...>`) is left out:
    Jinja renders in the render process, whose objects live elsewhere."""
    try:
        return "text", re.sub(r" at 0x[0-9a-f]+>", " at ...>", render(*args))
    except TemplateError as err:
        return "error", str(err)


@pytest.mark.parametrize("source", EQUIVALENCE_TEMPLATES)
def test_a_direct_reading_gives_what_jinja_renders_for_every_payload(source: str) -> None:
    templates = Templates()
    compiled = templates.compile(source)
    answered = 0

    for text in EQUIVALENCE_PAYLOADS:
        payload = Payload(text)
        jinja = _outcome(templates.render_with_jinja, compiled, payload)
        assert _outcome(templates.render_value, compiled, payload) == jinja, (source, text[:60])
        answered += compiled.direct is not None and compiled.direct(payload) is not None

    assert (answered > 0) == (compiled.direct is not None)  # the direct reading was tested, where there is one
