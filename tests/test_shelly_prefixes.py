"""`shelly.prefixes`: Gen2+ topic prefixes the owner set by hand (several levels, `home/shelly/porch`). Each one's
`online` and `events/rpc` are subscribed and claimed, the device found there is asked over RPC on its own
`<prefix>/rpc` as any other, its states read and its commands sent there; the key is checked at load (its form, and
never under a prefix hubd or another import owns, as the dialect table's publish rules say). Real payloads: the 2PM
Gen3 of tests/fixtures/shelly, whose cover profile's captured topic prefix has two levels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from shelly_helpers import REPLIES, TWO_PM, answer, asked, configs, discover, fixture, make, publish, rejected, states

from hubd.config.model import MAX_SHELLY_PREFIXES, HubdConfig, ShellyConfig, parse_config
from hubd.dialects.base import AvailabilityReceived, ControlRequest, topic_matches
from hubd.dialects.enabled import build_dialects, config_problems, publish_rules
from hubd.errors import ConfigError

TWO = fixture("ha_2pm_gen3")
COVER = fixture("ha_2pm_gen3_cover")
PORCH = "home/shelly/porch"


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, {})
    return info.value.problems


def one_problem(prefix: str, rest: str = "") -> str:
    found = problems(f"shelly:\n  enabled: true\n  prefixes: [{prefix!r}]\n{rest}")
    assert len(found) == 1, found
    return found[0]


# The dialect.

def test_a_device_at_a_declared_prefix_of_several_levels_is_asked_on_its_own_rpc_and_read() -> None:
    dialect = make(prefixes=[PORCH])
    filters = [f for f, _ in dialect.subscriptions()]
    assert {f"{PORCH}/online", f"{PORCH}/events/rpc"} <= set(filters)
    assert publish(dialect, f"{PORCH}/online", "true", retained=True) == []
    requests = asked(dialect)
    assert [(topic, frame["method"]) for topic, frame in requests] == \
        [(f"{PORCH}/rpc", m) for m in ("Shelly.GetDeviceInfo", "Shelly.GetConfig", "Shelly.GetStatus")]
    assert all(frame["src"] == REPLIES.removesuffix("/rpc") for _, frame in requests)
    assert [t for t, _ in dialect.pending_subscriptions()] == [f"{PORCH}/status/+"]

    found = answer(dialect, TWO, requests)
    assert set(configs(found)) == {TWO_PM, f"{TWO_PM}-switch-1"}  # the id from GetDeviceInfo, the rules unchanged
    assert AvailabilityReceived(TWO_PM, True) in found

    notify = {"src": TWO_PM, "dst": f"{PORCH}/events", "method": "NotifyStatus",
              "params": {"ts": 1747488800.0, "switch:0": {"id": 0, "output": True, "source": "button"}}}
    assert states(publish(dialect, f"{PORCH}/events/rpc", notify)) == {TWO_PM: {"Switch": "On"}}
    assert states(publish(dialect, f"{PORCH}/status/switch:1", TWO["status"]["switch:1"])) == \
        {f"{TWO_PM}-switch-1": {"Switch": "Off"}}
    assert AvailabilityReceived(TWO_PM, False) in publish(dialect, f"{PORCH}/online", "false", retained=True)
    assert dialect.owns_command_topic(f"{PORCH}/rpc")
    assert dialect.guards(f"{PORCH}/online") is not None


def test_a_command_to_a_device_at_a_declared_prefix_is_rpc_on_that_prefix() -> None:
    dialect = make(prefixes=[PORCH])
    announced = configs(discover(dialect, TWO, PORCH))[TWO_PM]
    request = dialect.encode_control(TWO_PM, announced.route, _control("Switch", "TurnOn", "On"))
    assert [m.topic for m in request] == [f"{PORCH}/rpc"]
    assert b'"method":"Switch.Set"' in request[0].payload and b'"params":{"id":0,"on":true}' in request[0].payload


def test_the_captured_two_level_prefix_is_found_when_declared_and_not_otherwise() -> None:
    prefix = COVER["config"]["mqtt"]["topic_prefix"]
    assert prefix.count("/") == 1  # shellies-gen3/shelly-2pm-gen3-365730, as the device shows it

    bare = make()
    assert not bare.claims(f"{prefix}/online")
    assert not any(topic_matches(f, f"{prefix}/online") for f, _ in bare.subscriptions())

    dialect = make(prefixes=[prefix])
    assert dialect.claims(f"{prefix}/online") and dialect.claims(f"{prefix}/events/rpc")
    assert set(configs(discover(dialect, COVER, prefix))) == {COVER["shelly"]["id"]}


def test_a_declared_prefix_is_found_by_a_notification_whatever_its_src() -> None:
    dialect = make(prefixes=["porch"])  # one level: `+/events/rpc` hears it, the declaration vouches for it
    notify = {"src": "porch-relay", "method": "NotifyStatus", "params": {"switch:0": {"output": True}}}
    publish(dialect, "porch/events/rpc", notify)
    assert [t for t, _ in asked(dialect)][:1] == ["porch/rpc"]
    assert make().claims("porch/online") is False


def test_an_answer_whose_id_is_not_its_src_is_refused_at_a_declared_prefix_too() -> None:
    dialect = make(prefixes=[PORCH])
    publish(dialect, f"{PORCH}/online", "true")
    requests = asked(dialect)
    info = next(frame for _, frame in requests if frame["method"] == "Shelly.GetDeviceInfo")
    found = publish(dialect, REPLIES, {"id": info["id"], "src": "shellyplus1-000000000000", "dst": info["src"],
                                       "result": TWO["shelly"]})
    assert any("is not the src" in r for r in rejected(found))


def test_topics_beside_a_declared_prefix_are_not_claimed() -> None:
    dialect = make(prefixes=[PORCH])
    for topic in ("home/shelly/online", "home/shelly/porch/x/online", "home/shelly/porch/status/switch:0",
                  "home/shelly/porch/events/other", "home/shelly/porch/rpc"):
        assert not dialect.claims(topic), topic


def _control(interface: str, operation: str, value: str) -> ControlRequest:
    return ControlRequest("c1", interface, operation, value, None, {})


# The config.

def test_prefixes_of_several_levels_load_and_default_to_none() -> None:
    assert HubdConfig().shelly.prefixes == []
    config = parse_config(f"shelly:\n  enabled: true\n  prefixes: [{PORCH}, porch, a/b]\n", {})
    assert config.shelly.prefixes == [PORCH, "porch", "a/b"]


@pytest.mark.parametrize(("prefix", "said"), [
    ("home/+/porch", "wildcard"),
    ("home/#", "wildcard"),
    ("$SYS/porch", "starts with '$'"),
    ("home//porch", "empty level"),
    ("/home/porch", "leading or trailing '/'"),
    ("home/porch/", "leading or trailing '/'"),
    ("", "is empty"),
    ("shellies/plus1pm", "found without this key"),
])
def test_a_prefix_of_a_wrong_form_is_refused_naming_the_field_and_the_fix(prefix: str, said: str) -> None:
    problem = one_problem(prefix)
    assert problem.startswith("shelly.prefixes: ") and said in problem and "(line 3)" in problem


def test_a_prefix_listed_twice_is_refused() -> None:
    found = problems(f"shelly:\n  prefixes: [{PORCH}, {PORCH}]\n")
    assert len(found) == 1 and "listed twice" in found[0]


def test_more_prefixes_than_the_cap_are_refused() -> None:
    many = ", ".join(f"home/{i}" for i in range(MAX_SHELLY_PREFIXES + 1))
    found = problems(f"shelly:\n  prefixes: [{many}]\n")
    assert len(found) == 1 and f"at most {MAX_SHELLY_PREFIXES}" in found[0]
    ShellyConfig(prefixes=[f"home/{i}" for i in range(MAX_SHELLY_PREFIXES)])


def clashes(text: str) -> list[str]:
    """What the dialect table says of the config's Shelly section (`hubd check-config`; `hubd run` refuses it)."""
    config = parse_config(text, {})
    found = config_problems(config)
    if found:
        with pytest.raises(ConfigError):
            build_dialects(config)
    return found


