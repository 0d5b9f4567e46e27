"""Local routes kept local: a listener of their own with http.local_port; without it, a 403 for outside peers.

Real hubd processes. The outside peer is a network namespace on this machine joined by a veth pair with
documentation addresses (198.51.100.0/24, public-looking; 192.168.213.0/24, private): nothing leaves the host.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from hubd_proc import HubdProcess, free_port
from mosquitto import Mosquitto
from rig import Rig

from hubd.config.model import parse_config
from hubd.errors import ConfigError
from hubd.lifecycle import EXIT_CANNOT_START
from hubd.web.peers import is_local_address

MakeRig = Callable[..., Awaitable[Rig]]
CALLBACK = "http://127.0.0.1:9/callback"
# (method, path, body): the routes the platform and a browser logging in reach ...
PUBLIC = [("POST", "/vendor", {}), ("POST", "/driver/command", {"command": "Nothing", "params": {}}),
          ("GET", f"/oauth/authorize?callbackURL={CALLBACK}", None)]
# ... and the ones for the local network only.
LOCAL = [("GET", "/", None), ("GET", "/api/devices", None), ("HEAD", "/api/devices", None), ("GET", "/api/users", None),
         ("GET", "/api/status", None), ("GET", "/metrics", None), ("POST", "/trigger/with/whk_unknown", {}),
         ("GET", "/api/commands/1", None)]


async def fetch(base: str, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One request; the status and the JSON body (or the text, or None for HEAD)."""
    async with aiohttp.ClientSession() as session, session.request(
            method, f"{base}{path}", json=body, headers=headers, allow_redirects=False) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except json.JSONDecodeError:
            return response.status, text or None


def not_routed(status: int, body: Any) -> bool:
    """The server's own 404: no such route on this listener."""
    return status == 404 and isinstance(body, dict) and body["error"].startswith("nothing here")


def test_local_addresses_are_loopback_private_link_local_and_ula() -> None:
    for local in ("127.0.0.1", "127.8.9.10", "::1", "10.1.2.3", "172.16.0.1", "172.31.255.254", "192.168.1.20",
                  "169.254.10.10", "fe80::1", "fe80::1%eth0", "fd12:3456::1", "fc00::1", "::ffff:192.168.1.20",
                  "::ffff:127.0.0.1"):
        assert is_local_address(local), local
    for outside in ("8.8.8.8", "172.32.0.1", "172.15.255.255", "192.169.0.1", "100.64.0.1", "198.51.100.2",
                    "203.0.113.9", "2001:db8::1", "2a00:1450::1", "::ffff:8.8.8.8", "0.0.0.0", "::", "", None,
                    "not-an-address", "localhost"):
        assert not is_local_address(outside), outside


async def test_with_a_local_port_the_local_routes_are_served_there_and_only_there(make_rig: MakeRig) -> None:
    local_port = free_port()
    rig = await make_rig(hub_overrides={"http": {"local_port": local_port}})
    hub, local = rig.hub, f"http://127.0.0.1:{local_port}"
    _, health = await hub.get("/healthz")
    assert str(local_port) in health["checks"]["http"]["detail"], health
    for method, path, body in LOCAL:
        assert not_routed(*await fetch(hub.url, method, path, body)) or method == "HEAD", (method, path)
        status, answer = await fetch(local, method, path, body)
        assert not not_routed(status, answer) and status != 403, (method, path, status, answer)
    assert (await fetch(hub.url, "HEAD", "/api/devices"))[0] == 404
    for method, path, body in PUBLIC:
        assert not_routed(*await fetch(local, method, path, body)), (method, path)
        status, answer = await fetch(hub.url, method, path, body)
        assert not not_routed(status, answer) and status != 403, (method, path, status, answer)
    assert (await fetch(hub.url, "GET", "/healthz"))[0] == 200
    assert (await fetch(local, "GET", "/healthz"))[0] == 200
    # The local listener checks the Host too (a rebound name reaches it as well as the main one).
    assert (await fetch(local, "GET", "/api/devices", headers={"Host": "attacker.example"}))[0] == 421
    assert (await fetch(local, "GET", "/api/devices", headers={"Host": f"localhost:{local_port}"}))[0] == 200
    # The platform's whole account linking goes through the main listener alone.
    await rig.bind()
    _, users = await fetch(local, "GET", "/api/users")
    assert [u["userId"] for u in users["users"]] == ["user-1"]
    assert hub.stop() == 0
    assert "Traceback" not in hub.log()


