"""The bench's moving parts: the receiver (platform simulator), hubd, the bare forwarder and Node-RED.

The driver is synchronous: it talks to the receiver's control API and to hubd with urllib, and publishes
device traffic with `bench.load.Publisher` (paho on its own thread).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench.procs import REPO, Child, free_port, python_child, wait_port
from bench.receiver import CLIENT_ID, CLIENT_SECRET
from simulators.platform_binding import bind_user

NODE_RED_DIR = REPO / "bench" / ".cache" / "node-red"
NODE_RED_FLOWS = REPO / "bench" / "nodered"


def http_json(method: str, url: str, body: object = None, timeout_s: float = 30.0) -> tuple[int, Any]:
    """One JSON request; returns (status, parsed body or text)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - the bench's own loopback URLs
        url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - loopback only
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def wait_until(check: Any, timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll check() until it returns something truthy; raise TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


class Receiver:
    """`python -m bench.receiver`: the strict platform simulator in its own process, plus its control API."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.control_port = free_port()
        self.child = python_child("receiver", "bench.receiver",
                                  ["--port", str(self.port), "--control-port", str(self.control_port)],
                                  workdir / "receiver.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.child.start()
        wait_port(self.port, child=self.child)
        wait_port(self.control_port, child=self.child)

    def stop(self) -> None:
        self.child.stop()

    def _control(self, method: str, path: str, body: object = None) -> Any:
        status, reply = http_json(method, f"http://127.0.0.1:{self.control_port}{path}", body)
        if status != 200:
            raise RuntimeError(f"receiver {path}: HTTP {status}: {reply}")
        return reply

    def token(self, user_id: str) -> str:
        return str(self._control("POST", "/bench/token", {"userId": user_id})["token"])

    def outage(self, on: bool) -> None:
        self._control("POST", "/bench/outage", {"on": on})

    def stats(self) -> dict[str, Any]:
        return dict(self._control("GET", "/bench/stats"))

    def user(self, user_id: str) -> dict[str, Any]:
        return dict(self.stats()["users"].get(user_id) or {"endpoints": 0, "received": 0})

    def take(self, user_id: str) -> dict[str, Any]:
        """The user's (seq, receipt time) pairs so far; the receiver forgets them."""
        return dict(self._control("POST", "/bench/take", {"userId": user_id}))

    def rejected(self) -> dict[str, Any]:
        stats = self.stats()
        return {"byStatus": stats["rejected"], "last": stats["lastRejection"]}

    def wait_received(self, user_id: str, count: int, timeout_s: float, stall_s: float = 15.0) -> None:
        """Wait for `count` ChangeReports; give up early once nothing new arrived for `stall_s`."""
        progress = [-1, time.monotonic()]

        def done() -> bool:
            received = int(self.user(user_id)["received"])
            if received >= count:
                return True
            now = time.monotonic()
            if received != progress[0]:
                progress[0], progress[1] = received, now
            elif now - progress[1] > stall_s:
                raise TimeoutError(f"{received} of {count} ChangeReports for {user_id}, none new for {stall_s:.0f} s")
            return False

        self._wait(done, timeout_s, f"{count} ChangeReports for {user_id}", 0.1)

    def wait_endpoints(self, user_id: str, count: int, timeout_s: float) -> None:
        self._wait(lambda: self.user(user_id)["endpoints"] >= count, timeout_s, f"{count} endpoints for {user_id}",
                   0.05)

    def endpoints(self, user_id: str) -> set[str]:
        """The endpointIds the user's AddOrUpdateReports announced so far."""
        return set(self._control("POST", "/bench/endpoints", {"userId": user_id})["endpoints"])

    def wait_endpoint_ids(self, user_id: str, ids: set[str], timeout_s: float) -> None:
        """Wait until every endpointId in `ids` was announced; name a few missing (and unexpected) ones if not."""
        def done() -> bool:  # the cheap count first, the list only once it may be complete
            return self.user(user_id)["endpoints"] >= len(ids) and ids <= self.endpoints(user_id)

        try:
            self._wait(done, timeout_s, f"{len(ids)} endpoints for {user_id}", 0.05)
        except TimeoutError as err:
            known = self.endpoints(user_id)
            missing, extra = sorted(ids - known), sorted(known - ids)
            raise TimeoutError(f"{err}; {len(missing)} missing (e.g. {missing[:3]}), {len(extra)} unexpected "
                               f"(e.g. {extra[:3]})") from None

    def _wait(self, check: Any, timeout_s: float, what: str, interval_s: float) -> None:
        """wait_until, naming the rejections as they are when it gives up (not as they were before)."""
        try:
            wait_until(check, timeout_s, what, interval_s)
        except TimeoutError as err:
            raise TimeoutError(f"{err} (rejections: {self.rejected()})") from None


class Hubd:
    """`python -m hubd run -c CONFIG` with its own workdir, database and log."""

    def __init__(self, workdir: Path, *, mqtt_port: int, receiver: Receiver, base_topic: str,
                 zeroconf: bool = False, synchronous: str = "full", extra: dict[str, Any] | None = None,
                 prefix: list[str] | None = None) -> None:
        """`prefix`: a command that execs hubd's command in place (e.g. `taskset -c 1`: bench.pi)."""
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.http_port = free_port()
        config: dict[str, Any] = {
            "storage": {"path": str(workdir / "hubd.db"), "synchronous": synchronous},
            "mqtt": {"host": "127.0.0.1", "port": mqtt_port, "client_id": f"bench-{base_topic}"[:23],
                     "base_topic": base_topic},
            "http": {"host": "127.0.0.1", "port": self.http_port},
            "platform": {"base_url": receiver.url, "auth_url": receiver.url, "client_id": CLIENT_ID,
                         "client_secret": CLIENT_SECRET},
            "driver": {"accounts": [{"username": "bench", "password": "bench"}]},
            "zeroconf": {"enabled": zeroconf},
            "log": {"level": "warning"},
        }
        for section, values in (extra or {}).items():
            config[section] = {**config.get(section, {}), **values}
        self.config_path = workdir / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.receiver = receiver
        self.child = Child("hubd", [_python(), "-m", "hubd", "run", "-c", str(self.config_path)],
                           workdir / "hubd.log", cwd=workdir, prefix=prefix)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout_s: float = 30.0) -> float:
        """Start and wait for GET /healthz 200; return the seconds from spawn to ready."""
        self.child.start()
        started = self.child.started_at

        def ready() -> bool:
            self.child.check_alive()
            try:
                return http_json("GET", f"{self.url}/healthz", timeout_s=2)[0] == 200
            except OSError:
                return False

        wait_until(ready, timeout_s, "hubd /healthz 200", 0.01)
        return time.monotonic() - started

    def stop(self) -> None:
        self.child.stop()

    def bind(self, user_id: str) -> None:
        """Bind a user the platform's way: driver login, then AcceptGrant (the simulator's bind flow)."""
        result = asyncio.run(bind_user(hub_url=self.url, vendor_path="/vendor", sim=self.receiver.url,
                                       username="bench", password="bench", user_id=user_id))
        if not result.ok:
            raise RuntimeError(f"binding {user_id} failed: {result.reply}")

    def metrics_text(self) -> str:
        """The whole /metrics text."""
        _, text = http_json("GET", f"{self.url}/metrics")
        return str(text)

    def metric(self, name: str) -> float:
        """Sum of every series of one /metrics counter or gauge."""
        text = self.metrics_text()
        total = 0.0
        for line in str(text).splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.split()[-1])
        return total


