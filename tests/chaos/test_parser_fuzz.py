"""Property-based fuzzing of every parser of outside input: device payloads (hubd.dialects.native.codec),
webhook bodies (hubd.webhook.trigger), platform directives (DirectiveEndpoint.handle) and driver commands
(DriverService.handle_command). Each accepts an input or refuses it with its documented error or reply, never
with another exception, and what it accepts can be serialised again.

Inputs come in families: arbitrary bytes and byte edits of valid inputs; JSON from hypothesis' recursive
strategies (lone surrogates, control characters, NaN, Infinity, 1e999 written raw); mutations of real valid
inputs (for directives and driver commands also `mutated_body`, which keeps the header or command intact so the
mutations reach the handlers); nesting a few thousand levels deep (also in UTF-16 and UTF-32); and integers past
Python's 4,300-digit limit. Runs are derandomized with no example database, so CI sees the same examples every
time. The inputs that found bugs are kept as plain cases too; those of other modules' bugs, reported to their
owners, are strict xfails that fail once the bug is fixed (then drop the mark).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from driver_helpers import CALLBACK, FakeClock, make_config
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rig import BELL, CLIMATE, LAMP
from unit_helpers import device_message

from hubd.cloud.client import TokenSet
from hubd.cloud.tokens import TokenManager
from hubd.devices.model import CommandResult, DeviceConfig, load_config
from hubd.dialects.base import Outgoing
from hubd.dialects.commands import DeviceCommands
from hubd.dialects.native import codec as native_codec
from hubd.dialects.native.dialect import NativeDialect
from hubd.dialects.payload import MAX_NESTING, MAX_PAYLOAD_BYTES
from hubd.directives.control import Controls
from hubd.directives.discovery import Discovery
from hubd.directives.endpoint import DirectiveEndpoint
from hubd.directives.grant import AcceptGrant
from hubd.directives.replay import Replay
from hubd.driver.service import DriverService
from hubd.driver.store import DriverRepo, Lifetimes
from hubd.errors import CloudUnavailable, DeviceMessageInvalid
from hubd.metrics import Metrics
from hubd.outbox.writer import OutboxWriter
from hubd.registry import DeviceRegistry
from hubd.store.db import Database
from hubd.store.grants import GrantRepo
from hubd.store.replies import DirectiveReplyRepo
from hubd.webhook.trigger import Trigger, TriggerInvalid, parse, parse_bytes
from simulators.device_models import AirConditioner, ClimateSensor, Curtain, Doorbell, Light
from simulators.platform_directives import control_message, discover_message, report_state_message
from simulators.platform_validate import ERROR_NAMES
from simulators.sim_device import SetRejected, SimDevice, parse_set

FUZZ = settings(deadline=None, derandomize=True, database=None, max_examples=60,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture, HealthCheck.large_base_example])
# The directive and driver tests keep state between examples (a code is spent once, a reply is remembered per
# messageId): a replay is not the same test, so a failure is reported as found, not shrunk.
STATEFUL = settings(FUZZ, phases=[Phase.explicit, Phase.generate], report_multiple_bugs=False)
TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

# -- JSON texts --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """A JSON token written as it is: what json.dumps cannot write (1e999, a 5,000-digit integer, deep nesting)."""

    text: str


def render(value: object, ascii_only: bool = True) -> str:
    """JSON text of a value that may hold Raw tokens; without ascii_only, surrogates are written raw."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=ascii_only)}:{render(v, ascii_only)}"
                              for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(v, ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


def encode(value: object, ascii_only: bool) -> bytes:
    """The bytes a device or client would send (lone surrogates written raw are not UTF-8: a refusal)."""
    return render(value, ascii_only).encode("utf-8", "surrogatepass")


TEXT = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates and control characters too
SPECIALS = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "-0", "1E400", "0.1e-400"]).map(Raw)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | TEXT | SPECIALS
SAMPLE_TIMES = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59),
    timezones=st.one_of(st.none(), st.timedeltas(-timedelta(hours=23, minutes=59),
                                                 timedelta(hours=23, minutes=59)).map(timezone)))