async def test_a_local_port_that_is_taken_stops_hubd(tmp_path: Path, mosquitto: Mosquitto) -> None:
    with socket.create_server(("127.0.0.1", 0)) as blocker:
        port = blocker.getsockname()[1]
        hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port, overrides={"http": {"local_port": port}})
        try:
            hub.start()
            # One line with the fix, and the exit status the unit does not restart (RestartPreventExitStatus=).
            assert hub.wait(15) == EXIT_CANNOT_START
            assert f"cannot listen on 127.0.0.1:{port}: Address already in use: is hubd already running?" in hub.log()
            assert "Traceback" not in hub.log()
        finally:
            hub.kill()
    assert f"cannot listen on 127.0.0.1:{port}" in hub.log()


async def test_one_listener_serves_every_route_to_loopback(tmp_path: Path, mosquitto: Mosquitto) -> None:
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        await hub.wait_ready()
        for method, path, body in LOCAL + PUBLIC:
            status, answer = await fetch(hub.url, method, path, body)
            assert status != 403 and not not_routed(status, answer), (method, path, status, answer)
    finally:
        hub.kill()


async def test_the_local_routes_answer_only_requests_addressed_to_the_hub(tmp_path: Path, mosquitto: Mosquitto) -> None:
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port, overrides={
        "http": {"public_url": "https://hub.example.com", "allowed_hosts": ["hub.home.arpa"]}})
    hub.start()
    try:
        await hub.wait_ready()
        port = hub.http_port
        # DNS rebinding: a page of attacker.example whose name now resolves to the hub; the browser says so in Host.
        rebound = {"Host": f"attacker.example:{port}"}
        for method, path, body in LOCAL:
            status, answer = await fetch(hub.url, method, path, body, rebound)
            assert status == 421, (method, path, status, answer)
            if method != "HEAD":
                assert "http.allowed_hosts" in answer["error"], answer
                assert answer["details"] == [{"path": "(header) Host", "message": f"'attacker.example:{port}' is "
                                              "neither an IP address, localhost, nor one of this hub's names"}]
        for method, path, body in [*PUBLIC, ("GET", "/healthz", None)]:  # reached through proxies by any name
            status, answer = await fetch(hub.url, method, path, body, rebound)
            assert status != 421 and not not_routed(status, answer), (method, path, status, answer)
        hostname = socket.gethostname()
        ours = [f"127.0.0.1:{port}", "127.0.0.1", f"[::1]:{port}", "192.168.1.20:8080", "localhost",
                f"localhost:{port}", hostname, f"{hostname}.local:{port}", socket.getfqdn(), "hub.home.arpa",
                f"HUB.home.arpa.:{port}", "hub.example.com"]
        for host in ours:
            status, answer = await fetch(hub.url, "GET", "/api/devices", headers={"Host": host})
            assert status == 200 and "devices" in answer, (host, status, answer)
        assert await hub.metric("hubd_http_requests_total", 'status="421"') == len(LOCAL)
    finally:
        hub.kill()
    assert "Traceback" not in hub.log()


@dataclass
class OutsidePeer:
    """A network namespace joined to this one by a veth pair: `hub_address` here, the peer's addresses there."""

    namespace: str
    hub_address: str  # on this side: hubd listens here
    public_address: str  # the namespace's side, public-looking
    private_address: str  # the namespace's side, RFC 1918

    def requests(self, url: str, source: str, requests: list[tuple[str, str, Any, dict[str, str]]]) -> list[Any]:
        """Make the requests from inside the namespace, from `source`; [status, parsed body] for each."""
        result = subprocess.run(["ip", "netns", "exec", self.namespace, sys.executable, "-c", _CLIENT, url, source,
                                 json.dumps(requests)], capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        answers: list[Any] = json.loads(result.stdout)
        return answers


# Runs inside the namespace: plain http.client, bound to the given source address.
_CLIENT = """
import http.client, json, sys, urllib.parse
url, source, requests = urllib.parse.urlsplit(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
out = []
for method, path, body, headers in requests:
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20, source_address=(source, 0))
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **headers})
    response = conn.getresponse()
    text = response.read().decode()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text or None
    out.append([response.status, parsed])
    conn.close()
print(json.dumps(out))
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def outside_peer() -> Iterator[OutsidePeer]:
    """The namespace and its veth pair, removed after the test; skipped where namespaces cannot be made."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a network namespace")
    pid = os.getpid()
    namespace, here, there = f"hubd-test-{pid}", f"hv{pid}h", f"hv{pid}p"
    base = 4 * (pid % 63)  # a /30 of each documentation range per test process
    peer = OutsidePeer(namespace, f"198.51.100.{base + 1}", f"198.51.100.{base + 2}", f"192.168.213.{base + 2}")
    try:
        _ip("netns", "add", namespace)
    except subprocess.CalledProcessError as err:
        pytest.skip(f"cannot make a network namespace here: {err.stderr.decode().strip()}")
    try:
        _ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", namespace)
        _ip("addr", "add", f"{peer.hub_address}/30", "dev", here)
        _ip("addr", "add", f"192.168.213.{base + 1}/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("-n", namespace, "addr", "add", f"{peer.public_address}/30", "dev", there)
        _ip("-n", namespace, "addr", "add", f"{peer.private_address}/30", "dev", there)
        _ip("-n", namespace, "link", "set", there, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        yield peer
    finally:
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30, check=False)
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=30, check=False)


