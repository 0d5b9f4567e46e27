"""HTTP connections: request timeouts, the connection cap, unreadable bodies (a real HttpServer over loopback)."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from unit_helpers import eventually

from hubd.lifecycle import Health
from hubd.metrics import Metrics
from hubd.web.connections import ACCEPT_BATCH, MAX_CONNECTIONS, MIN_CONNECTIONS, RESERVED_FDS, connection_cap
from hubd.web.server import HttpServer

FAILURE_BOUND_S = 10.0  # only to turn a hang into a failure


class _Routes:
    """/echo reads its whole body; /hold waits until the test lets it answer."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.holding = 0

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/echo", self._echo), web.get("/hold", self._hold)]

    async def _echo(self, request: web.Request) -> web.Response:
        return web.json_response({"body": (await request.read()).decode()})

    async def _hold(self, request: web.Request) -> web.Response:
        self.holding += 1
        await self.release.wait()
        return web.json_response({"held": True})


class Served:
    """A running HttpServer (its run() loop too) and what the tests look at."""

    def __init__(self, server: HttpServer, routes: _Routes, metrics: Metrics) -> None:
        self.server = server
        self.routes = routes
        self.metrics = metrics

    @property
    def port(self) -> int:
        assert self.server.bound_port is not None
        return self.server.bound_port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def value(self, name: str) -> float:
        """A metric's value from the exposition text (0 when absent)."""
        for line in self.metrics.render().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return 0.0

    async def connect(self, data: bytes = b"") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        if data:
            writer.write(data)
            await writer.drain()
        return reader, writer

    async def open_connections(self, count: int) -> None:
        await eventually(lambda: self.value("hubd_http_connections") == count, f"{count} connections open")


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    """Factory: `await serve(request_timeout_s=..., max_connections=...)`; everything stops at teardown."""
    started: list[tuple[HttpServer, asyncio.Task[None], list[asyncio.StreamWriter]]] = []

    async def make(**kwargs: Any) -> Served:
        metrics = Metrics()
        routes = _Routes()
        server = HttpServer(host="127.0.0.1", port=0, max_body_bytes=1024, health=Health(), metrics=metrics,
                            sources=[routes], **kwargs)
        await server.start()
        started.append((server, asyncio.create_task(server.run()), []))
        return Served(server, routes, metrics)

    yield make
    for server, task, _ in started:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await server.stop()


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closed)."""
    received = b""
    async with asyncio.timeout(FAILURE_BOUND_S):
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Records logged at WARNING or above, or with a traceback."""
    return [f"{r.name} {r.levelname} {r.getMessage()}" for r in caplog.records
            if r.levelno >= logging.WARNING or r.exc_info]


def test_the_connection_cap_leaves_descriptors_for_the_rest_of_hubd() -> None:
    assert connection_cap(256) == 80
    assert connection_cap(1024) == 464
    assert connection_cap(4096) == MAX_CONNECTIONS
    assert connection_cap(64) == MIN_CONNECTIONS
    assert connection_cap(1024, configured=100) == 100
    assert connection_cap(256, configured=500) == 80  # a setting never goes past what the limit allows
    # A batch of accepts may hold a descriptor each before the connections they evict are released.
    for limit in (256, 1024, 4096, 65536):
        assert RESERVED_FDS + connection_cap(limit) + ACCEPT_BATCH <= limit * 7 // 8, limit


async def test_a_client_that_never_finishes_its_headers_is_disconnected(
        serve: Callable[..., Awaitable[Served]]) -> None:
    served = await serve(request_timeout_s=0.3)
    reader, writer = await served.connect(b"GET /healthz HTTP/1.1\r\nHost: hub\r\n")
    assert await closed_by_server(reader) == b""
    writer.close()
    assert served.value('hubd_http_connections_closed_total{reason="header_timeout"}') == 1
    # A client that says nothing at all is the same.
    reader, writer = await served.connect()
    assert await closed_by_server(reader) == b""
    writer.close()
    assert served.value('hubd_http_connections_closed_total{reason="header_timeout"}') == 2


