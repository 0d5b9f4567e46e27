"""Directives end to end: the platform simulator sends Discover, control and ReportState to a hubd process,
simulated devices on a real broker obey, and every reply is checked against PROTOCOL.md 5."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hubd_proc import REPO, HubdProcess
from mosquitto import Mosquitto
from rig import Rig as SharedRig

from simulators.device_fleet import DeviceFleet
from simulators.device_models import AirConditioner, ClimateSensor, Curtain, Light
from simulators.platform import PlatformSimulator
from simulators.platform_directives import DirectiveClient, DirectiveReply, check_async_response
from simulators.platform_records import EventRecord
from simulators.sim_device import SimDevice

WAIT_S = 15.0


@dataclass
class Rig:
    """A broker, simulated devices, the platform simulator, a hubd process, and a bound user's directive client."""

    fleet: DeviceFleet
    sim: PlatformSimulator
    hub: HubdProcess
    client: DirectiveClient

    def device(self, endpoint_id: str) -> SimDevice:
        return self.fleet.device(endpoint_id)

    async def ok(self, endpoint_id: str, name: str, payload: dict[str, Any] | None = None,
                 **kwargs: Any) -> dict[str, Any]:
        """Send a control that must succeed; its Response states, which must be what the device now holds."""
        reply = await self.client.control(endpoint_id, name, payload, **kwargs)
        assert reply.name == "Response", (name, payload, reply.body)
        assert reply.states == self.device(endpoint_id).state(), (name, payload, reply.states)
        return reply.states

    async def error(self, endpoint_id: str, name: str, payload: dict[str, Any] | None = None,
                    **kwargs: Any) -> str:
        """Send a control that must be refused; its error name."""
        reply = await self.client.control(endpoint_id, name, payload, **kwargs)
        assert reply.name == "ErrorResponse", (name, payload, reply.body)
        assert reply.error is not None
        return reply.error

    async def events(self, name: str, count: int, endpoint: str) -> list[EventRecord]:
        def found() -> list[EventRecord]:
            return [e for e in self.sim.events if e.name == name and endpoint in e.endpoint_ids]
        try:
            await self.sim.wait_until(lambda: len(found()) >= count, WAIT_S)
        except TimeoutError:
            raise AssertionError(f"{count} {name} for {endpoint} expected, got {len(found())}; rejections: "
                                 f"{self.sim.rejections[-5:]}\n{self.hub.log()[-3000:]}") from None
        return found()


MakeRig = Callable[..., Awaitable[Rig]]


@pytest.fixture
async def make_directive_rig(make_rig: Callable[..., Awaitable[SharedRig]]) -> AsyncIterator[MakeRig]:
    """`await make_directive_rig(*devices)`: the shared rig with these devices, user-1 bound, its client."""
    clients: list[DirectiveClient] = []

    async def make(*devices: SimDevice) -> Rig:
        base = await make_rig(devices=devices)
        assert base.fleet is not None
        bound = await base.bind()
        clients.append(DirectiveClient(base.hub.url, token=bound.user_token))
        return Rig(base.fleet, base.sim, base.hub, clients[-1])

    yield make
    for client in clients:
        await client.close()


