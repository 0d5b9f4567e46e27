"""The paho-mqtt adapter: one MQTT 3.1.1 connection at a time, driven by hubd's asyncio loop.

Owns paho: this is the only module in hubd that imports it, and no paho type leaves it. It imports
nothing of hubd but hubd.errors and hubd.threads, and holds no reconnect logic: the caller loops
connect -> subscribe -> next_batch until MqttUnavailable, abort()s what is left of that connection,
backs off, and calls connect() again on the SAME MqttClient. Each connect() builds a fresh paho
client, so nothing of a dead connection (queued publishes, message ids, pending acks) leaks into the
next one.

The pattern is aiomqtt 2.5.1's / paho's examples/loop_asyncio.py, without paho's network thread:
socket readiness goes through loop.add_reader/add_writer, a timer calls loop_misc() every second for
keepalive, and only the blocking TCP/TLS connect runs in a (daemon) thread. paho callbacks only
resolve futures or append to the inbox; they never log payloads or run hubd logic.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import select
import socket
import ssl
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion

from hubd.errors import ConfigError, MqttRejected, MqttUnavailable, MqttUnconfirmed
from hubd.threads import in_daemon_thread

log = logging.getLogger(__name__)

MISC_INTERVAL_S = 1.0
DISCONNECT_TIMEOUT_S = 2.0
INBOX_MAX_MESSAGES = 10_000

# CONNACK refusals that retrying cannot fix (paho maps 3.1.1 return codes 2, 4 and 5 to these).
_CONNACK_REJECTED = {0x85, 0x86, 0x87}
# Messages one readable callback takes in before letting the loop's other work run. One paho loop_read()
# may read up to one packet per publish in flight (max_inflight_publishes), so a callback can exceed it
# by that much.
READ_BURST_PACKETS = 1000
_READ_BURST_CALLS = 4 * READ_BURST_PACKETS


@dataclass(frozen=True, slots=True)
class Message:
    """One PUBLISH received from the broker."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    mid: int
    # Which connection delivered it and where in that connection's receive order: ack() needs both.
    _conn: int = field(default=0, repr=False, compare=False)
    _seq: int = field(default=0, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Will:
    """The last will the broker publishes if hubd's connection dies without a DISCONNECT."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = True


class MqttClient:
    """An asyncio MQTT 3.1.1 client with manual acks and a bounded QoS 1 publish window."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        client_id: str,
        clean_session: bool = False,
        username: str | None = None,
        password: str | None = None,
        tls: bool = False,
        ca_file: str | None = None,
        will: Will | None = None,
        keepalive_s: int = 30,
        max_inflight_publishes: int = 100,
    ) -> None:
        self._host = host
        self._port = port
        self._client_id = client_id
        self._clean_session = clean_session
        self._username = username
        self._password = password
        self._will = will
        self._keepalive_s = keepalive_s
        self._max_inflight_publishes = max_inflight_publishes
        self._tls_context: ssl.SSLContext | None = None
        if tls:
            try:
                self._tls_context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as err:
                raise ConfigError([f"mqtt.ca_file: cannot load {ca_file}: {err}"]) from err
            self._tls_context.sslsocket_class = _HandshakeClosingSocket
        # paho wraps message ids at 65535 and silently loses publishes still in flight (measured on paho 2.x).
        self._publish_slots = asyncio.Semaphore(max_inflight_publishes)
        self._inbox = _Inbox(INBOX_MAX_MESSAGES)
        self._conn: _Connection | None = None
        self._conn_count = 0

    @property
    def client_id(self) -> str:
        """The MQTT client id this client connects with."""
        return self._client_id

    @property
    def connected(self) -> bool:
        """True between a successful connect() and the loss or end of that connection."""
        return self._conn is not None and self._conn.established

    @property
    def dropped_qos0(self) -> int:
        """QoS 0 messages dropped because the inbox was full (QoS 1 messages are never dropped)."""
        return self._inbox.dropped_qos0

    async def connect(self, timeout_s: float = 10.0) -> bool:
        """Connect (MQTT 3.1.1); returns session_present.

        Raises MqttRejected (bad credentials, not authorised, client id refused, with the reason) or
        MqttUnavailable (refused, timeout, DNS, TLS, no CONNACK). A connection still open from an
        earlier connect() is aborted first (with a warning): callers should abort() or disconnect().
        """
        leftover = self._conn
        if leftover is not None and leftover.lost is None:
            # The caller did not end its last connection (a failure it did not expect): drop that one
            # without DISCONNECT, so the broker publishes the will, and start afresh.
            log.warning("MQTT connect() while the previous connection is still open: aborting that one")
            leftover.abort("replaced by a new connection")
        self._conn_count += 1
        conn = _Connection(self._conn_count, self._new_paho(timeout_s), self._inbox)
        self._conn = conn
        try:
            async with asyncio.timeout(timeout_s):
                session_present = await conn.open(self._host, self._port, self._keepalive_s)
        except TimeoutError as err:
            reason = f"MQTT broker {self._host}:{self._port}: no CONNACK within {timeout_s} s"
            conn.abort(reason)
            raise MqttUnavailable(reason) from err
        except BaseException:
            conn.abort("connect failed")
            raise
        log.info("connected to MQTT %s:%d as client id %r (session present: %s)", self._host, self._port,
                 self._client_id, session_present)
        return session_present

    async def subscribe(self, topics: list[tuple[str, int]], timeout_s: float = 10.0) -> None:
        """Subscribe and await SUBACK; raises MqttRejected if the broker refused a topic (granted 0x80)."""
        conn = self._require_connection()
        rc, mid = conn.paho.subscribe(topics)
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or mid is None:
            raise MqttUnavailable(f"cannot subscribe: {paho.error_string(rc)}")
        fut: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        conn.pending_subscribes[mid] = fut
        try:
            async with asyncio.timeout(timeout_s):
                granted = await fut
        except TimeoutError as err:
            raise MqttUnavailable(f"no SUBACK within {timeout_s} s") from err
        finally:
            conn.pending_subscribes.pop(mid, None)
        refused = [topic for (topic, _qos), code in zip(topics, granted, strict=False) if code >= 0x80]
        if refused:
            raise MqttRejected(f"the broker refused the subscription to {', '.join(refused)}")

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False, timeout_s: float = 10.0
    ) -> None:
        """Publish; QoS 1 awaits PUBACK.

        At most max_inflight_publishes are outstanding; more callers wait for a slot (within timeout_s).
        Raises MqttUnavailable if not connected or no slot came free in time: nothing was sent. Raises
        MqttUnconfirmed (a MqttUnavailable) if the connection drops or times out before PUBACK: the
        message may or may not have reached the broker, so a caller that retries gets at-least-once.
        """
        self._require_connection()
        queued = False
        try:
            async with asyncio.timeout(timeout_s), self._publish_slots:
                # The connection may have died while this call waited for a slot.
                conn = self._require_connection()
                info = conn.paho.publish(topic, payload, qos=qos, retain=retain)
                if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                    raise MqttUnavailable(f"cannot publish: {paho.error_string(info.rc)}")
                if qos == 0:
                    return
                queued = True
                # Nothing is written before the loop runs the writer callback, so the PUBACK
                # cannot arrive before this future is registered.
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                conn.pending_publishes[info.mid] = fut
                try:
                    await fut
                except MqttUnavailable as err:
                    raise MqttUnconfirmed(f"connection lost before PUBACK: {err}") from err
                finally:
                    conn.pending_publishes.pop(info.mid, None)
        except TimeoutError as err:
            if queued:
                raise MqttUnconfirmed(f"no PUBACK within {timeout_s} s") from err
            raise MqttUnavailable(f"no free publish slot within {timeout_s} s") from err

    async def next_batch(self, max_messages: int = 500) -> list[Message]:
        """Wait for at least one message and return up to max_messages already queued.

        Raises MqttUnavailable once the connection is lost or closed and the messages received before
        that have all been returned.
        """
        while True:
            batch = self._inbox.take(max_messages)
            if batch:
                return batch
            conn = self._conn
            if conn is None:
                raise MqttUnavailable("not connected")
            if conn.lost is not None:
                raise MqttUnavailable(conn.lost)
            await self._inbox.wait()

    def ack(self, messages: Iterable[Message]) -> None:
        """Acknowledge QoS>=1 messages once what they caused is persisted (paho manual_ack).

        PUBACKs go out in receive order (MQTT 3.1.1 4.6.0-2): a message acked before an earlier one is held
        back until the earlier one is acked too, so every received QoS>=1 message must be acked
        eventually, including ones the caller rejects. Messages of an earlier connection are ignored:
        the broker redelivers them on the new one (persistent session).
        """
        conn = self._conn
        if conn is None or not conn.established:
            return
        conn.ack(messages)

    async def disconnect(self) -> None:
        """Send DISCONNECT (so the broker does NOT publish the will) and release the socket. Idempotent."""
        conn = self._conn
        if conn is None or conn.lost is not None:
            return
        if conn.established and conn.paho.disconnect() == MQTTErrorCode.MQTT_ERR_SUCCESS:
            # paho reports the disconnect once the DISCONNECT packet is written.
            try:
                async with asyncio.timeout(DISCONNECT_TIMEOUT_S):
                    await conn.closed.wait()
            except TimeoutError:
                log.warning("MQTT DISCONNECT not sent within %s s; closing the socket", DISCONNECT_TIMEOUT_S)
        conn.abort("disconnected")
        log.info("disconnected from MQTT broker %s:%d", self._host, self._port)

    def abort(self, reason: str) -> None:
        """Close the connection without DISCONNECT, so the broker publishes the will. Idempotent.

        For a session that failed half-way (a refused subscription, no SUBACK or PUBACK in time): the
        next connect() starts clean, and the broker says `offline` for us.
        """
        conn = self._conn
        if conn is None or conn.lost is not None:
            return
        conn.abort(reason)
        log.info("closed the connection to MQTT broker %s:%d: %s", self._host, self._port, reason)

    def _require_connection(self) -> _Connection:
        conn = self._conn
        if conn is None or not conn.established:
            reason = conn.lost if conn is not None and conn.lost else "not connected"
            raise MqttUnavailable(f"MQTT broker {self._host}:{self._port}: {reason}")
        return conn

    def _new_paho(self, timeout_s: float) -> paho.Client:
        client = paho.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self._client_id,
            clean_session=self._clean_session,
            protocol=MQTTProtocolVersion.MQTTv311,
            # Otherwise a refused CONNACK makes paho retry (MQTT 3.1 downgrade) with a blocking
            # connect on the event loop thread.
            reconnect_on_failure=False,
            manual_ack=True,
        )
        # Bounds the blocking TCP connect and TLS handshake in the connect thread (not DNS).
        client.connect_timeout = timeout_s
        # Our semaphore is the window; paho's own (default 20) would only queue behind it.
        client.max_inflight_messages_set(self._max_inflight_publishes)
        if self._username is not None:
            client.username_pw_set(self._username, self._password)
        if self._tls_context is not None:
            client.tls_set_context(self._tls_context)
        if self._will is not None:
            client.will_set(self._will.topic, self._will.payload, self._will.qos, self._will.retain)
        return client


