"""hubd as a real process on a real broker: ready only once connected, sd_notify, signals, broker outages and
restarts, SIGKILL, its last will, and the embedded broker."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import stat
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from hubd_proc import HubdProcess, NotifyListener, free_port
from mosquitto import MisbehavingBroker, Mosquitto, publish
from paho.mqtt.enums import CallbackAPIVersion
from rig import metric_at_least

from hubd.mqtt.client import MqttClient

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


async def test_hubd_gets_ready_shows_devices_and_stops_cleanly_within_5_s(tmp_path: Path, mosquitto: Mosquitto) -> None:
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        health = await hub.wait_ready()
        assert health["status"] == "ok"
        assert health["checks"]["mqtt"]["ok"] and health["checks"]["http"]["ok"]
        await _add_lamp_switched_on(hub, mosquitto.port, what="lamp state")
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


@pytest.mark.parametrize(("subscribe", "attempts"), [("refuse", 3), ("ignore", 2)])
async def test_a_broker_that_refuses_or_ignores_the_subscription_is_retried(
    tmp_path: Path, subscribe: str, attempts: int
) -> None:
    """SUBACK 0x80 (a broker's ACL) or no SUBACK at all (within 10 s): hubd stays up, not ready, and retries."""
    broker = MisbehavingBroker(subscribe=subscribe)  # type: ignore[arg-type]
    await broker.start()
    hub = HubdProcess(tmp_path / "hub", mqtt_port=broker.port)
    hub.start()
    assert hub.proc is not None
    exited = asyncio.ensure_future(asyncio.to_thread(hub.proc.wait))
    try:
        # Each attempt after the backoff; "ignore" waits 10 s for the SUBACK each time.
        retried = asyncio.ensure_future(broker.wait_for(lambda b: b.connections >= attempts, timeout_s=60))
        await asyncio.wait([retried, exited], return_when=asyncio.FIRST_COMPLETED)
        assert not exited.done(), hub.log()
        retried.result()
        status, body = await hub.get("/healthz")
        assert status == 503 and any(item.startswith("mqtt: ") for item in body["not_ready"]), body
        # Each failed session was aborted, not ended with DISCONNECT: a real broker publishes the will.
        await broker.wait_for(lambda b: b.aborts >= attempts - 1)
        assert broker.disconnects == 0
        assert hub.stop() == 0, hub.log()
        assert "Traceback" not in hub.log()
    finally:
        hub.kill()
        await broker.stop()
        await exited


async def test_systemd_is_told_ready_then_watchdog_pings_then_stopping(tmp_path: Path, mosquitto: Mosquitto) -> None:
    notify = NotifyListener(tmp_path / "notify.sock")
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port,
                      env={"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "400000"})
    received = notify.received
    next_message = notify.next_message

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
        notify.close()


async def test_broker_restart_is_survived(tmp_path: Path, mosquitto: Mosquitto) -> None:
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        await hub.wait_ready()
        await _add_lamp_switched_on(hub, mosquitto.port, what="first state")
        # Without its persisted state the broker forgets hubd's session and subscriptions: the state
        # below only arrives if hubd subscribes again on the new connection.
        mosquitto.restart(keep_state=False)
        await hub.wait_for(
            lambda: metric_at_least(hub, "hubd_mqtt_connects_total", 2), timeout_s=40, what="a reconnect"
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
        await _add_lamp_switched_on(hub, mosquitto.port, what="first state")
        assert hub.stop() == 0
        # Not retained: only the persistent session (fixed client id, clean_session false) keeps it.
        publish(mosquitto.port, "hubd/device/lamp-1/state", json.dumps({"Switch": "Off"}))
        hub.start()
        await hub.wait_ready()
        await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "Off"), what="the state sent while down")
    finally:
        hub.stop()


async def test_after_a_sigkill_the_devices_are_reloaded_not_reported_anew(tmp_path: Path, mosquitto: Mosquitto) -> None:
    """A device survives a SIGKILL: the registry reloads it and nothing is re-reported as new."""
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        await hub.wait_ready()
        await _add_lamp_switched_on(hub, mosquitto.port, what="state")
        hub.kill()
        hub.start()
        await hub.wait_ready()
        assert await device_states(hub, "lamp-1") == {"Switch": "On"}
    finally:
        hub.stop()


async def test_devices_reach_hubd_through_the_embedded_broker(tmp_path: Path) -> None:
    mqtt_port = free_port()
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mqtt_port, overrides={"mqtt": {"embedded": True}})
    hub.start()
    try:
        await hub.wait_ready()
        await _add_lamp_switched_on(hub, mqtt_port, what="state via embedded broker")
        assert hub.stop() == 0
    finally:
        hub.kill()


async def test_a_port_it_cannot_listen_on_exits_non_zero(tmp_path: Path, mosquitto: Mosquitto) -> None:
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


async def _add_lamp_switched_on(hub: HubdProcess, mqtt_port: int, *, what: str) -> None:
    """Announce lamp-1 (retained config), switch it On, and wait until hubd shows that state."""
    publish(mqtt_port, "hubd/device/lamp-1/config", json.dumps(LAMP_CONFIG), retain=True)
    publish(mqtt_port, "hubd/device/lamp-1/state", json.dumps({"Switch": "On"}))
    await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "On"), what=what)


async def _has_state(hub: HubdProcess, device_id: str, interface: str, value: object) -> bool:
    return (await device_states(hub, device_id)).get(interface) == value


async def test_sigint_stops_cleanly_like_sigterm(tmp_path: Path, mosquitto: Mosquitto) -> None:
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        await hub.wait_ready()
        started = time.monotonic()
        hub.signal(signal.SIGINT)
        assert hub.wait(10) == 0, hub.log()
        assert time.monotonic() - started < 5.0
        assert "Traceback" not in hub.log()
    finally:
        hub.kill()


