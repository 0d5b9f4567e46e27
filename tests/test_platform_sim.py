"""Tests for the platform simulator: real HTTP over loopback against simulators.platform."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import secrets
import signal
import socket
import struct
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import pytest
from aiohttp import web

from simulators.platform import PlatformSimulator
from simulators.platform_binding import BindError, bind_user
from simulators.platform_validate import MessageInvalid, failure_report_sign, validate_event

CLIENT_ID = "cid"
CLIENT_SECRET = "csecret"
TS = "2018-03-15T18:00:00.000Z"
REPO = Path(__file__).resolve().parents[1]
DELETE = object()


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def sim(clock: FakeClock) -> AsyncIterator[PlatformSimulator]:
    async with PlatformSimulator(client_id=CLIENT_ID, client_secret=CLIENT_SECRET, clock=clock) as s:
        yield s


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def basic(client_id: str = CLIENT_ID, secret: str = CLIENT_SECRET) -> dict[str, str]:
    raw = f"{quote(client_id, safe='')}:{quote(secret, safe='')}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


async def token_call(
    http: aiohttp.ClientSession,
    sim: PlatformSimulator,
    form: dict[str, str],
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], aiohttp.ClientResponse]:
    async with http.post(f"{sim.url}/oauth/token", data=form, headers=headers) as resp:
        return resp.status, await resp.json(), resp


async def access_token(
    http: aiohttp.ClientSession, sim: PlatformSimulator, user_id: str = "u1"
) -> dict[str, Any]:
    code = sim.issue_code(user_id)
    status, body, _ = await token_call(http, sim, {"grant_type": "authorization_code", "code": code}, basic())
    assert status == 200, body
    return body


async def post_event(http: aiohttp.ClientSession, sim: PlatformSimulator, message: object) -> tuple[int, str]:
    async with http.post(f"{sim.url}/async/events", json=message) as resp:
        return resp.status, await resp.text()


def header(token: str, namespace: str, name: str) -> dict[str, Any]:
    return {
        "messageId": secrets.token_hex(8),
        "namespace": namespace,
        "name": name,
        "payloadVersion": "v1",
        "authorization": {"type": "BearerToken", "token": token},
    }


def lamp(endpoint_id: str = "lamp-1") -> dict[str, Any]:
    return {
        "endpointId": endpoint_id,
        "displayName": "Desk Lamp",
        "displayType": "light",
        "recommendRoomName": "Study",
        "additionalInfo": {"gw": "g1"},
        "capabilities": [
            {
                "interface": "Switch",
                "supportedOperations": ["On", "Off"],
                "proactivelyReported": True,
                "retrievable": True,
            },
            {
                "interface": "Brightness",
                "supportedOperations": ["Set", "Adjust"],
                "proactivelyReported": True,
                "retrievable": True,
            },
        ],
        "states": [
            {"interface": "Switch", "value": "On", "timeOfSample": TS},
            {"interface": "Brightness", "value": 40, "timeOfSample": TS},
        ],
    }


def add_or_update(token: str, *endpoints: dict[str, Any]) -> dict[str, Any]:
    return {
        "header": header(token, "Service.Discovery", "AddOrUpdateReport"),
        "payload": {"endpoints": list(endpoints) or [lamp()]},
    }


def delete_report(token: str, *ids: str) -> dict[str, Any]:
    return {
        "header": header(token, "Service.Discovery", "DeleteReport"),
        "payload": {"endpoints": [{"endpointId": i} for i in ids or ("lamp-1",)]},
    }


def change_report(token: str, endpoint_id: str = "lamp-1") -> dict[str, Any]:
    return {
        "header": header(token, "Service", "ChangeReport"),
        "endpoint": {
            "endpointId": endpoint_id,
            "additionalInfo": {"gw": "g1"},
            "states": [
                {"interface": "Switch", "value": "On", "timeOfSample": TS},
                {"interface": "Brightness", "value": 40, "timeOfSample": TS},
            ],
        },
        "payload": {
            "change": {
                "cause": {"type": "PHYSICAL_INTERACTION"},
                "states": [{"interface": "Switch", "value": "On", "timeOfSample": TS}],
            }
        },
    }


def doorbell(token: str, endpoint_id: str = "lamp-1") -> dict[str, Any]:
    return {
        "header": header(token, "Service.EventSource", "DoorbellPress"),
        "payload": {
            "endpointId": endpoint_id,
            "cause": {"type": "PHYSICAL_INTERACTION"},
            "timestamp": "2018-06-09T23:23:23.230Z",
        },
    }


def response(token: str, endpoint_id: str = "lamp-1") -> dict[str, Any]:
    message = {
        "header": {**header(token, "Service", "Response"), "correlationToken": "corr-1"},
        "endpoint": {
            "endpointId": endpoint_id,
            "additionalInfo": {"gw": "g1"},
            "states": [{"interface": "Brightness", "value": 60}],
        },
        "payload": {},
    }
    return message


BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "ChangeReport": change_report,
    "AddOrUpdateReport": add_or_update,
    "DeleteReport": delete_report,
    "DoorbellPress": doorbell,
    "Response": response,
}


def mutated(message: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """A copy of message with the dotted path (list indices as numbers) set to value, or removed."""
    result = copy.deepcopy(message)
    *parents, last = path.split(".")
    target: Any = result
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    key: Any = int(last) if isinstance(target, list) else last
    if value is DELETE:
        del target[key]
    else:
        target[key] = value
    return result


@pytest.fixture
async def token(http: aiohttp.ClientSession, sim: PlatformSimulator) -> str:
    """A valid access token for u1, whose lamp-1 the platform already knows."""
    value: str = (await access_token(http, sim))["access_token"]
    assert (await post_event(http, sim, add_or_update(value)))[0] == 202
    return value


# ---- token endpoint ----------------------------------------------------------------------------


async def test_code_exchange_with_basic_auth(http: aiohttp.ClientSession, sim: PlatformSimulator) -> None:
    code = sim.issue_code("u1")
    status, body, resp = await token_call(
        http, sim, {"grant_type": "authorization_code", "code": code}, basic()
    )
    assert status == 200
    assert set(body) == {"access_token", "token_type", "expires_in", "refresh_token"}
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 3600
    assert resp.headers["Cache-Control"] == "no-store"
    assert sim.tokens_issued[-1].access_token == body["access_token"]
    request = sim.token_requests[-1]
    assert (request.grant_type, request.client_auth, request.status, request.user_id) == (
        "authorization_code",
        "basic",
        200,
        "u1",
    )


async def test_code_exchange_with_body_credentials_and_encoded_basic(http: aiohttp.ClientSession) -> None:
    async with PlatformSimulator(client_id="id:x", client_secret="s3c r+t/") as sim:
        form = {"grant_type": "authorization_code", "code": sim.issue_code("u1")}
        status, _, _ = await token_call(http, sim, {**form, "client_id": "id:x", "client_secret": "s3c r+t/"})
        assert status == 200
        form["code"] = sim.issue_code("u1")
        status, body, _ = await token_call(http, sim, form, basic("id:x", "s3c r+t/"))
        assert status == 200, body
        assert [r.client_auth for r in sim.token_requests] == ["body", "basic"]


async def test_code_is_single_use_and_expires(
    http: aiohttp.ClientSession, sim: PlatformSimulator, clock: FakeClock
) -> None:
    form = {"grant_type": "authorization_code", "code": sim.issue_code("u1")}
    assert (await token_call(http, sim, form, basic()))[0] == 200
    status, body, _ = await token_call(http, sim, form, basic())
    assert (status, body["error"]) == (400, "invalid_grant")
    form["code"] = sim.issue_code("u1")
    clock.now += 601
    status, body, _ = await token_call(http, sim, form, basic())
    assert (status, body["error"], body["error_description"]) == (400, "invalid_grant", "code expired")


@pytest.mark.parametrize(
    ("form", "headers", "status", "error"),
    [
        ({"grant_type": "authorization_code", "code": "nope"}, basic(), 400, "invalid_grant"),
        ({"grant_type": "authorization_code"}, basic(), 400, "invalid_request"),
        ({"code": "x"}, basic(), 400, "invalid_request"),
        ({"grant_type": "password", "username": "a"}, basic(), 400, "unsupported_grant_type"),
        ({"grant_type": "refresh_token", "refresh_token": "nope"}, basic(), 400, "invalid_grant"),
        ({"grant_type": "authorization_code", "code": "x"}, basic(secret="wrong"), 401, "invalid_client"),
        ({"grant_type": "authorization_code", "code": "x"}, basic(client_id="other"), 401, "invalid_client"),
        ({"grant_type": "authorization_code", "code": "x"}, None, 401, "invalid_client"),
        (
            {"grant_type": "authorization_code", "code": "x"},
            {"Authorization": "Basic !!!"},
            401,
            "invalid_client",
        ),
        (
            {"grant_type": "authorization_code", "code": "x", "client_id": CLIENT_ID, "client_secret": "bad"},
            None,
            401,
            "invalid_client",
        ),
        (
            {
                "grant_type": "authorization_code",
                "code": "x",
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
            },
            basic(),
            400,
            "invalid_request",
        ),
    ],
    ids=[
        "unknown-code",
        "no-code",
        "no-grant-type",
        "password-grant",
        "unknown-refresh",
        "wrong-secret",
        "wrong-client",
        "no-client-auth",
        "malformed-basic",
        "wrong-body-secret",
        "two-auth-methods",
    ],
)
async def test_token_errors(
    http: aiohttp.ClientSession,
    sim: PlatformSimulator,
    form: dict[str, str],
    headers: dict[str, str] | None,
    status: int,
    error: str,
) -> None:
    got_status, body, resp = await token_call(http, sim, form, headers)
    assert (got_status, body["error"]) == (status, error)
    assert body["error_description"]
    assert ("WWW-Authenticate" in resp.headers) == (status == 401)
    assert sim.token_requests[-1].error == error


async def test_token_request_must_be_form_encoded(
    http: aiohttp.ClientSession, sim: PlatformSimulator
) -> None:
    async with http.post(
        f"{sim.url}/oauth/token", json={"grant_type": "authorization_code"}, headers=basic()
    ) as r:
        assert (r.status, (await r.json())["error"]) == (400, "invalid_request")


@pytest.mark.parametrize(("required", "used"), [("basic", "body"), ("body", "basic")])
async def test_required_client_auth_method(http: aiohttp.ClientSession, required: Any, used: str) -> None:
    async with PlatformSimulator(
        client_id=CLIENT_ID, client_secret=CLIENT_SECRET, client_auth=required
    ) as sim:
        form = {"grant_type": "authorization_code", "code": sim.issue_code("u1")}
        if used == "body":
            status, body, _ = await token_call(
                http, sim, {**form, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
            )
        else:
            status, body, _ = await token_call(http, sim, form, basic())
        assert (status, body["error"]) == (401, "invalid_client")


async def test_refresh_rotates_both_tokens(http: aiohttp.ClientSession, sim: PlatformSimulator) -> None:
    first = await access_token(http, sim)
    form = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"]}
    status, second, _ = await token_call(http, sim, form, basic())
    assert status == 200
    assert second["access_token"] != first["access_token"]
    assert second["refresh_token"] != first["refresh_token"]
    status, body, _ = await token_call(http, sim, form, basic())
    assert (status, body["error"]) == (400, "invalid_grant")
    assert (await post_event(http, sim, add_or_update(second["access_token"])))[0] == 202
    assert [t.grant_type for t in sim.tokens_issued] == ["authorization_code", "refresh_token"]


async def test_revoke_refresh_fails_for_good(http: aiohttp.ClientSession, sim: PlatformSimulator) -> None:
    tokens = await access_token(http, sim)
    sim.revoke_refresh("u1")
    form = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}
    for _ in range(2):
        status, body, _ = await token_call(http, sim, form, basic())
        assert (status, body["error"]) == (400, "invalid_grant")


async def test_access_ttl_is_configurable(http: aiohttp.ClientSession, clock: FakeClock) -> None:
    async with PlatformSimulator(
        client_id=CLIENT_ID, client_secret=CLIENT_SECRET, access_ttl_s=60, clock=clock
    ) as sim:
        tokens = await access_token(http, sim)
        assert tokens["expires_in"] == 60
        clock.now += 59
        assert (await post_event(http, sim, add_or_update(tokens["access_token"])))[0] == 202
        clock.now += 1
        assert (await post_event(http, sim, add_or_update(tokens["access_token"])))[0] == 401


async def test_token_fault_script(http: aiohttp.ClientSession, sim: PlatformSimulator) -> None:
    sim.fail_token_requests(503)
    form = {"grant_type": "authorization_code", "code": sim.issue_code("u1")}
    assert (await token_call(http, sim, form, basic()))[0] == 503
    assert (await token_call(http, sim, form, basic()))[0] == 200


# ---- event gateway: valid messages -------------------------------------------------------------


@pytest.mark.parametrize("name", list(BUILDERS))
async def test_each_event_kind_is_accepted_and_recorded(
    http: aiohttp.ClientSession, sim: PlatformSimulator, token: str, clock: FakeClock, name: str
) -> None:
    message = BUILDERS[name](token)
    status, text = await post_event(http, sim, message)
    assert (status, text) == (202, "")
    record = sim.events[-1]
    assert (record.name, record.user_id, record.message_id) == (name, "u1", message["header"]["messageId"])
    assert record.endpoint_ids == ("lamp-1",)
    assert record.message == message
    assert record.received_at == clock.now


async def test_media_descriptor_values_and_speaker(
    http: aiohttp.ClientSession, sim: PlatformSimulator, token: str
) -> None:
    tv = {
        "endpointId": "tv-1",
        "displayName": "Living Room TV",
        "displayType": "tv",
        "additionalInfo": {},
        "capabilities": [
            {
                "interface": "Media.TVChannel",
                "supportedOperations": ["Set", "Next"],
                "proactivelyReported": False,
                "retrievable": True,
                "version": "v1",
            }
        ],
        "states": [
            {"interface": "Media.TVChannel", "value": {"name": "News", "code": "CCTV1"}, "timeOfSample": TS}
        ],
    }
    assert (await post_event(http, sim, add_or_update(token, tv)))[0] == 202
    assert sim.known_endpoints("u1") == {"lamp-1", "tv-1"}


async def test_namespace_brand_word_is_configurable(http: aiohttp.ClientSession) -> None:
    async with PlatformSimulator(client_id=CLIENT_ID, client_secret=CLIENT_SECRET, namespace="Acme") as sim:
        token = (await access_token(http, sim))["access_token"]
        message = add_or_update(token)
        status, text = await post_event(http, sim, message)
        assert status == 400
        assert json.loads(text)["error"].startswith("header.namespace: 'Service.Discovery' cannot carry")
        message["header"]["namespace"] = "Acme.Discovery"
        assert (await post_event(http, sim, message))[0] == 202


# ---- event gateway: invalid messages -----------------------------------------------------------

INVALID = [
    ("ChangeReport", "header.messageId", DELETE, "header.messageId: missing"),
    ("ChangeReport", "header.messageId", "", "header.messageId: must not be empty"),
    ("ChangeReport", "header.messageId", 7, "header.messageId: expected a string, got the number 7"),
    ("ChangeReport", "header.payloadVersion", "v2", "header.payloadVersion: expected 'v1'"),
    ("ChangeReport", "header.namespace", "Service.Discovery", "header.namespace: 'Service.Discovery' cannot"),
    ("ChangeReport", "header.name", "Discover", "header.name: 'Discover' is not an async event"),
    (
        "ChangeReport",
        "header.authorization.type",
        "Bearer",
        "header.authorization.type: expected 'BearerToken'",
    ),
    ("ChangeReport", "header.authorization", DELETE, "header.authorization: missing"),
    ("ChangeReport", "header.correlationToken", "c", "header.correlationToken: unknown field"),
    ("ChangeReport", "header.extra", 1, "header.extra: unknown field"),
    ("ChangeReport", "extra", {}, "extra: unknown field"),
    (
        "ChangeReport",
        "endpoint.states.0.timeOfSample",
        "2018-03-15T18:00:00Z",
        "endpoint.states[0].timeOfSample: expected UTC time as YYYY-MM-DDTHH:MM:SS.mmmZ",
    ),
    (
        "ChangeReport",
        "endpoint.states.0.timeOfSample",
        "2018-03-15T18:00:00.000+00:00",
        "endpoint.states[0].timeOfSample: expected UTC time",
    ),
    (
        "ChangeReport",
        "endpoint.states.0.timeOfSample",
        "2018-03-15T18:00:00.00Z",
        "endpoint.states[0].timeOfSample: expected UTC time",
    ),
    (
        "ChangeReport",
        "endpoint.states.0.timeOfSample",
        "2018-02-30T18:00:00.000Z",
        "endpoint.states[0].timeOfSample: '2018-02-30T18:00:00.000Z' is not a real date",
    ),
    (
        "ChangeReport",
        "payload.change.cause",
        "PHYSICAL_INTERACTION",
        "payload.change.cause: expected an object, got the string",
    ),
    ("ChangeReport", "payload.change.cause.type", DELETE, "payload.change.cause.type: missing"),
    ("ChangeReport", "payload.change.states", [], "payload.change.states: must not be empty"),
    (
        "ChangeReport",
        "payload.change.states.0.value",
        "Off",
        "payload.change.states[0].value: 'Off' differs from endpoint.states ('On')",
    ),
    (
        "ChangeReport",
        "payload.change.states.0",
        {"interface": "Color", "value": 5, "timeOfSample": TS},
        "payload.change.states[0].interface: 'Color' is not in endpoint.states",
    ),
    (
        "ChangeReport",
        "payload.change.states.0.interface",
        "Mode",
        "payload.change.states[0].value: 'On' is not a Mode value",
    ),
    (
        "ChangeReport",
        "endpoint.states.0.value",
        True,
        "endpoint.states[0].value: expected a string, got a boolean",
    ),
    ("ChangeReport", "endpoint.states.0.value", "on", "endpoint.states[0].value: 'on' is not a Switch value"),
    ("ChangeReport", "endpoint.states.1.value", "40", "endpoint.states[1].value: expected a number"),
    (
        "ChangeReport",
        "endpoint.states.1.value",
        140,
        "endpoint.states[1].value: 140 is outside Brightness's range",
    ),
    (
        "ChangeReport",
        "endpoint.states.0.interface",
        "Service.Switch",
        "endpoint.states[0].interface: 'Service.Switch' is not a known interface",
    ),
    (
        "ChangeReport",
        "endpoint.states.1.interface",
        "Switch",
        "endpoint.states[1].interface: duplicate state for 'Switch'",
    ),
    ("ChangeReport", "endpoint.additionalInfo", {"a.b": "x"}, "endpoint.additionalInfo.a.b: keys must"),
    ("ChangeReport", "endpoint.additionalInfo", {"n": 1}, "endpoint.additionalInfo.n: expected a string"),
    ("ChangeReport", "endpoint.additionalInfo", DELETE, "endpoint.additionalInfo: missing"),
    ("ChangeReport", "endpoint", DELETE, "endpoint: missing"),
    (
        "Response",
        "endpoint.states.0.timeOfSample",
        TS,
        "endpoint.states[0].timeOfSample: must be absent in a Response",
    ),
    ("Response", "header.correlationToken", DELETE, "header.correlationToken: missing"),
    ("Response", "payload.extra", 1, "payload.extra: unknown field"),
    (
        "AddOrUpdateReport",
        "payload.endpoints.0.displayType",
        "sensor",
        "payload.endpoints[0].displayType: 'sensor' is not one of PROTOCOL 7's 41 types",
    ),
    (
        "AddOrUpdateReport",
        "payload.endpoints.0.displayName",
        "Lamp 2",
        "payload.endpoints[0].displayName: 'Lamp 2' contains digits",
    ),
    (
        "AddOrUpdateReport",
        "payload.endpoints.0.capabilities.0.retrievable",
        DELETE,
        "payload.endpoints[0].capabilities[0].retrievable: missing",
    ),
    (
        "AddOrUpdateReport",
        "payload.endpoints.0.capabilities.0.isProactivelyReported",
        True,
        "payload.endpoints[0].capabilities[0].isProactivelyReported: unknown field",
    ),
    (
        "AddOrUpdateReport",
        "payload.endpoints.0.capabilities.0.supportedOperations",
        ["On", "Dim"],
        "payload.endpoints[0].capabilities[0].supportedOperations[1]: 'Dim' is not an operation of Switch",
    ),
    (
        "AddOrUpdateReport",
        "payload.endpoints.0.capabilities.0.proactivelyReported",
        "true",
        "payload.endpoints[0].capabilities[0].proactivelyReported: expected a boolean",
    ),
    (
        "AddOrUpdateReport",
        "payload.endpoints.0.capabilities",
        [],
        "payload.endpoints[0].states[0].interface: 'Switch' has no capability",
    ),
    (
        "AddOrUpdateReport",
        "payload.endpoints.0.states.0.timeOfSample",
        DELETE,
        "payload.endpoints[0].states[0].timeOfSample: missing",
    ),
    (
        "AddOrUpdateReport",
        "payload.endpoints.0.modelName",
        "X",
        "payload.endpoints[0].modelName: unknown field",
    ),
    ("AddOrUpdateReport", "payload.endpoints", [], "payload.endpoints: must not be empty"),
    ("AddOrUpdateReport", "endpoint", {}, "endpoint: unknown field"),
    (
        "DeleteReport",
        "payload.endpoints.0.displayName",
        "Lamp",
        "payload.endpoints[0].displayName: unknown field",
    ),
    (
        "DeleteReport",
        "payload.endpoints",
        [{"endpointId": "lamp-1"}, {"endpointId": "lamp-1"}],
        "payload.endpoints[1].endpointId: duplicate endpointId 'lamp-1'",
    ),
    (
        "DoorbellPress",
        "payload.timestamp",
        "2018-06-09 23:23:23.230Z",
        "payload.timestamp: expected UTC time",
    ),
    ("DoorbellPress", "payload.cause", DELETE, "payload.cause: missing"),
    ("DoorbellPress", "payload.endpointId", ["bell"], "payload.endpointId: expected a string, got an array"),
]


@pytest.mark.parametrize(("name", "path", "value", "error"), INVALID, ids=[f"{c[0]}-{c[1]}" for c in INVALID])
async def test_invalid_events_get_400_with_the_path(
    http: aiohttp.ClientSession,
    sim: PlatformSimulator,
    token: str,
    name: str,
    path: str,
    value: object,
    error: str,
) -> None:
    before = len(sim.events)
    status, text = await post_event(http, sim, mutated(BUILDERS[name](token), path, value))
    assert status == 400
    assert json.loads(text)["error"].startswith(error), text
    assert len(sim.events) == before
    assert sim.rejections[-1].status == 400


@pytest.mark.parametrize(
    ("body", "content_type", "error"),
    [
        (b"{not json", "application/json", "$: not JSON"),
        (b'{"header": NaN}', "application/json", "$: not JSON"),
        (b"[]", "application/json", "$: expected an object, got an array"),
        (b"{}", "application/json", "header: missing"),
        (b"{}", "text/plain", "$: Content-Type must be application/json"),
    ],
)
async def test_unparseable_events_get_400(
    http: aiohttp.ClientSession, sim: PlatformSimulator, body: bytes, content_type: str, error: str
) -> None:
    async with http.post(
        f"{sim.url}/async/events", data=body, headers={"Content-Type": content_type}
    ) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"].startswith(error)


def test_validator_error_carries_path_and_reason() -> None:
    with pytest.raises(MessageInvalid) as caught:
        validate_event(mutated(change_report("t"), "payload.change.cause", "PHYSICAL_INTERACTION"))
    assert caught.value.path == "payload.change.cause"
    assert caught.value.reason.startswith("expected an object")


# ---- event gateway: tokens, endpoints, duplicates ----------------------------------------------


async def test_unknown_token_is_403(http: aiohttp.ClientSession, sim: PlatformSimulator, token: str) -> None:
    status, text = await post_event(http, sim, change_report("at_made_up"))
    assert status == 403
    assert json.loads(text)["error"].startswith("header.authorization.token:")
    assert sim.expired_token_hits == 0


async def test_expired_token_is_401_then_refresh_and_resend_is_accepted(
    http: aiohttp.ClientSession, sim: PlatformSimulator, clock: FakeClock
) -> None:
    tokens = await access_token(http, sim)
    assert (await post_event(http, sim, add_or_update(tokens["access_token"])))[0] == 202
    clock.now += 3600
    message = change_report(tokens["access_token"])
    status, text = await post_event(http, sim, message)
    assert (status, json.loads(text)["error"]) == (401, "header.authorization.token: expired")
    assert sim.expired_token_hits == 1
    form = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}
    status, fresh, _ = await token_call(http, sim, form, basic())
    assert status == 200
    message["header"]["authorization"]["token"] = fresh["access_token"]
    assert (await post_event(http, sim, message))[0] == 202
    assert sim.events[-1].message_id == message["header"]["messageId"]
    assert sim.duplicates == []


async def test_expire_tokens_and_revoke_user(http: aiohttp.ClientSession, sim: PlatformSimulator) -> None:
    u1 = (await access_token(http, sim, "u1"))["access_token"]
    u2 = (await access_token(http, sim, "u2"))["access_token"]
    sim.expire_tokens("u1")
    assert (await post_event(http, sim, add_or_update(u1)))[0] == 401
    assert (await post_event(http, sim, add_or_update(u2)))[0] == 202
    sim.revoke_user("u2")
    assert (await post_event(http, sim, add_or_update(u2)))[0] == 403


@pytest.mark.parametrize("name", ["ChangeReport", "DoorbellPress", "Response"])
async def test_unknown_endpoint_is_422(
    http: aiohttp.ClientSession, sim: PlatformSimulator, token: str, name: str
) -> None:
    status, text = await post_event(http, sim, BUILDERS[name](token, "ghost-1"))
    assert status == 422
    assert "'ghost-1' is not a known endpoint" in json.loads(text)["error"]
    assert all(e.name != name for e in sim.events)


async def test_delete_report_forgets_endpoint(
    http: aiohttp.ClientSession, sim: PlatformSimulator, token: str
) -> None:
    assert (await post_event(http, sim, delete_report(token, "lamp-1")))[0] == 202
    assert sim.known_endpoints("u1") == set()
    assert (await post_event(http, sim, change_report(token)))[0] == 422


async def test_endpoints_are_known_per_user(
    http: aiohttp.ClientSession, sim: PlatformSimulator, token: str
) -> None:
    other = (await access_token(http, sim, "u2"))["access_token"]
    assert (await post_event(http, sim, change_report(other)))[0] == 422


async def test_binding_again_forgets_the_known_endpoints(
    http: aiohttp.ClientSession, sim: PlatformSimulator, token: str
) -> None:
    assert sim.known_endpoints("u1") == {"lamp-1"}
    again = (await access_token(http, sim, "u1"))["access_token"]  # a new code exchange: a new binding
    assert sim.known_endpoints("u1") == set()
    assert (await post_event(http, sim, change_report(again)))[0] == 422
    assert (await post_event(http, sim, add_or_update(again, lamp())))[0] == 202
    assert (await post_event(http, sim, change_report(again)))[0] == 202


async def test_an_outage_for_one_user(http: aiohttp.ClientSession, sim: PlatformSimulator, token: str) -> None:
    other = (await access_token(http, sim, "u2"))["access_token"]
    async with http.post(f"{sim.url}/sim/faults", json={"outage": True, "userId": "u1"}) as resp:
        assert (await resp.json())["outageUsers"] == ["u1"]
    assert (await post_event(http, sim, change_report(token)))[0] == 503
    assert (await post_event(http, sim, add_or_update(other, lamp("lamp-2"))))[0] == 202
    assert sim.rejections[-1].scripted
    sim.set_outage(False, "u1")
    assert (await post_event(http, sim, change_report(token)))[0] == 202


@pytest.mark.parametrize(("name", "problem"), [
    ("Lamp: Kitchen", "contains ':'"), ("Lamp-Two", "contains '-'"), ("Lamp ２", "contains digits"),
])
async def test_names_with_special_characters_are_refused(
    http: aiohttp.ClientSession, sim: PlatformSimulator, token: str, name: str, problem: str
) -> None:
    status, text = await post_event(http, sim, add_or_update(token, {**lamp("lamp-9"), "displayName": name}))
    assert status == 400 and problem in json.loads(text)["error"]
    status, text = await post_event(http, sim, add_or_update(token, {**lamp("lamp-9"), "recommendRoomName": name}))
    assert status == 400 and "recommendRoomName" in json.loads(text)["error"]


async def test_a_client_that_dies_mid_request_is_one_log_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    handling = asyncio.Event()
    handle_event = PlatformSimulator._handle_event

    async def noted(self: PlatformSimulator, request: web.Request) -> web.Response:
        handling.set()
        return await handle_event(self, request)

    monkeypatch.setattr(PlatformSimulator, "_handle_event", noted)
    async with PlatformSimulator(client_id=CLIENT_ID, client_secret=CLIENT_SECRET) as sim:
        _reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
        writer.write(b"POST /async/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"header\"")
        await writer.drain()
        async with asyncio.timeout(5):
            await handling.wait()  # the server took the headers: its handler is reading the body
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        writer.close()
        deadline = time.monotonic() + 5
        while "went away mid-request" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            await asyncio.sleep(0.01)
    assert "Traceback" not in caplog.text and "Error handling request" not in caplog.text


async def test_unknown_endpoints_allowed_when_configured(http: aiohttp.ClientSession) -> None:
    async with PlatformSimulator(
        client_id=CLIENT_ID, client_secret=CLIENT_SECRET, require_known_endpoints=False
    ) as sim:
        token = (await access_token(http, sim))["access_token"]
        assert (await post_event(http, sim, change_report(token, "ghost-1")))[0] == 202


async def test_duplicate_message_id_is_accepted_and_recorded_as_duplicate(
    http: aiohttp.ClientSession, sim: PlatformSimulator, token: str
) -> None:
    message = change_report(token)
    assert (await post_event(http, sim, message))[0] == 202
    assert (await post_event(http, sim, message))[0] == 202
    assert [e.message_id for e in sim.events].count(message["header"]["messageId"]) == 1
    assert [d.message_id for d in sim.duplicates] == [message["header"]["messageId"]]


# ---- failure report ----------------------------------------------------------------------------


def test_failure_report_sign_test_vector() -> None:
    sign = failure_report_sign("2erf3gfeg3gt", "SplxlOBeZQQYbYS6WxSbIA", "the_client_secret")
    assert sign == "189e55722f1d6cfe09bd6637f098356b329262d96a126e6aff2f46542d36dd90"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({}, None),
        ({"sign": "189E55722F1D6CFE09BD6637F098356B329262D96A126E6AFF2F46542D36DD90"}, "sign: "),
        ({"sign": "00" * 32}, "sign: "),
        ({"sign": None}, "sign: missing"),
        ({"clientId": "someone-else"}, "clientId: "),
        ({"userId": "stranger"}, "userId: 'stranger' never received a grant"),
        ({"extra": "1"}, "extra: unknown field"),
    ],
    ids=["valid", "uppercase-sign", "wrong-sign", "no-sign", "wrong-client", "unknown-user", "extra-field"],
)
async def test_failure_report(
    http: aiohttp.ClientSession, change: dict[str, str | None], error: str | None
) -> None:
    async with PlatformSimulator(
        client_id="SplxlOBeZQQYbYS6WxSbIA", client_secret="the_client_secret"
    ) as sim:
        sim.issue_code("2erf3gfeg3gt")
        form: dict[str, str | None] = {
            "userId": "2erf3gfeg3gt",
            "clientId": "SplxlOBeZQQYbYS6WxSbIA",
            "sign": "189e55722f1d6cfe09bd6637f098356b329262d96a126e6aff2f46542d36dd90",
            **change,
        }
        data = {k: v for k, v in form.items() if v is not None}
        async with http.post(f"{sim.url}/report/failed", data=data) as resp:
            body = await resp.json()
        if error is None:
            assert resp.status == 200
            assert [(r.user_id, r.client_id) for r in sim.failure_reports] == [
                ("2erf3gfeg3gt", "SplxlOBeZQQYbYS6WxSbIA")
            ]
        else:
            assert resp.status == 400
            assert body["error"].startswith(error)
            assert sim.failure_reports == []


async def test_failure_report_must_be_form_encoded(
    http: aiohttp.ClientSession, sim: PlatformSimulator
) -> None:
    async with http.post(f"{sim.url}/report/failed", json={"userId": "u"}) as resp:
        assert resp.status == 400


# ---- faults --------------------------------------------------------------------------------------


async def test_event_fault_script(http: aiohttp.ClientSession, sim: PlatformSimulator, token: str) -> None:
    sim.fail_events(503, 503, 500, 401)
    message = change_report(token)
    statuses = [(await post_event(http, sim, message))[0] for _ in range(5)]
    assert statuses == [503, 503, 500, 401, 202]
    assert [r.scripted for r in sim.rejections] == [True] * 4
    assert sim.expired_token_hits == 0
    assert len(sim.events) == 2  # the AddOrUpdateReport of the fixture, then this one


async def test_faults_over_http(http: aiohttp.ClientSession, sim: PlatformSimulator, token: str) -> None:
    async with http.post(f"{sim.url}/sim/faults", json={"events": [502], "token": [503]}) as resp:
        assert (await resp.json())["events"] == [502]
    assert (await post_event(http, sim, change_report(token)))[0] == 502
    form = {"grant_type": "authorization_code", "code": sim.issue_code("u1")}
    assert (await token_call(http, sim, form, basic()))[0] == 503
    async with http.post(f"{sim.url}/sim/faults", json={"events": ["x"]}) as resp:
        assert resp.status == 400


async def test_outage(http: aiohttp.ClientSession, sim: PlatformSimulator, token: str) -> None:
    async with http.post(f"{sim.url}/sim/faults", json={"outage": True}) as resp:
        assert resp.status == 200
    assert (await post_event(http, sim, change_report(token)))[0] == 503
    assert (await token_call(http, sim, {"grant_type": "refresh_token"}, basic()))[0] == 503
    async with http.post(f"{sim.url}/report/failed", data={"userId": "u1"}) as resp:
        assert resp.status == 503
    sim.set_outage(False)
    assert (await post_event(http, sim, change_report(token)))[0] == 202


async def test_latency(http: aiohttp.ClientSession, sim: PlatformSimulator, token: str) -> None:
    sim.set_latency(0.2)
    started = time.monotonic()
    assert (await post_event(http, sim, change_report(token)))[0] == 202
    assert time.monotonic() - started >= 0.2


# ---- inspection ----------------------------------------------------------------------------------


async def test_inspection_api(http: aiohttp.ClientSession, sim: PlatformSimulator, token: str) -> None:
    other = (await access_token(http, sim, "u2"))["access_token"]
    await post_event(http, sim, add_or_update(other, lamp("lamp-2")))
    await post_event(http, sim, change_report(token))
    async with http.get(f"{sim.url}/sim/events", params={"name": "AddOrUpdateReport"}) as resp:
        assert [(e["userId"], e["endpointIds"]) for e in await resp.json()] == [
            ("u1", ["lamp-1"]),
            ("u2", ["lamp-2"]),
        ]
    async with http.get(f"{sim.url}/sim/events", params={"userId": "u1", "endpointId": "lamp-1"}) as resp:
        rows = await resp.json()
        assert [e["name"] for e in rows] == ["AddOrUpdateReport", "ChangeReport"]
        assert rows[0]["receivedAt"].endswith("Z")
    sim.expire_tokens("u1")
    async with http.get(f"{sim.url}/sim/tokens") as resp:
        users = {u["userId"]: u for u in (await resp.json())["users"]}
        assert (users["u1"]["accessValid"], users["u2"]["accessValid"]) == (False, True)
    async with http.get(f"{sim.url}/sim/token-requests") as resp:
        text = await resp.text()
        assert [r["grantType"] for r in json.loads(text)] == ["authorization_code"] * 2
        assert CLIENT_SECRET not in text
        assert token not in text
    async with http.post(f"{sim.url}/sim/reset") as resp:
        assert resp.status == 200
    assert sim.events == []
    assert sim.known_endpoints("u1") == {"lamp-1"}


async def test_codes_and_token_actions_over_http(http: aiohttp.ClientSession, sim: PlatformSimulator) -> None:
    async with http.post(f"{sim.url}/sim/codes", json={"userId": "u9"}) as resp:
        code = (await resp.json())["code"]
    status, _, _ = await token_call(http, sim, {"grant_type": "authorization_code", "code": code}, basic())
    assert status == 200
    async with http.post(f"{sim.url}/sim/tokens/revoke-refresh", json={"userId": "u9"}) as resp:
        assert (await resp.json())["users"][0]["refreshValid"] is False
    async with http.post(f"{sim.url}/sim/tokens/expire", json={}) as resp:
        assert (await resp.json())["users"][0]["accessValid"] is False
    async with http.post(f"{sim.url}/sim/tokens/revoke", json={"userId": "nobody"}) as resp:
        assert resp.status == 404


async def test_wait_for_sees_events_that_arrive_later(
    http: aiohttp.ClientSession, sim: PlatformSimulator, token: str
) -> None:
    waiter = asyncio.create_task(sim.wait_for(lambda r: r.name == "DoorbellPress", timeout_s=5))
    await asyncio.sleep(0)  # let the waiter start before the event exists
    assert not waiter.done()
    await post_event(http, sim, doorbell(token))
    assert (await waiter).name == "DoorbellPress"
    with pytest.raises(TimeoutError, match="no matching event"):
        await sim.wait_for(lambda r: r.name == "Response", timeout_s=0.05)


# ---- bind_user against a fake hub --------------------------------------------------------------


class FakeHub:
    """Just enough of a hub's driver interface, authorize page and vendor endpoint to be bound."""

    def __init__(self, sim: PlatformSimulator, mode: str = "oauth2") -> None:
        self.sim = sim
        self.mode = mode
        self.grant_reply: dict[str, Any] | None = None
        self.drop_callback_query = False
        self.redirect_status = 302
        self.codes: dict[str, str] = {}
        self.user_tokens: set[str] = set()
        self.grants: list[dict[str, Any]] = []
        self.platform_tokens: list[dict[str, Any]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/driver/command", self.command)
        app.router.add_get("/oauth/authorize", self.page)
        app.router.add_post("/oauth/authorize", self.login)
        app.router.add_post("/vendor", self.vendor)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def command(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body["command"] == "OAuth":
            callback = quote(body["params"]["callbackURL"], safe="")
            return web.json_response(
                {"status": 0, "data": f"{self.url}/oauth/authorize?callbackURL={callback}"}
            )
        user_token = self.codes.pop(body["params"]["code"], None)
        if user_token is None:
            return web.json_response(
                {"status": 1, "errorName": "E_INVALID_AUTHORIZATION", "message": "bad code"}
            )
        return web.json_response(
            {
                "status": 0,
                "data": {
                    "userId": "local-1",
                    "userToken": user_token,
                    "expiresIn": 3600,
                    "refreshToken": "r1",
                },
            }
        )

    async def page(self, request: web.Request) -> web.Response:
        csrf = secrets.token_hex(8)
        html = f"""<html><body><form method="post" action="">
            <input type="hidden" name="csrf" value="{csrf}"><input name="username">
            <input type="password" name="password"><input type="checkbox" name="remember">
            <input type="submit" name="go" value="Log in"></form>
            <form method="post" action="/elsewhere"><input name="q"></form></body></html>"""
        response = web.Response(text=html, content_type="text/html")
        response.set_cookie("csrf", csrf)
        return response

    async def login(self, request: web.Request) -> web.Response:
        form = await request.post()
        if set(form) != {"csrf", "username", "password"} or form["csrf"] != request.cookies.get("csrf"):
            return web.Response(status=400, text=f"bad form {dict(form)}")
        if (form["username"], form["password"]) != ("alice", "pw"):
            return web.Response(text="<form method=post>wrong password</form>", content_type="text/html")
        callback = request.query["callbackURL"]
        if self.drop_callback_query:
            callback = callback.split("?")[0]
        user_token = f"ut_{secrets.token_hex(8)}"
        self.user_tokens.add(user_token)
        if self.mode == "oauth2":
            code = secrets.token_hex(6)
            self.codes[code] = user_token
            added = {"code": code}
        else:
            added = {"userId": "local-1", "userToken": user_token, "expiresIn": "3600"}
        location = callback + ("&" if "?" in callback else "?") + urlencode(added)
        return web.Response(status=self.redirect_status, headers={"Location": location})

    async def vendor(self, request: web.Request) -> web.Response:
        grant = await request.json()
        self.grants.append(grant)
        header = {"messageId": grant["header"]["messageId"], "payloadVersion": "v1"}
        if grant["header"]["authorization"]["token"] not in self.user_tokens:
            return web.json_response(
                {
                    "header": {**header, "namespace": "Service", "name": "ErrorResponse"},
                    "payload": {"name": "E_INVALID_AUTHORIZATION", "message": "who?"},
                }
            )
        form = {"grant_type": "authorization_code", "code": grant["payload"]["grant"]["code"]}
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{self.sim.url}/oauth/token", data=form, headers=basic()) as resp,
        ):
            self.platform_tokens.append(await resp.json())
            if resp.status != 200:
                return web.json_response(
                    {
                        "header": {**header, "namespace": "Service", "name": "ErrorResponse"},
                        "payload": {"name": "E_INTERNAL_ERROR", "message": "exchange"},
                    }
                )
        return web.json_response(
            self.grant_reply
            or {
                "header": {**header, "namespace": "Service.Authorization", "name": "AcceptGrantResponse"},
                "payload": {},
            }
        )


@pytest.fixture
async def hub(sim: PlatformSimulator) -> AsyncIterator[FakeHub]:
    fake = FakeHub(sim)
    await fake.start()
    yield fake
    await fake.stop()


async def bind(hub: FakeHub, sim: PlatformSimulator | str, password: str = "pw") -> Any:  # noqa: S107
    return await bind_user(
        hub_url=hub.url,
        vendor_path="/vendor",
        sim=sim,
        username="alice",
        password=password,
        user_id="platform-user-1",
    )


@pytest.mark.parametrize("mode", ["oauth2", "oauth"])
async def test_bind_user(hub: FakeHub, sim: PlatformSimulator, mode: str) -> None:
    hub.mode = mode
    result = await bind(hub, sim)
    assert (result.ok, result.auth_mode, result.user_id) == (True, mode, "platform-user-1")
    assert result.user_token in hub.user_tokens
    assert result.reply["header"]["name"] == "AcceptGrantResponse"
    grant = hub.grants[0]
    assert grant["header"]["namespace"] == "Service.Authorization"
    assert grant["header"]["authorization"] == {"type": "BearerToken", "token": result.user_token}
    assert grant["payload"]["grant"]["userId"] == "platform-user-1"
    assert grant["payload"]["grant"]["type"] == "OAuth2.AuthorizationCode"
    assert sim.tokens_issued[0].user_id == "platform-user-1"
    assert "access_token" in hub.platform_tokens[0]


async def test_bind_user_mints_the_code_over_http(hub: FakeHub, sim: PlatformSimulator) -> None:
    assert (await bind(hub, sim.url)).ok
    assert sim.tokens_issued[0].user_id == "platform-user-1"


async def test_bind_user_reports_error_response(hub: FakeHub, sim: PlatformSimulator) -> None:
    sim.fail_token_requests(503)
    result = await bind(hub, sim)
    assert not result.ok
    assert result.reply["payload"]["name"] == "E_INTERNAL_ERROR"


async def test_bind_user_rejects_a_malformed_reply(hub: FakeHub, sim: PlatformSimulator) -> None:
    hub.grant_reply = {
        "header": {
            "messageId": "m",
            "namespace": "Service.Authorization",
            "name": "AcceptGrantResponse",
            "payloadVersion": "v1",
            "authorization": {"type": "BearerToken", "token": "x"},
        },
        "payload": {},
    }
    with pytest.raises(BindError, match=r"header\.authorization: must be absent") as caught:
        await bind(hub, sim)
    assert caught.value.step == "AcceptGrant"


async def test_bind_user_requires_a_302(hub: FakeHub, sim: PlatformSimulator) -> None:
    hub.redirect_status = 303
    with pytest.raises(BindError, match="HTTP 303, expected 302") as caught:
        await bind(hub, sim)
    assert caught.value.step == "login"


async def test_bind_user_wrong_password_names_the_step(hub: FakeHub, sim: PlatformSimulator) -> None:
    with pytest.raises(BindError, match="HTTP 200, expected 302") as caught:
        await bind(hub, sim, password="nope")
    assert caught.value.step == "login"


async def test_bind_user_checks_the_redirect_keeps_the_callback(hub: FakeHub, sim: PlatformSimulator) -> None:
    hub.drop_callback_query = True
    with pytest.raises(BindError, match="lost the callback's parameter src=sim") as caught:
        await bind(hub, sim)
    assert caught.value.step == "redirect"


# ---- command line --------------------------------------------------------------------------------


async def run_main(*args: str) -> asyncio.subprocess.Process:
    code = "import sys; from simulators.platform_cli import main; sys.exit(main(sys.argv[1:]))"
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_cli_serve_runs_until_sigint(http: aiohttp.ClientSession) -> None:
    proc = await run_main("serve", "--port", "0", "--client-id", "a", "--client-secret", "b")
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
    assert line.startswith("platform simulator on http://127.0.0.1:"), line
    url = line.split()[-1]
    async with http.post(f"{url}/sim/codes", json={"userId": "u1"}) as resp:
        code = (await resp.json())["code"]
    form = {"grant_type": "authorization_code", "code": code, "client_id": "a", "client_secret": "b"}
    async with http.post(f"{url}/oauth/token", data=form) as resp:
        assert resp.status == 200
    proc.send_signal(signal.SIGINT)
    _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0, stderr
    assert b"token grant_type=authorization_code client_auth=body -> 200" in stderr


async def test_cli_bind(hub: FakeHub, sim: PlatformSimulator) -> None:
    proc = await run_main(
        "bind",
        "--hub",
        hub.url,
        "--sim",
        sim.url,
        "--username",
        "alice",
        "--password",
        "pw",
        "--user-id",
        "p-7",
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["ok"] is True
    assert sim.tokens_issued[0].user_id == "p-7"
    proc = await run_main(
        "bind",
        "--hub",
        hub.url,
        "--sim",
        sim.url,
        "--username",
        "alice",
        "--password",
        "x",
        "--user-id",
        "p-7",
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 2
    assert b"bind step 'login' failed" in stderr