class _HandshakeClosingSocket(ssl.SSLSocket):
    """paho 2.2 leaves the socket open when the TLS handshake fails (e.g. an untrusted certificate)."""

    def do_handshake(self, block: bool = False) -> None:
        try:
            super().do_handshake(block)
        except BaseException:
            self.close()
            raise


class _Inbox:
    """Received messages waiting for next_batch(): bounded for QoS 0, never dropping QoS>=1.

    QoS>=1 deliveries are bounded by the broker's in-flight window (mosquitto max_inflight_messages,
    default 20) because we ack only after the caller persisted them; QoS 0 has no such bound.
    """

    def __init__(self, max_messages: int) -> None:
        self._items: collections.deque[Message] = collections.deque()
        self._max = max_messages
        self._qos0_queued = 0
        self._event = asyncio.Event()
        self.dropped_qos0 = 0

    def put(self, msg: Message) -> None:
        if len(self._items) >= self._max and not self._make_room(msg):
            return
        self._items.append(msg)
        if msg.qos == 0:
            self._qos0_queued += 1
        self._event.set()

    def take(self, max_messages: int) -> list[Message]:
        n = min(max_messages, len(self._items))
        batch = [self._items.popleft() for _ in range(n)]
        self._qos0_queued -= sum(1 for m in batch if m.qos == 0)
        return batch

    async def wait(self) -> None:
        self._event.clear()
        await self._event.wait()

    def wake(self) -> None:
        self._event.set()

    def _make_room(self, incoming: Message) -> bool:
        """Drop the oldest queued QoS 0 message (or the incoming one); False if `incoming` was dropped."""
        if self.dropped_qos0 == 0:
            log.warning("MQTT inbox full (%d messages): dropping the oldest QoS 0 messages", self._max)
        if self._qos0_queued:
            for i, queued in enumerate(self._items):
                if queued.qos == 0:
                    del self._items[i]
                    self._qos0_queued -= 1
                    self.dropped_qos0 += 1
                    return True
        if incoming.qos == 0:
            self.dropped_qos0 += 1
            return False
        return True  # only QoS>=1 queued: keep it beyond the bound rather than lose it


