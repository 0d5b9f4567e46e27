"""Wildcard state and availability topics in discovery configs (CONTRACT 6 and 10), and every refused config listed:
the filter rules and the trie that matches them (hubd/dialects/wildcards.py), Theengs Gateway's and
OpenMQTTGateway's real configs (`+/+/BTtoMQTT/<MAC>`) read through the dialect, and a catalogue of broken configs
each listed as not exported with its discovery topic. Pure: no broker."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from homeassistant_helpers import NOW, announce, configs, fixture, make, publish, raw, replay_states, states

from hubd.dialects.base import InputRejected, topic_matches
from hubd.dialects.homeassistant.dialect import MAX_REFUSED, HomeAssistantDialect
from hubd.dialects.wildcards import MAX_FILTERS, FilterIndex, filter_problem

THEENGS = "theengs_bluemaestro_BM_V23_F35285"
OMG = "openmqttgateway_ble_LYWSD03MMC_A4C1386B2F1E"
TEMPC = "F35285-F35285-tempc"  # split off: the dew point (`F35285-dp`, °C) comes first alphabetically


@pytest.mark.parametrize("value", ["+/+/BTtoMQTT/F35285", "home/+/BTtoMQTT/#", "a/#", "sensors/+", "+/b",
                                   "plain/topic", "a/+/c/+"])
def test_a_filter_with_a_literal_level_is_read(value: str) -> None:
    assert filter_problem(value) is None


@pytest.mark.parametrize(("value", "why"), [
    ("#", "no literal level"), ("+", "no literal level"), ("+/+", "no literal level"), ("+/#", "no literal level"),
    ("+/+/+/#", "no literal level"), ("$SYS/#", "broker topic"), ("$SYS/broker/+", "broker topic"),
    ("a/#/b", "# before its last level"), ("a/b#", "inside a level"), ("a/+b", "inside a level"),
    ("", "empty"), ("a/\x00", "NUL"),
])
def test_a_filter_that_reads_the_whole_bus_or_the_brokers_topics_is_refused(value: str, why: str) -> None:
    assert why in (filter_problem(value) or "")


def test_the_trie_matches_exactly_what_mqtt_matching_does() -> None:
    levels = ["a", "b", "c", "$x", ""]
    rng = random.Random(35)
    filters = {"/".join(rng.choice([*levels, "+", "+"]) for _ in range(rng.randint(1, 4))) for _ in range(300)}
    filters |= {f"{f}/#" for f in list(filters)[:80]}
    filters = {f for f in filters if filter_problem(f) is None and ("+" in f or "#" in f)}
    index = FilterIndex()
    for pattern in filters:
        index.add(pattern)
    assert len(index) == len(filters)
    for _ in range(3000):
        topic = "/".join(rng.choice(levels) for _ in range(rng.randint(1, 5)))
        expected = {f for f in filters if topic_matches(f, topic) and not (topic.startswith("$") and f[0] in "+#")}
        assert set(index.matches(topic)) == expected, topic


def test_a_filter_discarded_matches_nothing_and_leaves_the_others() -> None:
    index = FilterIndex()
    for pattern in ("+/+/BTtoMQTT/F35285", "+/+/BTtoMQTT/#", "home/+/BTtoMQTT/F35285"):
        index.add(pattern)
    index.add("+/+/BTtoMQTT/F35285")  # once
    assert len(index) == 3

    index.discard("+/+/BTtoMQTT/F35285")
    assert sorted(index.matches("home/TheengsGateway/BTtoMQTT/F35285")) == ["+/+/BTtoMQTT/#",
                                                                            "home/+/BTtoMQTT/F35285"]
    index.discard("+/+/BTtoMQTT/#")
    index.discard("home/+/BTtoMQTT/F35285")
    assert len(index) == 0 and index.matches("home/TheengsGateway/BTtoMQTT/F35285") == []


def test_a_wildcard_never_matches_a_brokers_topic() -> None:
    index = FilterIndex()
    index.add("+/+/BTtoMQTT/F35285")
    assert index.matches("$SYS/x/BTtoMQTT/F35285") == []


# The producers' configs through the dialect.


def test_a_theengs_thermometer_is_read_from_every_gateways_topic_through_one_subscription() -> None:
    dialect = make()
    found = configs(announce(dialect, THEENGS))
    assert "F35285" in found
    subscribed = [t for t, _ in dialect.pending_subscriptions()]
    assert subscribed == ["+/+/BTtoMQTT/F35285"]  # five entities, one filter

    read = states(replay_states(dialect, THEENGS))
    assert (read[TEMPC]["Temperature"], read["F35285"]["Humidity"]) == (24.1, 100)  # 104.7 % as sent, bounded
    payload = json.loads(fixture(THEENGS)["states"][0]["payload"])
    other = publish(dialect, "office/AnotherGateway/BTtoMQTT/F35285", {**payload, "tempc": 19.5})
    assert states(other)[TEMPC]["Temperature"] == 19.5
    assert not dialect.claims("home/TheengsGateway/BTtoMQTT/F35286")
    assert not dialect.claims("home/TheengsGateway/extra/BTtoMQTT/F35285")


def test_an_openmqttgateway_ble_sensor_reports_its_temperature_and_humidity() -> None:
    dialect = make()
    assert list(configs(announce(dialect, OMG))) == ["A4C1386B2F1E"]
    assert [t for t, _ in dialect.pending_subscriptions()] == ["+/+/BTtoMQTT/A4C1386B2F1E"]
    assert states(replay_states(dialect, OMG)) == {"A4C1386B2F1E": {"Temperature": 21.9, "Humidity": 48}}


def test_the_last_entity_of_a_filter_gone_frees_its_subscription() -> None:
    dialect = make()
    announce(dialect, THEENGS)
    dialect.pending_subscriptions()
    for config in fixture(THEENGS)["configs"]:
        dialect.decode(config["topic"], b"", NOW, True)
    assert dialect.pending_unsubscriptions() == ["+/+/BTtoMQTT/F35285"]
    assert not dialect.claims("home/TheengsGateway/BTtoMQTT/F35285")


def test_a_wildcard_availability_topic_says_when_the_device_is_offline() -> None:
    dialect = make()
    config = {"stat_t": "+/sensors/t1", "avty_t": "+/sensors/t1/lwt", "dev_cla": "temperature",
              "unit_of_meas": "°C", "uniq_id": "t1", "dev": {"ids": "t1", "name": "Cellar"}}
    assert configs(dialect.decode("homeassistant/sensor/t1/config", raw(config), NOW, True))
    changes = publish(dialect, "gw2/sensors/t1/lwt", "offline")
    assert [(c.device_id, getattr(c, "online", None)) for c in changes] == [("t1", False)]


def test_a_command_topic_that_is_a_read_filters_match_is_refused() -> None:
    """A switch whose command topic a Theengs filter reads would forge the thermometer's state."""
    dialect = make()
    announce(dialect, THEENGS)
    switch = {"cmd_t": "home/TheengsGateway/BTtoMQTT/F35285", "stat_t": "s/state", "uniq_id": "forger",
              "dev": {"ids": "forger", "name": "Forger"}}
    out = dialect.decode("homeassistant/switch/forger/config", raw(switch), NOW, True)
    assert len(out) == 1 and isinstance(out[0], InputRejected) and "is read from" in out[0].reason
    listed = {u.endpoint_id: u for u in dialect.unexported_devices()}
    assert listed["forger"].topic == "homeassistant/switch/forger/config"


