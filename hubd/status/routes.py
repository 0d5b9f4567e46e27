"""Read-only routes: `GET /api/devices`, `GET /api/users`, `GET /api/status` (JSON) and `GET /` (the status page).

Each device shows where it came from (`source`: native, homeassistant or zigbee2mqtt) and its entities, each
exported or not and why; devices of an import none of whose entities is exported never reach the registry,
so the dialects themselves (`Dialect.unexported_devices`) list them under `unexported`, with the endpointId each
would have.

The page (`hubd.status.page`) comes with the current status in a JSON data block, so it shows everything at
once, and then polls `GET /api/status` every 2 s and redraws what changed, without a reload. Polling rather
than Server-Sent Events: a poll is one ordinary request that any proxy, the connection cap
(`web/connections.py`) and the request timeout treat like every other; nothing stays open per browser tab; a
hub restart or a phone waking from sleep needs no reconnect logic (the next poll works); and the page stops
polling while hidden. The cost, a small JSON document every 2 s per open page, is built from memory (the
registry, the outbox index, the event journal); only the webhooks' list is read from SQLite, at most every 5 s.

Device names and everything else in the data are untrusted: the script sets them as text (never as HTML).
These routes are local ones (`web/peers.py`). What they read comes in through the ports below (the registry,
the token manager, the outbox sender, the journal, the webhooks: app.py wires them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from aiohttp import web

from hubd.devices.device import Device
from hubd.dialects.base import Dialect
from hubd.lifecycle import Health
from hubd.status import page
from hubd.store.grants import Grant

EVENTS_SHOWN = 30


class Devices(Protocol):
    """The devices hubd knows (`hubd.registry.DeviceRegistry`)."""

    def devices(self) -> list[Device]:
        """Every known device, sorted by id."""


class Grants(Protocol):
    """The users' grants (`hubd.cloud.tokens.TokenManager`)."""

    def grants(self) -> list[Grant]:
        """Every grant."""


class Backlog(Protocol):
    """The events not yet delivered (`hubd.outbox.sender.OutboxSender`)."""

    def depth(self, user_id: str | None = None) -> int:
        """Undelivered events (of one user, or all)."""


class Journal(Protocol):
    """What the page reads of the event journal (`hubd.journal.EventJournal`)."""

    def events(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The latest platform events, newest first."""

    def rejected_messages(self) -> list[dict[str, Any]]:
        """Refused device messages, most recent first."""

    def failed_deliveries(self) -> list[dict[str, Any]]:
        """Failed tries to deliver, most recent first."""

    def notices(self) -> list[dict[str, Any]]:
        """Other problems (a burst of presses, a refused webhook call), most recent first."""

    def user(self, user_id: str) -> dict[str, Any]:
        """A user's last delivery and last delivery error."""


class WebhookUsage(Protocol):
    """The webhooks' use (`hubd.webhook.service.WebhookService`): names, counts and limits, never a token."""

    async def usage(self) -> list[dict[str, Any]]:
        """Each live webhook's name, calls in the last minute and 24 hours, and the limits."""


class StatusRoutes:
    """Shows what hubd knows: devices, where they came from, their states, readiness, events and problems."""

    def __init__(self, registry: Devices, health: Health, tokens: Grants, outbox: Backlog,
                 imports: Sequence[Dialect] = (), journal: Journal | None = None,
                 webhooks: WebhookUsage | None = None) -> None:
        self._registry = registry
        self._health = health
        self._tokens = tokens
        self._outbox = outbox
        self._imports = imports
        self._journal = journal
        self._webhooks = webhooks

    def routes(self) -> list[web.RouteDef]:
        """The routes this module serves (all local: `web/server.py` checks the peer)."""
        return [web.get("/api/devices", self._devices), web.get("/api/users", self._users),
                web.get("/api/status", self._status), web.get("/", self._page)]

    def _user_list(self) -> list[dict[str, Any]]:
        journal = self._journal
        return [{"userId": g.user_id, "status": g.status, "tokenExpiresAt": g.expires_at,
                 "pendingEvents": self._outbox.depth(g.user_id), "lastError": g.last_error,
                 **(journal.user(g.user_id) if journal is not None else {})}
                for g in sorted(self._tokens.grants(), key=lambda g: g.user_id)]

    async def _users(self, request: web.Request) -> web.Response:
        return web.json_response({"users": self._user_list(), "pendingEvents": self._outbox.depth()})

    def _device_list(self) -> list[dict[str, Any]]:
        out = []
        for device in self._registry.devices():
            item = device.endpoint()
            item["online"] = device.online
            item["availability"] = {True: "online", False: "offline", None: "unknown"}[device.online]
            item["lastSeen"] = device.last_seen
            if device.config.displayType == "speaker":
                item["sn"] = device.config.sn or device.device_id
                item["tags"] = list(device.config.tags)
            item["source"] = device.origin.source
            item["entities"] = _entities(device)
            out.append(item)
        return out

    def _unexported(self) -> list[dict[str, Any]]:
        return [{"source": source.name, "endpointId": u.endpoint_id, "name": u.name, "entities": list(u.reasons)}
                for source in self._imports for u in source.unexported_devices()]

    async def _devices(self, request: web.Request) -> web.Response:
        return web.json_response({"devices": self._device_list(), "unexported": self._unexported()})

    async def status(self) -> dict[str, Any]:
        """Everything the page shows, as `GET /api/status` answers it."""
        journal = self._journal
        return {
            "now": time.time(),
            "ready": self._health.ready,
            "checks": self._health.snapshot(),
            "devices": self._device_list(),
            "unexported": self._unexported(),
            "users": self._user_list(),
            "pendingEvents": self._outbox.depth(),
            "events": journal.events(EVENTS_SHOWN) if journal is not None else [],
            "problems": {"rejected": journal.rejected_messages() if journal is not None else [],
                         "deliveries": journal.failed_deliveries() if journal is not None else [],
                         "other": journal.notices() if journal is not None else []},
            "webhooks": await self._webhooks.usage() if self._webhooks is not None else [],
        }

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(await self.status(), headers={"Cache-Control": "no-store"})

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=page.render(await self.status()), content_type="text/html", charset="utf-8",
                            headers=page.headers())


def _entities(device: Device) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for note in device.origin.entities:
        item: dict[str, Any] = {"name": note.name, "exported": note.exported}
        if note.reason:  # why not; for an exported one, what it is for (e.g. a declared doorbell)
            item["reason"] = note.reason
        out.append(item)
    return out