async def test_sigterm_during_a_tls_connect_that_never_completes(tmp_path: Path) -> None:
    """The blocking TCP/TLS connect must not hold the process up: exit 0 within 5 s all the same."""
    # Accepts the TCP connection and then says nothing: hubd waits for the TLS handshake (up to 10 s).
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.settimeout(30)
        hub = HubdProcess(tmp_path / "hub", mqtt_port=silent.getsockname()[1], overrides={"mqtt": {"tls": True}})
        hub.start()
        try:
            conn, _ = await asyncio.to_thread(silent.accept)  # hubd is inside the handshake now
            with conn:
                started = time.monotonic()
                hub.signal()
                assert hub.wait(10) == 0, hub.log()
                assert time.monotonic() - started < 5.0, hub.log()
        finally:
            hub.kill()


async def test_ready_is_sent_only_once_the_broker_is_up(tmp_path: Path, mosquitto: Mosquitto) -> None:
    mosquitto.stop()
    notify = NotifyListener(tmp_path / "notify.sock")
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port,
                      env={"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "400000"})
    received = notify.received
    next_message = notify.next_message

    hub.start()
    try:
        # The supervisor's tasks run (the watchdog pings) and HTTP answers, while MQTT cannot connect.
        while "WATCHDOG=1" not in received:
            await next_message()
        status, body = await hub.get("/healthz")
        assert status == 503 and any(item.startswith("mqtt:") for item in body["not_ready"]), body
        # Everything hubd sent so far is queued on our socket already: READY=1 must not be among it, but
        # EXTEND_TIMEOUT_USEC must, or systemd's TimeoutStartSec would end the wait for the broker.
        notify.drain()
        assert "READY=1" not in received, received
        assert "EXTEND_TIMEOUT_USEC=30000000" in received, received
        mosquitto.start()
        while "READY=1" not in received:
            await next_message(40)
        status, body = await hub.get("/healthz")
        assert status == 200, body
    finally:
        hub.stop()
        notify.close()


async def test_status_topic_online_while_running_offline_after_sigkill(tmp_path: Path, mosquitto: Mosquitto) -> None:
    """hubd's last will: `B/status` is `offline` (retained) once hubd dies without a word, `online` while it runs."""
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mosquitto.port)
    hub.start()
    try:
        await hub.wait_ready()
        assert await retained(mosquitto.port, "hubd/status") == b"online"
        hub.kill()  # SIGKILL: no DISCONNECT, no `offline` of its own; only the will can say it
        await hub.wait_for(lambda: _retained_is(mosquitto.port, "hubd/status", b"offline"), what="the will")
        hub.start()
        await hub.wait_ready()
        await hub.wait_for(lambda: _retained_is(mosquitto.port, "hubd/status", b"online"), what="online again")
    finally:
        hub.stop()


async def test_embedded_broker_client_with_hubds_configured_id_does_not_cut_hubd_off(tmp_path: Path) -> None:
    """amqtt lets a client with hubd's client id take hubd's session over: hubd must use an id nobody knows."""
    mqtt_port = free_port()
    hub = HubdProcess(tmp_path / "hub", mqtt_port=mqtt_port, overrides={"mqtt": {"embedded": True}})
    hub.start()
    try:
        await hub.wait_ready()
        await _add_lamp_switched_on(hub, mqtt_port, what="the first state")

        # Another local program that happens to use the client id of hubd's config (clean session).
        intruder = paho.Client(CallbackAPIVersion.VERSION2, client_id=hub.config["mqtt"]["client_id"])
        intruder.connect("127.0.0.1", mqtt_port)
        intruder.loop_start()
        try:
            publish(mqtt_port, "hubd/device/lamp-1/state", json.dumps({"Switch": "Off"}))
        finally:
            intruder.disconnect()
            intruder.loop_stop()
        await hub.wait_for(lambda: _has_state(hub, "lamp-1", "Switch", "Off"), what="a state after the intruder")
        status, body = await hub.get("/healthz")
        assert status == 200, body
    finally:
        hub.stop()


async def retained(port: int, topic: str, timeout_s: float = 5.0) -> bytes | None:
    """The retained message on `topic` (None if there is none within timeout_s)."""
    client = MqttClient(host="127.0.0.1", port=port, client_id=f"test-retained-{time.monotonic_ns()}",
                        clean_session=True)
    await client.connect()
    try:
        await client.subscribe([(topic, 1)])
        try:
            async with asyncio.timeout(timeout_s):
                batch = await client.next_batch(1)
        except TimeoutError:
            return None
        client.ack(batch)
        return batch[0].payload if batch[0].retain else None
    finally:
        await client.disconnect()


async def _retained_is(port: int, topic: str, payload: bytes) -> bool:
    return await retained(port, topic, timeout_s=2.0) == payload


async def test_log_level_on_the_command_line_overrides_the_config_file(tmp_path: Path, mosquitto: Mosquitto) -> None:
    quiet = HubdProcess(tmp_path / "quiet", mqtt_port=mosquitto.port, overrides={"log": {"level": "error"}})
    loud = HubdProcess(tmp_path / "loud", mqtt_port=mosquitto.port, overrides={"log": {"level": "error"}},
                       args=("--log-level", "debug"))
    for hub in (quiet, loud):
        hub.start()
        await hub.wait_ready()
        assert hub.stop() == 0
    assert " DEBUG " in loud.log() and " INFO " in loud.log()
    assert " DEBUG " not in quiet.log() and " INFO " not in quiet.log()
