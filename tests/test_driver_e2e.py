"""The driver in a running hubd: the platform's four checks pass in both modes, binding works, and AcceptGrant
refuses what it must."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from rig import Rig

from simulators.platform_binding import bind_user

MakeRig = Callable[..., Awaitable[Rig]]


@pytest.mark.parametrize("mode", ["oauth2", "oauth"])
async def test_check_driver_passes_against_running_hubd(make_rig: MakeRig, mode: str) -> None:
    rig = await make_rig(hub_overrides={"driver": {"mode": mode}})
    hub, platform_sim = rig.hub, rig.sim
    try:
        result = subprocess.run(
            [sys.executable, "-m", "hubd", "check-driver", hub.url, "--callback-url",
             f"{platform_sim.url}/cb/path?u=1&v=2", "--username", "demo", "--password", "demo"],
            capture_output=True, text=True, timeout=60, check=False)
        lines = result.stdout.strip().splitlines()
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(lines) == 4 and all("PASS" in line for line in lines), lines

        # The platform binds a user through the same flow and AcceptGrant accepts the token it got.
        bound = await bind_user(hub_url=hub.url, vendor_path="/vendor", sim=platform_sim, username="demo",
                                password="demo", user_id=f"user-{mode}")
        assert bound.ok, bound.reply
        assert bound.auth_mode == mode
        _, users = await hub.get("/api/users")
        assert [u["userId"] for u in users["users"]] == [f"user-{mode}"]

        # A wrong password never gets anywhere: check 2 fails and says why.
        bad = subprocess.run(
            [sys.executable, "-m", "hubd", "check-driver", hub.url, "--callback-url", f"{platform_sim.url}/cb",
             "--username", "demo", "--password", "wrong"],
            capture_output=True, text=True, timeout=60, check=False)
        assert bad.returncode != 0
        assert "FAIL" in bad.stdout.splitlines()[1], bad.stdout
    finally:
        hub.stop()
    # debug logging is on in these tests: still no token in the log
    assert bound.user_token not in hub.log()


async def test_accept_grant_with_unknown_or_missing_token_is_refused(make_rig: MakeRig) -> None:
    rig = await make_rig()
    hub, platform_sim = rig.hub, rig.sim
    message = {"header": {"messageId": "m-1", "namespace": "Service.Authorization", "name": "AcceptGrant",
                          "payloadVersion": "v1", "authorization": {"type": "BearerToken", "token": "forged"}},
               "payload": {"grant": {"type": "OAuth2.AuthorizationCode",
                                     "code": platform_sim.issue_code("mallory"), "userId": "mallory"}}}
    status, reply, _ = await hub.post("/vendor", message)
    assert status == 200
    assert reply["header"]["name"] == "ErrorResponse" and reply["header"]["messageId"] == "m-1"
    assert reply["payload"]["name"] == "E_INVALID_AUTHORIZATION"
    status, reply, _ = await hub.post("/vendor", data=b"{not json", headers={"Content-Type": "application/json"})
    assert status == 200 and reply["header"]["name"] == "ErrorResponse"
    _, users = await hub.get("/api/users")
    assert users["users"] == []


async def test_accept_grant_reports_a_refused_code(make_rig: MakeRig) -> None:
    rig = await make_rig()
    hub, platform_sim = rig.hub, rig.sim
    bound = await bind_user(hub_url=hub.url, vendor_path="/vendor", sim=platform_sim, username="demo",
                            password="demo", user_id="alice")
    message: dict[str, Any] = {
        "header": {"messageId": "m-2", "namespace": "Service.Authorization", "name": "AcceptGrant",
                   "payloadVersion": "v1", "authorization": {"type": "BearerToken", "token": bound.user_token}},
        "payload": {"grant": {"type": "OAuth2.AuthorizationCode", "code": "not-a-code", "userId": "bob"}}}
    _, reply, _ = await hub.post("/vendor", message)
    assert reply["header"]["name"] == "ErrorResponse"
    assert reply["payload"]["name"] == "E_INTERNAL_ERROR"
    assert "invalid_grant" in reply["payload"]["message"]
    platform_sim.set_outage(True)
    message["header"]["messageId"] = "m-3"
    message["payload"]["grant"]["code"] = "whatever"
    _, reply, _ = await hub.post("/vendor", message)
    assert reply["payload"]["name"] == "E_SERVER_UNREACHABLE"
