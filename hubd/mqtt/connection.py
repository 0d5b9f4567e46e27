"""One MQTT connection: a paho client and its socket, driven by the asyncio loop, discarded once it ends.

The bridge between paho and the loop, after aiomqtt 2.5.1's / paho's examples/loop_asyncio.py but without
paho's network thread: socket readiness goes through loop.add_reader/add_writer, a timer calls loop_misc()
every second for keepalive, and only the blocking TCP/TLS connect runs in a (daemon) thread. paho's
callbacks only resolve this connection's futures (CONNACK, SUBACK, PUBACK) or put messages in the inbox;
they never log payloads or run hubd logic. PUBACKs for received messages go out in receive order. A
malformed packet or an I/O error ends the connection and fails everything waiting on it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.properties import Properties

from hubd.errors import MqttRejected, MqttUnavailable
from hubd.mqtt.inbox import Inbox, Message
from hubd.threads import in_daemon_thread

MISC_INTERVAL_S = 1.0
# CONNACK refusals that retrying cannot fix (MQTT 5's codes; paho maps 3.1.1 return codes 2, 4 and 5 to these).
_CONNACK_REJECTED = {0x85, 0x86, 0x87}
# Messages one readable callback takes in before letting the loop's other work run. One paho loop_read()
# may read up to one packet per publish in flight (max_inflight_publishes), so a callback can exceed it
# by that much.
READ_BURST_PACKETS = 1000
_READ_BURST_CALLS = 4 * READ_BURST_PACKETS


class Connection:
    """One paho client and one socket; discarded after the connection ends."""

    def __init__(self, conn_id: int, client: paho.Client, inbox: Inbox) -> None:
        self.id = conn_id
        self.paho = client
        self.loop = asyncio.get_running_loop()
        self.inbox = inbox
        self.connack: asyncio.Future[bool] = self.loop.create_future()
        self.closed = asyncio.Event()
        self.lost: str | None = None
        self.pending_publishes: dict[int, asyncio.Future[None]] = {}
        self.pending_subscribes: dict[int, asyncio.Future[list[int]]] = {}
        self.pending_unsubscribes: dict[int, asyncio.Future[None]] = {}
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
        self._paused = False  # not reading: the inbox is full (its bytes), until it calls _resume
        self._misc: asyncio.TimerHandle | None = None
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        client.on_unsubscribe = self._on_unsubscribe
        client.on_publish = self._on_publish
        client.on_message = self._on_message
        client.on_socket_close = self._on_socket_close
        client.on_socket_register_write = self._on_socket_register_write
        client.on_socket_unregister_write = self._on_socket_unregister_write

    @property
    def established(self) -> bool:
        """True from an accepted CONNACK until the connection is lost or closed."""
        done = self.connack.done() and not self.connack.cancelled()
        return self.lost is None and done and self.connack.exception() is None

    async def open(self, host: str, port: int, keepalive_s: int,
                   v5: tuple[bool, Properties | None] | None = None) -> bool:
        """Connect and await the CONNACK; returns session_present (MqttRejected, MqttUnavailable).

        `v5`: MQTT 5's clean start and CONNECT properties (None: MQTT 3.1.1, the clean session set on the client).
        """
        if v5 is None:
            self.paho.connect_async(host, port, keepalive_s)  # only stores the parameters
        else:
            self.paho.connect_async(host, port, keepalive_s, clean_start=v5[0], properties=v5[1])
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
        """PUBACK this connection's messages among `messages`, in receive order (later ones wait)."""
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
        self.inbox.on_room = self._resume
        if self.paho.want_write():  # the CONNECT packet queued in the executor thread
            self.loop.add_writer(self._fd, self._on_writable)
        self._misc = self.loop.call_later(MISC_INTERVAL_S, self._on_misc)

    def _unwatch(self) -> None:
        if self.inbox.on_room == self._resume:
            self.inbox.on_room = None
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
        for unsub in self.pending_unsubscribes.values():
            if not unsub.done():
                unsub.set_exception(MqttUnavailable(reason))
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
                if self._fd is not None and self.inbox.full:
                    self._pause()
                    return
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

    def _pause(self) -> None:
        # The rest waits in the socket and the broker (TCP's window), not in hubd's memory. Only messages of
        # megabytes fill it before the inbox's count bound; a caller that takes none for twice the keepalive
        # (a disk refusing writes) loses the connection, as paho reads no PINGRESP meanwhile.
        self._paused = True
        self.loop.remove_reader(self._fd)  # type: ignore[arg-type]  # _fd checked by the caller

    def _resume(self) -> None:
        if not self._paused or self._fd is None:
            return
        self._paused = False
        self.loop.add_reader(self._fd, self._on_readable)
        if self._ssl_pending():  # bytes an SSL socket already decrypted: the fd does not signal them
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
            self.connack.set_exception(MqttRejected(f"MQTT broker refused the connection: {reason}",
                                                       code=reason.value))
        else:
            self.connack.set_exception(MqttUnavailable(f"MQTT broker refused the connection: {reason}"))

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self._mark_lost(f"connection lost ({reason})")

    def _on_subscribe(self, client: paho.Client, userdata: Any, mid: int, reasons: list[Any], _: Any) -> None:
        fut = self.pending_subscribes.get(mid)
        if fut is not None and not fut.done():
            fut.set_result([r.value for r in reasons])

    def _on_unsubscribe(self, client: paho.Client, userdata: Any, mid: int, reasons: Any, props: Any) -> None:
        fut = self.pending_unsubscribes.get(mid)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        fut = self.pending_publishes.get(mid)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        seq = self._next_seq
        self._next_seq += 1
        if msg.qos > 0:
            self._unacked[seq] = (msg.mid, msg.qos)
        message = Message(msg.topic, bytes(msg.payload), msg.qos, bool(msg.retain), msg.mid, self.id, seq,
                          dup=bool(msg.dup), received_at=time.monotonic())
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
