"""hubd.directives in-process, dict in and dict out through DirectiveEndpoint.handle (and its HTTP view on
loopback): the real driver (with a fake clock, for expired tokens), registry, outbox writer and SQLite; simulated
device models stand in for MQTT."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from driver_helpers import RunningDriver, browser_session, command, log_in, running_driver, user_auth
from unit_helpers import device_message

from hubd.cloud.client import PlatformClient
from hubd.cloud.tokens import TokenManager
from hubd.config.model import HubdConfig
from hubd.dialects.base import Outgoing
from hubd.dialects.commands import DeviceCommands
from hubd.dialects.native.dialect import NativeDialect
from hubd.directives.control import Controls
from hubd.directives.discovery import Discovery
from hubd.directives.endpoint import DirectiveEndpoint
from hubd.directives.grant import AcceptGrant
from hubd.directives.replay import Replay
from hubd.driver.store import revoke_user_blocking
from hubd.driver.verdicts import VERDICT_TTL_S
from hubd.errors import MqttUnavailable, MqttUnconfirmed
from hubd.events import PendingEvent
from hubd.lifecycle import Health
from hubd.outbox.writer import OutboxWriter
from hubd.registry import DeviceRegistry
from hubd.store.db import Database
from hubd.store.grants import Grant, GrantRepo
from hubd.store.replies import DirectiveReplyRepo
from hubd.web.server import HttpServer
from simulators.device_models import AirConditioner, ClimateSensor, Light
from simulators.platform_directives import (
    DirectiveReply,
    control_message,
    discover_message,
    report_state_message,
    validate_directive_reply,
)
from simulators.sim_device import InterfaceSpec, Recorder, SimDevice, parse_set

BUDGET_S = 0.4
SLOW_S = 0.8
WAIT_S = 5.0
SPEC_REPLY_S = 3.0  # PROTOCOL.md 5.3: the only time bound these tests check
MAX_BODY_BYTES = 65536  # http.max_body_bytes' default


class LoopbackBus:
    """The MQTT side played in-process: `set` goes to a device model, whose full state goes to the registry.

    `hang`: the set never leaves hubd (no publish slot comes free); `unacked`: it goes out and the device
    obeys, but the broker's PUBACK never comes.
    """

    def __init__(self, registry: DeviceRegistry, devices: list[SimDevice]) -> None:
        self.registry = registry
        self.devices = {d.endpoint_id: d for d in devices}
        self.connected = True
        self.hang = False
        self.unacked = False
        self.published: list[dict[str, Any]] = []
        self._locks = {d.endpoint_id: asyncio.Lock() for d in devices}
        self._tasks: set[asyncio.Task[None]] = set()

    async def publish(self, message: Outgoing, *, timeout_s: float | None = None) -> None:
        base, _, device_id, suffix = message.topic.split("/")
        assert (base, suffix) == ("hubd", "set") and timeout_s is not None
        payload = message.payload
        if self.hang:
            await asyncio.sleep(timeout_s)
            raise MqttUnavailable(f"no free publish slot within {timeout_s} s")
        self.published.append(json.loads(payload))
        task = asyncio.create_task(self._obey(device_id, payload))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self.unacked:
            await asyncio.sleep(timeout_s)
            raise MqttUnconfirmed(f"no PUBACK within {timeout_s} s")

    async def feed(self, kind: str, device_id: str, payload: object) -> None:
        """Hand the registry one device message, as the bridge would."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        await self.registry.handle([device_message(kind, device_id, data, time.time())])

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


class RecordingEvents:
    """The real outbox writer's enqueue, recorded once it returned (the outbox row is then committed)."""

    def __init__(self, writer: OutboxWriter) -> None:
        self.writer = writer
        self.queued: Recorder[tuple[str, tuple[str, ...] | None]] = Recorder()

    async def enqueue(self, events: Sequence[PendingEvent], user_ids: Sequence[str] | None = None) -> int:
        count = await self.writer.enqueue(events, user_ids)
        for event in events:
            self.queued.add((event.name, None if user_ids is None else tuple(user_ids)))
        return count


