"""hubd.directives in-process, dict in and dict out through VendorEndpoint.handle: the real driver (with a
fake clock, for expired tokens), registry, reporter and SQLite; simulated device models stand in for MQTT."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from test_driver_support import RunningDriver, command, running_driver, user_auth

from hubd.cloud.client import PlatformClient
from hubd.cloud.tokens import TokenManager
from hubd.config import HubdConfig
from hubd.directives import Directives
from hubd.events import DeviceMessage, MessageKind
from hubd.registry import DeviceRegistry
from hubd.reporter import Reporter
from hubd.store.grants import Grant, GrantRepo
from hubd.vendor import VendorEndpoint
from simulators.device_models import ClimateSensor, Light
from simulators.platform_directives import (
    DirectiveReply,
    control_message,
    discover_message,
    report_state_message,
    validate_directive_reply,
)
from simulators.sim_device import SimDevice, parse_set

BUDGET_S = 0.4
SLOW_S = 0.8
WAIT_S = 5.0


class LoopbackBus:
    """The MQTT side played in-process: `set` goes to a device model, whose full state goes to the registry."""

    def __init__(self, registry: DeviceRegistry, devices: list[SimDevice]) -> None:
        self.registry = registry
        self.devices = {d.endpoint_id: d for d in devices}
        self.connected = True
        self.hang = False
        self.published: list[dict[str, Any]] = []
        self._locks = {d.endpoint_id: asyncio.Lock() for d in devices}
        self._tasks: set[asyncio.Task[None]] = set()

    async def publish(self, device_id: str, suffix: str, payload: bytes) -> None:
        assert suffix == "set"
        if self.hang:
            await asyncio.Event().wait()
        self.published.append(json.loads(payload))
        task = asyncio.create_task(self._obey(device_id, payload))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def feed(self, kind: MessageKind, device_id: str, payload: object) -> None:
        """Hand the registry one device message, as the bridge would."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        await self.registry.handle([DeviceMessage(kind, device_id, data, f"hubd/device/{device_id}/{kind}",
                                                  time.time())])

    async def announce(self, device: SimDevice, *, with_state: bool = True) -> None:
        await self.feed("config", device.endpoint_id, device.config())
        await self.feed("availability", device.endpoint_id, b"online")
        if with_state:
            await self.feed("state", device.endpoint_id, device.state())

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _obey(self, device_id: str, payload: bytes) -> None:
        device = self.devices[device_id]
        async with self._locks[device_id]:
            await asyncio.sleep(device.delay_s)  # the simulated device's own slowness
            device.apply_set(parse_set(payload), asyncio.get_running_loop().time())
            await self.feed("state", device_id, device.state())


@dataclass
class Hub:
    """VendorEndpoint with the directive handlers, and what stands around them."""

    driver: RunningDriver
    session: aiohttp.ClientSession
    auth: dict[str, Any]
    vendor: VendorEndpoint
    directives: Directives
    registry: DeviceRegistry
    bus: LoopbackBus
    sent_ids: list[str] = field(default_factory=list)

    @property
    def token(self) -> str:
        return str(self.auth["userToken"])

    async def send(self, message: dict[str, Any]) -> DirectiveReply:
        reply = await self.vendor.handle(message)
        return validate_directive_reply(reply, message)

    async def control(self, endpoint_id: str, name: str, payload: dict[str, Any] | None = None,
                      **kwargs: Any) -> DirectiveReply:
        token = kwargs.pop("token", self.token)
        return await self.send(control_message(token, endpoint_id, name, payload, **kwargs))

    def metric(self, outcome: str) -> float:
        return self.driver.metrics.counter("hubd_controls_total", "", "outcome").get(outcome)

    async def outbox(self, name: str) -> list[tuple[str, dict[str, Any]]]:
        rows = await self.driver.db.call(lambda c: c.execute(
            "SELECT user_id, body FROM outbox WHERE name = ? ORDER BY id", (name,)).fetchall())
        return [(r[0], json.loads(r[1])) for r in rows]


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[Hub]:
    async with running_driver(tmp_path) as driver, aiohttp.ClientSession() as session:
        auth = await user_auth(session, driver.url)  # alice's user token
        db, metrics = driver.db, driver.metrics
        reporter = Reporter(db, namespace="Service", metrics=metrics)
        registry = DeviceRegistry(db, reporter, metrics)
        await registry.start()
        bus = LoopbackBus(registry, [Light("lamp-1"), Light("lamp-2"), Light("slow-1", delay_s=SLOW_S),
                                     ClimateSensor("climate-1")])
        directives = Directives(brand="Service", registry=registry, publisher=bus, events=reporter,
                                grants=GrantRepo(db), metrics=metrics, reply_budget_s=BUDGET_S, confirm_wait_s=WAIT_S)
        platform = HubdConfig.model_validate({}).platform
        tokens = TokenManager(GrantRepo(db), PlatformClient(platform), clock=driver.clock, failure_report=False,
                              metrics=metrics, outbox_wakeup=asyncio.Event())
        vendor = VendorEndpoint(path="/vendor", brand="Service", verifier=driver.service, tokens=tokens,
                                registry=registry, reporter=reporter, reporting_enabled=False, metrics=metrics)
        directives.register(vendor)
        for device in bus.devices.values():
            await bus.announce(device, with_state=device.endpoint_id != "lamp-2")
        follower = asyncio.create_task(directives.run())
        try:
            yield Hub(driver, session, auth, vendor, directives, registry, bus)
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            await bus.close()


