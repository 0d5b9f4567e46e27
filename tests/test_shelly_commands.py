"""The Shelly dialect's commands, from the Route address alone: RPC on a Gen2+ device's own `<prefix>/rpc`
(Switch.Set, Cover.*, Light.Set) with hubd's src, Gen1 on the device's own `shellies/<id>/.../command` topics."""

from __future__ import annotations

import pytest
from shelly_helpers import TWO_PM, configs, control, discover, fixture, make, messages, publish

from hubd.devices.model import Route
from hubd.dialects.base import CommandRefused, ControlRequest
from hubd.dialects.shelly.parts import Address, Component, address

TWO = fixture("ha_2pm_gen3")
COVER = fixture("ha_2pm_gen3_cover")


def test_switch_on_is_switch_set_on_the_devices_own_rpc_topic_with_hubds_src() -> None:
    dialect = make()
    found = configs(discover(dialect, TWO))
    [(topic, frame)] = control(dialect, found[TWO_PM], "Switch", "On", "On")
    assert topic == f"{TWO_PM}/rpc"
    assert {k: frame[k] for k in ("src", "method", "params")} == \
        {"src": "hubd-hubd", "method": "Switch.Set", "params": {"id": 0, "on": True}}
    [(_, second)] = control(dialect, found[f"{TWO_PM}-switch-1"], "Switch", "Off", "Off")
    assert second["params"] == {"id": 1, "on": False} and second["id"] != frame["id"]


def test_a_cover_opens_closes_and_stops_by_rpc() -> None:
    dialect = make()
    cover = configs(discover(dialect, COVER))[TWO_PM]
    sent = [control(dialect, cover, interface, op, value)[0][1] for interface, op, value in
            (("Switch", "On", "On"), ("Switch", "Off", "Off"), ("MotionSwitch", "Off", "Off"))]
    assert [(f["method"], f["params"]) for f in sent] == \
        [("Cover.Open", {"id": 0}), ("Cover.Close", {"id": 0}), ("Cover.Stop", {"id": 0})]
    with pytest.raises(CommandRefused):
        control(dialect, cover, "Position", "Set", 50)  # no pos_control: no Position


def _route(gen: int, prefix: str, *components: Component) -> Route:
    return Route("shelly", address(Address("dev", gen, prefix, components)))


def test_a_calibrated_cover_goes_to_a_position_and_a_light_takes_brightness() -> None:
    dialect = make()
    route = _route(2, "shellyplus2pm-aabbccddeeff", Component("cover", 0, "cover", {"position": True}))
    sent = dialect.encode_control("dev", route, ControlRequest("c", "Position", "Set", 30, None, {}))
    assert sent[0].payload.endswith(b'"method":"Cover.GoToPosition","params":{"id":0,"pos":30}}')
    light = _route(2, "shellydimmerg3-aabbccddeeff", Component("light", 0, "light", {"dimmable": True}))
    sent = dialect.encode_control("dev", light, ControlRequest("c", "Brightness", "Set", 50, None, {}))
    assert sent[0].payload.endswith(b'"method":"Light.Set","params":{"id":0,"on":true,"brightness":50}}')
    with pytest.raises(CommandRefused, match="current value"):
        dialect.encode_control("dev", light, ControlRequest("c", "Brightness", "Adjust", None, 10, {}))


def test_a_gen1_relay_takes_on_and_off_on_its_own_command_topic() -> None:
    dialect = make()
    inputs = [i for topic, payload in messages("gen1_messages")[:3] for i in publish(dialect, topic, payload)]
    relay = configs(inputs)["shelly1"]
    assert control(dialect, relay, "Switch", "On", "On") == [("shellies/shelly1/relay/0/command", "on")]
    assert control(dialect, relay, "Switch", "Off", "Off") == [("shellies/shelly1/relay/0/command", "off")]


def test_gen1_rollers_and_dimmers_take_their_own_topics() -> None:
    dialect = make()
    roller = _route(1, "shellies/shellyswitch25-ABCDEF", Component("roller", 0, "cover", {"position": True}))
    sent = dialect.encode_control("dev", roller, ControlRequest("c", "Position", "Set", 40, None, {}))
    assert [(m.topic, m.payload) for m in sent] == [("shellies/shellyswitch25-ABCDEF/roller/0/command/pos", b"40")]
    sent = dialect.encode_control("dev", roller, ControlRequest("c", "MotionSwitch", "Off", "Off", None, {}))
    assert [(m.topic, m.payload) for m in sent] == [("shellies/shellyswitch25-ABCDEF/roller/0/command", b"stop")]
    dimmer = _route(1, "shellies/shellydimmer2-E09806966EFB", Component("light", 0, "light", {"dimmable": True}))
    sent = dialect.encode_control("dev", dimmer, ControlRequest("c", "Brightness", "Set", 25, None, {}))
    assert [(m.topic, m.payload) for m in sent] == \
        [("shellies/shellydimmer2-E09806966EFB/light/0/set", b'{"turn":"on","brightness":25}')]


def test_a_route_that_is_not_a_shelly_address_is_refused() -> None:
    with pytest.raises(CommandRefused, match="not a Shelly address"):
        make().encode_control("dev", Route("shelly", "{}"), ControlRequest("c", "Switch", "On", "On", None, {}))