def test_past_the_bound_of_distinct_filters_a_new_filter_is_refused_but_a_shared_one_is_read() -> None:
    dialect = make()

    def sensor(i: int, state: str) -> list[Any]:
        config = {"stat_t": state, "dev_cla": "temperature", "uniq_id": f"ble{i}", "dev": {"ids": f"ble{i}"}}
        return dialect.decode(f"homeassistant/sensor/ble{i}/config", raw(config), NOW, True)

    for i in range(MAX_FILTERS):
        assert configs(sensor(i, f"+/+/BTtoMQTT/{i:012X}"))
    refused = sensor(MAX_FILTERS, "+/+/BTtoMQTT/FFFFFFFFFFFF")
    assert isinstance(refused[0], InputRejected) and f"more than {MAX_FILTERS} wildcard" in refused[0].reason
    assert "ble256" in {u.endpoint_id for u in dialect.unexported_devices()}
    assert configs(sensor(MAX_FILTERS + 1, "+/+/BTtoMQTT/000000000001"))  # shares a filter: no new one


# Every refusal visible.

CATALOGUE: dict[str, tuple[str, bytes, str]] = {
    # name: (discovery topic, payload, a part of the reason)
    "bad JSON": ("homeassistant/sensor/s1/config", b"{not json", "JSON"),
    "not an object": ("homeassistant/sensor/s2/config", b"[1, 2]", "JSON object"),
    "too deep": ("homeassistant/sensor/s3/config", b"[" * 5000, "JSON"),
    "unknown component": ("homeassistant/toaster/t1/config", b"{}", "unknown component"),
    "bad discovery topic": ("homeassistant/sensor/bad id!/config", b'{"uniq_id": "x"}', "fix the device's discovery"),
    "missing required key": ("homeassistant/switch/s4/config", b'{"uniq_id": "s4"}', "command_topic"),
    "# at the root": ("homeassistant/sensor/s5/config", b'{"stat_t": "#", "dev_cla": "temperature"}',
                      "no literal level"),
    "$ topic": ("homeassistant/sensor/s6/config", b'{"stat_t": "$SYS/broker/+", "dev_cla": "temperature"}',
                "broker topic"),
    "template problem": ("homeassistant/sensor/s7/config",
                         b'{"stat_t": "a", "dev_cla": "temperature", "val_tpl": "{{ x "}', "value_template"),
    "wildcard command topic": ("homeassistant/switch/s8/config", b'{"cmd_t": "a/+/set", "uniq_id": "s8"}',
                               "wildcard"),
    "command topic refused": ("homeassistant/switch/s9/config", b'{"cmd_t": "homeassistant/status"}',
                              "under homeassistant/"),
    "bad device block": ("homeassistant/sensor/s10/config", b'{"stat_t": "a", "dev": {"ids": {"x": 1}}}',
                         "device.identifiers"),
    "bad availability": ("homeassistant/sensor/s11/config", b'{"stat_t": "a", "avty": [{"topic": "+/#"}]}',
                         "availability[0]"),
    "a number that is no number": ("homeassistant/climate/c1/config",
                                   b'{"mode_cmd_t": "c1/mode/set", "modes": ["off", "heat"], "max_temp": "hot"}',
                                   "max_temp"),
    "device-based config without cmps": ("homeassistant/device/d1/config", b'{"dev": {"ids": "d1"}}', "cmps"),
    "a bad component of a device-based config": (
        "homeassistant/device/d2/config",
        b'{"dev": {"ids": "d2", "name": "Two"}, "o": {"name": "x"}, "cmps": {"t": {"p": "sensor", "stat_t": "#"}}}',
        "no literal level"),
}