class RecordingGrants:
    """The real grants table; records each lookup once it returned."""

    def __init__(self, repo: GrantRepo) -> None:
        self.repo = repo
        self.looked_up: Recorder[int] = Recorder()

    async def all(self) -> list[Grant]:
        grants = await self.repo.all()
        self.looked_up.add(len(grants))
        return grants


class Dimmer(SimDevice):
    """A light whose brightness can be set but not read back (retrievable false)."""

    kind = "dimmer"
    label = "Dimmer"
    display_type = "light"

    def __init__(self, endpoint_id: str, *, delay_s: float = 0.0) -> None:
        super().__init__(endpoint_id, interfaces=(
            InterfaceSpec("Switch", ("On", "Off"), enum_values=("On", "Off")),
            InterfaceSpec("Brightness", ("Set", "Adjust"), retrievable=False)),
            initial={"Switch": "Off", "Brightness": 50}, delay_s=delay_s)


@dataclass
class Hub:
    """DirectiveEndpoint with the directive handlers, and what stands around them."""

    driver: RunningDriver
    session: aiohttp.ClientSession
    auth: dict[str, Any]
    endpoint: DirectiveEndpoint
    controls: Controls
    registry: DeviceRegistry
    writer: OutboxWriter
    tokens: TokenManager
    bus: LoopbackBus
    events: RecordingEvents
    grants: RecordingGrants
    url: str
    sent_ids: list[str] = field(default_factory=list)

    @property
    def token(self) -> str:
        return str(self.auth["userToken"])

    async def send(self, message: dict[str, Any], endpoint: DirectiveEndpoint | None = None) -> DirectiveReply:
        started = time.monotonic()
        reply = await (endpoint or self.endpoint).handle(message)
        assert time.monotonic() - started < SPEC_REPLY_S, message
        return validate_directive_reply(reply, message)

    async def control(self, endpoint_id: str, name: str, payload: dict[str, Any] | None = None,
                      **kwargs: Any) -> DirectiveReply:
        token = kwargs.pop("token", self.token)
        endpoint = kwargs.pop("endpoint", None)
        return await self.send(control_message(token, endpoint_id, name, payload, **kwargs), endpoint)

    async def post(self, data: bytes) -> tuple[int, dict[str, Any]]:
        async with self.session.post(f"{self.url}/vendor", data=data,
                                     headers={"Content-Type": "application/json"}) as resp:
            return resp.status, await resp.json()

    def metric(self, outcome: str) -> float:
        return self.driver.metrics.counter("hubd_controls_total", "", "outcome").get(outcome)

    async def outbox(self, name: str) -> list[tuple[str, dict[str, Any]]]:
        rows = await self.driver.db.call(lambda c: c.execute(
            "SELECT user_id, body FROM outbox WHERE name = ? ORDER BY id", (name,)).fetchall())
        return [(r[0], json.loads(r[1])) for r in rows]

    async def state_is(self, device_id: str, interface: str, value: object) -> None:
        reached = await self.registry.wait_for_state(
            device_id, lambda d: interface in d.states and d.states[interface].value == value, WAIT_S)
        assert reached, (device_id, interface, value)

    def another_hub(self) -> tuple[Controls, DirectiveEndpoint]:
        """A second set of directive handlers and endpoint over the same database and devices: hubd after a
        restart."""
        return directive_handlers(self.driver, self.registry, self.writer, self.tokens, self.bus, self.events,
                                  self.grants)


