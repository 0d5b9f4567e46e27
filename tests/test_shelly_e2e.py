"""Shelly devices imported natively (`shelly: {enabled: true}`), end to end: a real mosquitto, the platform simulator
and a real hubd process, a simulated Gen2+ Shelly (simulators/discovery_shelly.py) that says `online`, answers
hubd's RPC on its `<id>/rpc` and notifies its changes (also at a prefix of several levels listed in
`shelly.prefixes`), a simulated Plus RGBW PM (a colour light), and a simulated Gen1 Shelly 1 on `shellies/<id>/`.
The rig and the waiting helpers are tests/rig.py's.

hubd asks a Gen2+ device who it is as soon as the batch that found it is subscribed (`Dialect.requests`,
hubd/mqtt/requests.py), not at the pace of the announcements (at most once every 10 seconds): the tests wait for the
device with the rig's usual timeout.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rig import Rig, announced, devices, invalid_total, settle, states_of, wait_change

from simulators.discovery_shelly import ShellyGen1, ShellyPlus, ShellyPlusRGBW
from simulators.platform_directives import DirectiveClient

MakeRig = Callable[..., Awaitable[Rig]]
PLUS = "shellyplus1pm-a8032ab12345"
GEN1 = "shelly1-ABCDEF"
ON = {"shelly": {"enabled": True}}


async def found(rig: Rig, endpoint: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Wait until /api/devices lists the endpoint passing `check`."""
    async def listed() -> dict[str, Any] | None:
        device = (await devices(rig)).get(endpoint)
        return device if device is not None and check(device) else None
    result: dict[str, Any] = await rig.hub.wait_for(listed, what=f"{endpoint} in /api/devices")
    return result


async def test_a_gen2_shelly_is_asked_over_rpc_reports_obeys_switch_set_and_goes_unavailable(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides=ON)
    plus = ShellyPlus(rig.broker.host, rig.broker.port, on=False)
    try:
        await plus.start()
        await found(rig, PLUS, lambda d: d["online"] is True and states_of(d).get("Switch") == "Off")
        asked = [r for r in plus.requests if r["method"] == "Shelly.GetDeviceInfo"]
        assert asked and asked[0]["src"].startswith("hubd-")  # hubd-<its mqtt.client_id>: its replies come there
        bound = await rig.bind()
        endpoint = (await announced(rig, PLUS))[PLUS]
        assert (endpoint["displayName"], endpoint["displayType"]) == ("Shelly Plus One PM", "switch")

        await plus.turn(True)  # switched at the wall: NotifyStatus
        await wait_change(rig, PLUS, "Switch", "On")

        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            off = await client.control(PLUS, "Switch.Off")
            assert off.states["Switch"] == "Off"
            assert {k: plus.requests[-1][k] for k in ("method", "params")} == \
                {"method": "Switch.Set", "params": {"id": 0, "on": False}}

            await plus.kill()  # a power cut: the broker publishes its will, <id>/online false
            await found(rig, PLUS, lambda d: d["online"] is False)
            refused = await client.control(PLUS, "Switch.On")
            assert refused.error == "E_ENDPOINT_UNREACHABLE"
    finally:
        await plus.stop()


async def test_a_press_of_a_shelly_button_declared_a_doorbell_is_a_doorbell_press(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={**ON, "doorbells": [{"device": PLUS, "event": "single_push"}]})
    plus = ShellyPlus(rig.broker.host, rig.broker.port)
    try:
        await plus.start()
        await found(rig, PLUS, lambda d: d["online"] is True)
        await rig.bind()
        await announced(rig, PLUS)
        await plus.press("long_push")  # not the declared press
        await plus.press("single_push")
        await rig.wait_events(1, "DoorbellPress", endpoint=PLUS)
        await settle(rig)
        assert len(rig.events("DoorbellPress", endpoint=PLUS)) == 1
    finally:
        await plus.stop()


