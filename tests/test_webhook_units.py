"""Issue 5, the parts without I/O: the trigger body's checks, the rolling limits, speaker selection."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hubd.webhook.limits import CallLimiter
from hubd.webhook.selection import NoMatch, Speaker, matches, select
from hubd.webhook.trigger import MAX_BODY_BYTES, MAX_TEXT, DeviceQuery, TriggerInvalid, parse, parse_bytes

TTS = {"type": "tts", "devices": {"isAll": True}, "data": {"text": "hello"}}


def problems(body: Any) -> list[tuple[str, str]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(TriggerInvalid) as caught:
        parse_bytes(raw)
    return [(p.path, p.message) for p in caught.value.problems]


def test_valid_bodies_of_each_type() -> None:
    tts = parse(TTS)
    assert (tts.type, tts.text, tts.devices.is_all) == ("tts", "hello", True)
    audio = parse({"type": "audio", "devices": {"tag": "x"}, "data": {"url": "https://example.com/a.mp3"}})
    assert (audio.url, audio.devices.tag) == ("https://example.com/a.mp3", "x")
    asr = parse({"type": "asr", "devices": {"sn": "S1", "roomName": " Kitchen "}, "data": {"text": " lights on "}})
    assert (asr.text, asr.devices.sn, asr.devices.room_name) == ("lights on", "S1", "Kitchen")
    assert asr.command("c1") == {"id": "c1", "type": "asr", "text": "lights on"}
    assert audio.command("c2") == {"id": "c2", "type": "audio", "url": "https://example.com/a.mp3"}
    # The stored form runs again to the same trigger.
    assert parse(asr.as_body()) == asr


@pytest.mark.parametrize(("body", "path", "words"), [
    (b"{not json", "(body)", "not valid JSON"),
    (b"\xff\xfe", "(body)", "not UTF-8"),
    ([1, 2], "(body)", "must be a JSON object, not an array"),
    ({"devices": {"isAll": True}, "data": {"text": "x"}}, "type", "missing"),
    ({**TTS, "type": 3}, "type", "must be a string, not a number"),
    ({**TTS, "type": "beep"}, "type", "unknown type 'beep'"),
    ({"type": "tts", "data": {"text": "x"}}, "devices", "missing"),
    ({**TTS, "devices": "all"}, "devices", "must be an object"),
    ({**TTS, "devices": {}}, "devices", "selects nothing"),
    ({**TTS, "devices": {"isAll": False}}, "devices", "selects nothing"),
    ({**TTS, "devices": {"isAll": "yes"}}, "devices.isAll", "true or false"),
    ({**TTS, "devices": {"sn": 5}}, "devices.sn", "must be a string"),
    ({**TTS, "devices": {"roomName": "  "}}, "devices.roomName", "is empty"),
    ({**TTS, "devices": {"room": "Kitchen"}}, "devices.room", "unknown field; the fields are sn, roomName, tag, isAll"),
    ({"type": "tts", "devices": {"isAll": True}}, "data", "missing"),
    ({**TTS, "data": "hi"}, "data", "must be an object"),
    ({**TTS, "data": {}}, "data.text", "missing; tts needs data.text"),
    ({**TTS, "data": {"text": ""}}, "data.text", "is empty"),
    ({**TTS, "data": {"text": "x" * (MAX_TEXT + 1)}}, "data.text", f"at most {MAX_TEXT}"),
    ({**TTS, "data": {"text": 7}}, "data.text", "must be a string"),
    ({**TTS, "type": "asr", "data": {"url": "https://x"}}, "data.url", "not used by asr"),
    ({"type": "audio", "devices": {"isAll": True}, "data": {"url": "ftp://x/y.mp3"}}, "data.url", "not an http"),
    ({"type": "audio", "devices": {"isAll": True}, "data": {"url": "https://"}}, "data.url", "not an http"),
    ({"type": "audio", "devices": {"isAll": True}, "data": {}}, "data.url", "audio needs data.url"),
    ({**TTS, "extra": 1}, "extra", "unknown field"),
    (b"x" * (MAX_BODY_BYTES + 1), "(body)", "more than the"),
])
def test_every_bad_body_names_the_field_and_the_fix(body: Any, path: str, words: str) -> None:
    found = problems(body)
    assert any(p == path and words in m for p, m in found), found


def test_all_problems_are_listed_at_once() -> None:
    found = problems({"type": "nope", "devices": {}, "data": []})
    assert [p for p, _ in found] == ["type", "devices", "data"]


def test_limits_roll_and_retry_after_is_exact() -> None:
    limiter = CallLimiter(per_minute=3, per_day=5)
    key = (1, "h")
    for t in (0.0, 10.0, 20.0):
        assert limiter.admit(key, t) is None
    refused = limiter.admit(key, 30.0)
    assert refused is not None
    assert (refused.limit_key, refused.retry_after_s) == ("webhook.per_minute", 30)
    assert limiter.admit(key, 59.9) is not None  # refused calls are not counted ...
    assert limiter.admit(key, 60.0) is None  # ... so the Retry-After given at 30 s holds
    assert limiter.admit(key, 70.0) is None  # 5 in the day now
    day = limiter.admit(key, 200.0)
    assert day is not None
    assert (day.limit_key, day.retry_after_s) == ("webhook.per_day", 86200)
    assert limiter.admit(key, 86399.0) is not None
    assert limiter.admit(key, 86400.0) is None


def test_limits_are_per_key_and_load_history() -> None:
    limiter = CallLimiter(per_minute=2, per_day=10)
    limiter.load((1, "a"), [5.0, 1.0])
    refused = limiter.admit((1, "a"), 6.0)
    assert refused is not None
    assert refused.retry_after_s == 55
    assert limiter.admit((1, "rotated"), 6.0) is None
    limiter.forget_idle(100000.0)
    assert not limiter.known((1, "a"))


def test_retry_after_rounds_up() -> None:
    limiter = CallLimiter(per_minute=1, per_day=10)
    assert limiter.admit((1, "a"), 0.5) is None
    refused = limiter.admit((1, "a"), 1.0)
    assert refused is not None
    assert refused.retry_after_s == 60  # 59.5 s, rounded up so the retry is certain to pass


SPEAKERS = [
    Speaker("a", "SN-A", "Living Room", ("announce", "Music"), True),
    Speaker("b", "SN-B", "Bedroom", ("announce", "kids"), True),
    Speaker("c", "SN-C", "Living Room", (), False),
]


@pytest.mark.parametrize(("query", "reachable", "offline"), [
    (DeviceQuery(sn="SN-A"), ["a"], []),
    (DeviceQuery(sn="SN-A", room_name="Living Room"), ["a"], []),
    (DeviceQuery(tag="announce", room_name="bedroom"), ["b"], []),
    (DeviceQuery(tag="music"), ["a"], []),
    (DeviceQuery(is_all=True), ["a", "b"], ["c"]),
    (DeviceQuery(is_all=True, room_name="Living Room"), ["a"], ["c"]),
])
def test_selection_combines_fields_with_and(query: DeviceQuery, reachable: list[str], offline: list[str]) -> None:
    chosen = select(SPEAKERS, query)
    assert [s.endpoint_id for s in chosen.reachable] == reachable
    assert [s.endpoint_id for s in chosen.offline] == offline


def test_no_match_names_rooms_and_tags() -> None:
    assert not matches(SPEAKERS[0], DeviceQuery(sn="SN-A", room_name="Bedroom"))
    with pytest.raises(NoMatch) as caught:
        select(SPEAKERS, DeviceQuery(sn="SN-A", room_name="Bedroom"))
    message = caught.value.problem.message
    assert "no speaker matches sn 'SN-A', roomName 'Bedroom'" in message
    assert "rooms: Bedroom, Living Room" in message
    assert "tags: announce, kids, Music" in message
    with pytest.raises(NoMatch, match="no speaker is known"):
        select([], DeviceQuery(is_all=True))
