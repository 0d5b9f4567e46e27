"""The platform simulator's control routes: /sim/*, for tests, the demo and a person with curl.

Owns the HTTP face of a PlatformSimulator's test controls: POST /sim/codes mints a platform code,
/sim/faults scripts failures, latency and outages, /sim/tokens/{expire|revoke-refresh|revoke} ages or
revokes a user's tokens, /sim/reset clears recordings; GET /sim/{events|duplicates|tokens|failures|
rejections|token-requests} serves what it recorded. The state stays in simulators.platform; the
fault middleware skips these routes. Never imports hubd.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Protocol

from aiohttp import web

from simulators.platform_records import EventRecord, FailureReport, Rejection, TokenRequest, camel_json
from simulators.platform_tokens import TokenAuthority


class PlatformSimulator(Protocol):
    """What the control routes use of the simulator (simulators.platform.PlatformSimulator)."""

    tokens: TokenAuthority
    events: list[EventRecord]
    duplicates: list[EventRecord]
    rejections: list[Rejection]
    token_requests: list[TokenRequest]
    failure_reports: list[FailureReport]
    expired_token_hits: int

    def issue_code(self, user_id: str) -> str: ...
    def fail_events(self, *statuses: int) -> None: ...
    def fail_token_requests(self, *statuses: int) -> None: ...
    def set_latency(self, seconds: float) -> None: ...
    def set_outage(self, on: bool, user_id: str | None = None) -> None: ...
    def faults(self) -> dict[str, Any]: ...
    def expire_tokens(self, user_id: str | None = None) -> None: ...
    def revoke_refresh(self, user_id: str) -> None: ...
    def revoke_user(self, user_id: str) -> None: ...
    def reset(self, *, full: bool = False) -> None: ...


class ControlRoutes:
    """The /sim/* handlers of one PlatformSimulator."""

    def __init__(self, sim: PlatformSimulator) -> None:
        self._sim = sim

    def add_to(self, router: web.UrlDispatcher) -> None:
        """Register the routes, after the platform's own."""
        router.add_post("/sim/codes", self._codes)
        router.add_post("/sim/faults", self._faults)
        router.add_post("/sim/tokens/{action}", self._token_action)
        router.add_post("/sim/reset", self._reset)
        router.add_get("/sim/{kind}", self._list)

    async def _codes(self, request: web.Request) -> web.Response:
        user_id = (await _sim_json(request)).get("userId")
        if not isinstance(user_id, str) or not user_id:
            return web.json_response({"error": "userId: expected a non-empty string"}, status=400)
        return web.json_response({"code": self._sim.issue_code(user_id)})

    async def _faults(self, request: web.Request) -> web.Response:
        sim = self._sim
        body = await _sim_json(request)
        scripts = {key: body.get(key, []) for key in ("events", "token")}
        for key, statuses in scripts.items():
            if not isinstance(statuses, list) or not all(type(s) is int and 100 <= s < 600 for s in statuses):
                return web.json_response({"error": f"{key}: expected a list of HTTP statuses"}, status=400)
        sim.fail_events(*scripts["events"])
        sim.fail_token_requests(*scripts["token"])
        if "latencyS" in body:
            sim.set_latency(float(body["latencyS"]))
        if "outage" in body:
            outage_user = body.get("userId")
            if outage_user is not None and not isinstance(outage_user, str):
                return web.json_response({"error": "userId: expected a string"}, status=400)
            sim.set_outage(body["outage"] is True, outage_user)
        return web.json_response(sim.faults())

    async def _token_action(self, request: web.Request) -> web.Response:
        sim = self._sim
        user_id = (await _sim_json(request)).get("userId")
        action = request.match_info["action"]
        if action not in ("expire", "revoke-refresh", "revoke"):
            raise web.HTTPNotFound()
        if not isinstance(user_id, str) and (user_id is not None or action != "expire"):
            return web.json_response({"error": "userId: expected a string"}, status=400)
        try:
            if action == "expire":
                sim.expire_tokens(user_id)
            elif action == "revoke-refresh":
                sim.revoke_refresh(str(user_id))
            else:
                sim.revoke_user(str(user_id))
        except KeyError:
            return web.json_response({"error": f"userId: {user_id!r} has no tokens"}, status=404)
        return web.json_response({"users": sim.tokens.status()})

    async def _reset(self, request: web.Request) -> web.Response:
        self._sim.reset(full=bool((await _sim_json(request)).get("full", False)))
        return web.json_response({"ok": True})

    async def _list(self, request: web.Request) -> web.Response:
        sim = self._sim
        kind = request.match_info["kind"]
        query = request.query
        if kind in ("events", "duplicates"):
            records = sim.events if kind == "events" else sim.duplicates
            rows = [
                r.to_json() for r in records
                if query.get("name", r.name) == r.name and query.get("userId", r.user_id) == r.user_id
                and ("endpointId" not in query or query["endpointId"] in r.endpoint_ids)
            ]
            return web.json_response(rows)
        if kind == "tokens":
            hits = sim.expired_token_hits
            return web.json_response({"users": sim.tokens.status(), "expiredTokenHits": hits})
        lists: dict[str, list[Any]] = {
            "failures": sim.failure_reports,
            "rejections": sim.rejections,
            "token-requests": sim.token_requests,
        }
        if kind not in lists:
            raise web.HTTPNotFound()
        return web.json_response([camel_json(asdict(r)) for r in lists[kind]])


async def _sim_json(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.text() or "{}")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text='{"error": "$: expected an object"}', content_type="application/json")
    return body
