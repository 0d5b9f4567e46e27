"""The MQTT client hubd's components use: one MQTT connection at a time, driven by hubd's asyncio loop.

MQTT 5 when given a maximum packet size (the broker is asked, with CONNECT's Maximum Packet Size, never to send a
larger packet: mosquitto 2.0.11 then drops such a message for us, retained and queued ones included, and keeps
the connection), MQTT 3.1.1 otherwise (the embedded broker, amqtt 0.12, speaks nothing else). The session is the
same either way: MQTT 5's clean start is the 3.1.1 clean session, and a kept session never expires.

Owns the asyncio-facing API (connect, subscribe, unsubscribe, publish with a bounded QoS 1 window, next_batch, ack,
disconnect, abort) and the building of each connection's paho client (credentials, TLS, will). paho is
imported here and in hubd.mqtt.connection only, and no paho type leaves them. It imports nothing of hubd
but hubd.errors and the connection and inbox modules, and holds no reconnect logic: the caller loops
connect -> subscribe -> next_batch until MqttUnavailable, abort()s what is left of that connection,
backs off, and calls connect() again on the SAME MqttClient. Each connect() builds a fresh paho
client and Connection, so nothing of a dead connection (queued publishes, message ids, pending acks)
leaks into the next one. The inbox is the client's: messages received before a connection was lost are
still returned by next_batch().
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable
from dataclasses import dataclass

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from hubd.errors import ConfigError, MqttRejected, MqttUnavailable, MqttUnconfirmed
from hubd.mqtt.connection import Connection
from hubd.mqtt.inbox import Inbox, Message

log = logging.getLogger(__name__)

DISCONNECT_TIMEOUT_S = 2.0
INBOX_MAX_MESSAGES = 10_000
# Received payloads waiting for the caller: past this the connection stops reading until the caller took some.
INBOX_MAX_BYTES = 8 * 1024 * 1024
# MQTT 5 Session Expiry Interval meaning "never": a kept session lasts as MQTT 3.1.1's does.
SESSION_NEVER_EXPIRES = 0xFFFFFFFF
# What a PUBLISH packet holds besides its payload (fixed header, topic, packet id, properties): a maximum packet
# size of payload limit + this lets every payload within the limit through on a topic of up to ~4 KiB.
PACKET_HEADROOM_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Will:
    """The last will the broker publishes if hubd's connection dies without a DISCONNECT."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = True


class MqttClient:
    """An asyncio MQTT client (5 with a maximum packet size, else 3.1.1), manual acks, a bounded publish window."""

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
        max_packet_bytes: int | None = None,
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
        self._max_packet_bytes = max_packet_bytes
        self._tls_context: ssl.SSLContext | None = None
        if tls:
            try:
                self._tls_context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as err:
                raise ConfigError([f"mqtt.ca_file: cannot load {ca_file}: {err}"]) from err
            self._tls_context.sslsocket_class = _HandshakeClosingSocket
        # paho wraps message ids at 65535 and silently loses publishes still in flight (measured on paho 2.x).
        self._publish_slots = asyncio.Semaphore(max_inflight_publishes)
        self._inbox = Inbox(INBOX_MAX_MESSAGES, log, INBOX_MAX_BYTES)
        self._conn: Connection | None = None
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
        """Connect; returns session_present.

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
        conn = Connection(self._conn_count, self._new_paho(timeout_s), self._inbox)
        self._conn = conn
        try:
            async with asyncio.timeout(timeout_s):
                session_present = await conn.open(self._host, self._port, self._keepalive_s, self._connect_options())
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

    async def unsubscribe(self, topics: list[str], timeout_s: float = 10.0) -> None:
        """Unsubscribe and await UNSUBACK (its reason codes are not read: a topic not subscribed is no failure)."""
        conn = self._require_connection()
        rc, mid = conn.paho.unsubscribe(topics)
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or mid is None:
            raise MqttUnavailable(f"cannot unsubscribe: {paho.error_string(rc)}")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.pending_unsubscribes[mid] = fut
        try:
            async with asyncio.timeout(timeout_s):
                await fut
        except TimeoutError as err:
            raise MqttUnavailable(f"no UNSUBACK within {timeout_s} s") from err
        finally:
            conn.pending_unsubscribes.pop(mid, None)

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

    def _require_connection(self) -> Connection:
        conn = self._conn
        if conn is None or not conn.established:
            reason = conn.lost if conn is not None and conn.lost else "not connected"
            raise MqttUnavailable(f"MQTT broker {self._host}:{self._port}: {reason}")
        return conn

    def _connect_options(self) -> tuple[bool, Properties | None] | None:
        """MQTT 5's clean start and CONNECT properties; None for MQTT 3.1.1 (the clean session is the client's)."""
        if self._max_packet_bytes is None:
            return None
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.MaximumPacketSize = self._max_packet_bytes
        # Without it an MQTT 5 session ends with its connection, and the broker keeps nothing for us offline.
        props.SessionExpiryInterval = 0 if self._clean_session else SESSION_NEVER_EXPIRES
        return self._clean_session, props

    def _new_paho(self, timeout_s: float) -> paho.Client:
        v5 = self._max_packet_bytes is not None
        client = paho.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self._client_id,
            clean_session=None if v5 else self._clean_session,
            protocol=MQTTProtocolVersion.MQTTv5 if v5 else MQTTProtocolVersion.MQTTv311,
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