def directive_handlers(driver: RunningDriver, registry: DeviceRegistry, writer: OutboxWriter, tokens: TokenManager,
                       bus: LoopbackBus, events: RecordingEvents,
                       grants: RecordingGrants) -> tuple[Controls, DirectiveEndpoint]:
    """The endpoint with every directive handler registered, as app.py wires them; and the control component."""
    metrics = driver.metrics
    replay = Replay(DirectiveReplyRepo(driver.db), metrics)
    controls = Controls(namespace="Service", registry=registry, commands=DeviceCommands([NativeDialect("hubd")], bus),
                        events=events, grants=grants, replay=replay, metrics=metrics, confirm_wait_s=WAIT_S)
    endpoint = DirectiveEndpoint(path="/vendor", namespace="Service", verifier=driver.service, metrics=metrics,
                                 reply_budget_s=BUDGET_S)
    AcceptGrant(namespace="Service", tokens=tokens, writer=writer, reporting_enabled=False).register(endpoint)
    Discovery(namespace="Service", registry=registry, replay=replay).register(endpoint)
    controls.register(endpoint)
    return controls, endpoint


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[Hub]:
    async with running_driver(tmp_path) as driver, browser_session() as session:
        auth = await user_auth(session, driver.url)  # alice's user token
        db, metrics = driver.db, driver.metrics
        writer = OutboxWriter(db, namespace="Service", metrics=metrics)
        registry = DeviceRegistry(db, writer, metrics)
        await registry.start()
        bus = LoopbackBus(registry, [Light("lamp-1"), Light("lamp-2"), Light("slow-1", delay_s=SLOW_S),
                                     ClimateSensor("climate-1"), Dimmer("dimmer-1"),
                                     Dimmer("dimmer-slow", delay_s=SLOW_S),
                                     AirConditioner("ac-crossed", min_temperature=30, max_temperature=20)])
        events, grants = RecordingEvents(writer), RecordingGrants(GrantRepo(db))
        platform = HubdConfig.model_validate({}).platform
        tokens = TokenManager(GrantRepo(db), PlatformClient(platform), clock=driver.clock, failure_report=False,
                              metrics=metrics, outbox_wakeup=asyncio.Event())
        controls, endpoint = directive_handlers(driver, registry, writer, tokens, bus, events, grants)
        server = HttpServer(host="127.0.0.1", port=0, max_body_bytes=MAX_BODY_BYTES, health=Health(),
                            metrics=metrics, sources=[endpoint])
        await server.start()
        for device in bus.devices.values():
            await bus.announce(device, with_state=device.endpoint_id != "lamp-2")
        follower = asyncio.create_task(controls.run())
        try:
            yield Hub(driver, session, auth, endpoint, controls, registry, writer, tokens, bus, events, grants,
                      f"http://127.0.0.1:{server.bound_port}")
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            await controls.stop()
            await server.stop()
            await bus.close()