async def test_discover_lists_what_is_on_the_bus(make_directive_rig: MakeRig) -> None:
    devices: list[SimDevice] = [Light("lamp-1"), Curtain("curtain-1"), AirConditioner("ac-1"),
                                ClimateSensor("climate-1")]
    rig = await make_directive_rig(*devices)
    reply = await rig.client.discover()
    assert reply.name == "DiscoveryResponse"
    assert reply.body["header"]["namespace"] == "Service"
    endpoints = {e["endpointId"]: e for e in reply.endpoints}
    assert set(endpoints) == {d.endpoint_id for d in devices}
    for device in devices:
        endpoint = endpoints[device.endpoint_id]
        config = device.config()
        for key in ("displayName", "displayType", "recommendRoomName", "recommendHomeName", "additionalInfo",
                    "capabilities"):
            assert endpoint[key] == config[key], (device.endpoint_id, key)
        assert {s["interface"]: s["value"] for s in endpoint["states"]} == device.state()
        assert all(s["timeOfSample"].endswith("Z") for s in endpoint["states"])

    # A device that appears later is discovered too; payload may be missing in a Discover (PROTOCOL 5).
    newcomer = Light("lamp-2", room="Hall")
    late = DeviceFleet(host=rig.fleet.broker.host, port=rig.fleet.broker.port, devices=[newcomer])
    await late.start()
    try:
        async def listed() -> bool:
            return "lamp-2" in {e["endpointId"] for e in (await rig.client.discover()).endpoints}
        await rig.hub.wait_for(listed, what="lamp-2 discovered")
    finally:
        await late.stop()

    # A query answers with the current states, without timeOfSample.
    state = await rig.client.report_state("ac-1")
    assert state.name == "Response" and state.endpoint_id == "ac-1"
    assert state.states == rig.device("ac-1").state()
    assert all("timeOfSample" not in s for s in state.body["endpoint"]["states"])


async def test_the_simulators_command_line_sends_directives_and_exits_by_outcome(make_directive_rig: MakeRig) -> None:
    rig = await make_directive_rig(Light("lamp-1"))
    common = ("--hub", rig.hub.url, f"--token={rig.client.token}")  # a token may start with "-"
    code, out, err = await _cli("discover", *common)
    assert code == 0, err
    assert [e["endpointId"] for e in json.loads(out)["payload"]["endpoints"]] == ["lamp-1"]
    code, out, err = await _cli("control", *common, "--endpoint", "lamp-1", "--name", "Brightness.Set",
                                "--value", "42")
    assert code == 0, err
    assert {s["interface"]: s["value"] for s in json.loads(out)["endpoint"]["states"]}["Brightness"] == 42
    assert "Response in" in err
    code, out, err = await _cli("report-state", *common, "--endpoint", "ghost")
    assert code == 1 and json.loads(out)["payload"]["name"] == "E_NO_SUCH_ENDPOINT"
    assert "ErrorResponse in" in err and "E_NO_SUCH_ENDPOINT" in err
    code, _, err = await _cli("discover", "--hub", rig.hub.url, "--token", "t", "--vendor-path", "/healthz")
    assert code == 2 and "the hub broke the contract" in err


async def test_every_operation_kind_on_the_light(make_directive_rig: MakeRig) -> None:
    rig = await make_directive_rig(Light("lamp-1"))
    light = rig.device("lamp-1")
    assert (await rig.ok("lamp-1", "Switch.On"))["Switch"] == "On"
    assert (await rig.ok("lamp-1", "Switch.Off", {}))["Switch"] == "Off"
    assert (await rig.ok("lamp-1", "Service.Switch.On"))["Switch"] == "On"  # DIFF-8
    assert (await rig.ok("lamp-1", "Brightness.Set", {"value": 55}))["Brightness"] == 55
    assert (await rig.ok("lamp-1", "Brightness.Adjust", {"delta": 30}))["Brightness"] == 85
    assert (await rig.ok("lamp-1", "Brightness.Adjust", {"delta": 30}))["Brightness"] == 100  # clamped
    assert (await rig.ok("lamp-1", "Brightness.Adjust", {"delta": -500}))["Brightness"] == 0
    assert (await rig.ok("lamp-1", "Brightness.Adjust"))["Brightness"] == 10  # default step, no payload
    assert (await rig.ok("lamp-1", "Brightness.SetMax"))["Brightness"] == 100
    assert (await rig.ok("lamp-1", "Brightness.SetMin", {"delta": -1}))["Brightness"] == 0  # payload ignored
    assert (await rig.ok("lamp-1", "ColorTemperature.Set", {"value": 20}))["ColorTemperature"] == 20
    assert (await rig.ok("lamp-1", "ColorTemperature.SetMax"))["ColorTemperature"] == 100
    assert (await rig.ok("lamp-1", "Color.Set", {"value": 0x123456}))["Color"] == 0x123456
    colour = (await rig.ok("lamp-1", "Color.SetRandom"))["Color"]
    assert isinstance(colour, int) and 0 <= colour <= 0xFFFFFF
    # What went over MQTT: hubd resolved every value itself, and kept the delta for the record.
    clamped = light.sets.items[5]
    assert (clamped.interface, clamped.operation, clamped.value, clamped.delta) == ("Brightness", "Adjust", 100, 30.0)
    assert light.sets.items[0].value == "On"

    for name, payload in (("Brightness.Set", {"value": 101}), ("Brightness.Set", {"value": -1}),
                          ("Color.Set", {"value": 0x1000000}), ("ColorTemperature.Set", {"value": "warm"})):
        assert await rig.error("lamp-1", name, payload) == "E_VALUE_OUT_OF_RANGE", (name, payload)
    for name in ("Mode.Cool", "Position.Set", "Brightness.SetHigh", "Switch.Toggle", "Switch", "Toaster.On"):
        assert await rig.error("lamp-1", name, {"value": 1}) == "E_NOT_SUPPORTED_DIRECTIVE", name
    sent = len(light.sets.items)
    assert sent == 14
    # Refused directives never reach the device.
    assert (await rig.client.report_state("lamp-1")).states == light.state()
    assert len(light.sets.items) == sent


