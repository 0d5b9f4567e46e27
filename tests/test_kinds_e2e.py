"""The new kinds and the lock rule end to end: a real mosquitto, the platform simulator (which validates every message
strictly: hubd.devices.conformance's rules) and a real hubd process, fed real discovery configs (Valetudo's robot
vacuum, Home Assistant's documented humidifier: tests/fixtures/homeassistant) and zigbee2mqtt's own bridge/devices of
a Danalock (tests/fixtures/zigbee2mqtt). The rig and the waiting helpers are tests/rig.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from homeassistant_helpers import fixture
from rig import Rig, announced, changes, send, send_until_seen, settle, states_of, wait_change, wait_devices
from test_zigbee2mqtt_e2e import next_message, watching
from zigbee2mqtt_helpers import entries

from simulators.platform_directives import DirectiveClient, DirectiveReply

MakeRig = Callable[..., Awaitable[Rig]]

VACUUM = "GentleTimelyBadger"
VACUUM_STATE = "valetudo/GentleTimelyBadger/hass/GentleTimelyBadger_vacuum/state"
VACUUM_COMMAND = "valetudo/GentleTimelyBadger/hass/GentleTimelyBadger_vacuum/command"
HUMIDIFIER = "bedroom_humidifier"
LOCK = "0x000b57fffe0d4c01"  # danalock_V3-BTZB_lock: "Front door lock"


def _announce(rig: Rig, *names: str) -> None:
    for name in names:
        data = fixture(name)
        for config in data["configs"]:
            send(rig, config["topic"], config["payload"], retain=True)


async def _obeyed(rig: Rig, client: DirectiveClient, endpoint: str, name: str, topic: str, state_topic: str,
                  answer: Callable[[str], Any], payload: dict[str, Any] | None = None) -> tuple[str, DirectiveReply]:
    """A control sent while a stand-in for the device answers its command with the state it reaches; the command
    payload hubd published and the platform's reply."""
    async with watching(rig.broker, topic) as watcher:
        reply = asyncio.create_task(client.control(endpoint, name, payload))
        sent = (await next_message(watcher)).payload.decode()
        send(rig, state_topic, answer(sent))
        return sent, await reply


async def test_a_robot_vacuum_and_a_humidifier_are_announced_controlled_and_reported_as_the_platform_takes_them(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    _announce(rig, "valetudo_vacuum_GentleTimelyBadger", "ha_docs_humidifier")
    await wait_devices(rig, VACUUM, HUMIDIFIER)
    send(rig, "valetudo/GentleTimelyBadger/$state", "ready", retain=True)
    await send_until_seen(rig, VACUUM_STATE, {"state": "docked", "fan_speed": "max"}, VACUUM,
                          lambda d: states_of(d).get("Switch") == "Off")
    await send_until_seen(rig, "bedroom_humidifier/humidity/state", "55", HUMIDIFIER,
                          lambda d: states_of(d).get("Humidity") == 55)
    bound = await rig.bind()

    endpoints = await announced(rig, VACUUM, HUMIDIFIER)
    assert endpoints[VACUUM]["displayType"] == "cleanBot"
    assert {c["interface"]: c["supportedOperations"] for c in endpoints[VACUUM]["capabilities"]} == \
        {"Switch": ["On", "Off"], "PlaybackControl": ["Play", "Pause"]}
    assert endpoints[HUMIDIFIER]["displayType"] == "humidifier"
    assert {c["interface"]: c["supportedOperations"] for c in endpoints[HUMIDIFIER]["capabilities"]} == \
        {"Switch": ["On", "Off"], "Humidity": ["Set", "Adjust"]}

    vacuum_states = {"START": "cleaning", "PAUSE": "paused", "HOME": "returning"}
    async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
        sent, start = await _obeyed(rig, client, VACUUM, "Switch.On", VACUUM_COMMAND, VACUUM_STATE,
                                    lambda p: {"state": vacuum_states[p]})
        assert sent == "START" and start.states["Switch"] == "On"
        sent, pause = await _obeyed(rig, client, VACUUM, "PlaybackControl.Pause", VACUUM_COMMAND, VACUUM_STATE,
                                    lambda p: {"state": vacuum_states[p]})
        assert sent == "PAUSE" and pause.states["PlaybackControl"] == "Pause"
        sent, dock = await _obeyed(rig, client, VACUUM, "Switch.Off", VACUUM_COMMAND, VACUUM_STATE,
                                   lambda p: {"state": vacuum_states[p]})
        assert sent == "HOME" and dock.states["Switch"] == "Off"
        sent, target = await _obeyed(rig, client, HUMIDIFIER, "Humidity.Set", "bedroom_humidifier/humidity/set",
                                     "bedroom_humidifier/humidity/state", lambda p: p, {"value": 45})
        assert sent == "45" and target.states["Humidity"] == 45

    send(rig, VACUUM_STATE, {"state": "cleaning"})  # started from its app
    await wait_change(rig, VACUUM, "Switch", "On")
    await settle(rig)
    assert not rig.sim.rejections


async def test_a_lock_not_fully_locked_is_reported_off_and_unreachable_until_it_locks(make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}})
    send(rig, "zigbee2mqtt/bridge/state", {"state": "online"}, retain=True)
    send(rig, "zigbee2mqtt/bridge/devices", entries("danalock_V3-BTZB_lock"), retain=True)
    await wait_devices(rig, LOCK, check=lambda d: d["online"] is True)
    send(rig, "zigbee2mqtt/Front door lock", {"state": "LOCK", "lock_state": "locked", "battery": 80})
    await wait_devices(rig, LOCK, check=lambda d: states_of(d).get("Switch") == "On")
    bound = await rig.bind()
    await announced(rig, LOCK)

    send(rig, "zigbee2mqtt/Front door lock", {"state": "LOCK", "lock_state": "not_fully_locked", "battery": 80})
    await wait_change(rig, LOCK, "Switch", "Off")
    await wait_devices(rig, LOCK, check=lambda d: d["online"] is False)
    _, status = await rig.hub.get("/api/status")
    assert any("Front door lock" in p["reason"] and "not_fully_locked" in p["reason"]
               for p in status["problems"]["rejected"])
    async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
        assert (await client.report_state(LOCK)).error == "E_ENDPOINT_UNREACHABLE"
        assert (await client.control(LOCK, "Switch.On")).error == "E_ENDPOINT_UNREACHABLE"

        send(rig, "zigbee2mqtt/Front door lock", {"state": "LOCK", "lock_state": "locked", "battery": 80})
        await wait_devices(rig, LOCK, check=lambda d: d["online"] is True)
        assert (await client.report_state(LOCK)).states["Switch"] == "On"
    await settle(rig)
    assert [c.get("Switch") for c in changes(rig, LOCK)] == ["Off", "On"]
    assert not rig.sim.rejections
