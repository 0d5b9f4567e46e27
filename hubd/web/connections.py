"""HTTP connections: accepting them, how many may be open at once, how long a client may take to send its request.

aiohttp parses the requests and runs the handlers; this module decides which connections it gets and for
how long. It binds the listening sockets and accepts in a reader callback of its own (`_Listener`), not
asyncio's server: that one, when accept() fails for want of file descriptors, logs a traceback and tries
again up to `backlog` times in the same callback, and leaves retry timers behind that fail once the socket
is closed. Here a failed accept() is said once per episode without a traceback, the listener pauses with
backoff, and the connections that have not sent a request yet are closed to free descriptors.

Each accepted connection is wrapped in a `_Connection` (aiohttp's protocol inside), so that every connection
of every listener is counted and timed. It is *fresh* (connected, no request yet), *busy* (its request is
in a handler: `request_started` / `request_finished`, called by the server's middleware) or *kept* (idle
between keep-alive requests). `sweep()` aborts a fresh one after the request timeout (its headers never
came), a busy one whose body has not all arrived that long after its headers, and a kept one after
KEEPALIVE_S. This does not rely on aiohttp's keepalive_timeout, which closes a connection that never
sent its headers only in recent releases (3.9 and 3.10 never do).

The cap (`connection_cap`, from the process's file-descriptor limit) keeps HTTP well below that limit. At the cap, a new
connection takes the place of the oldest fresh one, else of the oldest kept one, else of the oldest still sending
its body; with none of those, it gets a canned 503 and is closed at once, before any parsing.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import resource
import socket
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from aiohttp import web

from hubd.metrics import Metrics

log = logging.getLogger(__name__)

BACKLOG = 128  # connections the kernel holds until they are accepted: not yet descriptors of hubd's
ACCEPT_BATCH = 16  # accepts per wake-up; the connections they make room for close on the next loop pass
KEEPALIVE_S = 75.0  # longer than the 60 s reverse proxies keep an idle upstream connection
REQUEST_TIMEOUT_S = 10.0
ACCEPT_RETRY_S = (0.05, 2.0)  # the backoff of a listener whose accept() failed: first pause, longest
ACCEPT_QUIET_S = 10.0  # accept() working this long after a failure ends the episode (and says so)
ACCEPT_REMINDER_S = 60.0  # while accept() keeps failing, a reminder this often
# File descriptors HTTP leaves to the rest of hubd: SQLite (database, WAL, shared memory), the MQTT
# connection, up to 64 outbox sends in flight (outbox.MAX_IN_FLIGHT), zeroconf, the event loop, the log.
RESERVED_FDS = 96
MAX_CONNECTIONS = 1024  # a hub's clients are a platform, a few browsers and automations
MIN_CONNECTIONS = 8

OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# The client's trouble, reported by accept() (accept(2): Linux passes pending network errors on): try the next.
_CLIENT_GONE = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.ENETDOWN, errno.ENOPROTOOPT,
                          errno.EHOSTDOWN, errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH})

_REFUSAL_BODY = json.dumps({"error": "hubd has too many open connections; try again in a few seconds",
                            "details": []}).encode()
_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n\r\n" + _REFUSAL_BODY)


def fd_limit() -> int:
    """The soft RLIMIT_NOFILE: how many file descriptors this process may have open."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def connection_cap(limit: int, configured: int | None = None) -> int:
    """HTTP connections allowed at once: half of the descriptors left after RESERVED_FDS, within bounds.

    The other half is headroom: a batch of accepts whose evictions are not released yet, the embedded
    broker's clients. A configured value lowers the cap, never raises it past what the limit allows.
    """
    derived = max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, (limit - RESERVED_FDS) // 2))
    return derived if configured is None else min(configured, derived)