async def test_every_operation_kind_on_the_curtain(make_directive_rig: MakeRig) -> None:
    rig = await make_directive_rig(Curtain("curtain-1", travel_s=1.0), Curtain("curtain-2", travel_s=3.0, position=100))
    curtain = rig.device("curtain-2")
    opening = await rig.ok("curtain-1", "Switch.On")  # confirmed as soon as it starts to open
    assert (opening["Switch"], opening["MotionSwitch"]) == ("On", "On")
    assert (await rig.ok("curtain-1", "Position.Set", {"value": 40}))["Position"] == 40
    assert (await rig.ok("curtain-1", "Position.Adjust", {"delta": -10}))["Position"] == 30
    assert (await rig.ok("curtain-1", "Position.Adjust", {"delta": 200}))["Position"] == 100
    assert await rig.error("curtain-1", "Position.Set", {"value": 120}) == "E_VALUE_OUT_OF_RANGE"
    assert await rig.error("curtain-1", "Position.SetMax") == "E_NOT_SUPPORTED_DIRECTIVE"

    # "Open the curtain" when it is open: the motor runs into its end stop, which confirms the directive.
    optimistic = await rig.hub.metric("hubd_controls_total", 'outcome="optimistic"')
    started = await rig.client.control("curtain-1", "MotionSwitch.On")
    assert started.name == "Response" and started.states["MotionSwitch"] == "On"
    assert await rig.hub.metric("hubd_controls_total", 'outcome="optimistic"') == optimistic  # confirmed
    await rig.hub.wait_for(_still(rig.device("curtain-1")), what="the motor stopped at its end stop")

    # "Close the curtain ... stop": the stop is confirmed at once; the curtain never gets to 0, so the close
    # is answered optimistically, with its target, at the deadline (and within 3 s).
    closing = asyncio.ensure_future(rig.client.control("curtain-2", "Position.Set", {"value": 0}))
    await rig.hub.wait_for(_reported_below(rig.hub, "curtain-2", 100), what="the curtain on its way")
    stopped = await rig.ok("curtain-2", "MotionSwitch.Off")
    assert stopped["MotionSwitch"] == "Off" and 0 < stopped["Position"] < 100
    close_reply = await closing  # DirectiveClient checks it came within 3 s
    assert close_reply.name == "Response" and close_reply.states["Position"] == 0
    assert await rig.hub.metric("hubd_controls_total", 'outcome="optimistic"') == optimistic + 1
    assert curtain.state()["Position"] == stopped["Position"]


