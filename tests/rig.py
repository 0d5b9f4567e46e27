"""The end-to-end rig shared by the tests: a real mosquitto, the platform simulator and a real hubd process.

Tests get it through the `make_rig` fixture (conftest.py): `rig = await make_rig()`, with hubd config overrides
(`hub_overrides`), simulated devices (`devices`), short-lived platform tokens (`access_ttl_s`) as options. Every
wait is on a condition (`wait_events`, `wait_devices`, `hub.wait_for`), never a fixed sleep; "nothing more was
sent" is checked after `settle`, a barrier hubd handles after everything published before it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hubd_proc import HubdProcess, deep_merge
from mosquitto import Mosquitto, publish

from simulators.device_fleet import DeviceFleet
from simulators.platform import PlatformSimulator
from simulators.platform_binding import BindResult, bind_user
from simulators.platform_records import EventRecord
from simulators.sim_device import SimDevice

LAMP = {
    "displayName": "Desk Lamp", "displayType": "light", "recommendRoomName": "Office",
    "additionalInfo": {"gateway": "attic"},
    "capabilities": [
        {"interface": "Switch", "supportedOperations": ["On", "Off"], "proactivelyReported": True, "retrievable": True},
        {"interface": "Brightness", "supportedOperations": ["Set", "Adjust"], "proactivelyReported": False,
         "retrievable": True},
    ],
}
CLIMATE = {
    "displayName": "Hall Sensor", "displayType": "unknown",
    "capabilities": [
        {"interface": "Temperature", "supportedOperations": [], "proactivelyReported": True, "retrievable": True},
        {"interface": "Humidity", "supportedOperations": [], "proactivelyReported": True, "retrievable": True},
    ],
}
BELL = {"displayName": "Front Door Bell", "displayType": "unknown", "capabilities": []}
_markers = itertools.count()


@dataclass
class Rig:
    """A broker, the platform simulator and a hubd process wired together (and simulated devices, if asked)."""

    broker: Mosquitto
    sim: PlatformSimulator
    hub: HubdProcess
    fleet: DeviceFleet | None = None  # with make_rig(devices=...)

    def publish(self, device: str, suffix: str, payload: object, *, retain: bool = False) -> None:
        data = payload if isinstance(payload, bytes | str) else json.dumps(payload)
        publish(self.broker.port, f"hubd/device/{device}/{suffix}", data, retain=retain)

    async def bind(self, user_id: str = "user-1") -> BindResult:
        result = await bind_user(hub_url=self.hub.url, vendor_path="/vendor", sim=self.sim, username="demo",
                                 password="demo", user_id=user_id)
        assert result.ok, result.reply
        return result

    async def bind_with_bell(self) -> BindResult:
        """bell-1 announced (retained), then user-1 bound and its AddOrUpdateReport delivered."""
        self.publish("bell-1", "config", BELL, retain=True)
        result = await self.bind()
        await self.wait_events(1, "AddOrUpdateReport")
        return result

    def events(self, name: str | None = None, user_id: str | None = None,
               endpoint: str | None = None) -> list[EventRecord]:
        return [e for e in self.sim.events if (name is None or e.name == name)
                and (user_id is None or e.user_id == user_id) and (endpoint is None or endpoint in e.endpoint_ids)]

    async def wait_events(self, count: int, name: str | None = None, user_id: str | None = None,
                          endpoint: str | None = None, timeout_s: float = 15.0) -> list[EventRecord]:
        deadline = time.monotonic() + timeout_s
        while len(found := self.events(name, user_id, endpoint)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {count} {name} events, got {len(found)}; rejections: "
                                     f"{self.sim.rejections[-5:]}\n{self.hub.log()[-3000:]}")
            await asyncio.sleep(0.05)
        return found



def platform_config(sim: PlatformSimulator, **extra: object) -> dict[str, object]:
    """hubd config overrides pointing at a platform simulator, with the demo driver account."""
    return {
        "platform": {"base_url": sim.url, "auth_url": sim.url, "client_id": "sim-client",
                     "client_secret": "sim-secret", **extra},
        "driver": {"accounts": [{"username": "demo", "password": "demo"}]},
    }


async def rig_factory(tmp_path: Path, mosquitto: Mosquitto) -> AsyncIterator[Callable[..., Any]]:
    """The body of the `make_rig` fixture: `await make(...)` gives a Rig (see `make` for the options)."""
    rigs: list[Rig] = []

    async def make(*, access_ttl_s: int = 3600, hub_overrides: dict[str, Any] | None = None,
                   devices: Sequence[SimDevice] = (), ready: bool = True,
                   start: Callable[[HubdProcess], None] | None = None) -> Rig:
        """A platform simulator and a hubd process pointing at it (platform_config, deep-merged with
        `hub_overrides`; a list such as `doorbells` replaces). `devices`: simulated devices on the broker, started
        once hubd is ready and returned once hubd shows each online with the states it holds. `ready=False`
        returns as soon as hubd was started (for a hubd that must refuse to run); `start` starts it instead of
        `hub.start()` (a resource limit, say)."""
        sim = PlatformSimulator(client_id="sim-client", client_secret="sim-secret", access_ttl_s=access_ttl_s)
        await sim.start()
        hub = HubdProcess(tmp_path / f"hub{len(rigs)}", mqtt_port=mosquitto.port,
                          overrides=deep_merge(platform_config(sim), hub_overrides or {}))
        rig = Rig(mosquitto, sim, hub)
        rigs.append(rig)
        (start or HubdProcess.start)(hub)
        if not ready:
            return rig
        await hub.wait_ready()
        if devices:
            rig.fleet = DeviceFleet(host=mosquitto.host, port=mosquitto.port, devices=list(devices))
            await rig.fleet.start()  # each device announces its config, availability and states
            await hub.wait_for(lambda: _all_shown(hub, devices), what="every device online with its states")
        return rig

    yield make
    for rig in rigs:
        if rig.fleet is not None:
            await rig.fleet.stop()
        rig.hub.kill()
        await rig.sim.stop()


async def _all_shown(hub: HubdProcess, devices: Sequence[SimDevice]) -> bool:
    _, body = await hub.get("/api/devices")
    shown = {d["endpointId"]: d for d in body["devices"]}
    return all(d.endpoint_id in shown and shown[d.endpoint_id]["online"]
               and {s["interface"]: s["value"] for s in shown[d.endpoint_id]["states"]} == d.state() for d in devices)


async def metric_at_least(hub: HubdProcess, name: str, value: float) -> bool:
    if "{" in name:
        base, labels = name.split("{", 1)
        return await hub.metric(base, labels.rstrip("}")) >= value
    return await hub.metric(name) >= value


async def invalid_total(hub: HubdProcess, count: int) -> bool:
    _, text = await hub.get("/metrics")
    total = sum(float(line.split()[-1]) for line in str(text).splitlines()
                if line.startswith("hubd_device_messages_invalid_total"))
    return total >= count


# What hubd shows and reports, and a barrier (`settle`) before checking that nothing more was sent.

def send(rig: Rig, topic: str, payload: object, *, retain: bool = False) -> None:
    """One QoS 1 publish, acknowledged by the broker (a str or bytes as it is, anything else as JSON)."""
    publish(rig.broker.port, topic, payload if isinstance(payload, str | bytes) else json.dumps(payload),
            retain=retain)


async def devices(rig: Rig) -> dict[str, dict[str, Any]]:
    """GET /api/devices: the devices by endpointId."""
    _, body = await rig.hub.get("/api/devices")
    return {d["endpointId"]: d for d in body["devices"]}


async def wait_devices(rig: Rig, *ids: str, check: Callable[[dict[str, Any]], bool] | None = None,
                       ) -> dict[str, dict[str, Any]]:
    """Wait until /api/devices lists these devices (each passing `check`); they, by endpointId."""
    async def found() -> dict[str, dict[str, Any]] | None:
        known = await devices(rig)
        ok = all(i in known and (check is None or check(known[i])) for i in ids)
        return {i: known[i] for i in ids} if ok else None
    result: dict[str, dict[str, Any]] = await rig.hub.wait_for(found, what=f"devices {ids} in /api/devices")
    return result


async def send_until_seen(rig: Rig, topic: str, payload: object, device_id: str,
                          check: Callable[[dict[str, Any]], bool]) -> None:
    """Publish a state that is not retained until hubd shows it: hubd subscribes to a discovered state topic
    only after the device's config is handled, so a first publish may find nobody subscribed yet."""
    async def seen() -> bool:
        send(rig, topic, payload)
        device = (await devices(rig)).get(device_id)
        return device is not None and check(device)
    await rig.hub.wait_for(seen, what=f"{device_id} showing what came on {topic}")