async def test_a_shelly_also_announced_through_home_assistant_discovery_is_imported_once_natively(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={**ON, "homeassistant": {"enabled": True}})
    plus = ShellyPlus(rig.broker.host, rig.broker.port, name="Porch", discovery_script=True)
    try:
        await plus.start()
        await found(rig, PLUS, lambda d: d["source"] == "shelly")

        async def once() -> bool:
            return set(await devices(rig)) == {PLUS}
        await rig.hub.wait_for(once, what="the discovery device left to the Shelly import")
        assert (await devices(rig))[PLUS]["displayName"] == "Porch"
        assert not await invalid_total(rig.hub, 1)
    finally:
        await plus.stop()


async def test_a_gen1_shelly_1_is_imported_from_its_announcement_and_obeys_its_relay_command(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides=ON)
    relay = ShellyGen1(rig.broker.host, rig.broker.port, on=False)
    try:
        await relay.start()
        await found(rig, GEN1, lambda d: d["online"] is True and states_of(d).get("Switch") == "Off")
        bound = await rig.bind()
        assert (await announced(rig, GEN1))[GEN1]["displayName"] == "Shelly One"
        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            on = await client.control(GEN1, "Switch.On")
            assert on.states["Switch"] == "On"
        assert [(m.topic, m.payload) for m in relay.commands] == [(f"shellies/{GEN1}/relay/0/command", b"on")]
        await relay.turn(False)
        await wait_change(rig, GEN1, "Switch", "Off")
    finally:
        await relay.stop()


async def test_a_gen2_shelly_at_a_declared_prefix_of_several_levels_is_found_reports_and_obeys_there(
        make_rig: MakeRig) -> None:
    porch = "home/shelly/porch"
    rig = await make_rig(hub_overrides={"shelly": {"enabled": True, "prefixes": [porch]}})
    plus = ShellyPlus(rig.broker.host, rig.broker.port, prefix=porch, on=False)
    try:
        await plus.start()
        await found(rig, PLUS, lambda d: d["online"] is True and states_of(d).get("Switch") == "Off")
        assert [r["method"] for r in plus.requests][:3] == \
            ["Shelly.GetDeviceInfo", "Shelly.GetConfig", "Shelly.GetStatus"]  # on home/shelly/porch/rpc, its only
        bound = await rig.bind()
        await announced(rig, PLUS)

        await plus.turn(True)  # NotifyStatus on home/shelly/porch/events/rpc
        await wait_change(rig, PLUS, "Switch", "On")
        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            off = await client.control(PLUS, "Switch.Off")
            assert off.states["Switch"] == "Off"
            assert {k: plus.requests[-1][k] for k in ("method", "params")} == \
                {"method": "Switch.Set", "params": {"id": 0, "on": False}}
    finally:
        await plus.stop()


async def test_a_shelly_rgbw_light_reports_its_colour_and_takes_color_set_as_rgbw_set(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides=ON)
    light = ShellyPlusRGBW(rig.broker.host, rig.broker.port, on=True)
    rgbw = light.device_id
    try:
        await light.start()
        await found(rig, rgbw, lambda d: d["online"] is True and states_of(d).get("Color") == 0x000080)
        bound = await rig.bind()
        endpoint = (await announced(rig, rgbw))[rgbw]
        assert endpoint["displayType"] == "light"
        assert {c["interface"] for c in endpoint["capabilities"]} >= {"Switch", "Brightness", "Color"}

        await light.paint((255, 128, 0))  # NotifyStatus rgbw:0 rgb
        await wait_change(rig, rgbw, "Color", 0xFF8000)
        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            red = await client.control(rgbw, "Color.Set", {"value": 0xFF0000})
            assert red.states["Color"] == 0xFF0000
        assert {k: light.requests[-1][k] for k in ("method", "params")} == \
            {"method": "RGBW.Set", "params": {"id": 0, "on": True, "rgb": [255, 0, 0]}}
    finally:
        await light.stop()