async def test_every_operation_kind_on_the_ac(make_directive_rig: MakeRig) -> None:
    rig = await make_directive_rig(AirConditioner("ac-1", min_temperature=17, max_temperature=28))
    assert (await rig.ok("ac-1", "Switch.On"))["Switch"] == "On"
    assert (await rig.ok("ac-1", "Mode.Cool"))["Mode"] == "Cool"
    assert (await rig.ok("ac-1", "Mode.Dry"))["Mode"] == "Dry"
    assert (await rig.ok("ac-1", "Temperature.Set", {"value": 24}))["Temperature"] == 24
    assert (await rig.ok("ac-1", "Temperature.Adjust", {"delta": 1.5}))["Temperature"] == 25.5
    assert (await rig.ok("ac-1", "Temperature.Adjust"))["Temperature"] == 26.5  # 1 °C by default
    assert (await rig.ok("ac-1", "Temperature.Adjust", {"delta": 10}))["Temperature"] == 28  # additionalInfo max
    assert (await rig.ok("ac-1", "Temperature.SetMin"))["Temperature"] == 17
    assert (await rig.ok("ac-1", "Temperature.SetMax"))["Temperature"] == 28
    assert await rig.error("ac-1", "Temperature.Set", {"value": 29}) == "E_VALUE_OUT_OF_RANGE"
    assert await rig.error("ac-1", "Temperature.Set", {"value": 16}) == "E_VALUE_OUT_OF_RANGE"
    assert (await rig.ok("ac-1", "FanSpeed.SetHigh"))["FanSpeed"] == 100
    assert (await rig.ok("ac-1", "FanSpeed.SetLow"))["FanSpeed"] == 30
    assert (await rig.ok("ac-1", "FanSpeed.SetMedium"))["FanSpeed"] == 60
    assert (await rig.ok("ac-1", "FanSpeed.Adjust", {"delta": -25}))["FanSpeed"] == 35
    assert (await rig.ok("ac-1", "FanSpeed.Set", {"value": "45"}))["FanSpeed"] == 45  # a numeric string
    assert await rig.error("ac-1", "Mode.Sleep") == "E_NOT_SUPPORTED_DIRECTIVE"  # not among the AC's modes
    assert (await rig.ok("ac-1", "Switch.Off"))["Switch"] == "Off"


async def test_unknown_and_offline_devices_and_bad_tokens(make_directive_rig: MakeRig) -> None:
    rig = await make_directive_rig(Light("lamp-1"), Light("lamp-2", room="Hall"))
    assert await rig.error("ghost-1", "Switch.On") == "E_NO_SUCH_ENDPOINT"
    query = await rig.client.report_state("ghost-1")
    assert query.error == "E_NO_SUCH_ENDPOINT"

    await rig.fleet.kill("lamp-2")  # the broker publishes its will: offline
    await rig.hub.wait_for(lambda: _online_is(rig.hub, "lamp-2", False), what="lamp-2 offline")
    assert await rig.error("lamp-2", "Switch.On") == "E_ENDPOINT_UNREACHABLE"
    assert await rig.error("lamp-2", "Brightness.Set", {"value": 500}) == "E_ENDPOINT_UNREACHABLE"  # offline first
    assert (await rig.client.report_state("lamp-2")).error == "E_ENDPOINT_UNREACHABLE"
    assert not rig.device("lamp-2").sets.items
    await rig.ok("lamp-1", "Switch.On")  # the other one still obeys

    # The header token is checked on every directive (D9).
    stranger = str(uuid.uuid4())
    for reply in (await rig.client.discover(token=stranger), await rig.client.report_state("lamp-1", token=stranger),
                  await rig.client.control("lamp-1", "Switch.Off", token=stranger)):
        assert reply.error == "E_INVALID_AUTHORIZATION", reply.body
    assert rig.device("lamp-1").state()["Switch"] == "On"

    # Unknown namespaces and names of known ones.
    for namespace, name in (("Service.Discovery", "AddOrUpdateReport"), ("Service.Query", "ReportEverything"),
                            ("Service.Teleport", "Beam"), ("Other.Control", "Switch.On")):
        message = {"header": {"messageId": str(uuid.uuid4()), "namespace": namespace, "name": name,
                              "payloadVersion": "v1", "authorization": {"type": "BearerToken",
                                                                        "token": rig.client.token}},
                   "endpoint": {"endpointId": "lamp-1"}, "payload": {}}
        assert (await rig.client.send(message)).error == "E_NOT_SUPPORTED_DIRECTIVE", (namespace, name)


