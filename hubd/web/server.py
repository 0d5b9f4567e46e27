"""The HTTP server component: its listeners, the error middleware, /healthz, /metrics.

Feature modules (driver, directive endpoint, webhook, status) contribute routes as `RouteSource`s; this
module knows none of them. app.py hands them over in two groups: `sources`, served to anyone (what the
platform and browsers logging in must reach), and `local_sources`, served only to the local network.
With `local_port`, the local ones (and /metrics) are served on a listener of their own and nowhere
else; without it, one listener serves all and a local route answers 403 to a peer outside loopback and
the private ranges (`peers.py`; the TCP peer, never X-Forwarded-For). On either listener a local route
answers 421 to a request whose `Host` is not an IP literal, localhost or one of the hub's names
(`hosts.py`: what DNS rebinding would send).

Connections are counted, capped and timed in `connections.py`. Errors become JSON in exactly one place:
`_error_middleware`, in one shape: `{"error": "<what to do>", "details": [...]}`; what aiohttp refuses
before any route runs is answered in the same shape by its protocol (`jsonerror.py`).
A failure is logged with the route's pattern (`/trigger/with/{token}`), never the path, which may hold a
secret; and the answer never carries an error's own text (it may name files). A client's own fault (a body
that does not match its Content-Encoding, a connection dropped mid-body) is a 4xx without a traceback,
also in aiohttp's log (`_ClientFaults`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from aiohttp import hdrs, web
from aiohttp.http_exceptions import ContentEncodingError, HttpProcessingError

from hubd.errors import HubdError, StorageUnavailable, StoreError
from hubd.identity import CHALLENGE_PARAM, CHALLENGE_RULE, valid_challenge
from hubd.lifecycle import Health
from hubd.metrics import Metrics
from hubd.threads import in_daemon_thread
from hubd.web.connections import KEEPALIVE_S, REQUEST_TIMEOUT_S, ConnectionGuard, connection_cap, fd_limit
from hubd.web.hosts import HostCheck, fqdn, machine_names
from hubd.web.jsonerror import JsonErrorProtocol, json_error, route_pattern
from hubd.web.peers import is_local_address

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# What a request that needed a write is told while the disk refuses writes: the storage probe retries meanwhile.
STORAGE_RETRY_AFTER_S = 10

NOT_LOCAL = ("this route is served only to the local network (loopback and private addresses): open it from "
             "there, or set http.local_port to serve the local routes on a listener of their own")
# 421 Misdirected Request: the request was meant for another host (RFC 9110 15.5.20), as a rebound name's is.
HOST_REFUSED_STATUS = 421
HOST_REFUSED = ("this route answers only requests addressed to this hub by an IP address, localhost or one of its "
                "names (the Host header): open it that way, or add the name you use to http.allowed_hosts")
FQDN_WAIT_S = 2.0  # at start, how long the FQDN lookup may take before the local routes go without it


class _ClientFaults(logging.Filter):
    """aiohttp's own log of a client's malformed request or body: one line at debug, not a traceback at error."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Let through anything but a client's fault; turn that into a debug line (or drop it above debug)."""
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError | web.RequestPayloadError | ConnectionError):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.msg = f"{record.getMessage()}: {type(exc).__name__}: {' '.join(str(exc).split())}"
        record.args = None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.exc_info = record.exc_text = None
        return True


# aiohttp logs through this (AppRunner's `logger`) rather than `aiohttp.server`: in 3.9 every malformed
# request and, in every release, a body it could not decode are an ERROR with a traceback there.
_aiohttp_log = logging.getLogger(f"{__name__}.aiohttp")
_aiohttp_log.addFilter(_ClientFaults())


class RouteSource(Protocol):
    """Something that serves HTTP routes."""

    def routes(self) -> list[web.RouteDef]:
        """The routes to add to the application."""


