"""PlatformClient against the platform simulator (or a proxy's error pages) over loopback, its name lookups, and
the message builders' token splice."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import outbox_helpers
import pytest
from aiohttp import web
from outbox_helpers import FakeTokens, running_sender
from unit_helpers import eventually

from hubd.cloud import messages
from hubd.cloud.client import PlatformClient, failure_sign
from hubd.config.model import HubdConfig
from hubd.errors import CloudAuthError, CloudRejected, CloudUnavailable
from hubd.events import new_message_id
from simulators.platform import PlatformSimulator

# Every character RFC 6749 2.3.1 makes a client encode before Basic auth, and one Basic itself cannot carry.
AWKWARD_ID = "hub+id/1=x:y"
AWKWARD_SECRET = "s3cr+t%2F/==&? é"


async def make_client(sim: PlatformSimulator, client_auth: str, client_id: str, secret: str) -> PlatformClient:
    config = HubdConfig.model_validate({"platform": {
        "base_url": sim.url, "auth_url": sim.url, "client_id": client_id, "client_secret": secret,
        "client_auth": client_auth}}).platform
    client = PlatformClient(config)
    await client.start()
    return client


@pytest.mark.parametrize("client_auth", ["basic", "body"])
async def test_client_credentials_with_special_characters(client_auth: str) -> None:
    async with PlatformSimulator(client_id=AWKWARD_ID, client_secret=AWKWARD_SECRET,
                                 client_auth=client_auth) as sim:  # type: ignore[arg-type]
        client = await make_client(sim, client_auth, AWKWARD_ID, AWKWARD_SECRET)
        try:
            tokens = await client.exchange_code(sim.issue_code("alice"))
            assert tokens.refresh_token is not None
            refreshed = await client.refresh(tokens.refresh_token)
            assert refreshed.access_token != tokens.access_token
        finally:
            await client.stop()
        assert [(r.grant_type, r.client_auth, r.status) for r in sim.token_requests] == [
            ("authorization_code", client_auth, 200), ("refresh_token", client_auth, 200)]


async def test_a_wrong_secret_is_refused_not_retried() -> None:
    async with PlatformSimulator(client_id="cid", client_secret="right") as sim:
        client = await make_client(sim, "basic", "cid", "wrong")
        try:
            with pytest.raises(CloudAuthError) as refused:
                await client.exchange_code(sim.issue_code("alice"))
        finally:
            await client.stop()
        assert refused.value.error == "invalid_client"


@pytest.fixture
async def bound() -> AsyncIterator[tuple[PlatformSimulator, PlatformClient, str]]:
    async with PlatformSimulator(client_id="cid", client_secret="cs") as sim:
        client = await make_client(sim, "basic", "cid", "cs")
        try:
            tokens = await client.exchange_code(sim.issue_code("alice"))
            yield sim, client, tokens.access_token
        finally:
            await client.stop()


def press(token: str) -> str:
    body = messages.add_or_update_report("Service", new_message_id(), [{
        "endpointId": "bell", "displayName": "Bell", "displayType": "unknown", "additionalInfo": {},
        "capabilities": [], "states": []}])
    return messages.with_token_json(json.dumps(body, separators=(",", ":")), token)


@pytest.mark.parametrize(("status", "error"), [
    (400, CloudRejected), (422, CloudRejected),                       # the platform's verdict on the message
    (401, CloudAuthError), (403, CloudAuthError),
    (404, CloudUnavailable), (405, CloudUnavailable), (408, CloudUnavailable), (409, CloudUnavailable),
    (413, CloudUnavailable), (429, CloudUnavailable), (500, CloudUnavailable), (503, CloudUnavailable),
])
async def test_event_api_statuses(bound: tuple[PlatformSimulator, PlatformClient, str], status: int,
                                  error: type[Exception]) -> None:
    sim, client, token = bound
    sim.fail_events(status)
    with pytest.raises(error) as raised:
        await client.post_event(press(token))
    if isinstance(raised.value, CloudAuthError):
        assert raised.value.fatal is (status == 403)
    if isinstance(raised.value, CloudRejected):
        assert raised.value.status == status and "simulated failure" in raised.value.body
    if 400 <= status < 500 and status not in (401, 403, 422, 429, 400):
        assert "platform.base_url" in str(raised.value)  # the retry's log line says where to look
    await client.post_event(press(token))  # the next one is accepted
    assert len(sim.events) == 1


def _each_kind() -> list[dict[str, Any]]:
    state = {"interface": "Switch", "value": "On", "timeOfSample": "2024-01-01T00:00:00.000Z"}
    endpoint = {"endpointId": "lamp", "displayName": "Lamp", "displayType": "light", "additionalInfo": {"k": "v"},
                "capabilities": [], "states": [state]}
    return [
        messages.change_report("Service", "m1", "lamp", {"k": "v"}, [state], [state], "PHYSICAL_INTERACTION"),
        messages.add_or_update_report("Service", "m2", [endpoint]),
        messages.delete_report("Service", "m3", ["lamp", "fan"]),
        messages.doorbell_press("Service", "m4", "bell", "2024-01-01T00:00:00.000Z"),
        messages.async_response("Service", "m5", "corr-1", "lamp", {}, [{"interface": "Switch", "value": "On"}]),
    ]


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys {keys}"
    return dict(pairs)


@pytest.mark.parametrize("body", _each_kind(), ids=lambda b: b["header"]["name"])
def test_with_token_json_equals_with_token(body: dict[str, Any]) -> None:
    stored = json.dumps(body, separators=(",", ":"))
    spliced = messages.with_token_json(stored, 'tok"en\\')
    assert json.loads(spliced, object_pairs_hook=_no_duplicate_keys) == messages.with_token(body, 'tok"en\\')
    assert "authorization" not in json.loads(stored)["header"]  # the stored body never holds a token


@pytest.mark.parametrize("layout", ["compact", "spaced"])
def test_with_token_json_replaces_an_authorization_already_there(layout: str) -> None:
    body = messages.with_token(_each_kind()[0], "old-token")
    text = json.dumps(body, separators=(",", ":")) if layout == "compact" else json.dumps(body)
    spliced = messages.with_token_json(text, "new-token")
    parsed = json.loads(spliced, object_pairs_hook=_no_duplicate_keys)
    assert parsed["header"]["authorization"] == {"type": "BearerToken", "token": "new-token"}
    assert "old-token" not in spliced


@pytest.fixture
async def proxy_errors() -> AsyncIterator[str]:
    """A server that answers like a proxy in front of the platform: error pages in a legacy charset."""

    async def gateway(request: web.Request) -> web.Response:
        # GBK, no charset in Content-Type: not valid UTF-8
        return web.Response(status=502, body="网关错误".encode("gbk"), headers={"Content-Type": "text/html"})

    async def token(request: web.Request) -> web.Response:
        return web.Response(status=400, body=b'{"error":"invalid_grant","error_description":"caf\xe9"}',
                            headers={"Content-Type": "application/json"})

    app = web.Application()
    app.router.add_post("/async/events", gateway)
    app.router.add_post("/report/failed", gateway)
    app.router.add_post("/oauth/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_body_that_is_not_utf8_is_an_answer_not_a_crash(proxy_errors: str, tmp_path: Path) -> None:
    config = HubdConfig.model_validate({"platform": {
        "base_url": proxy_errors, "auth_url": proxy_errors, "client_id": "c", "client_secret": "s"}}).platform
    client = PlatformClient(config)
    await client.start()
    try:
        with pytest.raises(CloudUnavailable, match="event API answered 502"):
            await client.post_event(press("t"))
        with pytest.raises(CloudUnavailable, match="failure report answered 502"):
            await client.report_failure("alice")
        with pytest.raises(CloudAuthError) as refused:
            await client.exchange_code("code")
        assert refused.value.error == "invalid_grant" and "caf\ufffd" in str(refused.value)
        # Behind the outbox: the press is retried later; the sender keeps running.
        async with running_sender(tmp_path, api=client, tokens=FakeTokens(tokens={"alice": "alice:1"})) as rig:
            await rig.queue("alice", outbox_helpers.press("bell"))
            failures = rig.metrics.counter("hubd_event_send_failures_total", "", "reason")
            await eventually(lambda: failures.get("unavailable") == 1 or rig.task.done(), "the send retried")
            assert not rig.task.done() and rig.sender.depth("alice") == 1
    finally:
        await client.stop()


def test_a_slow_dns_lookup_does_not_hold_up_the_end_of_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncio.run() waits for the default executor's threads at exit: no lookup may run there."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    real_getaddrinfo = socket.getaddrinfo

    def slow_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "platform.example":
            return real_getaddrinfo(host, *args, **kwargs)
        started.set()
        release.wait(30)  # a DNS server that does not answer (bounded, so a failing test ends)
        finished.set()
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", slow_getaddrinfo)
    config = HubdConfig.model_validate({"platform": {
        "base_url": "http://platform.example:9", "auth_url": "http://platform.example:9", "client_id": "c",
        "client_secret": "s"}}).platform

    async def send_and_give_up() -> None:
        client = PlatformClient(config)
        await client.start()
        sending = asyncio.create_task(client.post_event(press("t")))
        while not started.is_set():  # the lookup is under way
            await asyncio.sleep(0.01)
        sending.cancel()  # hubd stops (SIGTERM)
        await asyncio.gather(sending, return_exceptions=True)
        await client.stop()

    try:
        asyncio.run(send_and_give_up())
        assert not finished.is_set(), "asyncio.run waited for the DNS lookup"
    finally:
        release.set()


def test_failure_report_sign_matches_protocol_test_vector() -> None:
    assert failure_sign("2erf3gfeg3gt", "SplxlOBeZQQYbYS6WxSbIA", "the_client_secret") == (
        "189e55722f1d6cfe09bd6637f098356b329262d96a126e6aff2f46542d36dd90")