async def test_slow_device_gets_an_optimistic_reply_then_an_async_response(make_directive_rig: MakeRig) -> None:
    rig = await make_directive_rig(Light("slow-1", delay_s=3.0), Light("slow-2", room="Hall", delay_s=3.0))
    with_token, without = await asyncio.gather(
        rig.client.control("slow-1", "Brightness.Set", {"value": 30}, correlation_token="corr-slow-1"),
        rig.client.control("slow-2", "Brightness.Set", {"value": 70}))
    for reply, value in ((with_token, 30), (without, 70)):
        assert reply.name == "Response"  # within 3 s: DirectiveClient checks it
        assert reply.states["Brightness"] == value  # the target, not yet true
    assert rig.device("slow-1").state()["Brightness"] == 80  # the device has not done it yet

    [response] = await rig.events("Response", 1, "slow-1")
    message = response.message
    assert check_async_response(message, rig.client.correlation_tokens) == "corr-slow-1"
    assert message["header"]["namespace"] == "Service"
    assert {s["interface"]: s["value"] for s in message["endpoint"]["states"]} == rig.device("slow-1").state()
    assert message["endpoint"]["additionalInfo"] == rig.device("slow-1").config()["additionalInfo"]
    assert all("timeOfSample" not in s for s in message["endpoint"]["states"])
    # The ChangeReport of the same change went first: one lane per device.
    change = (await rig.events("ChangeReport", 1, "slow-1"))[0]
    assert rig.sim.events.index(change) < rig.sim.events.index(response)

    # Without a correlationToken the platform learns it from the ChangeReport only: once the next change
    # of slow-2 is reported, no Response can be on its way any more.
    await rig.events("ChangeReport", 1, "slow-2")
    await rig.fleet.publish_state("slow-2", {"Switch": "On"})
    await rig.events("ChangeReport", 2, "slow-2")
    assert [e for e in rig.sim.events if e.name == "Response"] == [response]
    assert not rig.sim.rejections


async def test_a_resent_message_id_gets_the_first_answer_and_runs_once(make_directive_rig: MakeRig) -> None:
    rig = await make_directive_rig(Light("lamp-1"), Light("slow-1", room="Hall", delay_s=1.0))
    first = await rig.client.control("lamp-1", "Brightness.Adjust", {"delta": 10}, message_id="adjust-1")
    assert first.states["Brightness"] == 90
    again = await rig.client.control("lamp-1", "Brightness.Adjust", {"delta": 10}, message_id="adjust-1")
    assert again.body == first.body
    assert rig.device("lamp-1").state()["Brightness"] == 90
    assert len(rig.device("lamp-1").sets.items) == 1
    assert (await rig.ok("lamp-1", "Brightness.Adjust", {"delta": 10}))["Brightness"] == 100  # a new messageId runs

    # Copies arriving while the first is still waiting for the device wait for its answer.
    replies: list[DirectiveReply] = await asyncio.gather(*(
        rig.client.control("slow-1", "Brightness.Adjust", {"delta": -30}, message_id="adjust-2") for _ in range(3)))
    assert all(r.body == replies[0].body for r in replies)
    assert replies[0].states["Brightness"] == 50
    assert len(rig.device("slow-1").sets.items) == 1
    # An error is remembered too, and a resend never executes.
    refused = await rig.client.control("lamp-1", "Brightness.Set", {"value": 500}, message_id="set-3")
    assert refused.error == "E_VALUE_OUT_OF_RANGE"
    assert (await rig.client.control("lamp-1", "Brightness.Set", {"value": 500}, message_id="set-3")).body \
        == refused.body
    assert await rig.hub.metric("hubd_directive_resends_total") == 4