@pytest.mark.parametrize(("prefix", "settings", "owner"), [
    ("hubd/porch", "", "hubd's own topics"),
    ("house/porch", "mqtt:\n  base_topic: house\n", "hubd's own topics"),
    ("hubd-hub1", "mqtt:\n  client_id: hub1\n", "under hubd-hub1/"),
    ("zigbee2mqtt/porch", "", "another import (zigbee2mqtt"),
    ("zb/porch", "zigbee2mqtt:\n  base_topic: zb\n", "another import (zigbee2mqtt"),
    ("tasmota/discovery/porch", "", "under tasmota/discovery/"),
    ("homeassistant", "", "under homeassistant/"),
    ("home/tasmotas", "", "group topic 'tasmotas'"),
])
def test_a_prefix_under_one_hubd_or_another_import_owns_is_refused(prefix: str, settings: str, owner: str) -> None:
    found = clashes(f"shelly:\n  enabled: true\n  prefixes: [{prefix!r}]\n{settings}")
    assert len(found) == 1 and found[0].startswith("shelly.prefixes[0]: ") and owner in found[0], found
    assert "set the device's topic prefix elsewhere" in found[0]


@pytest.mark.parametrize("settings", [
    "",
    "mqtt:\n  base_topic: house\n  client_id: hub1\nzigbee2mqtt:\n  base_topic: zb\ntasmota:\n"
    "  discovery_prefix: tas/disc\nhomeassistant:\n  discovery_prefix: ha\n",
])
def test_every_prefix_the_dialect_table_reserves_or_owns_is_refused_at_load(settings: str) -> None:
    rules = publish_rules(parse_config(settings, {}))
    owned = [rules.base_topic + "/", *rules.reserved, *(tree for tree, _ in rules.trees)]
    for prefix in owned:
        under = prefix + "porch"
        found = clashes(f"{settings}shelly:\n  enabled: true\n  prefixes: [{under}]\n")
        assert len(found) == 1 and found[0].startswith("shelly.prefixes[0]: "), (under, found)
    for level in rules.groups:
        assert clashes(f"{settings}shelly:\n  enabled: true\n  prefixes: [home/{level}/porch]\n")
    assert clashes(f"{settings}shelly:\n  enabled: true\n  prefixes: [home/shelly/porch]\n") == []