async def eventually(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_expired_and_unknown_tokens_are_refused_on_every_directive(hub: Hub) -> None:
    assert (await hub.send(discover_message(hub.token))).name == "DiscoveryResponse"
    assert (await hub.send(report_state_message(hub.token, "lamp-1"))).name == "Response"
    assert (await hub.control("lamp-1", "Switch.On")).states["Switch"] == "On"

    hub.driver.clock.advance(3601)  # driver.token_ttl_s is 3600
    expired = [await hub.send(discover_message(hub.token)), await hub.send(report_state_message(hub.token, "lamp-1")),
               await hub.control("lamp-1", "Switch.Off", message_id="off-1")]
    assert [r.error for r in expired] == ["E_AUTHORIZATION_EXPIRED"] * 3
    unknown = [await hub.send(discover_message("made-up")), await hub.control("lamp-1", "Switch.Off", token="x")]
    assert [r.error for r in unknown] == ["E_INVALID_AUTHORIZATION"] * 2
    assert len(hub.bus.published) == 1

    # The platform refreshes the token and resends: the first copy never ran, so this one does.
    refreshed = await command(hub.session, hub.driver.url, "OAuthRefresh", hub.auth)
    assert refreshed["status"] == 0, refreshed
    hub.auth = refreshed["data"]
    assert (await hub.control("lamp-1", "Switch.Off", message_id="off-1")).states["Switch"] == "Off"
    assert len(hub.bus.published) == 2


async def test_discover_and_report_state(hub: Hub) -> None:
    await hub.bus.feed("config", "sensor-1", {
        "displayName": "Cellar Sensor", "displayType": "unknown", "capabilities": [
            {"interface": "Temperature", "supportedOperations": [], "proactivelyReported": True, "retrievable": True},
            {"interface": "Humidity", "supportedOperations": [], "proactivelyReported": True, "retrievable": False}]})
    await hub.bus.feed("state", "sensor-1", {"Temperature": 12.5, "Humidity": 80})
    discovered = await hub.send(discover_message(hub.token, message_id="disc-1"))
    assert discovered.message_id == "disc-1"
    endpoints = {e["endpointId"]: e for e in discovered.endpoints}
    assert set(endpoints) == {"lamp-1", "lamp-2", "slow-1", "climate-1", "sensor-1"}
    assert [(s["interface"], s["value"]) for s in endpoints["sensor-1"]["states"]] == [("Temperature", 12.5),
                                                                                       ("Humidity", 80)]
    assert endpoints["lamp-2"]["states"] == []  # known, but it never reported a state

    query = await hub.send(report_state_message(hub.token, "sensor-1"))
    assert query.body["endpoint"] == {"endpointId": "sensor-1", "states": [{"interface": "Temperature",
                                                                            "value": 12.5}]}
    assert (await hub.send(report_state_message(hub.token, "nope"))).error == "E_NO_SUCH_ENDPOINT"
    no_endpoint = discover_message(hub.token)
    no_endpoint["header"].update(namespace="Service.Query", name="ReportState")
    assert (await hub.send(no_endpoint)).error == "E_INTERNAL_ERROR"
    # A read-only capability takes no control.
    assert (await hub.control("sensor-1", "Temperature.Set", {"value": 20})).error == "E_NOT_SUPPORTED_DIRECTIVE"

    await hub.bus.feed("availability", "lamp-1", b"offline")
    assert (await hub.send(report_state_message(hub.token, "lamp-1"))).error == "E_ENDPOINT_UNREACHABLE"
    assert (await hub.control("lamp-1", "Switch.On")).error == "E_ENDPOINT_UNREACHABLE"
    assert not hub.bus.published


async def test_slow_device_async_response_goes_to_the_users_bound_through_that_account(hub: Hub) -> None:
    grants = GrantRepo(hub.driver.db)
    for user, account in (("p-alice", "alice"), ("p-bob", "bob")):
        await grants.replace(Grant(user, account, "at", "rt", time.time() + 3600, time.time(), "active", False, None))
    started = time.monotonic()
    reply = await hub.control("slow-1", "Brightness.Set", {"value": 35}, correlation_token="corr-1")
    assert BUDGET_S <= time.monotonic() - started < BUDGET_S + 0.3
    assert reply.states["Brightness"] == 35 and hub.bus.devices["slow-1"].state()["Brightness"] == 80
    assert hub.metric("optimistic") == 1
    await eventually(lambda: _rows(hub, "Response", 1), "the async Response")
    [(user, body)] = await hub.outbox("Response")
    assert user == "p-alice"
    assert body["header"]["correlationToken"] == "corr-1" and body["header"]["name"] == "Response"
    assert "authorization" not in body["header"]  # added at send time, per user
    assert body["endpoint"]["additionalInfo"] == {"kind": "light"}
    assert {s["interface"]: s["value"] for s in body["endpoint"]["states"]}["Brightness"] == 35
    assert all("timeOfSample" not in s for s in body["endpoint"]["states"])

    # No correlationToken: confirmed in the background all the same, but nothing to send.
    await hub.control("slow-1", "Switch.On")
    await eventually(lambda: _metric_is(hub, "confirmed_late", 2), "the second late confirmation")
    assert len(await hub.outbox("Response")) == 1


async def test_quick_adjusts_build_on_the_unconfirmed_target(hub: Hub) -> None:
    first = await hub.control("slow-1", "Brightness.Adjust", {"delta": 5})
    second = await hub.control("slow-1", "Brightness.Adjust", {"delta": 5})
    assert (first.states["Brightness"], second.states["Brightness"]) == (85, 90)
    assert [p["value"] for p in hub.bus.published] == [85, 90]
    await eventually(lambda: _metric_is(hub, "confirmed_late", 2), "both confirmed")
    assert hub.bus.devices["slow-1"].state()["Brightness"] == 90
    # Once confirmed, the next Adjust starts from the device's own state again.
    assert (await hub.control("slow-1", "Brightness.Adjust", {"delta": -50})).states["Brightness"] == 40


async def test_adjust_of_an_unknown_state_is_left_to_the_device(hub: Hub) -> None:
    reply = await hub.control("lamp-2", "Brightness.Adjust", {"delta": -30})
    assert reply.states["Brightness"] == 50 and reply.states == hub.bus.devices["lamp-2"].state()
    assert hub.bus.published == [{"id": reply.message_id, "interface": "Brightness", "operation": "Adjust",
                                  "delta": -30}]


async def test_broker_trouble_is_a_gateway_error_within_the_budget(hub: Hub) -> None:
    hub.bus.connected = False
    assert (await hub.control("lamp-1", "Switch.On")).error == "E_GATEWAY_UNREACHABLE"
    hub.bus.connected, hub.bus.hang = True, True
    started = time.monotonic()
    assert (await hub.control("lamp-1", "Switch.On")).error == "E_GATEWAY_UNREACHABLE"
    assert time.monotonic() - started < BUDGET_S + 0.2
    assert hub.bus.devices["lamp-1"].state()["Switch"] == "Off"


async def test_same_message_id_with_other_content_is_another_directive(hub: Hub) -> None:
    a, b, c = await asyncio.gather(hub.control("lamp-1", "Brightness.Adjust", {"delta": 5}, message_id="m-1"),
                                   hub.control("lamp-1", "Brightness.Adjust", {"delta": 5}, message_id="m-1"),
                                   hub.control("lamp-2", "Switch.On", message_id="m-1"))
    assert a.body == b.body and a.states["Brightness"] == 85
    assert c.states["Switch"] == "On"
    assert len(hub.bus.published) == 2


async def _rows(hub: Hub, name: str, count: int) -> bool:
    return len(await hub.outbox(name)) >= count


async def _metric_is(hub: Hub, outcome: str, value: float) -> bool:
    return hub.metric(outcome) >= value
