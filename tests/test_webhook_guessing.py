"""Unknown webhook tokens over loopback: guessers are slowed per client address, the right token never is; the
refused calls left out of the log are summed up once their minute is over.

A WebhookService behind the real HttpServer with clocks the test moves. Clients come from different
loopback addresses (127.0.0.2 is another machine as far as hubd can tell), or through a trusted
proxy that names them in X-Forwarded-For. No speaker is known, so a call with the right token ends
in a 422 that says so: past the token check, which is all these tests are about.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mosquitto import free_port
from unit_helpers import eventually

from hubd.devices.changes import Change
from hubd.failures import REFUSAL_WINDOW_S
from hubd.lifecycle import Health
from hubd.metrics import Metrics
from hubd.registry import ChangeSink, DeviceRegistry
from hubd.store.db import Database
from hubd.store.devices import DeviceRows
from hubd.web.server import HttpServer
from hubd.webhook import store
from hubd.webhook.service import GUESS_CAP_S, GUESS_FREE, WebhookService

BODY = {"type": "tts", "devices": {"isAll": True}, "data": {"text": "hello"}}
NOW = 1_700_000_000.0


class NoSink:
    """The registry's next stage; nothing reaches it here."""

    async def commit(self, changes: Sequence[Change], rows: DeviceRows, receipts: Sequence[Any] = ()) -> None:
        """Nothing to persist."""


class NoBroker:
    """The way to the speakers; never reached here (no speaker is known), so it needs no methods but `connected`."""

    connected = True


@dataclass
class Hook:
    """A running webhook service: its URL, its token, and the clocks it reads (wall, monotonic)."""

    url: str
    token: str
    now: list[float]
    mono: list[float]

    def advance(self, seconds: float) -> None:
        """Move the service's clocks."""
        self.now[0] += seconds
        self.mono[0] += seconds


@asynccontextmanager
async def running_webhook(tmp_path: Path, trusted_proxies: tuple[str, ...] = (), *,
                          running: bool = False) -> AsyncIterator[Hook]:
    """A database with one webhook, the service (with `running`, its `run()` too) and the HTTP server on 127.0.0.1;
    stopped after."""
    now, mono = [NOW], [1000.0]
    db = Database(tmp_path / "hubd.db")
    await db.start()
    _, token = await db.call(store.create_blocking, "test", None, NOW)
    metrics = Metrics()
    service = WebhookService(db, DeviceRegistry(db, NoSink(), metrics), NoBroker(), per_minute=1000, per_day=10000,
                             metrics=metrics, clock=lambda: now[0], trusted_proxies=trusted_proxies,
                             monotonic=lambda: mono[0])
    port = free_port()
    server = HttpServer(host="127.0.0.1", port=port, max_body_bytes=65536, health=Health(), metrics=metrics,
                        sources=[service])
    try:
        await service.start()
        runs = asyncio.create_task(service.run()) if running else None
        await server.start()
        try:
            yield Hook(f"http://127.0.0.1:{port}", token, now, mono)
        finally:
            await server.stop()
            if runs is not None:
                runs.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runs
            await service.stop()
    finally:
        await db.stop()