class _Connection:
    """One paho client and one socket; discarded after the connection ends."""

    def __init__(self, conn_id: int, client: paho.Client, inbox: _Inbox) -> None:
        self.id = conn_id
        self.paho = client
        self.loop = asyncio.get_running_loop()
        self.inbox = inbox
        self.connack: asyncio.Future[bool] = self.loop.create_future()
        self.closed = asyncio.Event()
        self.lost: str | None = None
        self.pending_publishes: dict[int, asyncio.Future[None]] = {}
        self.pending_subscribes: dict[int, asyncio.Future[list[int]]] = {}
        # QoS>=1 messages not yet PUBACKed, in receive order: seq -> (mid, qos); and those acked early.
        self._unacked: collections.OrderedDict[int, tuple[int, int]] = collections.OrderedDict()
        self._acked_early: set[int] = set()
        self._next_seq = 0
        self._loop_thread = threading.get_ident()
        self._sock: Any = None
        self._fd: int | None = None
        # Asks "more bytes waiting?" between two packets (poll, not select: select fails for fd >= 1024).
        self._poller = select.poll()
        self._read_again: asyncio.Handle | None = None
        self._misc: asyncio.TimerHandle | None = None
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        client.on_publish = self._on_publish
        client.on_message = self._on_message
        client.on_socket_close = self._on_socket_close
        client.on_socket_register_write = self._on_socket_register_write
        client.on_socket_unregister_write = self._on_socket_unregister_write

    @property
    def established(self) -> bool:
        done = self.connack.done() and not self.connack.cancelled()
        return self.lost is None and done and self.connack.exception() is None

    async def open(self, host: str, port: int, keepalive_s: int) -> bool:
        self.paho.connect_async(host, port, keepalive_s)  # only stores the parameters
        # reconnect() blocks on DNS, TCP connect and the TLS handshake, so it runs in a thread: a daemon
        # thread, not the default executor, which asyncio.run() would wait for at exit, so a stop never
        # waits for a connect to a broker that does not answer. The socket callbacks it fires there
        # are ignored (see _on_socket_register_write); the socket is registered with the loop below,
        # once the thread is done with the paho client.
        blocking = in_daemon_thread(self.paho.reconnect, name="hubd-mqtt-connect", on_late=self._close_abandoned)
        try:
            rc = await blocking
        except OSError as err:  # DNS, refused, unreachable, timeout, TLS (ssl.SSLError is an OSError)
            raise MqttUnavailable(f"cannot reach MQTT broker {host}:{port}: {err}") from err
        except asyncio.CancelledError:
            # The thread's result and the cancellation (connect()'s timeout, a stop) landed in the same
            # loop iteration: the future holds a result, so on_late never runs. Close what it opened.
            if blocking.done() and not blocking.cancelled() and blocking.exception() is None:
                self._close_abandoned(blocking.result())
            raise
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            raise MqttUnavailable(f"cannot send CONNECT to {host}:{port}: {paho.error_string(rc)}")
        self._watch()
        return await self.connack

    def ack(self, messages: Iterable[Message]) -> None:
        for msg in messages:
            if msg._conn == self.id and msg._seq in self._unacked:
                self._acked_early.add(msg._seq)
        while self._unacked:
            seq = next(iter(self._unacked))
            if seq not in self._acked_early:
                break
            mid, qos = self._unacked.pop(seq)
            self._acked_early.discard(seq)
            self.paho.ack(mid, qos)

    def abort(self, reason: str) -> None:
        """Close the socket without DISCONNECT (the broker publishes the will) and fail all waiters."""
        sock = self._sock
        self._unwatch()
        if sock is not None:
            # This paho client is never used again, so closing its socket behind its back is safe.
            sock.close()
        self._mark_lost(reason)

    def _watch(self) -> None:
        self._sock = self.paho.socket()
        self._fd = self._sock.fileno()
        # paho leaves Nagle on: every small PUBACK/PUBLISH would wait ~40 ms for a delayed ACK.
        raw = self._sock
        with contextlib.suppress(OSError, AttributeError):
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._poller.register(self._fd, select.POLLIN)
        self.loop.add_reader(self._fd, self._on_readable)
        if self.paho.want_write():  # the CONNECT packet queued in the executor thread
            self.loop.add_writer(self._fd, self._on_writable)
        self._misc = self.loop.call_later(MISC_INTERVAL_S, self._on_misc)

    def _unwatch(self) -> None:
        if self._fd is not None:
            self.loop.remove_reader(self._fd)
            self.loop.remove_writer(self._fd)
            self._poller.unregister(self._fd)
            self._fd = None
        if self._read_again is not None:
            self._read_again.cancel()
            self._read_again = None
        if self._misc is not None:
            self._misc.cancel()
            self._misc = None

    def _mark_lost(self, reason: str) -> None:
        if self.lost is not None:
            return
        self.lost = reason
        if not self.connack.done():
            self.connack.set_exception(MqttUnavailable(reason))
            self.connack.exception()  # retrieved: nobody awaits it if open() was cancelled earlier
        for pub in self.pending_publishes.values():
            if not pub.done():
                pub.set_exception(MqttUnavailable(reason))
        for sub in self.pending_subscribes.values():
            if not sub.done():
                sub.set_exception(MqttUnavailable(reason))
        self.closed.set()
        self.inbox.wake()

    def _close_abandoned(self, rc: MQTTErrorCode) -> None:
        # The connect thread finished after connect() gave up: close what it opened.
        sock = self.paho.socket()
        if sock is not None:
            sock.close()

    # Event loop callbacks. paho reports I/O errors through on_disconnect; anything it raises instead
    # (a malformed packet) ends the connection too, rather than leaving a reader that fails forever.

    def _on_readable(self) -> None:
        if self._read_again is not None:  # this call reads what that one would have
            self._read_again.cancel()
            self._read_again = None
        first = self._next_seq
        try:
            # Reading on while the socket has more hands a burst (the retained configs after a SUBACK, a
            # backlog) to the bridge as one batch, and costs one loop iteration per burst instead of one per
            # message. Bounded by the messages taken in (and, against a flood of other packets, by calls),
            # so the loop's other work goes on.
            for _ in range(_READ_BURST_CALLS):
                self.paho.loop_read()
                if self._fd is None or not self._more_to_read():
                    return
                if self._next_seq - first >= READ_BURST_PACKETS:
                    break
        except Exception as err:
            self.abort(f"MQTT protocol error: {err!r}")
            return
        # Capped with more to read: a plain socket's fd signals again, bytes an SSL socket already
        # decrypted do not.
        if self._ssl_pending():
            self._read_again = self.loop.call_soon(self._on_readable)

    def _more_to_read(self) -> bool:
        # An SSL socket may hold decrypted bytes that the fd no longer signals (paho's loop checks too).
        return self._ssl_pending() or bool(self._poller.poll(0))

    def _ssl_pending(self) -> bool:
        return isinstance(self._sock, ssl.SSLSocket) and self._sock.pending() > 0

    def _on_writable(self) -> None:
        try:
            self.paho.loop_write()
        except Exception as err:
            self.abort(f"MQTT write error: {err!r}")

    def _on_misc(self) -> None:
        self._misc = None
        if self.paho.loop_misc() == MQTTErrorCode.MQTT_ERR_SUCCESS and self._fd is not None:
            self._misc = self.loop.call_later(MISC_INTERVAL_S, self._on_misc)

    # paho callbacks (VERSION2 signatures): resolve futures or fill the inbox, nothing else.

    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if self.connack.done():  # paho may report a CONNACK twice
            return
        if reason.value == 0:
            self.connack.set_result(bool(flags.session_present))
        elif reason.value in _CONNACK_REJECTED:
            self.connack.set_exception(MqttRejected(f"MQTT broker refused the connection: {reason}"))
        else:
            self.connack.set_exception(MqttUnavailable(f"MQTT broker refused the connection: {reason}"))

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self._mark_lost(f"connection lost ({reason})")

    def _on_subscribe(self, client: paho.Client, userdata: Any, mid: int, reasons: list[Any], _: Any) -> None:
        fut = self.pending_subscribes.get(mid)
        if fut is not None and not fut.done():
            fut.set_result([r.value for r in reasons])

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        fut = self.pending_publishes.get(mid)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        seq = self._next_seq
        self._next_seq += 1
        if msg.qos > 0:
            self._unacked[seq] = (msg.mid, msg.qos)
        message = Message(msg.topic, bytes(msg.payload), msg.qos, bool(msg.retain), msg.mid, self.id, seq)
        self.inbox.put(message)

    def _on_socket_close(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        self._unwatch()

    def _on_socket_register_write(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        # Fired in the executor thread while connecting: _watch() registers the writer afterwards.
        if threading.get_ident() == self._loop_thread and self._fd is not None:
            self.loop.add_writer(self._fd, self._on_writable)

    def _on_socket_unregister_write(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        if self._fd is not None:
            self.loop.remove_writer(self._fd)
