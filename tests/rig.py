"""The end-to-end rig shared by the tests: a real mosquitto, the platform simulator and a real hubd process.

Tests get it through the `make_rig` fixture (conftest.py): `rig = await make_rig()`; every wait is on a
condition (`wait_events`, `hub.wait_for`), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hubd_proc import HubdProcess
from mosquitto import Mosquitto, publish

from simulators.platform import PlatformSimulator
from simulators.platform_binding import BindResult, bind_user
from simulators.platform_records import EventRecord

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


@dataclass
class Rig:
    """A broker, the platform simulator and a hubd process wired together."""

    broker: Mosquitto
    sim: PlatformSimulator
    hub: HubdProcess

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
    """The body of the `make_rig` fixture: `await make(access_ttl_s=..., hub_overrides={...})` gives a Rig."""
    rigs: list[Rig] = []
    sims: list[PlatformSimulator] = []

    async def make(*, access_ttl_s: int = 3600, hub_overrides: dict[str, Any] | None = None) -> Rig:
        sim = PlatformSimulator(client_id="sim-client", client_secret="sim-secret", access_ttl_s=access_ttl_s)
        await sim.start()
        sims.append(sim)
        overrides = platform_config(sim)
        for key, value in (hub_overrides or {}).items():  # sections merge; a list (doorbells) replaces
            base = overrides.get(key)
            overrides[key] = {**base, **value} if isinstance(base, dict) and isinstance(value, dict) else value
        hub = HubdProcess(tmp_path / f"hub{len(rigs)}", mqtt_port=mosquitto.port, overrides=overrides)
        hub.start()
        await hub.wait_ready()
        rig = Rig(mosquitto, sim, hub)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.hub.kill()
    for sim in sims:
        await sim.stop()



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
