"""Shared pytest fixtures.

`tests/` has no __init__.py, so pytest puts this directory on sys.path: helpers live in sibling modules
(`mosquitto.py`) and test modules import them by name (`from mosquitto import Mosquitto`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mosquitto import Mosquitto
from rig import rig_factory

import hubd


@pytest.fixture
def make_mosquitto(tmp_path: Path) -> Iterator[Callable[..., Mosquitto]]:
    """Factory for more brokers, e.g. `make_mosquitto(users={"hubd": "pw"})`; all stop at teardown."""
    started: list[Mosquitto] = []

    def make(**kwargs: object) -> Mosquitto:
        broker = Mosquitto(tmp_path / f"mosquitto-{len(started)}", **kwargs)  # type: ignore[arg-type]
        started.append(broker)
        broker.start()
        return broker

    yield make
    for broker in started:
        broker.stop()


@pytest.fixture
def mosquitto(make_mosquitto: Callable[..., Mosquitto]) -> Mosquitto:
    """A started mosquitto on a free 127.0.0.1 port: anonymous access, persistence on; stopped after."""
    return make_mosquitto()


# Runs in a child process: connect with a will, say "ready", wait to be killed.
_WILL_CLIENT_SCRIPT = """
import asyncio, sys
from hubd.mqtt.client import MqttClient, Will
async def main(host, port, topic):
    client = MqttClient(host=host, port=int(port), client_id="will-client", will=Will(topic, b"offline"))
    await client.connect()
    await client.publish(topic, b"online", retain=True)
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main(*sys.argv[1:]))
"""


@pytest.fixture
def will_client() -> Iterator[Callable[[str, int, str], subprocess.Popen[bytes]]]:
    """Factory: a child process connected with will `offline` on `topic` (it first publishes `online`,
    retained); kill() it for an unexpected loss. Returns once it is connected; killed at teardown."""
    started: list[subprocess.Popen[bytes]] = []
    path = [str(Path(hubd.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}

    def start(host: str, port: int, topic: str) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-c", _WILL_CLIENT_SCRIPT, host, str(port), topic]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, env=env)
        started.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the will client did not connect to {host}:{port}")
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
async def make_rig(tmp_path: Path, mosquitto: Mosquitto) -> AsyncIterator[Callable[..., Any]]:
    """Factory for end-to-end rigs (tests/rig.py): `rig = await make_rig(hub_overrides={...}, devices=[...])`."""
    async for make in rig_factory(tmp_path, mosquitto):
        yield make
