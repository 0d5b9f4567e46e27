"""A message that kills hubd costs one restart, not a crash loop that outlasts systemd's start limit (the in-flight
record, hubd/mqtt/inflight.py): one alone in flight at a death is set aside at the next start; a death in a batch
makes the next run read every message alone, so N distinct poisons cost at most N + 1 restarts in all, each set
aside and counted once (`hubd_mqtt_set_aside_total` counts messages: retained copies set aside again at later starts
are not counted again).

The poison is injected (tests/fault/sitecustomize.py): hubd SIGKILLs itself, or allocates until the kernel's OOM
killer kills it in a memory cgroup of the unit's MemoryMax, while it reads a message whose payload holds MARK. The
test plays systemd's Restart=on-failure: it starts hubd again each time it dies, and counts.
"""

from __future__ import annotations

import asyncio
import configparser
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hubd_proc import REPO, HubdProcess
from mosquitto import publish
from rig import LAMP, Rig

from hubd.mqtt.inflight import POISONS_WITHIN_START_LIMIT

FAULT = Path(__file__).resolve().parents[1] / "fault"
MARK = "HUBD-TEST-POISON"
SET_ASIDE = "hubd_mqtt_set_aside_total"


def _poisoned(hub: HubdProcess, by: str = "kill", prefix: tuple[str, ...] = ()) -> None:
    """Start hubd with the injected poison (and under `prefix`: a memory cgroup, say)."""
    path = os.pathsep.join(p for p in (str(FAULT), os.environ.get("PYTHONPATH", "")) if p)
    hub.env = {**hub.env, "PYTHONPATH": path, "HUBD_TEST_POISON": MARK, "HUBD_TEST_POISON_BY": by}
    hub.prefix = prefix
    hub.start()


def _config(name: str, poison: bool = False) -> bytes:
    body = {**LAMP, "displayName": name}
    if poison:
        body["additionalInfo"] = {"note": f"{MARK} {name}"}
    return json.dumps(body).encode()


async def _settled_or_dead(hub: HubdProcess, settled: Callable[[], Awaitable[bool]], timeout_s: float = 60.0) -> bool:
    """Until hubd dies (False) or `settled` holds while it runs (True)."""
    assert hub.proc is not None
    deadline = time.monotonic() + timeout_s
    while True:
        if hub.proc.poll() is not None:
            assert hub.wait() == -9, hub.log()[-3000:]  # SIGKILL: its own, or the OOM killer's
            return False
        try:
            if await settled():
                return True
        except (aiohttp.ClientError, OSError, ValueError):  # not listening yet, or gone meanwhile
            pass
        assert time.monotonic() < deadline, f"hubd neither died nor settled:\n{hub.log()[-3000:]}"
        await asyncio.sleep(0.05)


async def _restarts_until(rig: Rig, settled: Callable[[], Awaitable[bool]], start: Callable[[HubdProcess], None],
                          limit: int) -> int:
    """Play systemd: start hubd again each time it dies, until `settled` holds; how many restarts that took."""
    restarts = 0
    while not await _settled_or_dead(rig.hub, settled):
        restarts += 1
        assert restarts <= limit, f"{restarts} restarts:\n{rig.hub.log()[-3000:]}"
        start(rig.hub)
    return restarts


async def _shown(rig: Rig, names: list[str], set_aside: int) -> bool:
    """hubd is ready, lists the devices named, and counts `set_aside` messages set aside."""
    status, _ = await rig.hub.get("/healthz")
    if status != 200 or await rig.hub.metric(SET_ASIDE) < set_aside:
        return False
    _, body = await rig.hub.get("/api/devices")
    return {d["endpointId"] for d in body["devices"]} >= set(names)


async def _set_aside_problems(rig: Rig) -> set[str]:
    _, status = await rig.hub.get("/api/status")
    return {p["topic"] for p in status["problems"]["rejected"] if "set aside unread" in json.dumps(p)}


def _set_aside_logged(rig: Rig) -> int:
    return rig.hub.log().count("while reading this message alone")


async def _set_aside_again(rig: Rig, before: int, count: int) -> bool:
    return _set_aside_logged(rig) >= before + count