@pytest.mark.parametrize(("prefixes", "refused", "read_from"), [
    (["home/events"], 0, "+/events/rpc"),  # its RPC topic is every one-level prefix's notifications
    ([PORCH, f"{PORCH}/events"], 1, f"{PORCH}/events/rpc"),  # the porch device's own notifications
    ([PORCH, f"{PORCH}/status"], 1, f"{PORCH}/status/+"),  # the porch device's status topics
    ([f"{TWO_PM}/status"], 0, f"{TWO_PM}/status/+"),  # a Shelly id's status topics, at its default prefix
])
def test_a_prefix_whose_rpc_topic_shelly_devices_are_read_from_is_refused_at_load(
        prefixes: list[str], refused: int, read_from: str) -> None:
    listed = ", ".join(prefixes)
    found = clashes(f"shelly:\n  enabled: true\n  prefixes: [{listed}]\n")
    assert len(found) == 1 and found[0].startswith(f"shelly.prefixes[{refused}]: "), found
    assert f"where Shelly devices are read from ({read_from})" in found[0] and "elsewhere" in found[0]
    # What the load refuses is what hubd would refuse at run time: no question ever goes there.
    dialect = make(prefixes=prefixes)
    discover(dialect, TWO, prefixes[0] if refused else TWO_PM)
    assert dialect.guards(f"{prefixes[refused]}/rpc") is not None


def test_prefixes_beside_each_other_that_read_nothing_of_one_another_load() -> None:
    assert clashes(f"shelly:\n  enabled: true\n  prefixes: [{PORCH}, {PORCH}/lamp, {PORCH}/online, home/status]\n") \
        == []


def test_check_config_names_a_prefix_under_another_imports_topics_and_run_refuses_to_start(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    example = (Path(__file__).resolve().parents[1] / "config.example.yaml").read_text(encoding="utf-8")
    section = example.split("\nshelly:", 1)[1].split("\n\n", 1)[0]
    assert "  enabled: false" in section and "  prefixes: []" in section
    ours = section.replace("  enabled: false", "  enabled: true").replace("  prefixes: []",
                                                                         "  prefixes: [zigbee2mqtt/porch]")
    config.write_text(example.replace(section, ours), encoding="utf-8")
    for command in ("check-config", "run"):
        result = subprocess.run([sys.executable, "-m", "hubd", command, "-c", str(config)], capture_output=True,
                                text=True, timeout=60, check=False, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr[-2000:])
        assert "shelly.prefixes[0]: 'zigbee2mqtt/porch'" in result.stderr and "Traceback" not in result.stderr