TIMESTAMPS = st.one_of(
    SAMPLE_TIMES.map(lambda t: t.isoformat()),
    SAMPLE_TIMES.map(lambda t: t.isoformat(timespec="milliseconds").replace("+00:00", "Z")),
    SAMPLE_TIMES.map(lambda t: t.strftime("%Y%m%dT%H%M%S%z")),
    st.sampled_from(["2024-01-31T12:00:00.000Z", "20240131T120000Z", "2024-01-31T12:00:00.123456789Z",
                     "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "2024-02-30T00:00:00Z", " 2024-01-31 "]),
)

# Values every parser meets now and then: lone surrogates (JSON can carry them, UTF-8 cannot) and integers
# beyond a double (JSON allows them, float() of them is an OverflowError).
HOSTILE_WORDS: list[object] = ["\ud800", "a\udfffb", 10**400, -(10**400)]
SPOILERS = st.sampled_from(["\ud800", "\udfff", "\x00", "\n", ".", "/", "\u202e", "\U0001f600"]) | TEXT
EXTREME_NUMBERS = st.sampled_from([10**400, -(10**400), 1e308, -1e308, 5e-324, -0.0, 2**63, math.nan, math.inf])
STRUCTURE_BYTES = [b'"', b"\\", b"{", b"[", b"\xef\xbb\xbf"]
LONG_NUMBERS = st.builds(lambda sign, digits: Raw(sign + "9" * digits), st.sampled_from(["", "-"]),
                         st.integers(4301, 6000))


def json_values(keys: st.SearchStrategy[str], words: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """Any JSON value; objects with the target's own keys and values half of the time."""
    leaves = SCALARS | words
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                        max_leaves=12)


def _slots(value: object, frozen: tuple[str, ...] = ()) -> list[tuple[Any, Any]]:
    """(container, key) of every value inside `value`, except the top-level keys `frozen` and what they hold."""
    found: list[tuple[Any, Any]] = []
    todo = [value]
    while todo:
        container = todo.pop()
        items = container.items() if isinstance(container, dict) else enumerate(container) \
            if isinstance(container, list) else ()
        for key, inner in items:
            if container is value and key in frozen:
                continue
            found.append((container, key))
            todo.append(inner)
    return found


@st.composite
def mutated(draw: st.DrawFn, examples: Sequence[object], keys: st.SearchStrategy[str],
            values: st.SearchStrategy[object], frozen: tuple[str, ...] = ()) -> object:
    """A valid example as it is, or with up to three values replaced, spoilt (a string gets a bad character, a
    number becomes an extreme one), deleted or added; the top-level keys `frozen` stay as they are (a directive's
    header, so that the mutations reach its handler)."""
    root: object = copy.deepcopy(draw(st.sampled_from(examples)))
    for _ in range(draw(st.integers(0, 3))):
        slots = _slots(root, frozen)
        containers = [c for c in [root, *(c[k] for c, k in slots)] if isinstance(c, dict | list)]
        action = draw(st.sampled_from(["replace", "spoil", "replace", "spoil", "delete", "add"]))
        if not containers:  # a scalar example: availability's `online`
            root = draw(values)
        elif action == "add" or not slots:
            target = draw(st.sampled_from(containers))
            if isinstance(target, list):
                target.insert(draw(st.integers(0, len(target))), draw(values))
            elif (key := draw(keys)) not in frozen or target is not root:
                target[key] = draw(values)
        elif action == "replace":
            container, key = draw(st.sampled_from(slots))
            container[key] = draw(values)
        elif action == "spoil":
            container, key = draw(st.sampled_from(slots))
            container[key] = draw(spoilt(container[key], values))
        else:
            container, key = draw(st.sampled_from(slots))
            del container[key]
    return root


def spoilt(value: object, values: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """`value` of the same type gone bad: a string with a bad character in it, a number at an extreme."""
    if isinstance(value, str):
        return st.tuples(st.integers(0, len(value)), SPOILERS).map(lambda c: value[:c[0]] + c[1] + value[c[0]:])
    if isinstance(value, int | float) and not isinstance(value, bool):
        return EXTREME_NUMBERS
    return values


@st.composite
def byte_edits(draw: st.DrawFn, raw: bytes) -> bytes:
    """`raw` with a few bytes flipped, cut out, doubled or inserted."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["flip", "cut", "double", "insert"]))
        if action == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[at:at + draw(st.integers(1, 8))]
        elif action == "double":
            data[at:at] = data[at:at + draw(st.integers(1, 16))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=4) | st.sampled_from(STRUCTURE_BYTES))
    return bytes(data)


@st.composite
def placed(draw: st.DrawFn, examples: Sequence[object], token: st.SearchStrategy[Raw]) -> object:
    """A hostile token alone, or in place of one value of a valid example."""
    root: object = copy.deepcopy(draw(st.sampled_from(examples)))
    slots = _slots(root)
    if not slots or draw(st.booleans()):
        return draw(token)
    container, key = draw(st.sampled_from(slots))
    container[key] = draw(token)
    return root


@st.composite
def deep_tokens(draw: st.DrawFn) -> Raw:
    """Arrays and objects nested up to 3,000 levels, closed or not."""
    depth = draw(st.integers(1, 3000) | st.sampled_from([33, 100, 900, 999, 1000, 1001, 2000, 3000]))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ('[{"k":', "}]"), ('{"value":[', "]}")]))
    leaf = draw(st.sampled_from(["1", '"On"', "{}", "[]", ""]))
    closers = "" if draw(st.integers(0, 3)) == 0 else closer * depth
    return Raw(opener * depth + leaf + closers)


@st.composite
def deep_texts(draw: st.DrawFn, examples: Sequence[object]) -> bytes:
    """Nesting up to 3,000 levels deep alone or in place of a value, sometimes after a string with an escaped
    quote, in UTF-8 or in the UTF-16 and UTF-32 that json.loads(bytes) also reads."""
    value = draw(placed(examples, deep_tokens()))
    if isinstance(value, dict) and draw(st.integers(0, 3)) > 0:
        value = {'a "quoted" key': '\\"', **value}
    return render(value).encode(draw(st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-32"])))


def inputs(examples: Sequence[object], keys: list[str], words: list[object],
           frozen: tuple[str, ...] = ()) -> dict[str, st.SearchStrategy[bytes]]:
    """The families of raw input for one parser, from its valid examples, field names and words; with `frozen`
    top-level keys, also `mutated_body`: mutations that keep those keys as they are."""
    key_strategy = st.sampled_from(keys) | TEXT
    word_strategy = st.sampled_from([*words, *HOSTILE_WORDS]) | TIMESTAMPS
    values = json_values(key_strategy, word_strategy)
    as_bytes = st.booleans().flatmap(lambda ascii_only: values.map(lambda v: encode(v, ascii_only)))
    edited = st.builds(encode, mutated(examples, key_strategy, values), st.booleans())
    families = {
        "bytes": st.binary(max_size=256) | st.sampled_from([render(v).encode() for v in examples]).flatmap(byte_edits),
        "json": as_bytes,
        "mutated": edited | edited.flatmap(byte_edits),
        "deep": deep_texts(examples),
        "long_number": placed(examples, LONG_NUMBERS).map(lambda v: render(v).encode()),
    }
    if frozen:
        families["mutated_body"] = st.builds(encode, mutated(examples, key_strategy, values, frozen), st.booleans())
    return families


FAMILIES = ["bytes", "json", "mutated", "deep", "long_number"]

# -- device payloads ---------------------------------------------------------------------------------------

SIM_DEVICES: list[SimDevice] = [Light("lamp-1"), ClimateSensor("climate-1"), AirConditioner("ac-1"),
                                Curtain("curtain-1"), Doorbell("bell-1")]
DEVICE_EXAMPLES: dict[str, list[object]] = {
    "config": [LAMP, CLIMATE, BELL, *(d.config() for d in SIM_DEVICES),
               {"endpointId": "x-1", "displayName": "TV", "displayType": "tv", "sn": "SN1", "tags": ["a"],
                "capabilities": [{"interface": "Service.Media.TVChannel", "supportedOperations": ["Set", "Next"],
                                  "isProactivelyReported": True, "isRetrievable": True}]}],
    "state": [{"Switch": "On"}, {"states": [{"interface": "Switch", "value": "On"}]},
              {"states": [{"interface": "Temperature", "value": 21.5, "timeOfSample": "2024-01-31T12:00:00.000Z"}],
               "cause": "PHYSICAL_INTERACTION"},
              {"states": [{"interface": "Switch", "value": "Off"}], "cause": {"type": "VOICE_INTERACTION"}},
              {"Media.TVChannel": {"name": "News", "code": "7"}}, *(d.state() for d in SIM_DEVICES[:4])],
    "event": [{"name": "DoorbellPress"}, {"name": "DoorbellPress", "timestamp": "20240131T120000Z"}],
    "availability": [Raw("online"), Raw("offline"), Raw(" ONLINE\n"), {"state": "online"}, {"state": "offline"}],
    "command_result": [{"id": "c1", "status": "done"}, {"id": "c1", "status": "error", "message": "no speaker"}],
}
DEVICE_KEYS = ["displayName", "displayType", "endpointId", "recommendRoomName", "recommendHomeName", "sn", "tags",
               "additionalInfo", "capabilities", "interface", "supportedOperations", "proactivelyReported",
               "isProactivelyReported", "retrievable", "isRetrievable", "states", "value", "timeOfSample", "cause",
               "type", "Switch", "Brightness", "Temperature", "name", "timestamp", "state", "id", "status", "message"]
DEVICE_WORDS: list[object] = ["On", "Off", "light", "speaker", "unknown", "Switch", "Service.Switch", "Service.", "",
                              " ", "DoorbellPress", "online", "offline", "done", "error", "a.b", "x" * 1000, 0, -1,
                              1e308, 2**64, [], {}]
DEVICE_INPUTS = {kind: inputs(examples, DEVICE_KEYS, DEVICE_WORDS) for kind, examples in DEVICE_EXAMPLES.items()}
PARSERS: dict[str, Callable[[bytes], object]] = {
    "config": native_codec.parse_config,
    "state": lambda payload: native_codec.parse_state(payload, 1_700_000_000.0),
    "event": lambda payload: native_codec.parse_event(payload, 1_700_000_000.0),
    "availability": native_codec.parse_availability,
    "command_result": native_codec.parse_command_result,
}


def outcome(parser: Callable[[bytes], object], raw: bytes, refusal: type[Exception]) -> object:
    """What `parser` returns, or the `refusal` it raises; any other exception goes on (a failure)."""
    try:
        return parser(raw)
    except refusal as err:
        return err


def _numbers(value: object) -> Iterator[int | float]:
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, int | float) and not isinstance(item, bool):
            yield item
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)


def _depth(value: object) -> int:
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, depth = todo.pop()
        deepest = max(deepest, depth)
        inner = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        todo.extend((v, depth + 1) for v in inner)
    return deepest


def check_device_payload(kind: str, payload: bytes) -> None:
    """Parsed into a value that serialises again, or DeviceMessageInvalid with a reason; nothing else."""
    result = outcome(PARSERS[kind], payload, DeviceMessageInvalid)
    if isinstance(result, DeviceMessageInvalid):
        assert str(result), "a refusal must say why"
    elif isinstance(result, DeviceConfig):
        text = result.canonical()
        assert load_config(text) == result
        assert load_config(text).canonical() == text
        json.dumps(result.endpoint("x-1"), allow_nan=False)
        assert all(c.interface for c in result.capabilities)
    elif isinstance(result, native_codec.StateUpdate):
        assert result.samples and isinstance(result.cause, str) and result.cause
        json.dumps([{"interface": s.interface, "value": s.value, "timeOfSample": s.time_of_sample}
                    for s in result.samples], allow_nan=False)
        for sample in result.samples:
            assert sample.interface and TIME_RE.fullmatch(sample.time_of_sample), sample
            assert not isinstance(sample.value, bool) and sample.value is not None, sample
            assert all(math.isfinite(float(n)) for n in _numbers(sample.value)), sample
            assert _depth(sample.value) <= MAX_NESTING
    elif isinstance(result, CommandResult):
        assert result.command_id and result.status in ("done", "error")
        assert result.message is None or isinstance(result.message, str)
    elif kind == "config":
        assert result is None and not payload.strip()
    elif kind == "event":
        assert isinstance(result, str) and TIME_RE.fullmatch(result), result
    else:
        assert kind == "availability" and isinstance(result, bool)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", list(PARSERS))
@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_any_device_payload_is_parsed_or_refused_with_a_reason(kind: str, family: str, data: st.DataObject) -> None:
    check_device_payload(kind, data.draw(DEVICE_INPUTS[kind][family], label="payload"))


@settings(FUZZ, max_examples=200)
@given(when=TIMESTAMPS | TEXT)
def test_any_sample_time_is_normalised_or_refused(when: str) -> None:
    check_device_payload("event", json.dumps({"name": "DoorbellPress", "timestamp": when}).encode())
    state = {"states": [{"interface": "Switch", "value": "On", "timeOfSample": when}]}
    check_device_payload("state", json.dumps(state).encode())


@pytest.mark.parametrize("kind", list(PARSERS))
def test_a_full_payload_of_escaped_quotes_is_refused_in_linear_time(kind: str) -> None:
    # An unterminated string of \" pairs made the nesting scan restart at every quote: 20 s for 64 KiB.
    payload = b'{"Switch": "' + b'\\"' * (MAX_PAYLOAD_BYTES // 2 - 80) + b"[]" * 40
    started = time.monotonic()
    check_device_payload(kind, payload)
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(("kind", "payload"), [
    ("state", b'{"Color": {"h": NaN}}'),  # was kept, and written to the outbox as NaN: not JSON
    ("state", b'{"Brightness": 1' + b"0" * 400 + b"}"),  # was kept; float() of it is an OverflowError
    ("state", b'{"Media.Music": {"n": [1, -1' + b"0" * 400 + b"]}}"),
    ("event", b'{"name": "DoorbellPress", "timestamp": "0001-01-01T00:00:00+05:00"}'),  # was a ValueError
    ("event", b'{"name": "DoorbellPress", "timestamp": "9999-12-31T23:59:59-05:00"}'),
    ("config", b'{"displayName": "Lamp", "displayType": "light", "capabilities": [{"interface": "Service."}]}'),
    # UTF-16 (json.loads(bytes) read it) hid nesting from the UTF-8 scan after an escaped quote: 950 levels were kept.
    ("state", ('{"a\\"": 1, "Color": ' + '{"a":' * 950 + "1" + "}" * 950 + "}").encode("utf-16")),
])
def test_payloads_found_while_fuzzing_are_refused_with_a_reason(kind: str, payload: bytes) -> None:
    with pytest.raises(DeviceMessageInvalid):
        PARSERS[kind](payload)


def test_a_sample_time_before_the_year_1000_keeps_four_digits() -> None:
    payload = b'{"name": "DoorbellPress", "timestamp": "0999-01-01T00:00:00Z"}'
    assert native_codec.parse_event(payload, 0.0) == "0999-01-01T00:00:00.000Z"  # was "999-01-01T...": not ISO 8601


# -- webhook bodies ----------------------------------------------------------------------------------------

TTS = {"type": "tts", "devices": {"isAll": True}, "data": {"text": "hello"}}
WEBHOOK_EXAMPLES: list[object] = [
    TTS, {"type": "audio", "devices": {"tag": "x"}, "data": {"url": "https://example.com/a.mp3"}},
    {"type": "asr", "devices": {"sn": "S1", "roomName": " Kitchen "}, "data": {"text": " lights on "}},
    {"type": "tts", "devices": {"sn": None, "roomName": "Kitchen", "tag": None, "isAll": None},
     "data": {"text": "smile \U0001f600"}},
]
WEBHOOK_INPUTS = inputs(WEBHOOK_EXAMPLES, ["type", "devices", "data", "sn", "roomName", "tag", "isAll", "text", "url"],
                        ["tts", "audio", "asr", "Kitchen", " ", "", "https://example.com/x.mp3", "http://h",
                         "ftp://x/y", "a\ud800b", "x" * 1001, "https://x.org/" + "y" * 2040, True, False])


@pytest.mark.parametrize("family", FAMILIES)
@settings(FUZZ, max_examples=100)
@given(data=st.data())
def test_any_webhook_body_is_a_trigger_or_refused_with_problems(family: str, data: st.DataObject) -> None:
    trigger = outcome(parse_bytes, data.draw(WEBHOOK_INPUTS[family], label="body"), TriggerInvalid)
    if isinstance(trigger, TriggerInvalid):  # the 422 body (CONTRACT.md 5)
        assert trigger.problems and all(isinstance(p.path, str) and p.message for p in trigger.problems)
        json.dumps({"error": str(trigger), "details": [p.as_dict() for p in trigger.problems]}, allow_nan=False)
    else:
        assert isinstance(trigger, Trigger) and parse(trigger.as_body()) == trigger
        # The command goes to the speakers as UTF-8 JSON.
        json.dumps(trigger.command("c1"), ensure_ascii=False, allow_nan=False).encode("utf-8")


# -- directives --------------------------------------------------------------------------------------------

REPLY_NAMES = {"Response", "ErrorResponse", "DiscoveryResponse", "AcceptGrantResponse"}
BUDGET_S = 1.0  # AcceptGrant needs 0.5 s of it left to start an exchange


class ErrorLog(logging.Handler):
    """Keeps hubd's ERROR records: an unexpected exception a handler caught and logged with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def raise_first(self) -> None:
        """Raise the exception of the first record that has one, as itself; AssertionError for one without."""
        records, self.records = self.records, []
        for record in records:
            if record.exc_info and record.exc_info[1] is not None:
                raise record.exc_info[1]
        assert not records, [r.getMessage() for r in records]


@pytest.fixture
def error_log() -> Iterator[ErrorLog]:
    handler = ErrorLog()
    logger = logging.getLogger("hubd")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


class ObeyingBus:
    """The MQTT side in-process: a `set` goes to the device model, whose new state goes to the registry."""

    connected = True

    def __init__(self, registry: DeviceRegistry, devices: list[SimDevice]) -> None:
        self.registry = registry
        self.devices = {d.endpoint_id: d for d in devices}

    async def publish(self, message: Outgoing, *, timeout_s: float | None = None) -> None:
        device_id = message.topic.split("/")[2]  # hubd/device/<id>/set
        device = self.devices[device_id]
        try:
            device.apply_set(parse_set(message.payload), time.time())
        except SetRejected:
            return
        await self.feed("state", device_id, device.state())

    async def feed(self, kind: str, device_id: str, payload: object) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        await self.registry.handle([device_message(kind, device_id, data, time.time())])


class TokenHost:
    """The platform's token endpoint: every code is good."""

    async def exchange_code(self, code: str, *, timeout_s: float | None = None) -> TokenSet:
        return TokenSet(f"at-{len(code)}", f"rt-{len(code)}", 3600.0)

    async def refresh(self, refresh_token: str) -> TokenSet:
        raise CloudUnavailable("not in these tests")

    async def report_failure(self, user_id: str) -> None:
        raise CloudUnavailable("not in these tests")


@dataclass
class Platform:
    """A DirectiveEndpoint with the directive handlers over real SQLite, a driver and device models."""

    endpoint: DirectiveEndpoint
    token: str


@pytest.fixture
async def platform(tmp_path: Path) -> AsyncIterator[Platform]:
    config = make_config(tmp_path)
    clock, metrics = FakeClock(), Metrics()
    db = Database(config.storage.path)
    await db.start()
    driver = DriverService(db, config.driver, public_url="http://127.0.0.1:8080", metrics=metrics, clock=clock)
    await driver.start()
    pair = await DriverRepo(db, Lifetimes(3600, 86400), frozenset({"alice"})).issue_grant("alice", clock.time())
    writer = OutboxWriter(db, namespace="Service", metrics=metrics)
    registry = DeviceRegistry(db, writer, metrics)
    await registry.start()
    bus = ObeyingBus(registry, SIM_DEVICES)
    for device in SIM_DEVICES:
        await bus.feed("config", device.endpoint_id, device.config())
        await bus.feed("availability", device.endpoint_id, b"online")
        await bus.feed("state", device.endpoint_id, device.state())
    commands = DeviceCommands([NativeDialect("hubd")], bus)
    replay = Replay(DirectiveReplyRepo(db), metrics)
    controls = Controls(namespace="Service", registry=registry, commands=commands, events=writer, grants=GrantRepo(db),
                        replay=replay, metrics=metrics, confirm_wait_s=0.1)
    tokens = TokenManager(GrantRepo(db), TokenHost(), clock=clock, failure_report=False, metrics=metrics,
                          outbox_wakeup=asyncio.Event())
    await tokens.start()
    endpoint = DirectiveEndpoint(path="/vendor", namespace="Service", verifier=driver, metrics=metrics,
                                 reply_budget_s=BUDGET_S)
    AcceptGrant(namespace="Service", tokens=tokens, writer=writer, reporting_enabled=True).register(endpoint)
    Discovery(namespace="Service", registry=registry, replay=replay).register(endpoint)
    controls.register(endpoint)
    tasks = [asyncio.create_task(controls.run()), asyncio.create_task(tokens.run())]
    try:
        yield Platform(endpoint, pair.user_token)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await controls.stop()
        await db.stop()


def directive_examples(token: str) -> dict[str, dict[str, Any]]:
    """Valid directives by name (PROTOCOL.md 5), with the user token `token`."""
    accept = {"header": {"messageId": "m-grant", "namespace": "Service.Authorization", "name": "AcceptGrant",
                         "payloadVersion": "v1", "authorization": {"type": "BearerToken", "token": token}},
              "payload": {"grant": {"type": "OAuth2.AuthorizationCode", "code": "c1", "userId": "u1"}}}
    controls = [("lamp-1", "Switch.On", None), ("lamp-1", "Brightness.Set", {"value": 50}),
                ("lamp-1", "Brightness.Adjust", {"delta": -10}), ("ac-1", "Temperature.Set", {"value": 22.5}),
                ("curtain-1", "Position.Set", {"value": 40}), ("lamp-1", "Color.SetRandom", None)]
    return {"Discover": discover_message(token, message_id="m-discover"),
            "ReportState": report_state_message(token, "climate-1", message_id="m-report"), "AcceptGrant": accept,
            **{name: control_message(token, device, name, payload, correlation_token="ct", message_id=f"m-{name}")
               for device, name, payload in controls}}


DIRECTIVE_KEYS = ["header", "endpoint", "payload", "messageId", "namespace", "name", "payloadVersion",
                  "authorization", "type", "token", "correlationToken", "endpointId", "additionalInfo", "states",
                  "value", "delta", "grant", "code", "userId", "tvChannel"]
DIRECTIVE_WORDS: list[object] = [
    "v1", "BearerToken", "Service.Discovery", "Service.Control", "Service.Query", "Service.Authorization",
    "Discover", "ReportState", "AcceptGrant", "Switch.On", "Brightness.Set", "Brightness.Adjust", "Brightness.SetMax",
    "Temperature.SetMin", "Color.Set", "FanSpeed.SetHigh", "Media.TVChannel.Next", "Service.Switch.Off",
    "OAuth2.AuthorizationCode", "lamp-1", "ac-1", "curtain-1", "bell-1", "nope", 1e308, 2**64, -1]


DIRECT_FAMILIES = ["bytes", "json", "mutated", "mutated_body", "deep"]  # long numbers: json.loads refuses them


def check_reply(reply: object, message: object) -> None:
    """A reply of PROTOCOL.md 5 that echoes a usable messageId; an ErrorResponse names a v2 error."""
    assert isinstance(reply, dict)
    header = reply["header"]
    assert header["name"] in REPLY_NAMES and header["payloadVersion"] == "v1", reply
    sent = message.get("header") if isinstance(message, dict) else None
    sent_id = sent.get("messageId") if isinstance(sent, dict) else None
    if isinstance(sent_id, str) and sent_id:
        assert header["messageId"] == sent_id
    else:
        assert isinstance(header["messageId"], str) and header["messageId"]
    if header["name"] == "ErrorResponse":
        assert reply["payload"]["name"] in ERROR_NAMES and isinstance(reply["payload"]["message"], str), reply
    json.dumps(reply, allow_nan=False)


@pytest.mark.parametrize("family", DIRECT_FAMILIES)
@settings(STATEFUL, max_examples=60)
@given(data=st.data())
async def test_any_directive_gets_a_reply_and_never_an_exception(platform: Platform, error_log: ErrorLog,
                                                                 family: str, data: st.DataObject) -> None:
    examples = list(directive_examples(platform.token).values())
    strategy = inputs(examples, DIRECTIVE_KEYS, [*DIRECTIVE_WORDS, platform.token], frozen=("header",))[family]
    raw = data.draw(strategy, label="body")
    try:
        message = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return  # the view answers these itself, before handle (DirectiveEndpoint._view)
    if isinstance(message, dict) and isinstance(message.get("header"), dict) and data.draw(st.booleans()):
        # A new messageId, or the first reply to that messageId would stand in for the handler's.
        message["header"]["messageId"] = f"m-{data.draw(st.integers(0, 10**9))}"
    reply = await platform.endpoint.handle(message)
    check_reply(reply, message)
    error_log.raise_first()  # a reply that hides an unexpected exception (the endpoint logs it) is a failure too


def with_value(message: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """A copy of `message` with the field at the dotted `path` set to `value`."""
    changed = copy.deepcopy(message)
    *parents, last = path.split(".")
    inner = changed
    for key in parents:
        inner = inner[key]
    inner[last] = value
    return changed


@pytest.mark.parametrize(("example", "path", "value"), [
    pytest.param("Discover", "header.authorization.token", "\ud800", id="token-lone-surrogate"),
    pytest.param("AcceptGrant", "payload.grant.userId", "\ud800", id="grant-userId-lone-surrogate"),
    pytest.param("AcceptGrant", "payload.grant.code", "c\udc00", id="grant-code-lone-surrogate"),
    pytest.param("Switch.On", "header.messageId", "\ud800", id="control-messageId-lone-surrogate"),
    pytest.param("Brightness.Set", "payload.value", 10**400, id="set-value-beyond-a-double"),
    pytest.param("Brightness.Adjust", "payload.delta", -(10**400), id="adjust-delta-beyond-a-double"),
    pytest.param("ReportState", "header.messageId", "\ud800", id="report-messageId-lone-surrogate"),
    pytest.param("Switch.On", "header.correlationToken", "\udfff", id="correlation-token-lone-surrogate"),
    pytest.param("Temperature.Set", "endpoint.endpointId", "ac-\ud800", id="endpoint-lone-surrogate"),
    pytest.param("Brightness.Set", "payload.value", math.nan, id="set-value-nan"),
    pytest.param("Brightness.Adjust", "payload.delta", math.inf, id="adjust-delta-infinity"),
])
async def test_a_directive_with_a_hostile_value_gets_the_documented_reply(
        platform: Platform, error_log: ErrorLog, example: str, path: str, value: object) -> None:
    message = with_value(directive_examples(platform.token)[example], path, value)
    check_reply(await platform.endpoint.handle(message), message)
    error_log.raise_first()


# -- driver commands ---------------------------------------------------------------------------------------


@dataclass
class Driver:
    """A DriverService over real SQLite, with a code and a refresh token it issued."""

    service: DriverService
    code: str
    refresh_token: str


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[Driver]:
    config = make_config(tmp_path)
    clock = FakeClock()
    db = Database(config.storage.path)
    await db.start()
    service = DriverService(db, config.driver, public_url="http://127.0.0.1:8080", metrics=Metrics(), clock=clock)
    await service.start()
    repo = DriverRepo(db, Lifetimes(3600, 86400), frozenset({"alice"}))
    code = await repo.issue_code("alice", CALLBACK, clock.time())
    pair = await repo.issue_grant("alice", clock.time())
    try:
        yield Driver(service, code, pair.refresh_token)
    finally:
        await db.stop()


def command_examples(driver: Driver) -> dict[str, dict[str, Any]]:
    """Valid driver commands by name (CONTRACT.md 5), with the code and refresh token `driver` issued."""
    return {"OAuth": {"command": "OAuth", "params": {"callbackURL": CALLBACK}},
            "OAuthGetToken": {"command": "OAuthGetToken", "params": {"code": driver.code, "callbackURL": CALLBACK}},
            "OAuthRefresh": {"command": "OAuthRefresh",
                             "params": {"refreshToken": driver.refresh_token, "userId": "alice"}},
            "refreshToken": {"command": "refreshToken", "params": {"refreshToken": driver.refresh_token}}}


def check_command_reply(reply: object) -> None:
    """The CONTRACT.md 5 envelope: {status: 0, data} or {status > 0, errorName, message}."""
    assert isinstance(reply, dict)
    if reply["status"] == 0:
        assert set(reply) == {"status", "data"}, reply
        data = reply["data"]
        assert isinstance(data, str) or {"userId", "userToken", "expiresIn", "refreshToken"} == set(data), reply
    else:
        assert isinstance(reply["status"], int) and reply["status"] > 0, reply
        assert set(reply) == {"status", "errorName", "message"}, reply
        assert isinstance(reply["errorName"], str) and isinstance(reply["message"], str), reply
    json.dumps(reply, allow_nan=False)


@pytest.mark.parametrize("family", DIRECT_FAMILIES)
@settings(STATEFUL, max_examples=60)
@given(data=st.data())
async def test_any_driver_command_gets_a_status_reply(driver: Driver, family: str, data: st.DataObject) -> None:
    keys = ["command", "params", "callbackURL", "callbackurl", "code", "refreshToken", "userId"]
    strategy = inputs(list(command_examples(driver).values()), keys,
                      ["OAuth", "OAuthGetToken", "OAuthRefresh", "refreshToken", CALLBACK, "https://h/cb",
                       driver.code, driver.refresh_token, "alice", 12345, 1.5, 1e300], frozen=("command",))[family]
    raw = data.draw(strategy, label="body")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return  # the route answers these itself, before handle_command (service.py _command_route)
    check_command_reply(await driver.service.handle_command(body))


@pytest.mark.parametrize(("example", "path", "value"), [
    pytest.param("OAuthGetToken", "params.code", "\ud800", id="code-lone-surrogate"),
    pytest.param("OAuthRefresh", "params.refreshToken", "\ud800", id="refresh-token-lone-surrogate"),
    pytest.param("OAuthRefresh", "params.userId", "\ud800", id="userId-lone-surrogate"),
    pytest.param("OAuthGetToken", "params.callbackURL", "\ud800", id="callback-lone-surrogate"),
    pytest.param("refreshToken", "params.refreshToken", 10**400, id="refresh-token-beyond-a-double"),
    pytest.param("refreshToken", "params.refreshToken", math.nan, id="refresh-token-nan"),
])
async def test_a_driver_command_with_a_hostile_value_gets_a_status_reply(driver: Driver, example: str, path: str,
                                                                         value: object) -> None:
    body = with_value(command_examples(driver)[example], path, value)
    check_command_reply(await driver.service.handle_command(body))
