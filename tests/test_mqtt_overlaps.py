"""The session never holds two filters one message matches (MQTT 5 brokers send a copy per subscription):
`covers` says when one filter's topics are all another's, `Needed` holds each needed filter unless another
covers it, and gives back what it covered when the cover goes. Pure."""

from __future__ import annotations

import random

import pytest

from hubd.dialects.base import topic_matches
from hubd.mqtt.overlaps import Needed, covers


@pytest.mark.parametrize(("wide", "narrow", "expected"), [
    ("+/+/BTtoMQTT/AA", "home/gw/BTtoMQTT/AA", True),
    ("home/gw/BTtoMQTT/AA", "+/+/BTtoMQTT/AA", False),
    ("zigbee2mqtt/#", "zigbee2mqtt/lamp", True),
    ("zigbee2mqtt/#", "zigbee2mqtt", True),  # `a/#` matches `a` itself
    ("zigbee2mqtt/#", "zigbee2mqtt/+/set", True),
    ("+/online", "shellyplus1-a8032ab12345/online", True),
    ("+/online", "a/b/online", False),
    ("+/#", "$SYS/broker/load", False),  # a leading wildcard matches no $ topic
    ("a/+", "a/#", False),
    ("a/#", "a/+/#", True),
    ("a/+/c", "a/+/c", True),
    ("a/b", "a/b/c", False),
])
def test_a_filter_covers_another_only_when_it_matches_every_topic_the_other_does(
        wide: str, narrow: str, expected: bool) -> None:
    assert covers(wide, narrow) is expected


def test_covering_agrees_with_matching_on_random_topics() -> None:
    rng = random.Random(7)
    levels = ["a", "b", "+", "#"]
    for _ in range(3_000):
        wide = "/".join(rng.choice(levels[:3]) for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.3:
            wide += "/#"
        narrow = "/".join(rng.choice(levels[:2]) for _ in range(rng.randint(1, 4)))
        if covers(wide, narrow):
            assert topic_matches(wide, narrow), (wide, narrow)


def test_a_topic_a_needed_filter_covers_is_not_held_and_comes_back_when_the_filter_goes() -> None:
    needed = Needed()
    needed.reset({"homeassistant": [("home/gw/BTtoMQTT/AA", 1)], "zigbee2mqtt": [("zigbee2mqtt/#", 1)]})
    assert needed.held() == {"home/gw/BTtoMQTT/AA": 1, "zigbee2mqtt/#": 1}
    needed.take_touched()

    needed.add("homeassistant", [("+/+/BTtoMQTT/AA", 1)])
    assert needed.held() == {"+/+/BTtoMQTT/AA": 1, "zigbee2mqtt/#": 1}
    assert needed.take_touched() is None  # a wildcard came: any topic may have changed

    needed.add("homeassistant", [("office/gw2/BTtoMQTT/AA", 1), ("kitchen/plug", 1)])
    assert needed.held() == {"+/+/BTtoMQTT/AA": 1, "zigbee2mqtt/#": 1, "kitchen/plug": 1}
    assert needed.take_touched() == {"office/gw2/BTtoMQTT/AA", "kitchen/plug"}

    needed.remove("homeassistant", ["+/+/BTtoMQTT/AA"])
    assert needed.held() == {"home/gw/BTtoMQTT/AA": 1, "office/gw2/BTtoMQTT/AA": 1, "zigbee2mqtt/#": 1,
                             "kitchen/plug": 1}


def test_a_filter_two_dialects_need_is_held_until_the_last_lets_it_go() -> None:
    needed = Needed()
    needed.reset({"homeassistant": [("tele/x/LWT", 1)], "tasmota": [("tele/x/LWT", 1)]})
    needed.remove("tasmota", ["tele/x/LWT"])
    assert needed.held() == {"tele/x/LWT": 1}
    needed.remove("homeassistant", ["tele/x/LWT"])
    assert needed.held() == {}


def test_a_cover_at_a_lower_qos_covers_nothing() -> None:
    needed = Needed()
    needed.reset({"a": [("bell/#", 0)], "b": [("bell/press", 1)]})
    assert needed.held() == {"bell/#": 0, "bell/press": 1}


def test_of_two_wildcard_filters_the_wider_is_held() -> None:
    needed = Needed()
    needed.reset({"a": [("+/+/BTtoMQTT/AA", 1), ("home/+/BTtoMQTT/AA", 1), ("home/#", 1)]})
    assert needed.held() == {"+/+/BTtoMQTT/AA": 1, "home/#": 1}
