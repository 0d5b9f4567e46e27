"""The HTTP server component: aiohttp AppRunner + TCPSite, the error middleware, /healthz, /metrics.

Feature modules (driver, vendor endpoint, webhook, status) contribute routes as `RouteSource`s;
this module knows none of them. Errors become JSON in exactly one place: `_error_middleware`, in
the shape of CONTRACT.md section 5: `{"error": "<what to do>", "details": [...]}`. A failure is
logged with the route's pattern (`/trigger/with/{token}`), never the path, which may hold a secret;
and the answer never carries an error's own text (it may name files).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from aiohttp import web

from hubd.errors import HubdError, StoreError
from hubd.lifecycle import Health
from hubd.metrics import Metrics

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RouteSource(Protocol):
    """Something that serves HTTP routes."""

    def routes(self) -> list[web.RouteDef]:
        """The routes to add to the application."""


class HttpServer:
    """Serves hubd's HTTP API on http.host:http.port."""

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
    ) -> None:
        self._host = host
        self._port = port
        self._max_body = max_body_bytes
        self._health = health
        self._metrics = metrics
        self._sources = sources
        self._runner: web.AppRunner | None = None
        self._requests = metrics.counter("hubd_http_requests_total", "HTTP requests served, by status", "status")
        self.bound_port: int | None = None
        health.require("http", "not listening yet")

    async def start(self) -> None:
        """Bind the port; fail fast if it is taken."""
        app = web.Application(client_max_size=self._max_body, middlewares=[self._error_middleware])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/metrics", self._metrics_route)
        for source in self._sources:
            app.router.add_routes(source.routes())
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port, reuse_address=True)
        try:
            await site.start()
        except OSError as err:
            await runner.cleanup()
            raise HubdError(f"cannot listen on {self._host}:{self._port}: {err.strerror}") from err
        self._runner = runner
        server = site._server  # aiohttp exposes no public accessor for the bound socket
        sockets = getattr(server, "sockets", None) or []
        self.bound_port = sockets[0].getsockname()[1] if sockets else self._port
        log.info("HTTP listening on %s:%s", self._host, self.bound_port)
        self._health.set("http", True, f"listening on {self._host}:{self.bound_port}")

    async def run(self) -> None:
        """aiohttp serves from its own tasks; nothing to loop over here."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """aiohttp's graceful shutdown: stop accepting, finish in-flight requests, clean up."""
        self._health.set("http", False, "stopped")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _error_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as err:
            self._requests.inc(label=str(err.status))
            if err.status < 400:
                raise  # a redirect
            return self._http_error(request, err)
        except HubdError as err:
            self._requests.inc(label="500")
            log.error("%s %s failed: %s", request.method, _route(request), err)
            message = ("hubd's database failed while answering; try again shortly, and see the hubd log if it keeps "
                       "failing" if isinstance(err, StoreError) else "hubd could not answer; see the hubd log")
            return _json_error(500, message, [{"path": "(server)", "message": type(err).__name__}])
        except Exception:
            self._requests.inc(label="500")
            log.exception("%s %s failed", request.method, _route(request))
            return _json_error(500, "internal error in hubd; see the hubd log", [])
        self._requests.inc(label=str(response.status))
        return response

    def _http_error(self, request: web.Request, err: web.HTTPException) -> web.Response:
        """aiohttp's own refusals (no such route, wrong method, body too large) as JSON."""
        headers = {k: v for k, v in err.headers.items() if k.lower() not in ("content-type", "content-length")}
        if isinstance(err, web.HTTPNotFound):
            message = f"nothing here: {request.method} {request.path}; see README.md for hubd's routes"
        elif isinstance(err, web.HTTPMethodNotAllowed):
            message = f"{request.method} is not allowed here; use {', '.join(sorted(err.allowed_methods))}"
        elif isinstance(err, web.HTTPRequestEntityTooLarge):
            message = f"request bodies are limited to {self._max_body} bytes (http.max_body_bytes)"
        else:
            message = f"{err.status} {err.reason}"
        return _json_error(err.status, message, [], headers)

    async def _healthz(self, request: web.Request) -> web.Response:
        body: dict[str, object] = {"status": "ok" if self._health.ready else "unavailable",
                                   "checks": self._health.snapshot()}
        if not self._health.ready:
            body["not_ready"] = self._health.not_ready()
        return web.json_response(body, status=200 if self._health.ready else 503)

    async def _metrics_route(self, request: web.Request) -> web.Response:
        return web.Response(text=self._metrics.render(), content_type="text/plain", charset="utf-8")


def _route(request: web.Request) -> str:
    """The route's pattern, e.g. `/trigger/with/{token}`: never the path itself, which may hold a secret."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "(no route)"


def _json_error(status: int, message: str, details: list[dict[str, str]],
                headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message, "details": details}, status=status, headers=headers)