async def test_a_client_that_never_finishes_its_body_is_disconnected_without_a_traceback(
        serve: Callable[..., Awaitable[Served]], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    served = await serve(request_timeout_s=0.3)
    reader, writer = await served.connect(
        b"POST /echo HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
    assert await closed_by_server(reader) == b""
    writer.close()
    assert served.value('hubd_http_connections_closed_total{reason="body_timeout"}') == 1
    await eventually(lambda: served.value('hubd_http_requests_total{status="400"}') == 1, "the request counted")
    assert no_tracebacks(caplog) == []


async def test_a_request_sent_in_time_is_answered_and_the_connection_kept(
        serve: Callable[..., Awaitable[Served]]) -> None:
    served = await serve(request_timeout_s=5.0)
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            async with session.post(f"{served.url}/echo", json={"n": 1}) as response:
                assert (response.status, await response.json()) == (200, {"body": '{"n": 1}'})
    assert served.value('hubd_http_requests_total{status="200"}') == 3
    assert served.metrics.render().count("hubd_http_connections_closed_total{") == 0


async def test_a_full_server_makes_room_by_closing_the_longest_waiting_connection(
        serve: Callable[..., Awaitable[Served]]) -> None:
    served = await serve(max_connections=MIN_CONNECTIONS)
    assert served.value("hubd_http_connections_max") == MIN_CONNECTIONS
    waiting = []
    for _ in range(MIN_CONNECTIONS):
        waiting.append(await served.connect(b"GET /healthz HTTP/1.1\r\n"))
        await served.open_connections(len(waiting))
    async with aiohttp.ClientSession() as session, session.get(f"{served.url}/healthz") as response:
        assert response.status == 200
    oldest_reader, _ = waiting[0]
    assert await closed_by_server(oldest_reader) == b""
    assert served.value('hubd_http_connections_closed_total{reason="evicted"}') == 1
    assert served.value("hubd_http_connections") <= MIN_CONNECTIONS
    for _, writer in waiting:
        writer.close()


async def test_a_full_server_whose_every_request_is_in_a_handler_answers_503(
        serve: Callable[..., Awaitable[Served]]) -> None:
    served = await serve(max_connections=MIN_CONNECTIONS)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def hold() -> int:
            async with session.get(f"{served.url}/hold") as response:
                return response.status

        held = [asyncio.create_task(hold()) for _ in range(MIN_CONNECTIONS)]
        await eventually(lambda: served.routes.holding == MIN_CONNECTIONS, "every connection in a handler")
        reader, writer = await served.connect()
        answer = await closed_by_server(reader)
        writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 "), answer
        assert b"Retry-After: 5" in head
        assert "too many open connections" in json.loads(body)["error"]
        assert served.value("hubd_http_connections_refused_total") == 1
        served.routes.release.set()
        assert await asyncio.gather(*held) == [200] * MIN_CONNECTIONS


@pytest.mark.parametrize("split", [False, True], ids=["one-packet", "body-later"])
async def test_a_gzip_header_on_a_body_that_is_not_gzip_is_a_json_400(
        serve: Callable[..., Awaitable[Served]], caplog: pytest.LogCaptureFixture, split: bool) -> None:
    caplog.set_level(logging.DEBUG)
    served = await serve()
    body = b'{"this is": "not gzip"}'
    head = (b"POST /echo HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    reader, writer = await served.connect(head if split else head + body)
    if split:
        await eventually(lambda: served.value("hubd_http_connections") == 1, "the request under way")
        writer.write(body)
    answer = await closed_by_server(reader)  # and closed: the rest of the stream cannot be trusted
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 400 "), answer
    reply = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert "Content-Encoding" in reply["error"], reply
    assert reply["details"] == [{"path": "(body)", "message": "ContentEncodingError"}]
    assert no_tracebacks(caplog) == []
    # A real gzip body is read as sent.
    async with aiohttp.ClientSession() as session, session.post(
            f"{served.url}/echo", data=gzip.compress(body),
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}) as response:
        assert (response.status, await response.json()) == (200, {"body": body.decode()})


@pytest.mark.parametrize("encoding", ["br", "zstd"])
async def test_a_body_in_an_encoding_hubd_cannot_decode_is_a_json_400(
        serve: Callable[..., Awaitable[Served]], caplog: pytest.LogCaptureFixture, encoding: str) -> None:
    caplog.set_level(logging.DEBUG)
    served = await serve()
    body = b'{"not": "compressed"}'  # what aiohttp could decode (with the package) would fail as a bad body instead
    reader, writer = await served.connect(b"POST /echo HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\n"
                                          b"Content-Encoding: " + encoding.encode() + b"\r\n"
                                          b"Content-Length: %d\r\n\r\n" % len(body) + body)
    answer = await closed_by_server(reader)
    writer.close()
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0], answer
    assert b"application/json" in head, answer
    reply = json.loads(rest)
    assert "Content-Encoding" in reply["error"] and "gzip" in reply["error"], reply
    assert "install" not in json.dumps(reply).lower(), reply  # aiohttp's own text named a package
    assert reply["details"][0]["message"] == "ContentEncodingError", reply
    assert no_tracebacks(caplog) == []


@pytest.mark.parametrize(("raw", "status", "words"), [
    (b"GARBAGE\r\n\r\n", 400, "not valid HTTP/1.1"),
    (b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "not valid HTTP/1.1"),  # no Host
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: hub\r\n\r\n", 400, "too long"),
    (b"POST /echo HTTP/1.1\r\nHost: hub\r\nExpect: 200-ok\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
     417, "the Expect header may only be 100-continue"),
], ids=["garbage", "no-host", "long-line", "expect"])
async def test_requests_aiohttp_refuses_before_any_route_get_the_json_error_shape(
        serve: Callable[..., Awaitable[Served]], caplog: pytest.LogCaptureFixture, raw: bytes, status: int,
        words: str) -> None:
    caplog.set_level(logging.DEBUG)
    served = await serve()
    reader, writer = await served.connect(raw)
    answer = await closed_by_server(reader)
    writer.close()
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == str(status).encode(), answer
    assert b"application/json" in head, answer
    reply = json.loads(rest)
    assert words in reply["error"] and isinstance(reply["details"], list), reply
    assert no_tracebacks(caplog) == []