class Forwarder:
    """`python -m bench.forwarder`: the ceiling."""

    def __init__(self, workdir: Path, *, mqtt_port: int, receiver: Receiver, base: str, token: str) -> None:
        self.child = python_child("forwarder", "bench.forwarder",
                                  ["--mqtt-port", str(mqtt_port), "--base", base,
                                   "--url", f"{receiver.url}/async/events", f"--token={token}"],
                                  workdir / "forwarder.log")

    def start(self) -> None:
        self.child.start()
        _wait_logged(self.child, "forwarder ready", 15, "the forwarder")

    def stop(self) -> None:
        self.child.stop()


def node_red_missing() -> str | None:
    """Why Node-RED cannot run here, or None."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node or npm is not installed"
    return None


def install_node_red() -> Path:
    """`npm install node-red@4` into bench/.cache/node-red once; return red.js."""
    red = NODE_RED_DIR / "node_modules" / "node-red" / "red.js"
    if red.exists():
        return red
    NODE_RED_DIR.mkdir(parents=True, exist_ok=True)
    package = NODE_RED_DIR / "package.json"
    if not package.exists():
        package.write_text('{"name": "bench-node-red", "private": true}\n')
    log = NODE_RED_DIR / "npm.log"
    child = Child("npm", ["npm", "install", "--no-audit", "--no-fund", "node-red@4"], log, cwd=NODE_RED_DIR)
    child.start()
    assert child.proc is not None
    if child.proc.wait(timeout=300) != 0 or not red.exists():
        raise RuntimeError(f"npm install node-red failed:\n{child.log_tail()}")
    child.stop()
    return red


class NodeRed:
    """Node-RED, headless, running bench/nodered/flows.json with bench/nodered/settings.js."""

    def __init__(self, workdir: Path, *, mqtt_port: int, receiver: Receiver, base: str, token: str) -> None:
        red = install_node_red()
        user_dir = workdir / "node-red-user"
        user_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(NODE_RED_FLOWS / "flows.json", user_dir / "flows.json")
        env = {"BENCH_MQTT_PORT": str(mqtt_port), "BENCH_TOPIC": f"{base}/device/+/+", "BENCH_TOKEN": token,
               "BENCH_EVENTS_URL": f"{receiver.url}/async/events", "BENCH_NODE_RED_PORT": str(free_port())}
        self.child = Child("node-red", ["node", str(red), "--settings", str(NODE_RED_FLOWS / "settings.js"),
                                        "--userDir", str(user_dir)], workdir / "node-red.log", env=env)

    def start(self) -> None:
        self.child.start()
        _wait_logged(self.child, "Started flows", 60, "Node-RED to start its flows", lines=200, interval_s=0.1)

    def stop(self) -> None:
        self.child.stop()


def _wait_logged(child: Child, text: str, timeout_s: float, what: str, *, lines: int = 40,
                 interval_s: float = 0.05) -> None:
    """Wait until `text` is in the end of the child's log; raise at once if the child exits."""
    def logged() -> bool:
        child.check_alive()
        return text in child.log_tail(lines)

    wait_until(logged, timeout_s, what, interval_s)


def _python() -> str:
    """The interpreter running the bench (the venv's)."""
    import sys

    return os.environ.get("BENCH_PYTHON", sys.executable)
