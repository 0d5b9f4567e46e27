"""`OwnerRoutes`: the devices page and its API, on the local listener (`hubd.web.server` checks peer and Host).

- `GET /devices`: the page (`hubd.owner.page`): every device, exported or not and why, the owner's name and room,
  exposure and doorbell, and the delivery of the latest report that carried it.
- `GET /api/devices/{endpointId}`: one device as `GET /api/devices` lists it, with its `overrides`; also one
  listed as not exported, and one gone whose override is kept (`"present": false`).
- `PATCH /api/devices/{endpointId}`: `name`, `room`, `exposed`, `doorbell` (`hubd.owner.edits`); 200 with the
  device, 401/403 without the owner (`hubd.owner.guard`), 404 for an unknown endpointId, 422 for a bad field.
  `PATCH /api/devices` applies one edit to several (`{"endpointIds": [...], "room": ...}`), in one commit.
- `GET`, `POST`, `DELETE /api/session`: whether the browser is signed in (and its CSRF token), signing in with an
  owner account, signing out (`hubd.owner.signin`).

An edit is stored with what the platform must hear of it in one transaction (`DeviceRegistry.override`); a new
doorbell then goes to the dialects (`hubd.owner.live.LiveSelection`), and the edit answers once all of it is
committed, so the outbox already holds the AddOrUpdateReport (or DeleteReport) when the owner sees the answer.
What the listing shows comes from the status routes (`Listing`); whether a bulk edit's endpointIds are known, from the
registry, the overrides and what the dialects leave out, without a listing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web

from hubd.devices.device import Device
from hubd.devices.overrides import Override
from hubd.dialects.base import Dialect
from hubd.owner.edits import Edit, EditInvalid, Problem, parse_bulk, parse_edit, unknown_event
from hubd.owner.guard import OwnerGuard
from hubd.owner.signin import Sessions
from hubd.web.jsonbody import JsonBodyInvalid, load_json
from hubd.web.jsonerror import json_error
from hubd.web.page import InlinePage

log = logging.getLogger(__name__)

PAGE = InlinePage("hubd.owner", "templates/devices.html", referrer="same-origin")  # the devices page

MAX_BODY_BYTES = 64 * 1024  # an edit is a small object; a bulk one names at most 500 endpointIds
NO_STORE = {"Cache-Control": "no-store"}


class OwnedDevices(Protocol):
    """The overrides' single writer (hubd.registry.DeviceRegistry)."""

    def get(self, device_id: str) -> Device | None:
        """One device, or None."""

    def override_of(self, device_id: str) -> Override:
        """The owner's override of an endpoint (an empty one when none)."""

    def overrides(self) -> dict[str, Override]:
        """Every override, by endpointId."""

    async def override(self, changes: Mapping[str, Override]) -> None:
        """Store overrides and queue what the platform must hear, in one transaction."""


class Listing(Protocol):
    """The devices as the API shows them (hubd.status.routes.StatusRoutes)."""

    def one(self, endpoint_id: str) -> dict[str, Any] | None:
        """One device (or one not exported), or None."""

    def listing(self) -> dict[str, Any]:
        """`{"devices": [...], "unexported": [...]}`, as `GET /api/devices` answers."""


class Doorbells(Protocol):
    """Where the owner's doorbells go (hubd.owner.live.LiveSelection)."""

    async def apply(self) -> None:
        """Hand the dialects the doorbells as they are now; return once what that changes is committed."""


