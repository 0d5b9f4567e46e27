"""The MQTT side of simulated devices: one paho session per device, and DeviceFleet to drive them.

Owns the device end of hubd's topics (docs/mqtt.md): retained config, availability (online, offline, last will),
state, event, and answering `set` and `command`. paho runs in its own thread per device
(loop_start); its callbacks only hand over to the event loop with call_soon_threadsafe, and all
behaviour runs there. Also the broker options shared by the simulator command lines. Must not
import hubd.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import socket
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from simulators.device_models import Doorbell
from simulators.sim_device import Happening, SetRejected, SimDevice, StateReport, parse_set

log = logging.getLogger(__name__)

QOS = 1
KEEPALIVE_S = 30
RECONNECT_MIN_DELAY_S = 0.1
RECONNECT_MAX_DELAY_S = 30
START_TIMEOUT_S = 15.0
PUBLISH_TIMEOUT_S = 10.0
OFFLINE_TIMEOUT_S = 2.0
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class DeviceStopped(RuntimeError):
    """The device's MQTT session was stopped or killed, so it cannot publish."""


class BrokerRefused(RuntimeError):
    """The broker refused a device's connection (bad login, not authorised)."""


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """Where the simulated devices connect and under which topic root."""

    host: str
    port: int
    base_topic: str = "hubd"
    username: str | None = None
    password: str | None = None


