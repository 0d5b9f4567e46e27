"""Issue 2: hubd installs, configures itself, runs under systemd and talks to a real broker."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hubd_proc import REPO, HubdProcess, free_port
from mosquitto import Mosquitto, publish

LAMP_CONFIG = {
    "displayName": "Desk Lamp",
    "displayType": "light",
    "recommendRoomName": "Office",
    "capabilities": [
        {"interface": "Switch", "supportedOperations": ["On", "Off"], "proactivelyReported": True, "retrievable": True}
    ],
}


async def device_states(hub: HubdProcess, device_id: str) -> dict[str, object]:
    _, body = await hub.get("/api/devices")
    for device in body["devices"]:
        if device["endpointId"] == device_id:
            return {s["interface"]: s["value"] for s in device["states"]}
    return {}


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hubd", *args], capture_output=True, text=True, timeout=30, cwd=cwd, check=False
    )


def test_example_config_is_valid() -> None:
    result = run_cli("check-config", "-c", str(REPO / "config.example.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_config_errors_name_key_and_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "mqtt:\n  host: 127.0.0.1\n  prot: 1883\nhttp:\n  port: eighty\nplatform:\n  client_auth: digest\n"
    )
    result = run_cli("check-config", "-c", str(config))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert any(line.startswith("mqtt.prot: unknown key") and "(line 3)" in line for line in lines), lines
    assert any(line.startswith("http.port:") and "(line 5)" in line for line in lines), lines
    assert any(
        line.startswith("platform.client_auth:") and "'basic'" in line and "(line 7)" in line for line in lines
    ), lines
    assert len(lines) == 3


def test_config_env_and_secret_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t-value\n")
    config = tmp_path / "c.yaml"
    config.write_text(
        f"mqtt:\n  port: ${{HUBD_TEST_PORT}}\n  password_file: {secret}\n"
        "platform:\n  client_secret: ${HUBD_MISSING_VAR}\n"
    )
    env = {**os.environ, "HUBD_TEST_PORT": "1999"}
    result = subprocess.run(
        [sys.executable, "-m", "hubd", "check-config", "-c", str(config)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 2
    assert "platform.client_secret: environment variable HUBD_MISSING_VAR is not set (line 5)" in result.stderr
    assert "s3cr3t" not in result.stderr + result.stdout


def test_secrets_are_never_printed(tmp_path: Path) -> None:
    from hubd.config import load_config

    config = tmp_path / "c.yaml"
    config.write_text("platform:\n  client_secret: very-secret-value\nmqtt:\n  password: other-secret\n")
    loaded = load_config(config)
    assert "very-secret-value" not in repr(loaded) and "other-secret" not in str(loaded)
    assert loaded.platform.client_secret is not None
    assert loaded.platform.client_secret.get_secret_value() == "very-secret-value"


async def test_ready_healthz_devices_and_clean_stop(tmp_path: Path, mosquitto: Mosquitto) -> None:
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        health = await hub.wait_ready()
        assert health["status"] == "ok"
        assert health["checks"]["mqtt"]["ok"] and health["checks"]["http"]["ok"]
        publish(mosquitto.port, "hubd/device/lamp-1/config", json.dumps(LAMP_CONFIG), retain=True)
        publish(mosquitto.port, "hubd/device/lamp-1/state", json.dumps({"Switch": "On"}))
        await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "On"), what="lamp state")
        status, page = await hub.get("/")
        assert status == 200 and "Desk Lamp" in page
        db = Path(hub.config["storage"]["path"])
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        started = time.monotonic()
        hub.signal()
        assert hub.wait(10) == 0
        assert time.monotonic() - started < 5.0
    finally:
        hub.kill()


async def test_not_ready_while_broker_is_down(tmp_path: Path, mosquitto: Mosquitto) -> None:
    mosquitto.stop()
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:

        async def unavailable() -> object:
            try:
                status, body = await hub.get("/healthz")
            except OSError:
                return None
            return body if status == 503 else None

        body = await hub.wait_for(unavailable, what="a 503 from /healthz")
        assert body["status"] == "unavailable"
        assert any(item.startswith("mqtt:") for item in body["not_ready"]), body
        mosquitto.start()
        await hub.wait_ready(timeout_s=40)
    finally:
        hub.stop()


async def test_sd_notify_ready_watchdog_stopping(tmp_path: Path, mosquitto: Mosquitto) -> None:
    sock_path = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(sock_path)
    listener.setblocking(False)
    hub = HubdProcess(
        tmp_path / "hub", mqtt_port=mosquitto.port, env={"NOTIFY_SOCKET": sock_path, "WATCHDOG_USEC": "400000"}
    )
    loop = asyncio.get_running_loop()
    received: list[str] = []

    async def next_message(timeout_s: float = 15.0) -> str:
        message = (await asyncio.wait_for(loop.sock_recv(listener, 4096), timeout_s)).decode()
        received.append(message)
        return message

    hub.start()
    try:
        while "READY=1" not in received:
            await next_message()
        # Ready only once MQTT is connected and HTTP listens.
        status, body = await hub.get("/healthz")
        assert status == 200, body
        watchdogs = 0
        while watchdogs < 2:
            if await next_message() == "WATCHDOG=1":
                watchdogs += 1
        hub.signal()
        while "STOPPING=1" not in received:
            await next_message()
        assert hub.wait(10) == 0
    finally:
        hub.kill()
        listener.close()


async def test_broker_restart_is_survived(tmp_path: Path, mosquitto: Mosquitto) -> None:
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        await hub.wait_ready()
        publish(mosquitto.port, "hubd/device/lamp-1/config", json.dumps(LAMP_CONFIG), retain=True)
        publish(mosquitto.port, "hubd/device/lamp-1/state", json.dumps({"Switch": "On"}))
        await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "On"), what="first state")
        mosquitto.restart()
        await hub.wait_for(
            lambda: _metric_at_least(hub, "hubd_mqtt_connects_total", 2), timeout_s=40, what="a reconnect"
        )
        publish(mosquitto.port, "hubd/device/lamp-1/state", json.dumps({"Switch": "Off"}))
        await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "Off"), what="state after restart")
    finally:
        hub.stop()


async def test_messages_published_while_hubd_is_down_arrive(tmp_path: Path, mosquitto: Mosquitto) -> None:
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        await hub.wait_ready()
        publish(mosquitto.port, "hubd/device/lamp-1/config", json.dumps(LAMP_CONFIG), retain=True)
        publish(mosquitto.port, "hubd/device/lamp-1/state", json.dumps({"Switch": "On"}))
        await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "On"), what="first state")
        assert hub.stop() == 0
        # Not retained: only the persistent session (fixed client id, clean_session false) keeps it.
        publish(mosquitto.port, "hubd/device/lamp-1/state", json.dumps({"Switch": "Off"}))
        hub.start()
        await hub.wait_ready()
        await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "Off"), what="the state sent while down")
    finally:
        hub.stop()


async def test_sigkill_before_ack_redelivers(tmp_path: Path, mosquitto: Mosquitto) -> None:
    """A device survives a SIGKILL: the registry reloads it and nothing is re-reported as new."""
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        await hub.wait_ready()
        publish(mosquitto.port, "hubd/device/lamp-1/config", json.dumps(LAMP_CONFIG), retain=True)
        publish(mosquitto.port, "hubd/device/lamp-1/state", json.dumps({"Switch": "On"}))
        await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "On"), what="state")
        hub.kill()
        hub.start()
        await hub.wait_ready()
        assert await device_states(hub, "lamp-1") == {"Switch": "On"}
    finally:
        hub.stop()


async def test_embedded_broker_works_with_paho(tmp_path: Path) -> None:
    mqtt_port = free_port()
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mqtt_port, overrides={"mqtt": {"embedded": True}})
    hub.start()
    try:
        await hub.wait_ready()
        publish(mqtt_port, "hubd/device/lamp-1/config", json.dumps(LAMP_CONFIG), retain=True)
        publish(mqtt_port, "hubd/device/lamp-1/state", json.dumps({"Switch": "On"}))
        await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "On"), what="state via embedded broker")
        assert hub.stop() == 0
    finally:
        hub.kill()


async def test_fatal_error_exits_non_zero(tmp_path: Path, mosquitto: Mosquitto) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    hub = HubdProcess(
        tmp_path / "hub", mqtt_port=mosquitto.port, overrides={"http": {"port": blocker.getsockname()[1]}}
    )
    try:
        hub.start()
        code = hub.wait(15)
        assert code != 0
        assert "cannot listen on" in hub.log()
    finally:
        blocker.close()
        hub.kill()


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    unit = (REPO / "systemd" / "hubd.service").read_text()
    for required in (
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "DynamicUser=yes",
        "StateDirectory=hubd",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectHome=yes",
        "RestrictAddressFamilies=",
    ):
        assert required in unit, required
    hubd_bin = shutil.which("hubd") or str(Path(sys.executable).with_name("hubd"))
    assert Path(hubd_bin).exists(), "install the package first: pip install -e ."
    copy = tmp_path / "hubd.service"
    copy.write_text(unit.replace("/opt/hubd/bin/hubd", hubd_bin))
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, check=False)
    # systemd-analyze exits 0 for most mistakes; any output at all is a finding.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


async def _has_state(hub: HubdProcess, device_id: str, interface: str, value: object) -> bool:
    return (await device_states(hub, device_id)).get(interface) == value


async def _metric_at_least(hub: HubdProcess, name: str, value: float) -> bool:
    return await hub.metric(name) >= value
