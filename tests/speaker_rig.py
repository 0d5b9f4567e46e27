"""Helpers for the speaker agent's tests (tests/test_speaker_*.py): the agent as a real subprocess, a watch on
its MQTT topics, a local audio server, a stand-in of Home Assistant's conversation API, and sox's measure of
a WAV file. Every wait is on a condition, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from hubd_proc import REPO
from mqtt_observer import Observer, Seen

WAIT_S = 20.0
HA_TOKEN = "ha-long-lived-token-0123456789"
HA_ANSWER = "It is 21 degrees"


def need(*programs: str) -> None:
    """Skip (with what to install) where a program the test plays sound with is missing; CI installs them."""
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} missing: .ci/run installs espeak-ng and sox; CI must run this test")
        pytest.skip(f"needs {', '.join(missing)} (sudo apt-get install {' '.join(missing)})")


@dataclass(frozen=True)
class WavStat:
    """What `sox FILE -n stat` says about a sound file."""

    length_s: float
    rms: float
    max_amplitude: float


def wav_stat(path: Path) -> WavStat:
    """sox's statistics of an audio file (sox prints them on stderr)."""
    done = subprocess.run(["sox", str(path), "-n", "stat"], capture_output=True, text=True, check=True, timeout=30)
    values = {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^([^:\n]+):\s+(-?[\d.]+)\s*$",
                                                                           done.stderr, re.MULTILINE)}
    return WavStat(values["Length (seconds)"], values["RMS     amplitude"], values["Maximum amplitude"])


def make_wav(path: Path, seconds: float = 0.8) -> Path:
    """A short tone made by sox, as a WAV file."""
    subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16", str(path), "synth", str(seconds), "sine", "660",
                    "vol", "0.5"], check=True, capture_output=True, timeout=30)
    return path


async def wait_until(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S, log: Callable[[], str] = str
                     ) -> Any:
    """Poll check() until it returns something truthy; AssertionError (with `log()`) after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{log()[-4000:]}")
        await asyncio.sleep(0.02)


def speaker_config(broker_port: int, out_dir: Path, **extra: Any) -> dict[str, Any]:
    """A speaker.yaml whose player copies every sound into out_dir (file names numbered by the agent)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "mqtt": {"host": "127.0.0.1", "port": broker_port, "keepalive_s": 5},
        "id": "kitchen-speaker",
        "name": "Kitchen Speaker",
        "room": "Kitchen",
        "tags": ["announce"],
        "player": {"command": f"cp {{file}} {out_dir}/"},
        "log": {"level": "debug"},
    }
    for key, value in extra.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) and key in config else value
    return config


def volume_command(path: Path) -> str:
    """A volume.command that appends {percent} to a file, one line per call."""
    script = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + chr(10))"
    return f"{sys.executable} -c \"{script}\" {path} {{percent}}"


def url_recorder(path: Path) -> str:
    """A player.url_command that appends the {url} it gets to a file, one line per call (repr: any character)."""
    script = "import sys; open(sys.argv[1], 'a').write(repr(sys.argv[2]) + chr(10))"
    return f"{sys.executable} -c \"{script}\" {path} {{url}}"


def lan_address() -> str:
    """This machine's address on its network (not loopback), the one it would reach the internet from; skips
    (fails under CI) where it has none."""
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect((probe, 9))  # UDP: no packet is sent, the kernel only picks the route's source
            except OSError:
                continue
            address = str(sock.getsockname()[0])
            if not address.startswith(("127.", "169.254.", "fe80:")) and address != "::1":
                return address
    if os.environ.get("CI"):
        pytest.fail("this machine has no network address besides loopback; CI must run this test")
    pytest.skip("needs a network address besides loopback (a LAN address) for an allowed audio server")


def slow_player(pid_file: Path) -> str:
    """A player.command that writes its pid to pid_file (so a test knows it plays) and then plays for 60 s."""
    script = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
    return f"{sys.executable} -c \"{script}\" {pid_file} {{file}}"


class SpeakerProcess:
    """`python -m hubd speaker -c CONFIG` as a subprocess, with its log in a file."""

    def __init__(self, workdir: Path, config: dict[str, Any]) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.config_path = workdir / "speaker.yaml"
        self.log_path = workdir / "speaker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    @property
    def id(self) -> str:
        return str(self.config["id"])

    def start(self) -> None:
        self.config_path.write_text(yaml.safe_dump(self.config))
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "hubd", "speaker", "-c", str(self.config_path)],
                                     cwd=REPO, env=env, stdout=self._log_file, stderr=subprocess.STDOUT)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout_s)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class SpeakerWatch(Observer):
    """Every message on `hubd/device/<id>/#` (tests/mqtt_observer.py), and a way to send the speaker commands."""

    def __init__(self, port: int, device_id: str) -> None:
        super().__init__("127.0.0.1", port, subscribe=f"hubd/device/{device_id}/#")
        self.base = f"hubd/device/{device_id}"

    def on(self, suffix: str) -> list[Seen]:
        return [m for m in self.seen.items if m.topic == f"{self.base}/{suffix}"]

    def results(self) -> dict[str, dict[str, Any]]:
        return {r.json()["id"]: r.json() for r in self.on("command/result")}

    def command(self, body: dict[str, Any]) -> None:
        info = self._client.publish(f"{self.base}/command", json.dumps(body), qos=1)
        info.wait_for_publish(timeout=10)

    async def result(self, command_id: str, log: Callable[[], str] = str) -> dict[str, Any]:
        found: dict[str, Any] = await wait_until(lambda: self.results().get(command_id), f"result of {command_id}",
                                                 log=log)
        return found

    async def availability(self, value: str, log: Callable[[], str] = str) -> None:
        await wait_until(lambda: self.on("availability") and self.on("availability")[-1].payload == value.encode(),
                         f"availability {value}", log=log)


