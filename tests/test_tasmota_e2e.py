"""Tasmota devices imported natively (`tasmota: {enabled: true}`), end to end: a real mosquitto, the platform
simulator and a real hubd process, a simulated Tasmota bulb (simulators/discovery_tasmota.py) that announces itself
with Tasmota's own discovery and obeys `cmnd/<topic>/...`, and the retained legacy (SetOption19 1) discovery of a
real Tasmota relay (tests/fixtures/homeassistant). The rig and the waiting helpers are tests/rig.py's.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mosquitto import Mosquitto, publish
from rig import Rig, announced, changes, devices, invalid_total, send, settle, states_of, wait_change, wait_devices

from simulators.discovery_tasmota import TasmotaBulb
from simulators.platform_directives import DirectiveClient

MakeRig = Callable[..., Awaitable[Rig]]
BULB = "A4CF12D4E5F6"
RELAY = "A4CF12FB6A07"  # the native twin of the legacy relay FB6A07: the same topic, the MAC ending FB6A07
LEGACY = json.loads((Path(__file__).parent / "fixtures" / "homeassistant" / "tasmota_relay_FB6A07.json")
                    .read_text(encoding="utf-8"))["configs"][0]
BOTH = {"tasmota": {"enabled": True}, "homeassistant": {"enabled": True}}


def native_relay() -> dict[str, Any]:
    """The native discovery config of the relay whose legacy config LEGACY is (topic tasmota_FB6A07)."""
    fixture = Path(__file__).parent / "fixtures" / "tasmota" / "ha_default_config_49A3BC.json"
    config: dict[str, Any] = json.loads(json.loads(fixture.read_text(encoding="utf-8"))["messages"][0]["payload"])
    config.update(mac=RELAY, t="tasmota_FB6A07", hn="tasmota-FB6A07-2567", ft="%prefix%/%topic%/", dn="Garage Door",
                  rl=[1, 0, 0, 0, 0, 0, 0, 0])
    return config


async def test_a_tasmota_bulb_is_imported_reports_obeys_on_cmnd_and_goes_unavailable_with_its_lwt(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"tasmota": {"enabled": True}})
    bulb = TasmotaBulb(rig.broker.host, rig.broker.port, mac=BULB, on=False, dimmer=60)
    try:
        await bulb.start()
        await wait_devices(rig, BULB, check=lambda d: d["online"] is True and states_of(d).get("Switch") == "Off")
        bound = await rig.bind()
        endpoint = (await announced(rig, BULB))[BULB]
        assert (endpoint["displayName"], endpoint["displayType"]) == ("Hallway Light", "light")
        assert {c["interface"] for c in endpoint["capabilities"]} == \
            {"Switch", "Brightness", "ColorTemperature", "Color"}

        await bulb.turn(True)  # switched at the wall: stat/RESULT {"POWER":"ON",...}
        await wait_change(rig, BULB, "Switch", "On")

        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            dim = await client.control(BULB, "Brightness.Set", {"value": 40})
            assert dim.states["Brightness"] == 40
            assert [(m.topic, m.payload) for m in bulb.commands][-1] == (f"cmnd/{bulb.topic}/Dimmer", b"40")

            await bulb.kill()  # a power cut: the broker publishes its will, tele/<topic>/LWT Offline
            await wait_devices(rig, BULB, check=lambda d: d["online"] is False)
            refused = await client.control(BULB, "Switch.Off")
            assert refused.error == "E_ENDPOINT_UNREACHABLE"
    finally:
        await bulb.stop()


async def test_a_tasmota_device_is_asked_for_its_state_once_found_and_again_after_a_broker_restart(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"tasmota": {"enabled": True}})
    bulb = TasmotaBulb(rig.broker.host, rig.broker.port, mac=BULB, on=True, dimmer=60)

    def asked() -> int:
        return sum(m.topic == f"cmnd/{bulb.topic}/STATE" for m in bulb.commands)

    async def asked_at_least(n: int) -> bool:
        return asked() >= n

    try:
        await bulb.start()
        await wait_devices(rig, BULB, check=lambda d: states_of(d).get("Switch") == "On")
        await rig.hub.wait_for(lambda: asked_at_least(1), what="hubd asking the new bulb for its state")
        before = asked()
        rig.broker.restart()  # what the bulb said while hubd was away is not retained: hubd asks again
        await rig.hub.wait_for(lambda: asked_at_least(before + 1), timeout_s=30,
                               what="hubd asking the bulb for its state on its new connection")
    finally:
        await bulb.stop()


async def test_a_colour_for_an_off_tasmota_light_turns_it_on_first(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"tasmota": {"enabled": True}})
    bulb = TasmotaBulb(rig.broker.host, rig.broker.port, mac=BULB, on=False)
    try:
        await bulb.start()
        await wait_devices(rig, BULB, check=lambda d: states_of(d).get("Switch") == "Off")
        bound = await rig.bind()
        await announced(rig, BULB)
        heard = len(bulb.commands)
        async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
            await client.control(BULB, "Color.Set", {"value": 0x0000FF})
        await bulb.wait_until(lambda: len(bulb.commands) >= heard + 2)
        assert [(m.topic.rsplit("/", 1)[-1], m.payload) for m in bulb.commands[heard:]] == \
            [("POWER1", b"ON"), ("Color2", b"0,0,255")]
        await wait_change(rig, BULB, "Switch", "On")
    finally:
        await bulb.stop()


async def test_a_device_also_seen_through_legacy_discovery_is_imported_once_natively(
        mosquitto: Mosquitto, make_rig: MakeRig) -> None:
    # Both retained before hubd starts: its Tasmota subscription comes before Home Assistant's, so the native
    # config is read first and discovery leaves the relay to it.
    publish(mosquitto.port, LEGACY["topic"], json.dumps(LEGACY["payload"]), retain=True)
    publish(mosquitto.port, f"tasmota/discovery/{RELAY}/config", json.dumps(native_relay()), retain=True)
    publish(mosquitto.port, "tele/tasmota_FB6A07/LWT", "Online", retain=True)
    rig = await make_rig(hub_overrides=BOTH)
    await wait_devices(rig, RELAY, check=lambda d: d["online"] is True)
    await rig.bind()
    await settle(rig)

    shown = await devices(rig)
    assert {e for e in shown if not e.startswith("marker-")} == {RELAY}
    assert not await invalid_total(rig.hub, 1)  # left to the native import, not refused as a problem
    assert shown[RELAY]["source"] == "tasmota" and shown[RELAY]["displayName"] == "Garage Door"
    send(rig, "tele/tasmota_FB6A07/STATE", {"POWER": "ON"})
    await wait_change(rig, RELAY, "Switch", "On")
    assert changes(rig, RELAY) == [{"Switch": "On"}]


async def test_a_native_config_after_the_legacy_one_takes_the_device_over(make_rig: MakeRig) -> None:
    # Live, discovery read the relay first; when its native config comes, the device is the native import's: the
    # discovery device is gone (DeleteReport) and the native one announced, one device as the contract says.
    rig = await make_rig(hub_overrides=BOTH)
    send(rig, LEGACY["topic"], LEGACY["payload"], retain=True)
    await wait_devices(rig, "FB6A07")
    send(rig, f"tasmota/discovery/{RELAY}/config", native_relay(), retain=True)
    await wait_devices(rig, RELAY)
    await rig.hub.wait_for(lambda: _without(rig, "FB6A07"), what="the discovery device gone")
    assert (await devices(rig))[RELAY]["source"] == "tasmota"
    assert not await invalid_total(rig.hub, 1)


async def test_after_a_restart_a_device_imported_both_ways_is_one_native_device(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides=BOTH)
    send(rig, LEGACY["topic"], LEGACY["payload"], retain=True)
    await wait_devices(rig, "FB6A07")
    send(rig, f"tasmota/discovery/{RELAY}/config", native_relay(), retain=True)
    await wait_devices(rig, RELAY)

    rig.hub.stop()
    rig.hub.start()
    await rig.hub.wait_ready()
    await rig.hub.wait_for(lambda: _without(rig, "FB6A07"), timeout_s=5.0, what="the discovery device gone")


async def _without(rig: Rig, endpoint: str) -> bool:
    return endpoint not in await devices(rig)