async def test_one_listener_refuses_the_local_routes_to_an_outside_peer(
        make_rig: MakeRig, outside_peer: OutsidePeer) -> None:
    rig = await make_rig(hub_overrides={"http": {"host": outside_peer.hub_address}})
    hub = rig.hub
    spoofed = {"X-Forwarded-For": "192.168.1.10", "X-Real-IP": "127.0.0.1"}
    asked = [(m, p, b, {}) for m, p, b in LOCAL + PUBLIC] + [(m, p, b, spoofed) for m, p, b in LOCAL]
    outside = outside_peer.requests(hub.url, outside_peer.public_address, asked)
    for (method, path, _, headers), (status, answer) in zip(asked, outside, strict=True):
        if (method, path, None) in LOCAL or (method, path, {}) in LOCAL:
            assert status == 403, (method, path, headers, status, answer)
            if method != "HEAD":
                assert "http.local_port" in answer["error"], answer
                assert answer["details"] == [{"path": "(address)", "message": f"{outside_peer.public_address} "
                                              "is not a loopback, private or link-local address"}]
        else:
            assert status != 403 and not not_routed(status, answer), (method, path, status, answer)
    inside = outside_peer.requests(hub.url, outside_peer.private_address, [(m, p, b, {}) for m, p, b in LOCAL])
    for (method, path, _), (status, answer) in zip(LOCAL, inside, strict=True):
        assert status != 403 and not not_routed(status, answer), (method, path, status, answer)
    # hubd's own machine reaching it at a public-looking address is outside too: the peer decides.
    assert (await fetch(hub.url, "GET", "/api/devices"))[0] == 403
    assert (await fetch(hub.url, "GET", "/healthz"))[0] == 200
    assert hub.stop() == 0
    assert "Traceback" not in hub.log()


def test_the_local_port_must_differ_from_the_main_port_on_the_same_address() -> None:
    def problems(http: dict[str, Any]) -> list[str]:
        try:
            parse_config(yaml.safe_dump({"http": http}), {})
        except ConfigError as err:
            return err.problems
        return []

    assert problems({"port": 8080, "local_port": 8081}) == []
    assert problems({"host": "192.168.1.20", "port": 8080, "local_port": 8080}) == []  # other address, same port
    [problem] = problems({"port": 8080, "local_port": 8080})
    assert problem.startswith("http.local_port: must differ from http.port (8080)"), problem
    assert problems({"host": "0.0.0.0", "port": 8080, "local_port": 8080}) != []
    config = parse_config(yaml.safe_dump({"http": {"local_host": "::1", "local_port": 8081}}), {})
    assert config.http.local_url == "http://[::1]:8081"
    assert parse_config("{}", {}).http.local_url == "http://127.0.0.1:8080"


def test_allowed_hosts_are_names_and_join_the_public_urls_host() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(yaml.safe_dump({"http": {"allowed_hosts": ["hub.lan", "http://pi.lan:8080"]}}), {})
    assert caught.value.problems == ["http.allowed_hosts: 'http://pi.lan:8080' is not a host name: give names only, "
                                     "without scheme or port, e.g. [hub.home.arpa, pi.lan] (line 2)"]
    config = parse_config(yaml.safe_dump({"http": {"host": "0.0.0.0", "local_host": "pi.lan", "local_port": 8081,
                                                   "public_url": "https://hub.example.com:8443/x",
                                                   "allowed_hosts": ["hub.home.arpa"]}}), {})
    assert config.http.host_names == ["hub.home.arpa", "hub.example.com", "pi.lan"]