async def test_a_resend_after_a_restart_gets_the_first_answer_and_does_not_run_again(
        make_directive_rig: MakeRig) -> None:
    rig = await make_directive_rig(Light("lamp-1"))
    first = await rig.client.control("lamp-1", "Brightness.Adjust", {"delta": 10}, message_id="adjust-r")
    assert first.states["Brightness"] == 90
    assert rig.hub.stop() == 0
    rig.hub.start()
    await rig.hub.wait_ready()
    await rig.hub.wait_for(lambda: _online_is(rig.hub, "lamp-1", True), what="lamp-1 back after the restart")
    again = await rig.client.control("lamp-1", "Brightness.Adjust", {"delta": 10}, message_id="adjust-r")
    assert again.body == first.body
    assert rig.device("lamp-1").state()["Brightness"] == 90
    assert len(rig.device("lamp-1").sets.items) == 1
    assert await rig.hub.metric("hubd_directive_resends_total") == 1
    assert (await rig.ok("lamp-1", "Brightness.Adjust", {"delta": 10}))["Brightness"] == 100  # a new messageId runs


async def test_a_broker_that_stops_answering_gets_an_optimistic_reply_and_the_device_still_obeys(
        make_directive_rig: MakeRig, mosquitto: Mosquitto) -> None:
    rig = await make_directive_rig(Light("lamp-1"))
    mosquitto.pause()  # hubd's set goes out into the socket, but no PUBACK comes back
    try:
        reply = await rig.client.control("lamp-1", "Brightness.Set", {"value": 25}, message_id="paused-1",
                                         correlation_token="corr-paused")
    finally:
        mosquitto.resume()
    assert reply.name == "Response" and reply.states["Brightness"] == 25, reply.body  # never an error: it may run
    [response] = await rig.events("Response", 1, "lamp-1")
    assert check_async_response(response.message, rig.client.correlation_tokens) == "corr-paused"
    assert rig.device("lamp-1").state()["Brightness"] == 25
    again = await rig.client.control("lamp-1", "Brightness.Set", {"value": 25}, message_id="paused-1")
    assert again.body == reply.body
    assert len(rig.device("lamp-1").sets.items) == 1


async def test_a_stalled_database_still_gets_an_answer_within_3_s(make_directive_rig: MakeRig) -> None:
    rig = await make_directive_rig(Light("lamp-1"))
    await rig.ok("lamp-1", "Switch.On")  # the token has been checked once
    # Another process holds the write lock; hubd's one database thread gets stuck writing a state change.
    holder = sqlite3.connect(rig.hub.workdir / "hubd.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        received = await rig.hub.metric("hubd_mqtt_messages_total", 'kind="state"')
        await rig.fleet.publish_state("lamp-1", {"ColorTemperature": 20})

        async def taken_in() -> bool:
            return await rig.hub.metric("hubd_mqtt_messages_total", 'kind="state"') > received
        await rig.hub.wait_for(taken_in, what="hubd writing the state change")
        # Every reply within 3 s (DirectiveClient checks): the answer where memory suffices, else busy.
        discovered, queried, controlled = await asyncio.gather(
            rig.client.discover(), rig.client.report_state("lamp-1"),
            rig.client.control("lamp-1", "Brightness.Set", {"value": 60}, message_id="stalled-1"))
    finally:
        holder.rollback()
        holder.close()
    assert discovered.name == "DiscoveryResponse" and queried.name == "Response"
    assert controlled.error == "E_ENDPOINT_BUSY"
    assert not [s for s in rig.device("lamp-1").sets.items if s.id == "stalled-1"]  # not sent unrecorded
    # Nothing ran, so the platform's retry runs.
    assert (await rig.ok("lamp-1", "Brightness.Set", {"value": 60}, message_id="stalled-1"))["Brightness"] == 60


async def _cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "simulators", "platform", *args, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), WAIT_S)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _online_is(hub: HubdProcess, endpoint_id: str, online: bool) -> bool:
    _, body = await hub.get("/api/devices")
    return any(d["endpointId"] == endpoint_id and d["online"] is online for d in body["devices"])


def _still(device: SimDevice) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return device.state()["MotionSwitch"] == "Off"
    return check


def _reported_below(hub: HubdProcess, endpoint_id: str, position: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        _, body = await hub.get("/api/devices")
        states = {d["endpointId"]: {s["interface"]: s["value"] for s in d["states"]} for d in body["devices"]}
        return bool(states.get(endpoint_id, {}).get("Position", 100) < position)
    return check
