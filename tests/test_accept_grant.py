"""AcceptGrant against the reply deadline: hubd's real driver checks the header token, real SQLite stores the
grant and its AddOrUpdateReport, and the token endpoint is in-process so a test decides when it answers.

A code is spent the moment the token endpoint takes it (RFC 6749 4.1.2: single use), so a reply deadline
must never throw away the tokens the endpoint issues for it, and a resent AcceptGrant must not spend it again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from driver_helpers import browser_session, running_driver, user_auth
from unit_helpers import device_message, eventually

from hubd.cloud.client import TokenSet
from hubd.cloud.tokens import TokenManager
from hubd.directives.endpoint import DirectiveEndpoint
from hubd.directives.grant import AcceptGrant
from hubd.errors import CloudAuthError, CloudUnavailable
from hubd.outbox.writer import OutboxWriter
from hubd.registry import DeviceRegistry
from hubd.store.db import Database
from hubd.store.grants import GrantRepo

BUDGET_S = 1.0  # the reply budget in these tests (hubd's is 2.5 s): a deadline the tests reach sooner


@dataclass
class TokenHost:
    """The platform's token endpoint: takes (spends) a code when asked, answers once `answer` is set."""

    answer: asyncio.Event = field(default_factory=asyncio.Event)
    spent: list[str] = field(default_factory=list)
    failures: list[CloudAuthError | CloudUnavailable] = field(default_factory=list)

    async def exchange_code(self, code: str, *, timeout_s: float | None = None) -> TokenSet:
        if self.failures:
            raise self.failures.pop(0)
        if code in self.spent:
            raise CloudAuthError("token endpoint refused (400, error=invalid_grant)", fatal=True,
                                 error="invalid_grant")
        self.spent.append(code)
        await self.answer.wait()
        return TokenSet(f"at-{len(self.spent)}", f"rt-{len(self.spent)}", 3600.0)

    async def refresh(self, refresh_token: str) -> TokenSet:
        raise CloudUnavailable("not in these tests")

    async def report_failure(self, user_id: str) -> None:
        raise CloudUnavailable("not in these tests")


@dataclass
class Rig:
    endpoint: DirectiveEndpoint
    tokens: TokenManager
    host: TokenHost
    db: Database
    user_token: str

    def accept_grant(self, code: str = "c1", message_id: str = "m1") -> dict[str, Any]:
        return {"header": {"messageId": message_id, "namespace": "Service.Authorization", "name": "AcceptGrant",
                           "payloadVersion": "v1", "authorization": {"type": "BearerToken", "token": self.user_token}},
                "payload": {"grant": {"type": "OAuth2.AuthorizationCode", "code": code, "userId": "alice"}}}

    async def outbox_names(self) -> list[str]:
        return await self.db.call(lambda c: [r[0] for r in c.execute("SELECT name FROM outbox ORDER BY id")])


def reply_name(reply: dict[str, Any]) -> str:
    header_name = str(reply["header"]["name"])
    return str(reply["payload"]["name"]) if header_name == "ErrorResponse" else header_name


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with running_driver(tmp_path) as driver, browser_session() as session:
        auth = await user_auth(session, driver.url)
        host = TokenHost()
        tokens = TokenManager(GrantRepo(driver.db), host, clock=driver.clock, failure_report=False,
                              metrics=driver.metrics, outbox_wakeup=asyncio.Event())
        await tokens.start()
        writer = OutboxWriter(driver.db, namespace="Service", metrics=driver.metrics)
        registry = DeviceRegistry(driver.db, writer, driver.metrics)
        await registry.start()
        lamp = {"displayName": "Lamp", "displayType": "light",
                "capabilities": [{"interface": "Switch", "supportedOperations": ["On", "Off"]}]}
        await registry.handle([device_message("config", "lamp-1", json.dumps(lamp).encode(), time.time())])
        endpoint = DirectiveEndpoint(path="/vendor", namespace="Service", verifier=driver.service,
                                     metrics=driver.metrics, reply_budget_s=BUDGET_S)
        AcceptGrant(namespace="Service", tokens=tokens, writer=writer, reporting_enabled=True).register(endpoint)
        task = asyncio.create_task(tokens.run())
        try:
            yield Rig(endpoint, tokens, host, driver.db, str(auth["userToken"]))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_slow_token_endpoint_keeps_the_grant_and_a_resend_gets_its_outcome(rig: Rig) -> None:
    first = await rig.endpoint.handle(rig.accept_grant())
    assert reply_name(first) == "E_ENDPOINT_BUSY"
    assert "send AcceptGrant again" in first["payload"]["message"]
    # The platform resends while the token endpoint is still busy: the code is not spent twice.
    again = await rig.endpoint.handle(rig.accept_grant())
    assert reply_name(again) == "E_ENDPOINT_BUSY" and rig.host.spent == ["c1"]
    rig.host.answer.set()  # the tokens arrive after the replies: they are stored all the same
    await eventually(lambda: rig.tokens.is_active("alice"), "the grant stored")
    assert await rig.outbox_names() == ["AddOrUpdateReport"]  # stored with the grant, for the new user
    assert [g.access_token for g in await GrantRepo(rig.db).all()] == ["at-1"]
    third = await rig.endpoint.handle(rig.accept_grant(message_id="m2"))
    assert reply_name(third) == "AcceptGrantResponse" and third["header"]["messageId"] == "m2"
    assert rig.host.spent == ["c1"]


async def test_too_little_time_left_answers_busy_without_spending_the_code(rig: Rig) -> None:
    loop = asyncio.get_running_loop()
    late = loop.time() - (BUDGET_S - 0.2)  # the request arrived long ago: 0.2 s of its budget are left
    reply = await rig.endpoint.handle(rig.accept_grant(), received_at=late)
    assert reply_name(reply) == "E_ENDPOINT_BUSY" and "it is unspent" in reply["payload"]["message"]
    assert rig.host.spent == []
    rig.host.answer.set()
    assert reply_name(await rig.endpoint.handle(rig.accept_grant())) == "AcceptGrantResponse"
    assert rig.host.spent == ["c1"] and rig.tokens.is_active("alice")


async def test_a_refused_code_gets_the_same_answer_and_an_unreachable_endpoint_is_tried_again(rig: Rig) -> None:
    rig.host.failures.append(CloudAuthError("token endpoint refused (400, error=invalid_grant)", fatal=True,
                                            error="invalid_grant"))
    for _ in range(2):
        reply = await rig.endpoint.handle(rig.accept_grant("bad"))
        assert reply_name(reply) == "E_INTERNAL_ERROR" and "invalid_grant" in reply["payload"]["message"]
    assert rig.host.failures == []  # asked once: the resend got the remembered answer
    rig.host.failures.append(CloudUnavailable("token endpoint: connection refused"))
    assert reply_name(await rig.endpoint.handle(rig.accept_grant("good"))) == "E_SERVER_UNREACHABLE"
    rig.host.answer.set()
    assert reply_name(await rig.endpoint.handle(rig.accept_grant("good"))) == "AcceptGrantResponse"
    assert rig.host.spent == ["good"]