def states_of(device: dict[str, Any]) -> dict[str, Any]:
    """An endpoint's (or /api/devices device's) states, interface to value."""
    return {s["interface"]: s["value"] for s in device.get("states", [])}


async def announced(rig: Rig, *ids: str) -> dict[str, dict[str, Any]]:
    """Wait until AddOrUpdateReports have carried these endpoints; the latest endpoint of each."""
    async def found() -> dict[str, dict[str, Any]] | None:
        latest = {e["endpointId"]: e for r in rig.events("AddOrUpdateReport")
                  for e in r.message["payload"]["endpoints"]}
        return latest if all(i in latest for i in ids) else None
    result: dict[str, dict[str, Any]] = await rig.hub.wait_for(found, what=f"AddOrUpdateReport of {ids}")
    return result


def changes(rig: Rig, endpoint: str) -> list[dict[str, Any]]:
    """The changed states of every ChangeReport about an endpoint, in arrival order (interface to value)."""
    return [states_of(r.message["payload"]["change"]) for r in rig.events("ChangeReport", endpoint=endpoint)]


async def wait_change(rig: Rig, endpoint: str, interface: str, value: object) -> None:
    """Wait for a ChangeReport about `endpoint` that changed `interface` to `value`."""
    async def found() -> bool:
        return any(c.get(interface) == value for c in changes(rig, endpoint))
    await rig.hub.wait_for(found, what=f"a ChangeReport of {endpoint} with {interface}={value!r}")


async def settle(rig: Rig) -> None:
    """Return once hubd has handled everything published before and delivered every event it queued (a user
    must be bound).

    hubd takes its MQTT messages in the order the broker forwards them and commits their events in that order,
    so the events of everything published before a native marker device are in the outbox before the marker's
    AddOrUpdateReport; once that arrived, the outbox is waited empty."""
    marker = f"marker-{next(_markers)}"
    rig.publish(marker, "config", {"displayName": "Marker", "displayType": "unknown", "capabilities": []})
    await rig.wait_events(1, "AddOrUpdateReport", endpoint=marker)

    async def delivered() -> bool:
        return await rig.hub.metric("hubd_outbox_depth") == 0
    await rig.hub.wait_for(delivered, what="the outbox delivered")
