"""zigbee2mqtt's device list read within a memory budget: hubd/untrusted/arrays.py element by element, the device cap
checked before more than cap + 1 entries are built, the byte limit zigbee2mqtt.max_devices_bytes."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from zigbee2mqtt_helpers import announce, entries, make, publish, states

from hubd.config.model import Zigbee2MqttConfig
from hubd.dialects.base import InputRejected
from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect
from hubd.untrusted import arrays
from hubd.untrusted.arrays import NotAnArray, array_items

CONTACT = entries("aqara_MCCGQ11LM_contact")[0]["ieee_address"]


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice([0, 1, -12345.5e3, 1.5e-300, 10**30, "", 'h\u00e9llo \U0001F600 "x"', True, False, None])
    if roll < 0.65:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f"k{i}\u00e9": _random_json(rng, depth + 1) for i in range(rng.randint(0, 4))}


@pytest.mark.parametrize("window", [1, 2, 3, 7, 64])
def test_array_items_reads_what_json_loads_reads_whatever_the_window(
    window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Elements, numbers, multi-byte UTF-8 and escapes cut anywhere by the window's edge."""
    monkeypatch.setattr(arrays, "WINDOW_BYTES", window)
    rng = random.Random(window)
    for _ in range(300):
        doc = [_random_json(rng) for _ in range(rng.randint(0, 6))]
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
        assert list(array_items(text.encode())) == doc, text


@pytest.mark.parametrize("payload", [b"[1,]", b"[1 2]", b"[1", b"[", b"[1]x", b"[\xff]", b"[1,,2]", b"[1.]", b"[-]"])
def test_array_items_refuses_what_json_loads_refuses(payload: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrays, "WINDOW_BYTES", 2)
    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
        json.loads(payload.decode())
    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
        list(array_items(payload))


@pytest.mark.parametrize(("payload", "kind"), [(b'{"a": 1}', "dict"), (b"12", "number"), (b'"x"', "str"),
                                               (b"null", "NoneType"), (b"", "text"), (b"<html>", "text")])
def test_array_items_names_what_a_document_is_instead_of_an_array(payload: bytes, kind: str) -> None:
    with pytest.raises(NotAnArray) as caught:
        list(array_items(payload))
    assert caught.value.kind == kind


def test_array_items_builds_an_element_only_when_it_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    """What follows the elements taken (and their window) is not even decoded: a caller that stops at its cap
    builds no more."""
    monkeypatch.setattr(arrays, "WINDOW_BYTES", 4)
    items = array_items(b"[{}, {}, " + b"\xff" * 10 + b"]")
    assert [next(items), next(items)] == [{}, {}]
    with pytest.raises(UnicodeDecodeError):
        next(items)


def test_a_list_of_more_devices_than_the_cap_is_refused_at_the_first_one_over_it_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arrays, "WINDOW_BYTES", 4)
    dialect = make(max_devices=3)
    announce(dialect, entries("aqara_MCCGQ11LM_contact"))
    # What follows the 4th element would fail to parse: the refusal comes at the 4th, so it is never reached.
    payload = b"[{}, {}, {}, {}, " + b"\xff" * 1000 + b"]"
    inputs = dialect.decode("zigbee2mqtt/bridge/devices", payload, 0.0, True)
    assert [i.reason for i in inputs if isinstance(i, InputRejected)] == [
        "zigbee2mqtt/bridge/devices: more than 3 devices; hubd takes at most 3, so nothing changed"]
    assert len(inputs) == 1
    assert states(publish(dialect, "Contact sensor", {"contact": False})) == {CONTACT: {"Switch": "On"}}


def test_a_list_over_max_devices_bytes_is_refused_unread_and_one_at_the_limit_is_read() -> None:
    limit = 1 << 20
    dialect = Zigbee2MqttDialect(Zigbee2MqttConfig(enabled=True, max_devices_bytes=limit), [])
    listed = json.dumps(entries("aqara_MCCGQ11LM_contact")).encode()
    at_limit = listed[:-1] + b" " * (limit - len(listed)) + b"]"
    assert len(at_limit) == limit
    topic = "zigbee2mqtt/bridge/devices"
    assert not [i for i in dialect.decode(topic, at_limit, 0.0, True) if isinstance(i, InputRejected)]
    over = at_limit[:-1] + b" ]"
    assert [i.reason for i in dialect.decode(topic, over, 0.0, True) if isinstance(i, InputRejected)] == [
        f"zigbee2mqtt/bridge/devices: {limit + 1} bytes; hubd reads at most {limit} (zigbee2mqtt.max_devices_bytes), "
        "so nothing changed"]
    assert states(publish(dialect, "Contact sensor", {"contact": False})) == {CONTACT: {"Switch": "On"}}


def test_the_dialect_names_bridge_devices_and_groups_as_its_large_topics() -> None:
    dialect = Zigbee2MqttDialect(Zigbee2MqttConfig(enabled=True, base_topic="z2m/home"), [])
    assert dialect.large_topics() == ("z2m/home/bridge/devices", "z2m/home/bridge/groups")