@asynccontextmanager
async def stalled_database(hub: Hub) -> AsyncIterator[None]:
    """Another process holds the write lock, and hubd's one database thread is stuck in a write behind it."""
    # Writes hubd queued before (the reply writer's first prune) land first: one stuck behind the lock would
    # hold up stuck_write below for the whole busy_timeout.
    await hub.driver.db.call(lambda _conn: None)
    holder = sqlite3.connect(hub.driver.db.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    inside = threading.Event()

    def stuck_write(conn: sqlite3.Connection) -> None:
        inside.set()
        conn.execute("UPDATE devices SET online = online WHERE id = 'lamp-1'")

    stuck = asyncio.ensure_future(hub.driver.db.call(stuck_write))
    try:
        assert await asyncio.to_thread(inside.wait, WAIT_S)
        yield
    finally:
        holder.rollback()
        holder.close()
        await stuck


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
    assert set(endpoints) == {"lamp-1", "lamp-2", "slow-1", "climate-1", "dimmer-1", "dimmer-slow", "ac-crossed",
                              "sensor-1"}
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
    # Offline comes first: a bad value for an offline device is still "unreachable".
    assert (await hub.control("lamp-1", "Brightness.Set", {"value": 500})).error == "E_ENDPOINT_UNREACHABLE"
    assert (await hub.control("lamp-1", "Toaster.On")).error == "E_NOT_SUPPORTED_DIRECTIVE"  # no such interface
    assert not hub.bus.published


async def test_control_replies_hold_only_retrievable_states_like_report_state(hub: Hub) -> None:
    query = await hub.send(report_state_message(hub.token, "dimmer-1"))
    assert query.states == {"Switch": "Off"}
    assert (await hub.control("dimmer-1", "Switch.On")).states == {"Switch": "On"}  # confirmed
    assert (await hub.control("dimmer-1", "Brightness.Set", {"value": 70})).states == {"Switch": "On"}
    # The optimistic reply of a slow device filters the same way.
    optimistic = await hub.control("dimmer-slow", "Brightness.Set", {"value": 20})
    assert optimistic.name == "Response" and optimistic.states == {"Switch": "Off"}
    assert hub.metric("optimistic") == 1
    await hub.state_is("dimmer-slow", "Brightness", 20)


async def test_slow_device_async_response_goes_to_the_users_bound_through_that_account(hub: Hub) -> None:
    grants = GrantRepo(hub.driver.db)
    for user, account in (("p-alice", "alice"), ("p-bob", "bob")):
        await grants.replace(Grant(user, account, "at", "rt", time.time() + 3600, time.time(), "active", False, None))
    reply = await hub.control("slow-1", "Brightness.Set", {"value": 35}, correlation_token="corr-1")
    assert reply.states["Brightness"] == 35 and hub.bus.devices["slow-1"].state()["Brightness"] == 80
    assert hub.metric("optimistic") == 1
    await hub.events.queued.wait_for(lambda e: e[0] == "Response", WAIT_S)
    [(user, body)] = await hub.outbox("Response")
    assert user == "p-alice"
    assert body["header"]["correlationToken"] == "corr-1" and body["header"]["name"] == "Response"
    assert "authorization" not in body["header"]  # added at send time, per user
    assert body["endpoint"]["additionalInfo"] == {"kind": "light"}
    assert {s["interface"]: s["value"] for s in body["endpoint"]["states"]}["Brightness"] == 35
    assert all("timeOfSample" not in s for s in body["endpoint"]["states"])

    # No correlationToken: confirmed in the background all the same, but nothing to send. The device obeys
    # in order, so once the next one's Response is queued, the Switch.On was confirmed.
    await hub.control("slow-1", "Switch.On")
    await hub.control("slow-1", "Brightness.Set", {"value": 45}, correlation_token="corr-2")
    await hub.events.queued.wait_for(lambda e: e[0] == "Response" and len(hub.events.queued.items) == 2, WAIT_S)
    assert [b["header"]["correlationToken"] for _, b in await hub.outbox("Response")] == ["corr-1", "corr-2"]
    assert hub.metric("confirmed_late") == 3


async def test_async_response_goes_to_nobody_when_the_account_has_no_grant(
        hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    # Only bob is bound; alice's directive must not tell bob's platform user about it.
    await GrantRepo(hub.driver.db).replace(Grant("p-bob", "bob", "at", "rt", time.time() + 3600, time.time(),
                                                 "active", False, None))
    caplog.set_level(logging.WARNING, logger="hubd.directives")
    reply = await hub.control("slow-1", "Switch.On", correlation_token="corr-x")
    assert reply.states["Switch"] == "On" and hub.metric("optimistic") == 1
    await hub.grants.looked_up.wait_for(timeout_s=WAIT_S)  # the late confirmation looked for alice's users
    assert hub.metric("confirmed_late") == 1
    assert not hub.events.queued.items and await hub.outbox("Response") == []
    assert "no platform user is bound through the hubd account 'alice'" in caplog.text


async def test_quick_adjusts_build_on_the_unconfirmed_target(hub: Hub) -> None:
    await GrantRepo(hub.driver.db).replace(Grant("p-alice", "alice", "at", "rt", time.time() + 3600, time.time(),
                                                 "active", False, None))
    first = await hub.control("slow-1", "Brightness.Adjust", {"delta": 5}, correlation_token="a-1")
    second = await hub.control("slow-1", "Brightness.Adjust", {"delta": 5}, correlation_token="a-2")
    assert (first.states["Brightness"], second.states["Brightness"]) == (85, 90)
    assert [p["value"] for p in hub.bus.published] == [85, 90]
    await hub.events.queued.wait_for(lambda _: len(hub.events.queued.items) == 2, WAIT_S)
    assert hub.metric("confirmed_late") == 2
    assert hub.bus.devices["slow-1"].state()["Brightness"] == 90
    # Once confirmed, the next Adjust starts from the device's own state again.
    assert (await hub.control("slow-1", "Brightness.Adjust", {"delta": -50})).states["Brightness"] == 40


async def test_adjust_of_an_unknown_state_is_left_to_the_device(hub: Hub) -> None:
    reply = await hub.control("lamp-2", "Brightness.Adjust", {"delta": -30})
    assert reply.states["Brightness"] == 50 and reply.states == hub.bus.devices["lamp-2"].state()
    assert hub.bus.published == [{"id": reply.message_id, "interface": "Brightness", "operation": "Adjust",
                                  "delta": -30}]


async def test_a_set_that_never_left_is_a_gateway_error_and_a_retry_runs(hub: Hub) -> None:
    hub.bus.connected = False
    assert (await hub.control("lamp-1", "Switch.On", message_id="on-1")).error == "E_GATEWAY_UNREACHABLE"
    hub.bus.connected, hub.bus.hang = True, True
    assert (await hub.control("lamp-1", "Switch.On", message_id="on-1")).error == "E_GATEWAY_UNREACHABLE"
    assert hub.bus.devices["lamp-1"].state()["Switch"] == "Off" and not hub.bus.published
    # Nothing ran, so nothing was remembered: the platform's retry runs, also after a "restart".
    hub.bus.hang = False
    _, restarted = hub.another_hub()
    assert (await hub.control("lamp-1", "Switch.On", message_id="on-1", endpoint=restarted)).states["Switch"] == "On"
    assert len(hub.bus.published) == 1


async def test_a_set_the_broker_has_not_acknowledged_is_answered_optimistically(hub: Hub) -> None:
    hub.bus.unacked = True
    reply = await hub.control("lamp-1", "Brightness.Set", {"value": 15}, message_id="unacked-1")
    assert reply.name == "Response" and reply.states["Brightness"] == 15  # the target: the device may obey
    await hub.state_is("lamp-1", "Brightness", 15)
    hub.bus.unacked = False
    again = await hub.control("lamp-1", "Brightness.Set", {"value": 15}, message_id="unacked-1")
    assert again.body == reply.body and len(hub.bus.published) == 1


async def test_same_message_id_with_other_content_is_another_directive(hub: Hub) -> None:
    a, b, c = await asyncio.gather(hub.control("lamp-1", "Brightness.Adjust", {"delta": 5}, message_id="m-1"),
                                   hub.control("lamp-1", "Brightness.Adjust", {"delta": 5}, message_id="m-1"),
                                   hub.control("lamp-2", "Switch.On", message_id="m-1"))
    assert a.body == b.body and a.states["Brightness"] == 85
    assert c.states["Switch"] == "On"
    assert len(hub.bus.published) == 2


async def test_a_resend_after_a_restart_is_answered_from_the_database(hub: Hub) -> None:
    first = await hub.control("lamp-1", "Brightness.Adjust", {"delta": 10}, message_id="adj-1")
    assert first.states["Brightness"] == 90
    await hub.controls.stop()  # what a graceful stop writes
    _, restarted = hub.another_hub()
    again = await hub.control("lamp-1", "Brightness.Adjust", {"delta": 10}, message_id="adj-1", endpoint=restarted)
    assert again.body == first.body
    assert len(hub.bus.published) == 1 and hub.bus.devices["lamp-1"].state()["Brightness"] == 90

    # A hub that died after sending, before it noted the answer (its writer never ran): the resend gets
    # the target states, and the device is not told twice.
    _, crashed = hub.another_hub()  # its run() is never started
    slow = await hub.control("slow-1", "Brightness.Adjust", {"delta": -20}, message_id="adj-2", endpoint=crashed)
    assert slow.states["Brightness"] == 60
    _, restarted = hub.another_hub()
    resent = await hub.control("slow-1", "Brightness.Adjust", {"delta": -20}, message_id="adj-2", endpoint=restarted)
    assert resent.body == slow.body
    await hub.state_is("slow-1", "Brightness", 60)
    assert [p["id"] for p in hub.bus.published] == ["adj-1", "adj-2"]


async def test_a_resend_after_a_restart_whose_claim_stalled_does_not_run_again(hub: Hub) -> None:
    first = await hub.control("lamp-1", "Brightness.Adjust", {"delta": 10}, message_id="adj-9")
    assert first.states["Brightness"] == 90
    await hub.controls.stop()
    _, restarted = hub.another_hub()
    assert (await hub.send(discover_message(hub.token), endpoint=restarted)).name == "DiscoveryResponse"

    # The database stalls: the resend's claim waits behind the lock, hubd gives up on it (busy), and it lands
    # later, meeting the row from before the restart.
    async with stalled_database(hub):
        busy = await hub.control("lamp-1", "Brightness.Adjust", {"delta": 10}, message_id="adj-9", endpoint=restarted)
        assert busy.error == "E_ENDPOINT_BUSY"
    again = await hub.control("lamp-1", "Brightness.Adjust", {"delta": 10}, message_id="adj-9", endpoint=restarted)
    assert [p["id"] for p in hub.bus.published] == ["adj-9"]  # the device was told once
    assert again.body == first.body


async def test_a_stalled_database_still_gets_an_answer_in_time(hub: Hub) -> None:
    assert (await hub.send(discover_message(hub.token))).name == "DiscoveryResponse"  # the token passed once
    fresh_token = (await user_auth(hub.session, hub.driver.url))["userToken"]  # valid, never presented yet

    async with stalled_database(hub):
        # Each reply is on time: the right answer where memory suffices, else E_ENDPOINT_BUSY.
        assert (await hub.send(discover_message(hub.token))).name == "DiscoveryResponse"
        assert (await hub.send(report_state_message(hub.token, "lamp-1"))).states["Brightness"] == 80
        assert (await hub.send(discover_message(fresh_token))).error == "E_ENDPOINT_BUSY"
        busy = await hub.control("lamp-1", "Brightness.Set", {"value": 60}, message_id="stalled-1")
        assert busy.error == "E_ENDPOINT_BUSY"
        assert not hub.bus.published  # nothing may be sent before it is on record
    # Nothing ran, so the platform's retry runs, once.
    assert (await hub.control("lamp-1", "Brightness.Set", {"value": 60}, message_id="stalled-1")).states[
        "Brightness"] == 60
    assert len(hub.bus.published) == 1


async def test_an_expired_token_is_refused_while_the_database_stalls(hub: Hub,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="hubd.directives.endpoint")
    hub.driver.clock.advance(3600 - 5)  # driver.token_ttl_s is 3600: 5 s of the token's life left
    assert (await hub.send(discover_message(hub.token))).name == "DiscoveryResponse"  # checked in the database
    hub.driver.clock.advance(10)  # expired, though checked only 10 s ago
    async with stalled_database(hub):
        assert (await hub.send(discover_message(hub.token))).error == "E_AUTHORIZATION_EXPIRED"
        assert (await hub.control("lamp-1", "Switch.On", token=hub.token)).error == "E_AUTHORIZATION_EXPIRED"
    assert not hub.bus.published
    assert any("did not answer the token check (timed out)" in r.getMessage() for r in caplog.records)


async def test_a_token_the_driver_revoked_is_refused_while_the_database_stalls(hub: Hub) -> None:
    _, added = await log_in(hub.session, hub.driver.url)
    first = await command(hub.session, hub.driver.url, "OAuthGetToken", {"code": added["code"]})
    token = first["data"]["userToken"]
    assert (await hub.send(discover_message(token))).name == "DiscoveryResponse"
    # The same code again: RFC 6749 says revoke what it was exchanged for, and the driver does.
    replayed = await command(hub.session, hub.driver.url, "OAuthGetToken", {"code": added["code"]})
    assert replayed["status"] != 0
    async with stalled_database(hub):
        assert (await hub.send(discover_message(token))).error == "E_ENDPOINT_BUSY"
        assert (await hub.control("lamp-1", "Switch.On", token=token)).error == "E_ENDPOINT_BUSY"
        assert (await hub.send(discover_message(hub.token))).error == "E_ENDPOINT_BUSY"  # every verdict forgotten
    assert not hub.bus.published
    assert (await hub.send(discover_message(token))).error == "E_INVALID_AUTHORIZATION"


async def test_a_token_revoked_by_another_process_is_refused_after_a_few_seconds_while_the_database_stalls(
        hub: Hub) -> None:
    assert (await hub.send(discover_message(hub.token))).name == "DiscoveryResponse"
    revoked = await asyncio.to_thread(Database(hub.driver.db.path).call_blocking, revoke_user_blocking, "alice",
                                      hub.driver.clock.time(), "revoked with `hubd tokens revoke`")
    assert revoked == 1
    hub.driver.clock.advance(VERDICT_TTL_S)  # README: seen within 15 s, even while the database stalls
    async with stalled_database(hub):
        assert (await hub.send(discover_message(hub.token))).error == "E_ENDPOINT_BUSY"
    assert (await hub.send(discover_message(hub.token))).error == "E_INVALID_AUTHORIZATION"


async def test_bad_device_limits_are_ignored_with_one_warning(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="hubd.directives")
    for _ in range(2):
        refused = await hub.control("ac-crossed", "Temperature.Set", {"value": 31})
        assert refused.error == "E_VALUE_OUT_OF_RANGE" and "16 to 30" in (refused.error_message or "")
    warnings = [r.getMessage() for r in caplog.records if "minTemperature (30) is above maxTemperature (20)" in
                r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("device ac-crossed: additionalInfo")


@pytest.mark.parametrize("header", [
    {"payloadVersion": "v2"},
    {"authorization": None},
    {"namespace": 7},
    {"authorization": {"type": "Basic", "token": "t"}},
])
async def test_the_message_id_is_echoed_whatever_else_is_wrong(hub: Hub, header: dict[str, Any]) -> None:
    message = discover_message(hub.token, message_id="echo-me")
    message["header"].update(header)
    message["header"] = {k: v for k, v in message["header"].items() if v is not None}
    reply = await hub.send(message)  # validate_directive_reply checks the echo (DIFF-14)
    assert reply.name == "ErrorResponse" and reply.message_id == "echo-me"


async def test_the_message_id_is_echoed_with_a_bad_payload(hub: Hub) -> None:
    message = control_message(hub.token, "lamp-1", "Switch.On", message_id="echo-2")
    message["payload"] = []
    reply = await hub.send(message)
    assert (reply.error, reply.message_id) == ("E_INTERNAL_ERROR", "echo-2")
    for bad in ({"header": {"messageId": ""}}, {"header": {"messageId": 5}}, {"header": []}, [1]):
        answer = await hub.endpoint.handle(bad)
        assert answer["header"]["name"] == "ErrorResponse" and len(answer["header"]["messageId"]) == 36  # a uuid


async def test_every_body_gets_http_200_and_an_error_response(hub: Hub) -> None:
    nested = b"[" * 30_000 + b"]" * 30_000  # 60 KB of nesting: RecursionError in the JSON parser
    too_large = json.dumps({"header": {"messageId": "big"}, "pad": "x" * MAX_BODY_BYTES}).encode()
    for body, words in ((nested, "levels deep"), (b"\xff\xfe{", "not UTF-8"), (b"{", "not valid JSON"),
                        (too_large, f"http.max_body_bytes ({MAX_BODY_BYTES} bytes)"), (b"[]", "a JSON object")):
        status, reply = await hub.post(body)
        assert status == 200, body[:20]
        assert reply["header"]["name"] == "ErrorResponse" and reply["payload"]["name"] == "E_INTERNAL_ERROR"
        assert words in reply["payload"]["message"], reply
    status, reply = await hub.post(json.dumps(discover_message(hub.token, message_id="http-1")).encode())
    assert (status, reply["header"]["name"], reply["header"]["messageId"]) == (200, "DiscoveryResponse", "http-1")
