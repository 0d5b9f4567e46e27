"""The webhook's parts without I/O: the trigger body's checks, the rolling limits, speaker selection."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

from hubd.webhook.limits import CallLimiter
from hubd.webhook.redact import RedactTokens, redact
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
    (b"[" * 2000 + b"]" * 2000, "(body)", "nests arrays or objects more than 32 levels deep"),
    (b'{"type": "tts", "data": {"text": ' + b"7" * 5000 + b"}}", "(body)", "a number of more than 4300 digits"),
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
    ({"type": "audio", "devices": {"isAll": True}, "data": {"url": "https://example.com/a.mp3\n"}}, "data.url",
     "not an http"),
    (b'{"type": "tts", "devices": {"isAll": true}, "data": {"text": "a\\ud800b"}}', "data.text",
     "unpaired surrogate escape (\\ud800 at character 2)"),
    (b'{"type": "audio", "devices": {"isAll": true}, "data": {"url": "https://x.org/\\udfff"}}', "data.url",
     "unpaired surrogate"),
    (b'{"type": "tts", "devices": {"roomName": "\\ud83d"}, "data": {"text": "hi"}}', "devices.roomName",
     "unpaired surrogate"),
    (b"\xef\xbb\xbf[]", "(body)", "must be a JSON object"),  # a byte order mark is fine, the array is not
])
def test_every_bad_body_names_the_field_and_the_fix(body: Any, path: str, words: str) -> None:
    found = problems(body)
    assert any(p == path and words in m for p, m in found), found


def test_null_in_a_device_field_means_the_field_is_absent() -> None:
    trigger = parse({**TTS, "devices": {"sn": None, "roomName": "Kitchen", "tag": None, "isAll": None}})
    assert trigger.devices == DeviceQuery(room_name="Kitchen")
    found = problems({**TTS, "devices": {"sn": None, "roomName": None, "tag": None, "isAll": None}})
    assert [p for p, _ in found] == ["devices"]
    assert "selects nothing" in found[0][1]


def test_a_body_with_a_byte_order_mark_and_paired_surrogates_is_fine() -> None:
    raw = b"\xef\xbb\xbf" + json.dumps({**TTS, "data": {"text": "smile \U0001f600"}}).encode()
    assert "\\ud83d\\ude00" in raw.decode()  # json.dumps writes the emoji as a surrogate pair
    assert parse_bytes(raw).text == "smile \U0001f600"


def test_redact_blanks_webhook_urls_and_tokens() -> None:
    token = "whk_" + "A" * 43
    cases = {
        f"POST /trigger/with/{token} failed": "POST /trigger/with/<redacted> failed",
        "POST /trigger/with/{token} failed: locked": "POST /trigger/with/<redacted> failed: locked",
        f"b'POST /trigger/with/{token[:10]} {token[10:]} HTTP/1.1'": "b'POST /trigger/with/<redacted> HTTP/1.1'",
        f"b'POST /trigger/with/{token[:10]}\\x7f{token[10:]} HTTP/1.1'": "b'POST /trigger/with/<redacted> HTTP/1.1'",
        f"url=http://hub:8080/trigger/with/{token}?x=1 next": "url=http://hub:8080/trigger/with/<redacted> next",
        f"the token {token} leaked": "the token whk_<redacted> leaked",
        "nothing to hide": "nothing to hide",
    }
    for text, clean in cases.items():
        assert redact(text) == clean


def test_the_log_filter_redacts_message_arguments_and_tracebacks() -> None:
    token = "whk_" + "B" * 43
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactTokens())
    logger = logging.getLogger("test.redact")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error("%s %s failed", "POST", f"/trigger/with/{token}")
        try:
            raise ValueError(f"bad line b'POST /trigger/with/{token} HTTP/9.Z'")
        except ValueError:
            logger.exception("Error handling request from %s", "127.0.0.1")
        logger.warning("100%% sure, no arguments: %s")  # a record without args keeps its text
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert token not in text
    assert "POST /trigger/with/<redacted> failed" in text
    assert "ValueError: bad line b'POST /trigger/with/<redacted> HTTP/9.Z'" in text
    assert "100%% sure, no arguments: %s" in text


def test_all_problems_are_listed_at_once() -> None:
    found = problems({"type": "nope", "devices": {}, "data": []})
    assert [p for p, _ in found] == ["type", "devices", "data"]


def test_refused_calls_count_and_retry_after_is_the_wait_if_the_caller_stops() -> None:
    limiter = CallLimiter(per_minute=3, per_day=100)
    key = (1, "h")
    for t in (0.5, 10.5, 20.5):
        assert limiter.admit(key, t) is None
    refused = limiter.admit(key, 30.5)
    assert refused is not None
    # The third newest call (10.5, counted as the end of its second, 11) leaves the minute at 71.
    assert (refused.limit_key, refused.retry_after_s) == ("webhook.per_minute", 41)
    # Calling again while refused counts too, and pushes the wait out.
    again = limiter.admit(key, 40.5)
    assert again is not None
    assert again.retry_after_s == 41  # now the call of 20.5 must leave: at 81
    assert limiter.admit(key, 80.9) is not None  # still three in the minute (30.5, 40.5, 80.9)
    # A caller that stops for the whole Retry-After gets through.
    last = limiter.admit(key, 85.0)
    assert last is not None
    assert limiter.admit(key, 85.0 + last.retry_after_s) is None


def test_refused_calls_fill_the_day() -> None:
    limiter = CallLimiter(per_minute=2, per_day=4)
    key = (1, "h")
    assert limiter.admit(key, 100.0) is None
    assert limiter.admit(key, 100.2) is None
    minute = limiter.admit(key, 100.4)
    assert minute is not None
    assert minute.limit_key == "webhook.per_minute"
    # The fourth call (the second refused one) fills the day: from now on the day decides.
    day = limiter.admit(key, 101.5)
    assert day is not None
    assert (day.limit_key, day.window) == ("webhook.per_day", "24 hours")
    assert day.retry_after_s == 101 + 86400 - 101  # the fourth newest call is in second 100: it leaves at 86501
    assert limiter.admit(key, 200.0) is not None  # a minute later the day is still full


def test_a_flood_is_counted_per_second_and_memory_stays_bounded() -> None:
    limiter = CallLimiter(per_minute=20, per_day=50)
    key = (7, "h")
    for i in range(2000):
        limiter.admit(key, 1000.0 + i / 2000)  # 2000 calls in one second
    assert limiter.take_unsaved() == {key: {1000: 2000}}
    assert limiter.take_unsaved() == {}
    for second in range(1001, 3001):
        limiter.admit(key, second + 0.5)
    unsaved = limiter.take_unsaved()[key]
    assert (len(unsaved), sum(unsaved.values())) == (2000, 2000)
    buckets = limiter._keys[key].items  # only the buckets that can still decide are kept
    assert len(buckets) <= 50
    refused = limiter.admit(key, 3000.9)
    assert refused is not None
    # The 50th newest call is the one of second 2952: 2953 + 86400 - 3000.9.
    assert (refused.limit_key, refused.retry_after_s) == ("webhook.per_day", 86353)


def test_unsaved_counts_survive_a_failed_save() -> None:
    limiter = CallLimiter(per_minute=10, per_day=10)
    limiter.admit((1, "a"), 5.0)
    taken = limiter.take_unsaved()
    limiter.admit((1, "a"), 5.5)
    limiter.restore_unsaved(taken)
    assert limiter.take_unsaved() == {(1, "a"): {5: 2}}


def test_limits_are_per_key_and_load_history() -> None:
    limiter = CallLimiter(per_minute=2, per_day=10)
    limiter.load((1, "a"), [(5, 1), (1, 1)], 6.0)
    assert limiter.known((1, "a"))
    refused = limiter.admit((1, "a"), 6.0)
    assert refused is not None
    assert refused.retry_after_s == 60  # the second call (second 5) leaves at 66
    assert limiter.admit((1, "rotated"), 6.0) is None
    limiter.take_unsaved()
    limiter.forget_idle(100000.0)
    assert not limiter.known((1, "a"))


def test_idle_keys_with_unsaved_counts_are_kept() -> None:
    limiter = CallLimiter(per_minute=2, per_day=10)
    limiter.admit((1, "a"), 0.0)
    limiter.forget_idle(100000.0)
    assert limiter.known((1, "a"))


def test_a_clock_stepped_back_does_not_inflate_retry_after() -> None:
    now = 1_000_000.0
    # Saved while the clock was an hour ahead: those calls count as made now, not an hour from now.
    limiter = CallLimiter(per_minute=3, per_day=100)
    limiter.load((1, "a"), [(int(now) + 3600, 3)], now)
    refused = limiter.admit((1, "a"), now)
    assert refused is not None
    assert refused.retry_after_s <= 61
    # The same while running: three calls, then the clock goes back an hour.
    limiter = CallLimiter(per_minute=3, per_day=100)
    for _ in range(3):
        limiter.admit((1, "a"), now + 3600)
    refused = limiter.admit((1, "a"), now)
    assert refused is not None
    assert refused.retry_after_s <= 61


def test_retry_after_rounds_up() -> None:
    limiter = CallLimiter(per_minute=1, per_day=10)
    assert limiter.admit((1, "a"), 0.5) is None
    refused = limiter.admit((1, "a"), 1.3)
    assert refused is not None
    # The refused call counts, as the end of its second (2): it leaves the minute at 62, 60.7 s on.
    assert refused.retry_after_s == 61


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