class OwnerRoutes:
    """The owner's devices page, its API, and signing in."""

    def __init__(self, devices: OwnedDevices, listing: Listing, guard: OwnerGuard, sessions: Sessions,
                 doorbells: Doorbells, imports: Sequence[Dialect]) -> None:
        self._devices = devices
        self._listing = listing
        self._imports = imports  # the dialects: which endpoints they leave out
        self._guard = guard
        self._sessions = sessions
        self._doorbells = doorbells

    def routes(self) -> list[web.RouteDef]:
        """The routes (all local)."""
        return [web.get("/devices", self._page), web.get("/api/devices/{endpointId}", self._one),
                web.patch("/api/devices/{endpointId}", self._patch), web.patch("/api/devices", self._patch_many),
                web.get("/api/session", self._session), web.post("/api/session", self._sign_in),
                web.delete("/api/session", self._sign_out)]

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=PAGE.render(self._listing.listing()), content_type="text/html", charset="utf-8",
                            headers=PAGE.headers)

    async def _one(self, request: web.Request) -> web.Response:
        endpoint_id = request.match_info["endpointId"]
        found = self._device(endpoint_id)
        if found is None:
            return _not_found([endpoint_id])
        return web.json_response(found, headers=NO_STORE)

    async def _patch(self, request: web.Request) -> web.Response:
        owner = await self._guard.owner(request)
        if isinstance(owner, web.Response):
            return owner
        endpoint_id = request.match_info["endpointId"]
        try:
            edit = parse_edit(await _body(request))
        except EditInvalid as err:
            return _invalid(err)
        shown = self._device(endpoint_id)
        if shown is None:
            return _not_found([endpoint_id])
        unknown = _unannounced(edit, {endpoint_id: shown})
        if unknown is not None:
            return unknown
        refused = self._untouchable(edit, [endpoint_id])
        if refused is not None:
            return refused
        await self._apply([endpoint_id], edit)
        log.info("%s changed %s: %s", owner, endpoint_id, ", ".join(sorted(edit.values)))
        return web.json_response(self._device(endpoint_id), headers=NO_STORE)

    async def _patch_many(self, request: web.Request) -> web.Response:
        owner = await self._guard.owner(request)
        if isinstance(owner, web.Response):
            return owner
        try:
            ids, edit = parse_bulk(await _body(request))
        except EditInvalid as err:
            return _invalid(err)
        unknown = self._unknown(ids)
        if unknown:
            return _not_found(unknown)
        if edit.doorbell:
            index = self._index()
            refused = _unannounced(edit, {i: index[i] for i in ids if i in index}, bulk=True)
            if refused is not None:
                return refused
        untouchable = self._untouchable(edit, ids)
        if untouchable is not None:
            return untouchable
        await self._apply(ids, edit)
        log.info("%s changed %d devices: %s", owner, len(ids), ", ".join(sorted(edit.values)))
        shown = self._index()
        return web.json_response({"devices": [shown.get(i) for i in ids]}, headers=NO_STORE)

    async def _apply(self, ids: list[str], edit: Edit) -> None:
        """Store the edit of these endpoints with what the platform must hear; a new doorbell or exposure goes to the
        dialects (exposing exports what they keep back by rule)."""
        kept_back = {u.endpoint_id for source in self._imports for u in source.unexported_devices()
                     if u.exposable} if "exposed" in edit.values else set()
        await self._devices.override({i: edit.apply(self._devices.override_of(i), i in kept_back) for i in ids})
        if edit.selects:
            await self._doorbells.apply()

    def _untouchable(self, edit: Edit, ids: list[str]) -> web.Response | None:
        """The 422 for exposing an endpoint that hubd keeps back by a rule no owner lifts (a maintenance action:
        restart, erase, reset, update, identify), naming the rule; None when none of `ids` is one."""
        if edit.values.get("exposed") is not True:
            return None
        wanted = set(ids)
        problems = [Problem("exposed", f"{u.endpoint_id[:80]} ({u.name[:60]}) is kept back by rule: {u.rule}")
                    for source in self._imports for u in source.unexported_devices()
                    if u.endpoint_id in wanted and u.rule is not None]
        return _invalid(EditInvalid(problems)) if problems else None

    def _device(self, endpoint_id: str) -> dict[str, Any] | None:
        """What the API shows of an endpoint: a device, one not exported, one gone whose override is kept."""
        found = self._listing.one(endpoint_id)
        if found is not None:
            return found
        override = self._devices.overrides().get(endpoint_id)
        return None if override is None else _absent(endpoint_id, override)

    def _unknown(self, ids: list[str]) -> list[str]:
        """The endpointIds the API knows nothing of: no device, none left out, no override kept."""
        overrides = self._devices.overrides()
        left_out = {u.endpoint_id for source in self._imports for u in source.unexported_devices()}
        return [i for i in ids if self._devices.get(i) is None and i not in overrides and i not in left_out]

    def _index(self) -> dict[str, dict[str, Any]]:
        """What the API shows of every endpoint it knows, by endpointId (one listing for a bulk edit's answer)."""
        listing = self._listing.listing()
        out = {endpoint_id: _absent(endpoint_id, override)
               for endpoint_id, override in self._devices.overrides().items()}
        out.update((u["endpointId"], {**u, "exported": False}) for u in listing["unexported"])
        out.update((d["endpointId"], {**d, "exported": True}) for d in listing["devices"])
        return out

    async def _session(self, request: web.Request) -> web.Response:
        session = self._sessions.find(request)
        if session is None:
            return web.json_response({"signedIn": False, "owners": bool(self._sessions.owners)}, headers=NO_STORE)
        return web.json_response({"signedIn": True, "username": session.username, "csrf": session.csrf,
                                  "expiresAt": session.expires_at}, headers=NO_STORE)

    async def _sign_in(self, request: web.Request) -> web.Response:
        refused = self._guard.foreign(request)
        if refused is not None:
            return refused
        try:
            body = await _body(request)
        except EditInvalid as err:
            return _invalid(err)
        if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in ("username", "password")):
            return json_error(422, 'send {"username": ..., "password": ...} as JSON',
                              [{"path": "(body)", "message": "username and password must be strings"}])
        result = await self._sessions.sign_in(body["username"], body["password"], request.remote or "unknown")
        if result.session is None or result.session_id is None:
            headers = {"Retry-After": str(math.ceil(result.wait_s))} if result.wait_s else None
            message = result.error or "not signed in"
            if result.wait_s:
                message = f"{message}; try again in {math.ceil(result.wait_s)} s"
            return json_error(result.status, message, [{"path": "(body)", "message": result.error or ""}], headers)
        response = web.json_response({"signedIn": True, "username": result.session.username,
                                      "csrf": result.session.csrf, "expiresAt": result.session.expires_at},
                                     headers=NO_STORE)
        self._sessions.set_cookie(response, result.session_id, secure=request.secure)
        return response

    async def _sign_out(self, request: web.Request) -> web.Response:
        refused = self._guard.foreign(request)
        if refused is not None:
            return refused
        session = self._sessions.sign_out(request)
        if session is not None:
            log.info("owner sign-in: %r signed out", session.username)
        response = web.json_response({"signedIn": False}, headers=NO_STORE)
        self._sessions.clear_cookie(response)
        return response


