"""Helpers for the tests of the owner's control (the devices page's API, admin tokens, sessions): the admin-token
command run for real, and PATCH/GET over loopback with or without a credential."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import aiohttp
from hubd_proc import REPO, HubdProcess


def hubd_cli(hub: HubdProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`hubd <args> -c <the hub's config>` as a subprocess (the admin commands work while hubd runs)."""
    group, *rest = args
    return subprocess.run([sys.executable, "-m", "hubd", group, "-c", str(hub.config_path), *rest], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def admin_token(hub: HubdProcess, name: str = "tests") -> str:
    """A new admin token, made with `hubd admin-token create`."""
    made = hubd_cli(hub, "admin-token", "create", "--name", name)
    assert made.returncode == 0, made.stderr
    return str(json.loads(made.stdout)["token"])


async def request(hub: HubdProcess, method: str, path: str, body: Any = None, *, token: str | None = None,
                  headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    """One request with a JSON body (and `Authorization: Bearer token`); status, parsed body, headers."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession() as session, session.request(
            method, f"{hub.url}{path}", json=body, headers=sent) as response:
        text = await response.text()
        try:
            parsed: Any = json.loads(text)
        except json.JSONDecodeError:
            parsed = text
        return response.status, parsed, dict(response.headers)


async def patch(hub: HubdProcess, endpoint_id: str, body: Any, *, token: str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """PATCH /api/devices/{endpointId}; status and parsed body."""
    status, parsed, _ = await request(hub, "PATCH", f"/api/devices/{endpoint_id}", body, token=token,
                                      headers=headers)
    return status, parsed


async def device(hub: HubdProcess, endpoint_id: str) -> dict[str, Any]:
    """GET /api/devices/{endpointId} (it must be there)."""
    status, body, _ = await request(hub, "GET", f"/api/devices/{endpoint_id}")
    assert status == 200, body
    return dict(body)


def endpoint_in(record: Any, endpoint_id: str) -> dict[str, Any]:
    """The endpoint an AddOrUpdateReport carried for `endpoint_id`."""
    return next(e for e in record.message["payload"]["endpoints"] if e["endpointId"] == endpoint_id)