@dataclass
class AudioServer:
    """Audio URLs on `host` (127.0.0.1): a WAV, a 404, an HTML page, a 50 MB body with and without Content-Length,
    and `/go?to=URL`, a redirect; `requests` counts what it was asked."""

    wav: bytes
    host: str = "127.0.0.1"
    url: str = ""
    huge_bytes: int = 50_000_000
    huge_sent: int = 0
    requests: int = 0
    _runner: web.AppRunner | None = None
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        app = web.Application(middlewares=[self._count])
        app.router.add_get("/go", self._go)
        app.router.add_get("/chime.wav", self._chime)
        app.router.add_get("/gone.mp3", self._gone)
        app.router.add_get("/page.html", self._page)
        app.router.add_get("/huge.mp3", self._huge_unsized)
        app.router.add_get("/huge-sized.mp3", self._huge_sized)
        app.router.add_get("/stalls.mp3", self._stalls)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://[{self.host}]:{port}" if ":" in self.host else f"http://{self.host}:{port}"

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests += 1
        response: web.StreamResponse = await handler(request)
        return response

    async def _go(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def _chime(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.wav, content_type="audio/wav")

    async def _gone(self, _request: web.Request) -> web.Response:
        return web.Response(status=404, text="not here")

    async def _page(self, _request: web.Request) -> web.Response:
        return web.Response(text="<html><body>a page, not a sound</body></html>", content_type="text/html")

    async def _huge_unsized(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "audio/mpeg"})
        response.enable_chunked_encoding()  # no Content-Length: only counting the bytes can stop it
        sock = request.transport.get_extra_info("socket") if request.transport is not None else None
        if sock is not None:  # count what the agent took, not what the kernel queues for it (up to 4 MiB here)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        await response.prepare(request)
        chunk = b"\xff" * (256 * 1024)
        try:
            while self.huge_sent < self.huge_bytes:
                await response.write(chunk)
                self.huge_sent += len(chunk)
        except (ConnectionError, RuntimeError):  # the agent hung up: what the test wants
            pass
        return response

    async def _huge_sized(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "audio/mpeg"})
        response.content_length = self.huge_bytes
        await response.prepare(request)
        try:
            await response.write(b"\xff" * 1024)
            await self._release.wait()
        except (ConnectionError, RuntimeError):
            pass
        return response

    async def _stalls(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "audio/mpeg"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write(b"\xff" * 1024)
            await self._release.wait()
        except (ConnectionError, RuntimeError):
            pass
        return response


@dataclass
class HomeAssistantStandIn:
    """Home Assistant's conversation API, checking each request as the real one would (method, path, token, body)."""

    token: str = HA_TOKEN
    answer: str = HA_ANSWER
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/conversation/process", self._process)
        app.router.add_get("/api/", self._api)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    async def _api(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"message": "401: Unauthorized"}, status=401)
        return web.json_response({"message": "API running."})

    async def _process(self, request: web.Request) -> web.Response:
        problem = await self._problem(request)
        if problem is not None:
            self.refused.append(problem)
            status = 401 if problem.startswith("token") else 405 if problem.startswith("method") else 400
            return web.json_response({"message": problem}, status=status)
        body = await request.json()
        self.requests.append(body)
        return web.json_response({"response": {"speech": {"plain": {"speech": self.answer, "extra_data": None}},
                                               "card": {}, "language": body.get("language", "en"),
                                               "response_type": "action_done",
                                               "data": {"targets": [], "success": [], "failed": []}},
                                  "conversation_id": None})

    async def _problem(self, request: web.Request) -> str | None:
        if request.method != "POST":
            return f"method {request.method}: the conversation API takes POST"
        if not self._authorized(request):
            return f"token: Authorization was {request.headers.get('Authorization')!r}"
        if request.content_type != "application/json":
            return f"content type {request.content_type}"
        try:
            body = await request.json()
        except ValueError:
            return "the body is not JSON"
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            return f"the body has no text: {body!r}"
        extra = set(body) - {"text", "language", "conversation_id", "agent_id"}
        if extra:
            return f"unknown keys {sorted(extra)}"
        return None