async def _body(request: web.Request) -> object:
    """The request's JSON body; EditInvalid when it is not JSON."""
    try:
        return load_json(await request.read(), max_bytes=MAX_BODY_BYTES)
    except JsonBodyInvalid as err:
        raise EditInvalid([Problem("(body)", f"{err}; send a JSON object")]) from None


def _absent(endpoint_id: str, override: Override) -> dict[str, Any]:
    """What the API shows of an endpoint gone (or never seen) whose override is kept."""
    return {"endpointId": endpoint_id, "exported": False, "present": False, "overrides": override.as_json()}


def _unannounced(edit: Edit, shown: dict[str, dict[str, Any]], *, bulk: bool = False) -> web.Response | None:
    """The 422 for a doorbell event one of these devices does not announce (`doorbellEvents`, as the devices page
    offers them), naming the ones it does (and, in a bulk edit, the endpointId); None when each announces it, or
    announces none."""
    event = edit.values.get("doorbell")
    if event is None:
        return None
    problems = []
    for endpoint_id, device in shown.items():
        problem = unknown_event(event, list(device.get("doorbellEvents") or ()))
        if problem is not None:
            problems.append(problem if not bulk else
                            Problem(problem.path, f"{endpoint_id[:80]}: {problem.message}"))
    return _invalid(EditInvalid(problems)) if problems else None


def _invalid(err: EditInvalid) -> web.Response:
    first = err.problems[0]
    more = f" (and {len(err.problems) - 1} more problems)" if len(err.problems) > 1 else ""
    return json_error(422, f"{first.path}: {first.message}{more}", [p.as_json() for p in err.problems])


def _not_found(ids: list[str]) -> web.Response:
    shown = ", ".join(repr(i[:80]) for i in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return json_error(404, f"no device {shown} on this hub (nor one it leaves out); see GET /api/devices for the "
                           "endpointIds", [{"path": "endpointId", "message": f"unknown: {i[:80]}"} for i in ids[:20]])