class DeviceLink:
    """One simulated device's own MQTT session: announces itself and reacts to `set` and `command`."""

    def __init__(self, device: SimDevice, broker: BrokerSettings) -> None:
        self.device = device
        self._topic = f"{broker.base_topic}/device/{device.endpoint_id}/"
        self._loop = asyncio.get_running_loop()
        self._inbox: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self._kick = asyncio.Event()
        self._announced = False
        self._started: asyncio.Future[None] = self._loop.create_future()  # first announcement, or refusal
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._announce_task: asyncio.Task[None] | None = None
        self._connect_error: str | None = None
        self._stopping = False
        self.running = False
        self._client = self._make_client(broker)

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Connect; returns once subscribed and config and `online` are acknowledged by the broker."""
        self.running = True
        name = self.device.endpoint_id
        self._tasks = [
            asyncio.create_task(self._serve_inbox(), name=f"sim-{name}-inbox"),
            asyncio.create_task(self._follow_time(), name=f"sim-{name}-time"),
        ]
        self._client.loop_start()
        try:
            async with asyncio.timeout(timeout_s):
                await self._started
        except TimeoutError:
            why = f": {self._connect_error}" if self._connect_error else ""
            await self.kill()
            raise TimeoutError(f"device {name} did not connect and announce in {timeout_s} s{why}") from None
        except BrokerRefused:
            await self.kill()
            raise

    async def stop(self, *, announce_offline: bool = True) -> None:
        """Graceful: publish `offline` (unless told not to), then DISCONNECT, so the will is not fired."""
        if not self.running:
            return
        self._stopping = True
        # While the connection is down there is no one to tell; the broker has published the will.
        if announce_offline and self._announced and self._client.is_connected():
            try:
                await self.publish("availability", b"offline", retain=True, timeout_s=OFFLINE_TIMEOUT_S)
            except (TimeoutError, DeviceStopped) as err:
                log.warning("device %s: offline not acknowledged: %s", self.device.endpoint_id, err)
        await self._shut_down(graceful=True)

    async def kill(self) -> None:
        """Drop the connection without DISCONNECT, as a power cut would; the broker publishes the will."""
        if self.running:
            await self._shut_down(graceful=False)

    async def publish(self, suffix: str, payload: bytes, *, retain: bool = False, wait: bool = True,
                      timeout_s: float = PUBLISH_TIMEOUT_S) -> None:
        """Publish on `B/device/ID/<suffix>` at QoS 1; with wait, until the broker's PUBACK."""
        if not self.running:
            raise DeviceStopped(f"device {self.device.endpoint_id} is not running")
        info = self._client.publish(self._topic + suffix, payload, qos=QOS, retain=retain)
        # NO_CONN still queues the message: paho sends it after the reconnect.
        if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
            why = mqtt.error_string(info.rc)
            raise DeviceStopped(f"device {self.device.endpoint_id}: publish failed: {why}")
        if not wait:
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        # Safe against a PUBACK that beat us here: on_publish reaches the loop only via call_soon_threadsafe,
        # which cannot run before this synchronous registration.
        self._acks[info.mid] = fut
        async with asyncio.timeout(timeout_s):
            await fut

    async def emit(self, happening: Happening, *, wait: bool = True) -> None:
        """Publish what the device reports: a state (map or list form) or a doorbell event."""
        if isinstance(happening, StateReport):
            await self.publish("state", _json(happening.payload()), wait=wait)
        else:
            await self.publish("event", _json(happening.payload()), wait=wait)

    def kick(self) -> None:
        """Tell the timer that the device's next deadline may have changed."""
        self._kick.set()

    async def _shut_down(self, *, graceful: bool) -> None:
        self.running = False
        if self._announce_task is not None:
            self._announce_task.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, *([self._announce_task] if self._announce_task else []),
                             return_exceptions=True)
        if not graceful:
            sock = self._client.socket()
            # Shutting the socket down sends no DISCONNECT; the disconnect() after it only stops paho's
            # reconnecting, its DISCONNECT packet cannot get out any more.
            if isinstance(sock, socket.socket):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._client.disconnect()
        await asyncio.to_thread(self._client.loop_stop)
        self._fail_acks("stopped")
        log.info("device %s %s", self.device.endpoint_id, "stopped" if graceful else "killed")

    def _make_client(self, broker: BrokerSettings) -> mqtt.Client:
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sim-{self.device.endpoint_id}",
                             clean_session=True)
        if broker.username is not None:
            client.username_pw_set(broker.username, broker.password)
        client.will_set(self._topic + "availability", b"offline", qos=QOS, retain=True)
        # paho's hint says int, but floats work. A short first delay also keeps kill() short: paho's thread
        # is usually in that wait when loop_stop() joins it.
        client.reconnect_delay_set(RECONNECT_MIN_DELAY_S, RECONNECT_MAX_DELAY_S)  # type: ignore[arg-type]
        client.on_socket_open = tcp_nodelay
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_publish = self._on_publish
        client.on_subscribe = self._on_subscribe
        client.connect_async(broker.host, broker.port, KEEPALIVE_S)
        return client

    # paho callbacks: they run on paho's thread and only hand over to the loop.

    def _on_connect(self, _c: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            self._to_loop(self._refused, str(reason))
        else:
            self._to_loop(self._connected)

    def _on_connect_fail(self, _c: mqtt.Client, _u: Any) -> None:
        self._to_loop(self._unreachable)

    def _on_disconnect(self, _c: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        self._to_loop(self._disconnected, str(reason))

    def _on_message(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        self._to_loop(self._inbox.put_nowait, (message.topic, bytes(message.payload)))

    def _on_publish(self, _c: mqtt.Client, _u: Any, mid: int, _r: Any, _p: Any) -> None:
        self._to_loop(self._acked, mid, None)

    def _on_subscribe(self, _c: mqtt.Client, _u: Any, mid: int, reasons: list[Any], _p: Any) -> None:
        failed = [str(r) for r in reasons if r.is_failure]
        self._to_loop(self._acked, mid, f"subscription refused: {failed}" if failed else None)

    def _to_loop(self, func: Any, *args: Any) -> None:
        # A callback can still fire while the loop shuts down; nothing waits for it any more then.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(func, *args)

    # Loop side.

    def _refused(self, reason: str) -> None:
        log.warning("device %s: the broker refused the connection: %s", self.device.endpoint_id, reason)
        if not self._started.done():
            self._started.set_exception(BrokerRefused(f"broker refused device {self.device.endpoint_id}: {reason}"))

    def _unreachable(self) -> None:
        self._connect_error = "broker unreachable"
        log.warning("device %s: cannot reach the broker; paho retries", self.device.endpoint_id)

    def _connected(self) -> None:
        if not self.running:
            return
        if self._announce_task is not None:
            self._announce_task.cancel()
        name = f"sim-{self.device.endpoint_id}-announce"
        self._announce_task = asyncio.create_task(self._announce(), name=name)

    def _disconnected(self, reason: str) -> None:
        if self._announce_task is not None:
            self._announce_task.cancel()
        if self._stopping:
            # Otherwise paho resends after the reconnect, but stop() would only wait for `offline` in vain.
            self._fail_acks(f"connection lost while stopping ({reason})")
        if self.running:
            log.warning("device %s: connection lost (%s); paho reconnects", self.device.endpoint_id, reason)

    def _acked(self, mid: int, error: str | None) -> None:
        fut = self._acks.pop(mid, None)
        if fut is None or fut.done():
            return
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(DeviceStopped(f"device {self.device.endpoint_id}: {error}"))

    def _fail_acks(self, why: str) -> None:
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(DeviceStopped(f"device {self.device.endpoint_id}: {why}"))
        self._acks.clear()

    async def _announce(self) -> None:
        """On every (re)connect: subscribe (the session is clean), config and `online` (retained), current state."""
        device = self.device
        wanted = (("set", device.controllable), ("command", device.accepts_commands))
        topics = [(self._topic + suffix, QOS) for suffix, yes in wanted if yes]
        try:
            if topics:
                rc, mid = self._client.subscribe(topics)
                if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or mid is None:
                    raise DeviceStopped(f"subscribe failed: {mqtt.error_string(rc)}")
                fut: asyncio.Future[None] = self._loop.create_future()
                self._acks[mid] = fut
                async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                    await fut
            await self.publish("config", _json(device.config()), retain=True)
            await self.publish("availability", b"online", retain=True)
            # Like a real device after boot: say where it stands, so the hub knows states before any change.
            if device.state():
                await self.publish("state", _json(device.state()))
        except (TimeoutError, DeviceStopped) as err:
            # The next reconnect announces again.
            log.warning("device %s: announcing failed: %s", device.endpoint_id, err)
            return
        self._connect_error = None
        self._announced = True
        if not self._started.done():
            self._started.set_result(None)
        log.info("device %s online (%s)", device.endpoint_id, device.kind)

    async def _serve_inbox(self) -> None:
        while True:
            topic, payload = await self._inbox.get()
            suffix = topic.removeprefix(self._topic)
            try:
                if suffix == "set":
                    await self._handle_set(payload)
                elif suffix == "command":
                    result = await self.device.handle_command(payload)
                    if result is not None:
                        await self.publish("command/result", _json(result))
            except (TimeoutError, DeviceStopped) as err:
                log.warning("device %s: could not answer on %s: %s", self.device.endpoint_id, suffix, err)
            except Exception:
                log.exception("device %s: failed to handle a message on %s", self.device.endpoint_id, suffix)

    async def _handle_set(self, payload: bytes) -> None:
        device = self.device
        if device.delay_s > 0:
            await asyncio.sleep(device.delay_s)
        try:
            directive = parse_set(payload)
            device.sets.add(directive)
            device.apply_set(directive, self._loop.time())
        except SetRejected as err:
            log.warning("device %s: set not applied: %s", device.endpoint_id, err)
        except ValueError as err:
            log.warning("device %s: bad set payload: %s", device.endpoint_id, err)
        # Always answer with every state, changed or not, so hubd can confirm the directive.
        await self.emit(StateReport(device.state()))
        self.kick()

    async def _follow_time(self) -> None:
        """Call the device's advance() at its deadlines (curtain travel, motion hold, random presses)."""
        while True:
            self._kick.clear()
            deadline = self.device.next_deadline(self._loop.time())
            if deadline is None:
                await self._kick.wait()
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await self._kick.wait()
                    continue
            happening = self.device.advance(self._loop.time())
            if happening is not None:
                try:
                    await self.emit(happening)
                except (TimeoutError, DeviceStopped) as err:
                    log.warning("device %s: report not acknowledged: %s", self.device.endpoint_id, err)


class DeviceFleet:
    """A set of simulated devices, each with its own MQTT session; what tests and the CLI drive."""

    def __init__(self, *, host: str, port: int, base_topic: str = "hubd", devices: list[SimDevice],
                 username: str | None = None, password: str | None = None) -> None:
        ids = [d.endpoint_id for d in devices]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"endpoint ids used twice: {duplicates}")
        self.broker = BrokerSettings(host, port, base_topic, username, password)
        self._devices = {d.endpoint_id: d for d in devices}
        self._links: dict[str, DeviceLink] = {}

    @property
    def devices(self) -> list[SimDevice]:
        """The devices of the fleet, in order."""
        return list(self._devices.values())

    def device(self, endpoint_id: str) -> SimDevice:
        """One device by endpointId (KeyError if unknown)."""
        return self._devices[endpoint_id]

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Connect every device; returns once all subscribed and had config and `online` acknowledged."""
        self._links = {i: DeviceLink(d, self.broker) for i, d in self._devices.items()}
        results = await asyncio.gather(*(link.start(timeout_s) for link in self._links.values()),
                                       return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.stop()
            raise errors[0]

    async def stop(self) -> None:
        """Graceful: every device publishes `offline` and disconnects."""
        await asyncio.gather(*(link.stop() for link in self._links.values()))

    async def kill(self, endpoint_id: str) -> None:
        """Drop one device's connection without DISCONNECT, so the broker publishes its will (`offline`)."""
        await self._link(endpoint_id).kill()

    async def revive(self, endpoint_id: str) -> None:
        """Reconnect a killed or stopped device with a fresh session; it announces itself again."""
        old = self._link(endpoint_id)
        await old.stop()
        link = DeviceLink(old.device, self.broker)
        self._links[endpoint_id] = link
        await link.start()

    async def publish_state(self, endpoint_id: str, states: dict[str, object], *, cause: str | None = None,
                            list_form: bool = False) -> None:
        """Publish states as the device (list form if list_form or a cause is given); awaits the PUBACK."""
        link = self._link(endpoint_id)
        link.device.absorb(states, asyncio.get_running_loop().time())
        await link.emit(StateReport(dict(states), cause=cause, list_form=list_form))
        link.kick()

    async def press(self, endpoint_id: str) -> None:
        """Press a doorbell: a DoorbellPress event (QoS 1, not retained); awaits the PUBACK."""
        link = self._link(endpoint_id)
        if not isinstance(link.device, Doorbell):
            raise TypeError(f"device {endpoint_id} is a {link.device.kind}, not a doorbell")
        await link.emit(link.device.press())

    async def remove(self, endpoint_id: str) -> None:
        """Delete the device: empty retained config, retained availability cleared, then disconnect."""
        link = self._link(endpoint_id)
        await link.publish("config", b"", retain=True)
        await link.publish("availability", b"", retain=True)
        await link.stop(announce_offline=False)
        del self._links[endpoint_id]
        del self._devices[endpoint_id]

    async def run_random(self, interval_s: float) -> None:
        """Realistic spontaneous changes (climate drift, doors, motion, wall switches) until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_s)
            for link in list(self._links.values()):
                if not link.running:
                    continue
                happening = link.device.random_step(loop.time())
                if happening is not None:
                    # Without waiting: paho keeps QoS 1 messages while disconnected and sends them later.
                    await link.emit(happening, wait=False)
                link.kick()

    def _link(self, endpoint_id: str) -> DeviceLink:
        if endpoint_id not in self._links:
            raise KeyError(f"no started device {endpoint_id!r}")
        return self._links[endpoint_id]


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    """The broker options every simulator command line takes."""
    parser.add_argument("--host", default="127.0.0.1", help="MQTT broker host")
    parser.add_argument("--port", type=int, default=1883, help="MQTT broker port")
    parser.add_argument("--base-topic", default="hubd", help="topic root (hubd's mqtt.base_topic)")
    parser.add_argument("--username", help="broker login")
    parser.add_argument("--password", help="broker password")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


async def serve(fleet: DeviceFleet, *, interval_s: float | None) -> int:
    """Run a fleet until SIGINT/SIGTERM (random changes every interval_s if given); the exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await fleet.start()
    except (TimeoutError, BrokerRefused) as err:
        log.error("cannot start: %s", err)
        return 1
    random_task = asyncio.create_task(fleet.run_random(interval_s), name="sim-random") if interval_s else None
    await stop.wait()
    if random_task is not None:
        random_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await random_task
    await fleet.stop()
    return 0


def tcp_nodelay(_c: mqtt.Client, _u: Any, sock: Any) -> None:
    """A paho on_socket_open callback that turns Nagle's algorithm off."""
    # paho leaves Nagle on: a small PUBLISH right after a PUBACK then waits for the broker's delayed ACK
    # (about 40 ms on Linux), which every set round trip would pay.
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _json(payload: dict[str, object]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