def client(source: str = "127.0.0.1") -> aiohttp.ClientSession:
    """A client whose connections come from `source` (a loopback address)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source, 0)))


async def call(session: aiohttp.ClientSession, hook: Hook, token: str, forwarded: str | None = None,
               data: bytes | None = None) -> tuple[int, dict[str, Any], str | None]:
    """POST /trigger/with/<token>; (status, JSON body, Retry-After)."""
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    kwargs: dict[str, Any] = {"data": data, "headers": {**headers, "Content-Type": "application/json"}} \
        if data is not None else {"json": BODY, "headers": headers}
    async with session.post(f"{hook.url}/trigger/with/{token}", **kwargs) as resp:
        return resp.status, await resp.json(), resp.headers.get("Retry-After")


def guess(i: int) -> str:
    return f"whk_{i:043d}"


def accepted(status: int, body: dict[str, Any]) -> bool:
    """Past the token check: no speaker is known, so the right token ends in this 422."""
    return status == 422 and "speaker" in body["error"]


async def test_the_right_token_is_accepted_after_a_neighbours_many_wrong_guesses(tmp_path: Path) -> None:
    async with running_webhook(tmp_path) as hook, client("127.0.0.2") as neighbour, client() as owner:
        answers = [(await call(neighbour, hook, guess(i)))[0] for i in range(50)]
        assert answers == [404] * GUESS_FREE + [429] * (50 - GUESS_FREE)
        status, body, _ = await call(owner, hook, hook.token)
        assert accepted(status, body), body
        # even from the guessing address itself: a token has 256 random bits, refusing it protects nothing
        status, body, _ = await call(neighbour, hook, hook.token)
        assert accepted(status, body), body
        # and the owner's own address is not slowed by the neighbour's guesses
        assert (await call(owner, hook, guess(99)))[0] == 404


async def test_unknown_tokens_wait_longer_and_longer_up_to_the_cap(tmp_path: Path) -> None:
    async with running_webhook(tmp_path) as hook, client() as session:
        for i in range(GUESS_FREE):
            assert (await call(session, hook, guess(i)))[0] == 404
        waits = []
        for i in range(14):
            status, body, retry_after = await call(session, hook, guess(100 + i))
            assert status == 429 and retry_after is not None
            assert body["error"] == ("too many unknown webhook tokens from 127.0.0.1; check the URL and try again "
                                     "later") and body["details"][0]["path"] == "(address)"
            waits.append(int(retry_after))
            hook.advance(int(retry_after))
            assert (await call(session, hook, guess(200 + i)))[0] == 404  # its turn: answered, and counted
        assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900, 900, 900]
        assert max(waits) == GUESS_CAP_S


async def test_a_waiting_address_costs_no_lookup_per_made_up_token_yet_finds_a_new_webhook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups: list[str] = []
    real = store.lookup_blocking

    def counting(conn: Any, token: str) -> Any:
        lookups.append(token)
        return real(conn, token)

    monkeypatch.setattr(store, "lookup_blocking", counting)
    async with running_webhook(tmp_path) as hook, client("127.0.0.2") as neighbour:
        for i in range(GUESS_FREE):
            assert (await call(neighbour, hook, guess(i)))[0] == 404
        lookups.clear()
        answers = [(await call(neighbour, hook, guess(100 + i)))[0] for i in range(200)]
        assert answers == [429] * 200 and lookups == []
        # the right token, and one made after the hashes were loaded (within a second), still get through
        assert accepted(*(await call(neighbour, hook, hook.token))[:2])
        db = Database(tmp_path / "hubd.db")
        await db.start()
        try:
            _, fresh = await db.call(store.create_blocking, "fresh", None, NOW)
        finally:
            await db.stop()

        async def fresh_accepted() -> bool:
            return accepted(*(await call(neighbour, hook, fresh))[:2])
        await eventually(fresh_accepted, "the new webhook's token accepted from the waiting address")


@pytest.mark.parametrize("trusted", [False, True])
async def test_x_forwarded_for_is_honoured_only_from_a_trusted_proxy(tmp_path: Path, trusted: bool) -> None:
    async with running_webhook(tmp_path, ("127.0.0.1",) if trusted else ()) as hook, client() as proxy, \
            client("127.0.0.2") as other:
        answers = [(await call(proxy, hook, guess(i), forwarded=f"198.51.100.{i}"))[0] for i in range(GUESS_FREE + 5)]
        # through a trusted proxy every client has its own count; else the header is ignored
        assert answers == [404] * (GUESS_FREE + 5) if trusted else [404] * GUESS_FREE + [429] * 5
        for i in range(GUESS_FREE):
            await call(proxy, hook, guess(i), forwarded="203.0.113.7")
        status, body, _ = await call(proxy, hook, guess(0), forwarded="203.0.113.7")
        assert status == 429 and f"from {'203.0.113.7' if trusted else '127.0.0.1'};" in body["error"]
        # a peer that is not a trusted proxy is counted by its own address, whatever its header says
        assert (await call(other, hook, guess(0), forwarded="198.51.100.77"))[0] == 404


async def test_a_body_nested_2000_deep_is_a_422_naming_the_problem(tmp_path: Path) -> None:
    async with running_webhook(tmp_path) as hook, client() as session:
        for raw, words in ((b"[" * 2000 + b"]" * 2000, "more than 32 levels deep"),
                           (b'{"type": ' + b'{"a": ' * 2000 + b"1" + b"}" * 2001, "more than 32 levels deep"),
                           (b'{"type": ' + b"1" * 5000 + b"}", "a number of more than 4300 digits")):
            status, body, _ = await call(session, hook, hook.token, data=raw)
            assert status == 422, body
            assert words in body["error"] and body["details"] == [{"path": "(body)", "message": body["error"]}]


def _static_checks(sink: NoSink) -> ChangeSink:
    """mypy proves the fake fits the protocol the registry takes."""
    return sink


async def test_refused_calls_left_out_of_the_log_are_summed_up_once_their_minute_is_over_without_another(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with running_webhook(tmp_path, running=True) as hook, client() as session:
        with caplog.at_level(logging.WARNING, logger="hubd.webhook.service"):
            for i in range(3):
                assert (await call(session, hook, guess(i)))[0] == 404
            lines = [r.getMessage() for r in caplog.records if r.name == "hubd.webhook.service"]
            assert len(lines) == 1 and lines[0].startswith("webhook: unknown tokens from 127.0.0.1 refused: 404: ")
            hook.advance(REFUSAL_WINDOW_S)  # and no further call

            def summed_up() -> bool:
                return any(r.getMessage().startswith("2 more refused webhook calls on 1 topic(s) not logged one by "
                                                     "one (most on unknown tokens from 127.0.0.1 (2))")
                           for r in caplog.records)
            await eventually(summed_up, "the summary of the two calls left out")
