"""Run `hubd run -c CONFIG` as a real subprocess for end-to-end tests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Nested dict merge (extra wins)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class HubdProcess:
    """One hubd daemon with its own config, database and log file."""

    def __init__(
        self,
        workdir: Path,
        *,
        mqtt_port: int,
        overrides: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        prefix: tuple[str, ...] = (),
    ) -> None:
        self.workdir = workdir
        self.args = args  # more arguments of `hubd run`, e.g. ("--log-level", "debug")
        self.prefix = prefix  # a command hubd runs under (joining a memory cgroup, say), exec'ing the rest
        workdir.mkdir(parents=True, exist_ok=True)
        self.http_port = free_port()
        self.config: dict[str, Any] = deep_merge(
            {
                "storage": {"path": str(workdir / "hubd.db"), "synchronous": "normal"},
                "mqtt": {
                    "host": "127.0.0.1",
                    "port": mqtt_port,
                    "client_id": f"hubd-{self.http_port}",
                    "base_topic": "hubd",
                    "keepalive_s": 5,
                },
                "http": {"host": "127.0.0.1", "port": self.http_port},
                "zeroconf": {"enabled": False},
                "log": {"level": "debug"},
            },
            overrides or {},
        )
        self.config_path = workdir / "config.yaml"
        self.log_path = workdir / "hubd.log"
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    @property
    def url(self) -> str:
        """Base URL of the HTTP API: on the address it listens on (http.host), loopback for a wildcard."""
        host = str(self.config["http"].get("host", "127.0.0.1"))
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        return f"http://[{host}]:{self.http_port}" if ":" in host else f"http://{host}:{self.http_port}"

    def start(self) -> None:
        """Write the config and spawn the daemon."""
        self.config_path.write_text(yaml.safe_dump(self.config))
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        if "NOTIFY_SOCKET" not in self.env:
            env.pop("NOTIFY_SOCKET", None)  # never talk to the test runner's own service manager
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "hubd", "run", "-c", str(self.config_path), *self.args],
            cwd=self.workdir,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    async def wait_ready(self, timeout_s: float = 15.0) -> dict[str, Any]:
        """Poll /healthz until 200; fail with the log if the process dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise AssertionError(f"hubd exited with {self.proc.returncode}:\n{self.log()}")
                try:
                    async with session.get(f"{self.url}/healthz") as response:
                        last = await response.json()
                        if response.status == 200:
                            return dict(last)
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"hubd not ready after {timeout_s} s (last /healthz: {last}):\n{self.log()}")

    async def get(self, path: str) -> tuple[int, Any]:
        """GET a JSON (or text) route."""
        async with aiohttp.ClientSession() as session, session.get(f"{self.url}{path}") as response:
            text = await response.text()
            try:
                return response.status, json.loads(text)
            except json.JSONDecodeError:
                return response.status, text

    async def post(
        self, path: str, body: Any = None, *, data: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any, dict[str, str]]:
        """POST JSON (or raw bytes) and return status, parsed body and headers."""
        async with aiohttp.ClientSession() as session:
            kwargs: dict[str, Any] = {"headers": headers or {}}
            if data is not None:
                kwargs["data"] = data
            elif body is not None:
                kwargs["json"] = body
            async with session.post(f"{self.url}{path}", **kwargs) as response:
                text = await response.text()
                try:
                    parsed: Any = json.loads(text)
                except json.JSONDecodeError:
                    parsed = text
                return response.status, parsed, dict(response.headers)

    async def metric(self, name: str, labels: str = "") -> float:
        """One value from /metrics (0 when absent)."""
        _, text = await self.get("/metrics")
        wanted = f"{name}{{{labels}}}" if labels else name
        for line in str(text).splitlines():
            if line.startswith(wanted + " "):
                return float(line.split()[-1])
        return 0.0

    async def wait_for(self, predicate: Any, timeout_s: float = 10.0, what: str = "condition") -> Any:
        """Await an async predicate returning a truthy value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = await predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.log()[-4000:]}")
            await asyncio.sleep(0.05)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        """Send a signal."""
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float = 10.0) -> int:
        """Wait for exit; return the exit code."""
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout_s)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM and wait."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.wait(5)
            raise

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.wait(5)

    def log(self) -> str:
        """Everything the daemon printed."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class NotifyListener:
    """The service manager's end of NOTIFY_SOCKET: a datagram socket that records what hubd sends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.received: list[str] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.setblocking(False)

    async def next_message(self, timeout_s: float = 15.0) -> str:
        """Wait for the next notification."""
        data = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(self._sock, 4096), timeout_s)
        self.received.append(data.decode())
        return self.received[-1]

    def drain(self) -> None:
        """Record everything already queued on the socket."""
        while True:
            try:
                self.received.append(self._sock.recv(4096).decode())
            except BlockingIOError:
                return

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()