class _Connection(asyncio.Protocol):
    """One accepted connection: aiohttp's protocol inside, counted and timed by the guard."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol, now: float) -> None:
        self._guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.since = now  # when it connected, its request started, or its last response was handed over
        self.request: web.BaseRequest | None = None
        self.doomed = False  # aborted before asyncio handed over its transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Hand the transport to aiohttp (and abort it at once if the guard gave up on it already)."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.inner.connection_made(transport)
        if self.doomed:
            transport.abort()

    def data_received(self, data: bytes) -> None:
        """Pass the bytes to aiohttp's parser."""
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        """The client closed its side."""
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        """Uncount it and tell aiohttp."""
        self._guard.forget(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        """The client reads slower than aiohttp writes."""
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        """The client caught up."""
        self.inner.resume_writing()

    def receiving_body(self) -> bool:
        """Whether its request's body has not all arrived yet."""
        return self.request is not None and not self.request.content.is_eof()

    def abort(self) -> None:
        """Close at once, without flushing anything still to be written."""
        if self.transport is None:
            self.doomed = True
        else:
            self.transport.abort()

    def close_idle(self) -> None:
        """Close an idle keep-alive connection: a clean close unless a response is still waiting to be read."""
        if self.transport is not None and self.transport.get_write_buffer_size() == 0:
            self.transport.close()
        else:
            self.abort()


class _Listener:
    """One listening socket, accepted from in a reader callback; pauses with backoff when accept() fails."""

    def __init__(self, guard: ConnectionGuard, sock: socket.socket, make_protocol: Callable[[], asyncio.Protocol],
                 loop: asyncio.AbstractEventLoop) -> None:
        self._guard = guard
        self.sock = sock
        self._make_protocol = make_protocol
        self._loop = loop
        self._delay = ACCEPT_RETRY_S[0]
        self._resume: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Accept whenever a connection waits."""
        self._loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        """Stop accepting and close the socket (queued connections are reset by the kernel)."""
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        if self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())
            self.sock.close()

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                if err.errno in _CLIENT_GONE:
                    continue
                self._guard.accept_failed(err)
                self._pause()
                return
            conn.setblocking(False)
            self._delay = ACCEPT_RETRY_S[0]
            self._guard.admit(conn, self._make_protocol)

    def _pause(self) -> None:
        """Stop reading the socket for a while (Linux keeps it readable): the backoff doubles each time."""
        self._loop.remove_reader(self.sock.fileno())
        self._resume = self._loop.call_later(self._delay, self._resume_accepting)
        self._delay = min(self._delay * 2, ACCEPT_RETRY_S[1])

    def _resume_accepting(self) -> None:
        self._resume = None
        self.start()


class ConnectionGuard:
    """Accepts, counts, times and caps the connections of every listener of one HTTP server."""

    def __init__(self, *, request_timeout_s: float, metrics: Metrics) -> None:
        self.request_timeout_s = request_timeout_s
        self.cap = MAX_CONNECTIONS
        self.limit = 0  # the descriptor limit the cap was derived from (set at start)
        self._listeners: list[_Listener] = []
        self._connecting: set[asyncio.Task[Any]] = set()
        self._fresh: OrderedDict[_Connection, None] = OrderedDict()  # each ordered oldest first
        self._kept: OrderedDict[_Connection, None] = OrderedDict()
        self._busy: OrderedDict[_Connection, None] = OrderedDict()
        self._by_protocol: dict[object, _Connection] = {}
        self._failing_since: float | None = None
        self._last_failure = 0.0
        self._failures = 0
        self._reminded_at = 0.0
        self._closed = metrics.counter("hubd_http_connections_closed_total",
                                       "HTTP connections hubd closed before the client did, by reason", "reason")
        self._refused = metrics.counter("hubd_http_connections_refused_total",
                                        "HTTP connections answered 503 at the cap, with nothing idle to close")
        self._accept_failures = metrics.counter("hubd_http_accept_failures_total",
                                                "accept() calls that failed (out of file descriptors, mostly)")
        metrics.gauge("hubd_http_connections", "HTTP connections open", lambda: float(len(self)))
        metrics.gauge("hubd_http_connections_max", "HTTP connections allowed at once", lambda: float(self.cap))

    def __len__(self) -> int:
        return len(self._fresh) + len(self._kept) + len(self._busy)

    async def listen(self, host: str, port: int, make_protocol: Callable[[], asyncio.Protocol]) -> int:
        """Bind host:port (every address it resolves to) and accept there; the port bound. OSError if it cannot."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        sockets: list[socket.socket] = []
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        for sock in sockets:
            listener = _Listener(self, sock, make_protocol, loop)
            self._listeners.append(listener)
            listener.start()
        return int(sockets[0].getsockname()[1]) if sockets else port

    def close(self) -> None:
        """Stop accepting everywhere (a connection being set up still gets its transport, closed with the rest)."""
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()

    def admit(self, sock: socket.socket, make_protocol: Callable[[], asyncio.Protocol]) -> None:
        """A connection just accepted: hand it to aiohttp, making room at the cap, or refuse it."""
        loop = asyncio.get_running_loop()
        self._accepting(loop.time())
        if len(self) >= self.cap and not self._make_room():
            self._refused.inc()
            _refuse(sock)
            return
        inner = make_protocol()
        conn = _Connection(self, inner, loop.time())
        self._by_protocol[inner] = conn
        self._fresh[conn] = None
        # Like asyncio's own server, one short task per connection: it ends once the transport exists.
        task = loop.create_task(loop.connect_accepted_socket(lambda: conn, sock), name="http-accept")
        self._connecting.add(task)
        task.add_done_callback(lambda done: self._connected(done, conn, sock))

    def _connected(self, task: asyncio.Task[Any], conn: _Connection, sock: socket.socket) -> None:
        self._connecting.discard(task)
        if task.cancelled() or task.exception() is not None:
            # asyncio closed the transport if it made one (closing the socket again is harmless), else the
            # socket is still ours.
            log.debug("an accepted HTTP connection could not be set up", exc_info=None if task.cancelled()
                      else task.exception())
            self.forget(conn)
            sock.close()

    def request_started(self, request: web.BaseRequest) -> None:
        """Its headers are in and a handler has it: the connection is busy."""
        conn = self._by_protocol.get(request.protocol)
        if conn is None:
            return
        self._fresh.pop(conn, None)
        self._kept.pop(conn, None)
        conn.request = request
        conn.since = asyncio.get_running_loop().time()
        self._busy[conn] = None

    def request_finished(self, request: web.BaseRequest) -> None:
        """The handler is done: the connection waits for the client's next request."""
        conn = self._by_protocol.get(request.protocol)
        if conn is None or conn.request is not request:
            return
        self._busy.pop(conn, None)
        conn.request = None
        conn.since = asyncio.get_running_loop().time()
        if not conn.doomed and conn.transport is not None and not conn.transport.is_closing():
            self._kept[conn] = None

    def forget(self, conn: _Connection) -> None:
        """The connection is closed."""
        self._fresh.pop(conn, None)
        self._kept.pop(conn, None)
        self._busy.pop(conn, None)
        self._by_protocol.pop(conn.inner, None)

    def sweep(self, now: float) -> None:
        """Close what took too long: headers (fresh), an idle keep-alive (kept), a body (busy)."""
        self._expire(self._fresh, now - self.request_timeout_s, "header_timeout")
        self._expire(self._kept, now - KEEPALIVE_S, "keepalive")
        for conn in list(self._busy):
            if conn.since > now - self.request_timeout_s:
                break
            if conn.receiving_body():
                self._abort(conn, "body_timeout")
        self._accepting(now)

    async def run(self) -> None:
        """Sweep a few times per request timeout, until cancelled."""
        loop = asyncio.get_running_loop()
        every = min(1.0, self.request_timeout_s / 4)
        while True:
            await asyncio.sleep(every)
            self.sweep(loop.time())

    def abort_all(self) -> None:
        """Close whatever is still open (after aiohttp's graceful shutdown)."""
        for queue in (self._fresh, self._kept, self._busy):
            for conn in list(queue):
                self._abort(conn, "shutdown")

    def accept_failed(self, err: OSError) -> None:
        """accept() failed: say so once per episode, and free descriptors for the connections waiting."""
        now = asyncio.get_running_loop().time()
        self._accept_failures.inc()
        self._failures += 1
        self._last_failure = now
        if self._failing_since is None:
            self._failing_since = self._reminded_at = now
            log.warning("cannot accept HTTP connections: %s (file descriptor limit %d, %d HTTP connections open); "
                        "closing the ones that have sent no request and trying again, less often each time",
                        err.strerror, self.limit, len(self))
        elif now - self._reminded_at >= ACCEPT_REMINDER_S:
            self._reminded_at = now
            log.warning("still cannot accept HTTP connections: %s (%d tries failed in %.0f s, %d HTTP connections "
                        "open)", err.strerror, self._failures, now - self._failing_since, len(self))
        if err.errno not in OUT_OF_DESCRIPTORS:
            return
        if self._fresh:  # the likeliest culprits; a client of those that meant well connects again
            for conn in list(self._fresh):
                self._abort(conn, "evicted")
        else:
            self._make_room()

    def _accepting(self, now: float) -> None:
        """Accept works: after a quiet spell following failures, the episode is over."""
        if self._failing_since is not None and now - self._last_failure >= ACCEPT_QUIET_S:
            log.info("accepting HTTP connections again (%d tries failed in %.0f s)", self._failures,
                     self._last_failure - self._failing_since)
            self._failing_since = None
            self._failures = 0

    def _make_room(self) -> bool:
        """Close one connection that is waiting on its client; whether there was one."""
        for queue in (self._fresh, self._kept):
            if queue:
                self._abort(next(iter(queue)), "evicted")
                return True
        for conn in self._busy:
            if conn.receiving_body():
                self._abort(conn, "evicted")
                return True
        return False

    def _expire(self, queue: OrderedDict[_Connection, None], before: float, reason: str) -> None:
        while queue:
            conn = next(iter(queue))
            if conn.since > before:
                return
            self._abort(conn, reason)

    def _abort(self, conn: _Connection, reason: str) -> None:
        self._fresh.pop(conn, None)
        self._kept.pop(conn, None)
        self._busy.pop(conn, None)
        self._closed.inc(label=reason)
        if reason == "keepalive":
            conn.close_idle()
        else:
            conn.abort()


def _refuse(sock: socket.socket) -> None:
    """The canned 503, if the socket takes it at once, then closed; nothing is read or parsed."""
    try:
        sock.send(_REFUSAL)
    except OSError:
        pass
    finally:
        sock.close()