@pytest.mark.parametrize("case", sorted(CATALOGUE))
def test_every_refused_config_is_listed_as_not_exported_with_its_topic_and_reason(case: str) -> None:
    dialect = make()
    topic, payload, why = CATALOGUE[case]
    out = dialect.decode(topic, payload, NOW, True)
    assert any(isinstance(i, InputRejected) for i in out), out

    listed = [u for u in dialect.unexported_devices() if topic in u.topic.split(", ")]
    assert len(listed) == 1, dialect.unexported_devices()
    assert any(why in reason for reason in listed[0].reasons), listed[0]


def test_the_whole_catalogue_at_once_lists_each_config_once() -> None:
    dialect = make()
    for topic, payload, _ in CATALOGUE.values():
        dialect.decode(topic, payload, NOW, True)
    topics = [t for u in dialect.unexported_devices() for t in u.topic.split(", ")]
    assert sorted(topics) == sorted(t for t, _, _ in CATALOGUE.values())


def _listed(dialect: HomeAssistantDialect) -> list[str]:
    return [u.topic for u in dialect.unexported_devices()]


def test_a_refused_config_fixed_or_removed_is_no_longer_listed() -> None:
    dialect = make()
    topic = "homeassistant/sensor/s1/config"
    dialect.decode(topic, b'{"stat_t": "#", "dev_cla": "temperature", "uniq_id": "s1"}', NOW, True)
    assert _listed(dialect) == [topic]
    assert configs(dialect.decode(topic, b'{"stat_t": "a/#", "dev_cla": "temperature", "uniq_id": "s1"}', NOW,
                                  True))
    assert _listed(dialect) == []

    dialect.decode("homeassistant/sensor/s2/config", b"{not json", NOW, True)
    dialect.decode("homeassistant/sensor/s2/config", b"", NOW, True)
    assert _listed(dialect) == []


def test_a_bad_update_of_an_exported_entity_leaves_it_exported_and_unlisted() -> None:
    dialect = make()
    announce(dialect, THEENGS)
    first = fixture(THEENGS)["configs"][0]
    out = dialect.decode(first["topic"], b"{not json", NOW, True)
    assert isinstance(out[0], InputRejected)
    assert _listed(dialect) == []
    assert states(replay_states(dialect, THEENGS))[TEMPC]["Temperature"] == 24.1


def test_a_refused_entity_of_an_exported_device_is_listed_as_the_endpoint_it_would_split_off_as() -> None:
    dialect = make()
    announce(dialect, THEENGS)
    bad = {"stat_t": "#", "dev_cla": "battery", "uniq_id": "F35285-batt",
           "device": {"identifiers": ["F35285"], "name": "F35285"}}
    topic = "homeassistant/sensor/TheengsMQTT/F35285-batt/config"
    assert isinstance(dialect.decode(topic, raw(bad), NOW, True)[0], InputRejected)

    listed = {u.endpoint_id: u for u in dialect.unexported_devices()}
    assert list(listed) == ["F35285-F35285-batt"] and listed["F35285-F35285-batt"].topic == topic
    assert states(replay_states(dialect, THEENGS))[TEMPC]["Temperature"] == 24.1  # the device itself still read


def test_refused_configs_listed_are_bounded_to_the_newest() -> None:
    dialect = make()
    for i in range(MAX_REFUSED + 5):
        dialect.decode(f"homeassistant/sensor/r{i}/config", b"{not json", NOW, True)
    topics = _listed(dialect)
    assert len(topics) == MAX_REFUSED
    assert "homeassistant/sensor/r0/config" not in topics
    assert f"homeassistant/sensor/r{MAX_REFUSED + 4}/config" in topics
    for i in range(MAX_REFUSED + 5):  # each fixed: none left, and the index by topic empties with them
        dialect.decode(f"homeassistant/sensor/r{i}/config", b"", NOW, True)
    assert _listed(dialect) == [] and not dialect._refused_on