class IdentityProof(Protocol):
    """The installation's answer to a `/healthz?challenge=` nonce (hubd.store.identity.InstanceIdentity)."""

    async def prove(self, challenge: str) -> str | None:
        """The answer, or None when there is no secret to answer with."""


class HttpServer:
    """Serves hubd's HTTP API on http.host:http.port, and the local routes on http.local_port when set."""

    name = "http"

    def __init__(
        self,
        *,
        host: str,
        port: int,
        max_body_bytes: int,
        health: Health,
        metrics: Metrics,
        sources: Sequence[RouteSource],
        local_sources: Sequence[RouteSource] = (),
        local_host: str = "127.0.0.1",
        local_port: int | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int | None = None,
        host_names: Sequence[str] = (),
        identity: IdentityProof | None = None,
    ) -> None:
        self._host = host
        self._identity = identity
        self._port = port
        self._local_host = local_host
        self._local_port = local_port
        self._max_body = max_body_bytes
        self._max_connections = max_connections
        self._health = health
        self._metrics = metrics
        self._sources = sources
        self._local_sources = local_sources
        self._guard = ConnectionGuard(request_timeout_s=request_timeout_s, metrics=metrics)
        self._runners: list[web.AppRunner] = []
        self._local_resources: set[web.AbstractResource] = set()  # checked: the Host, and the peer (one listener)
        self._check_peers = local_port is None
        self._hosts = HostCheck(host_names)
        self._requests = metrics.counter("hubd_http_requests_total", "HTTP requests served, by status", "status")
        self.bound_port: int | None = None
        self.bound_local_port: int | None = None
        health.require("http", "not listening yet")

    async def start(self) -> None:
        """Bind the port(s); fail fast if one is taken."""
        limit = fd_limit()
        self._guard.limit = limit
        self._guard.cap = connection_cap(limit, self._max_connections)
        if self._max_connections is not None and self._guard.cap < self._max_connections:
            log.warning("http.max_connections %d is more than the file descriptor limit %d allows; using %d",
                        self._max_connections, limit, self._guard.cap)
        await self._find_machine_names()
        try:
            if self._local_port is None:
                app = self._app(self._sources, self._local_sources, serve_local=True)
                self.bound_port = await self._listen(app, self._host, self._port)
                detail = f"listening on {_hostport(self._host, self.bound_port)}"
            else:
                public = self._app(self._sources, (), serve_local=False)
                local = self._app((), self._local_sources, serve_local=True)
                self.bound_port = await self._listen(public, self._host, self._port)
                self.bound_local_port = await self._listen(local, self._local_host, self._local_port)
                detail = (f"listening on {_hostport(self._host, self.bound_port)} and, for the local routes, "
                          f"{_hostport(self._local_host, self.bound_local_port)}")
        except BaseException:
            await self._close()
            raise
        log.info("HTTP %s; at most %d connections at once (file descriptor limit %d)", detail, self._guard.cap, limit)
        self._health.set("http", True, detail)

    async def run(self) -> None:
        """Close connections whose client takes too long to send its request (aiohttp serves from its own tasks)."""
        await self._guard.run()

    async def stop(self) -> None:
        """aiohttp's graceful shutdown: stop accepting, finish in-flight requests, clean up."""
        self._health.set("http", False, "stopped")
        await self._close()

    async def _close(self) -> None:
        self._guard.close()
        runners, self._runners = self._runners, []
        await asyncio.gather(*(runner.cleanup() for runner in runners))
        self._guard.abort_all()

    async def _find_machine_names(self) -> None:
        """Let the local routes answer this machine's names too: hostname, `<hostname>.local`, and the FQDN."""
        self._hosts.add(machine_names())
        # getfqdn() may wait on DNS: not on the loop, and a start never waits for it past FQDN_WAIT_S.
        try:
            async with asyncio.timeout(FQDN_WAIT_S):
                self._hosts.add([await in_daemon_thread(fqdn, name="hubd-fqdn")])
        except (TimeoutError, OSError) as err:
            log.warning("this machine's fully qualified name was not found (%s); the local routes answer its "
                        "hostname, IP addresses and http.allowed_hosts", err or "no answer in time")
        log.debug("the local routes answer the Host names %s and any IP address", ", ".join(sorted(self._hosts.names)))

    def _app(self, public: Sequence[RouteSource], local: Sequence[RouteSource], *, serve_local: bool
             ) -> web.Application:
        """An application with /healthz, the public routes, and with `serve_local` /metrics and the local routes."""
        app = web.Application(client_max_size=self._max_body, middlewares=[self._error_middleware])
        app.router.add_get("/healthz", self._healthz)
        for source in public:
            app.router.add_routes(source.routes())
        if serve_local:
            routes = [web.get("/metrics", self._metrics_route)] + [r for source in local for r in source.routes()]
            added = app.router.add_routes(routes)
            # By resource: it also holds the HEAD route aiohttp adds to each GET.
            self._local_resources.update(route.resource for route in added if route.resource is not None)
        return app

    async def _listen(self, app: web.Application, host: str, port: int) -> int:
        """Serve `app` on host:port through the connection guard; the port bound."""
        handler_args: dict[str, Any] = {"access_log": None, "keepalive_timeout": KEEPALIVE_S, "logger": _aiohttp_log}
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2.0, **handler_args)
        await runner.setup()
        self._runners.append(runner)
        server = runner.server
        assert server is not None  # set by setup()
        loop = asyncio.get_running_loop()
        try:
            # aiohttp's protocol but for its own refusals (JSON), made as the server would make it.
            return await self._guard.listen(host, port, lambda: JsonErrorProtocol(server, loop=loop, **handler_args))
        except OSError as err:
            raise HubdError(f"cannot listen on {host}:{port}: {err.strerror}") from err

    @web.middleware
    async def _error_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self._guard.request_started(request)
        try:
            response = await self._answer(request, handler)
        except web.HTTPException as err:  # a redirect
            self._requests.inc(label=str(err.status))
            raise
        finally:
            self._guard.request_finished(request)
        self._requests.inc(label=str(response.status))
        return response

    async def _answer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The handler's response, or the JSON error it comes to; only a redirect is raised."""
        if request.match_info.route.resource in self._local_resources:
            refused = self._refused_here(request)
            if refused is not None:
                return refused
        try:
            return await handler(request)
        except web.HTTPException as err:
            if err.status < 400:
                raise
            return self._http_error(request, err)
        except web.RequestPayloadError as err:
            return _unreadable_body(request, err)
        except (ConnectionError, RuntimeError):
            # Reading from a connection that is gone: ConnectionResetError, or aiohttp's RuntimeError when it
            # was gone before the read began. Anything else, or with the connection still there, is a fault.
            if request.transport is not None and not request.transport.is_closing():
                log.exception("%s %s failed", request.method, route_pattern(request))
                return json_error(500, "internal error in hubd; see the hubd log", [])
            log.debug("%s %s: the connection closed before the request was complete", request.method,
                      route_pattern(request))
            return json_error(400, "the connection closed before the request was complete", [])
        except StorageUnavailable as err:  # the disk refuses writes: hubd says so on /healthz and recovers
            log.warning("%s %s: not answered, the database takes no writes: %s", request.method, route_pattern(request),
                        err)
            return json_error(503, "hubd cannot save anything right now (its disk refuses writes); nothing was "
                               "done, try again shortly", [{"path": "(server)", "message": "storage"}],
                               {"Retry-After": str(STORAGE_RETRY_AFTER_S)})
        except HubdError as err:
            log.error("%s %s failed: %s", request.method, route_pattern(request), err)
            message = ("hubd's database failed while answering; try again shortly, and see the hubd log if it keeps "
                       "failing" if isinstance(err, StoreError) else "hubd could not answer; see the hubd log")
            return json_error(500, message, [{"path": "(server)", "message": type(err).__name__}])
        except Exception:
            log.exception("%s %s failed", request.method, route_pattern(request))
            return json_error(500, "internal error in hubd; see the hubd log", [])

    def _refused_here(self, request: web.Request) -> web.Response | None:
        """A local route's answer to a peer outside the local network (one listener) or a Host not the hub's."""
        if self._check_peers:
            peer = _peer_host(request)
            if not is_local_address(peer):
                return json_error(403, NOT_LOCAL, [{"path": "(address)", "message": f"{peer or 'an unknown peer'} "
                                                    "is not a loopback, private or link-local address"}])
        refusal = self._hosts.refusal(request.headers.getall(hdrs.HOST, []))
        if refusal is not None:
            log.debug("%s %s: refused, %s", request.method, route_pattern(request), refusal)
            return json_error(HOST_REFUSED_STATUS, HOST_REFUSED, [{"path": "(header) Host", "message": refusal}])
        return None

    def _http_error(self, request: web.Request, err: web.HTTPException) -> web.Response:
        """aiohttp's own refusals (no such route, wrong method, body too large) as JSON."""
        headers = {k: v for k, v in err.headers.items() if k.lower() not in ("content-type", "content-length")}
        if isinstance(err, web.HTTPNotFound):
            message = f"nothing here: {request.method} {request.path}; see docs/http.md for hubd's routes"
        elif isinstance(err, web.HTTPMethodNotAllowed):
            message = f"{request.method} is not allowed here; use {', '.join(sorted(err.allowed_methods))}"
        elif isinstance(err, web.HTTPRequestEntityTooLarge):
            message = f"request bodies are limited to {self._max_body} bytes (http.max_body_bytes)"
        else:
            message = f"{err.status} {err.reason}"
        return json_error(err.status, message, [], headers)

    async def _healthz(self, request: web.Request) -> web.Response:
        body: dict[str, object] = {"status": "ok" if self._health.ready else "unavailable",
                                   "checks": self._health.snapshot()}
        if not self._health.ready:
            body["not_ready"] = self._health.not_ready()
        challenge = request.query.get(CHALLENGE_PARAM)
        if challenge is not None and self._identity is not None:
            # `hubd doctor`'s proof that this hubd, not some server at the public URL, answers (hubd/identity.py).
            if not valid_challenge(challenge):
                return json_error(400, f"{CHALLENGE_PARAM} must be {CHALLENGE_RULE}",
                                  [{"path": CHALLENGE_PARAM, "message": "not a nonce hubd answers"}])
            body["identity"] = await self._identity.prove(challenge)
        return web.json_response(body, status=200 if self._health.ready else 503)

    async def _metrics_route(self, request: web.Request) -> web.Response:
        return web.Response(text=self._metrics.render(), content_type="text/plain", charset="utf-8")


def _unreadable_body(request: web.Request, err: web.RequestPayloadError) -> web.Response:
    """A body aiohttp could not read (e.g. `Content-Encoding: gzip` on one that is not): 400, connection closed."""
    if isinstance(err.__cause__, ContentEncodingError):
        message = ("the body is not what its Content-Encoding header says; send it uncompressed, or compressed "
                   "as declared (gzip, deflate)")
    else:
        message = "the body could not be read as sent; check its Content-Length or Transfer-Encoding"
    log.debug("%s %s: unreadable request body (%s)", request.method, route_pattern(request), " ".join(str(err).split()))
    response = json_error(400, message, [{"path": "(body)", "message": type(err.__cause__ or err).__name__}])
    response.force_close()  # the rest of the stream cannot be parsed
    return response


def _peer_host(request: web.Request) -> str | None:
    """The TCP peer's address: the connection's own, whatever a forwarding header says."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    return str(peer[0]) if isinstance(peer, tuple) and peer else None


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