def _retained_burst(rig: Rig, poisons: int, ordinary: int) -> tuple[list[str], list[str]]:
    """Retained configs, poisons among ordinary ones; (ordinary device ids, poison topics)."""
    names, topics = [f"lamp-{i}" for i in range(ordinary)], [f"hubd/device/bad-{i}/config" for i in range(poisons)]
    for i in range(max(poisons, ordinary)):
        if i < ordinary:
            publish(rig.broker.port, f"hubd/device/{names[i]}/config", _config(names[i]), retain=True)
        if i < poisons:
            publish(rig.broker.port, topics[i], _config(f"bad-{i}", poison=True), retain=True)
    return names, topics


async def test_five_retained_poisons_cost_at_most_six_restarts_and_count_five(make_rig: Callable[..., Any]) -> None:
    n = POISONS_WITHIN_START_LIMIT
    rig: Rig = await make_rig(start=_poisoned)
    assert rig.hub.stop() == 0
    names, topics = _retained_burst(rig, n, 6)

    rig.hub.start()  # the burst comes at the start: the worst case, a first death in a batch
    restarts = await _restarts_until(rig, lambda: _shown(rig, names, n), _poisoned, n + 1)
    assert restarts <= n + 1
    assert await _set_aside_problems(rig) == set(topics)
    assert await rig.hub.metric(SET_ASIDE) == n
    _, body = await rig.hub.get("/api/devices")
    assert not [d for d in body["devices"] if d["endpointId"].startswith("bad-")]

    # One more start: the retained copies come again and are set aside again, counted no more.
    logged = _set_aside_logged(rig)
    assert rig.hub.stop() == 0
    _poisoned(rig.hub)
    await rig.hub.wait_ready()
    await rig.hub.wait_for(lambda: _set_aside_again(rig, logged, n), what="the retained poisons set aside again")
    assert await rig.hub.metric(SET_ASIDE) == n
    assert rig.hub.proc is not None and rig.hub.proc.poll() is None
    assert "Traceback" not in rig.hub.log()


async def test_a_poison_alone_costs_one_restart(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(start=_poisoned)
    publish(rig.broker.port, "hubd/device/bad-0/config", _config("bad-0", poison=True), retain=True)
    restarts = await _restarts_until(rig, lambda: _shown(rig, [], 1), _poisoned, 1)
    assert restarts == 1
    publish(rig.broker.port, "hubd/device/lamp-0/config", _config("lamp-0"), retain=True)
    await rig.hub.wait_for(lambda: _shown(rig, ["lamp-0"], 1), what="lamp-0 read after the poison")
    assert await _set_aside_problems(rig) == {"hubd/device/bad-0/config"}


async def test_a_poison_in_a_batch_costs_at_most_two_restarts(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig(start=_poisoned)
    assert rig.hub.stop() == 0
    names, topics = _retained_burst(rig, 1, 8)
    rig.hub.start()
    restarts = await _restarts_until(rig, lambda: _shown(rig, names, 1), _poisoned, 2)
    assert 1 <= restarts <= 2
    assert await _set_aside_problems(rig) == set(topics)


async def test_poisons_that_exhaust_memory_cost_at_most_n_plus_one_oom_kills(make_rig: Callable[..., Any]) -> None:
    sys.path.insert(0, str(REPO))
    from bench.pi import MemoryCgroup, find_memory_cgroup

    plan = find_memory_cgroup()
    if isinstance(plan, str):
        pytest.skip(f"no memory cgroup to make here: {plan}")
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((REPO / "systemd" / "hubd.service").read_text())
    memory_max = unit["Service"]["MemoryMax"]
    assert memory_max.endswith("M")
    cgroup = MemoryCgroup(plan, f"hubd-test-poisons-{time.monotonic_ns()}", int(memory_max[:-1]))
    cgroup.create()
    n = 2

    def start(hub: HubdProcess) -> None:
        _poisoned(hub, "memory", tuple(cgroup.join_prefix()))

    try:
        rig: Rig = await make_rig(start=start)
        assert rig.hub.stop() == 0
        names, topics = _retained_burst(rig, n, 4)
        start(rig.hub)
        restarts = await _restarts_until(rig, lambda: _shown(rig, names, n), start, n + 1)
        assert 1 <= restarts <= n + 1
        assert cgroup.oom_kills() == restarts  # each death the OOM killer's
        assert await _set_aside_problems(rig) == set(topics)
    finally:
        rig_hub = getattr(locals().get("rig"), "hub", None)
        if rig_hub is not None:
            rig_hub.kill()
        cgroup.remove()
