"""Read-only routes: `GET /api/devices`, `GET /api/users`, `GET /api/status` (JSON) and `GET /` (the status page).

Each device shows where it came from (`source`: the name of the dialect that imported it, whose labels the listing
carries under `sources`, from the table of dialects) and its entities, each
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

Each device also carries what the owner's devices page (`hubd.owner`) shows: whether the platform gets it
(`exposed`), the owner's `overrides`, its own name and room (`described`), the events its button announces
(`doorbellEvents`) and the latest AddOrUpdateReport or DeleteReport that carried it, with its delivery, from the
journal (`report`); `one` answers `GET /api/devices/{endpointId}` for that page's API. While the `storage`
check fails, the problems begin with one saying so: hubd stops acknowledging, and the broker's own queue limit
decides what is kept.

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
from hubd.devices.overrides import Override
from hubd.dialects.base import Dialect, Unexported
from hubd.dialects.enabled import labels
from hubd.lifecycle import Health
from hubd.store.db import STORAGE_NOT_OPEN
from hubd.store.grants import Grant
from hubd.web.page import InlinePage

EVENTS_SHOWN = 30
PAGE = InlinePage("hubd.status", "templates/status.html", referrer="no-referrer")  # the status page
SOURCES = labels()  # each dialect's labels for its devices' source, by its name
REPORTS = frozenset({"AddOrUpdateReport", "DeleteReport"})  # what tells the platform of a device's name and room


class Devices(Protocol):
    """The devices hubd knows (`hubd.registry.DeviceRegistry`)."""

    def devices(self) -> list[Device]:
        """Every known device, sorted by id."""

    def get(self, device_id: str) -> Device | None:
        """One device, or None."""

    def override_of(self, device_id: str) -> Override:
        """The owner's override of an endpoint (an empty one when none)."""


class Grants(Protocol):
    """The users' grants (`hubd.cloud.tokens.TokenManager`)."""

    def grants(self) -> list[Grant]:
        """Every grant."""


class Backlog(Protocol):
    """The events not yet delivered (`hubd.outbox.sender.OutboxSender`)."""

    def depth(self, user_id: str | None = None) -> int:
        """Undelivered events (of one user, or all)."""


class Journal(Protocol):
    """What the page reads of the event journal (`hubd.outbox.journal.EventJournal`)."""

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
        self._by_name = {dialect.name: dialect for dialect in imports}
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

    def one(self, endpoint_id: str) -> dict[str, Any] | None:
        """One device as `GET /api/devices` lists it (`"exported": true`), or one listed as not exported
        (`"exported": false`); None when neither."""
        reports = self._reports()
        device = self._registry.get(endpoint_id)
        if device is not None:
            return {**self._device(device, reports), "exported": True}
        for source in self._imports:
            for unexported in source.unexported_devices():
                if unexported.endpoint_id == endpoint_id:
                    return {**self._unexported_item(source.name, unexported, reports), "exported": False}
        return None

    def _device_list(self, reports: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [self._device(device, reports) for device in self._registry.devices()]

    def _device(self, device: Device, reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
        item = device.endpoint()
        item["online"] = device.online
        item["availability"] = {True: "online", False: "offline", None: "unknown"}[device.online]
        item["lastSeen"] = device.last_seen
        if device.config.displayType == "speaker":
            item["sn"] = device.config.sn or device.device_id
            item["tags"] = list(device.config.tags)
        item["source"] = device.origin.source
        if device.origin.naming:  # the name is hubd's choice, not the source's: why
            item["naming"] = device.origin.naming
        item["entities"] = _entities(device)
        described = device.described
        item["exposed"] = not device.hidden
        item["overrides"] = self._registry.override_of(device.device_id).as_json()
        item["described"] = {"displayName": described.displayName, "recommendRoomName": described.recommendRoomName}
        dialect = self._by_name.get(device.route.dialect)
        item["doorbellEvents"] = list(dialect.doorbell_events(device.device_id)) if dialect is not None else []
        item["report"] = reports.get(device.device_id)
        return item

    def _unexported(self, reports: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [self._unexported_item(source.name, u, reports)
                for source in self._imports for u in source.unexported_devices()]

    def _unexported_item(self, source: str, unexported: Unexported, reports: dict[str, dict[str, Any]],
                         ) -> dict[str, Any]:
        return {"source": source, "endpointId": unexported.endpoint_id, "name": unexported.name,
                "entities": list(unexported.reasons), "doorbellEvents": list(unexported.events),
                "exposable": unexported.exposable, "keptBackRule": unexported.rule,
                "topic": unexported.topic,
                "overrides": self._registry.override_of(unexported.endpoint_id).as_json(),
                "report": reports.get(unexported.endpoint_id)}

    def _reports(self) -> dict[str, dict[str, Any]]:
        """Each endpoint's latest AddOrUpdateReport or DeleteReport the journal holds, with its delivery."""
        out: dict[str, dict[str, Any]] = {}
        for event in self._journal.events() if self._journal is not None else []:  # newest first
            if event["name"] not in REPORTS:
                continue
            report = {key: event[key] for key in ("name", "userId", "status", "error", "createdAt", "deliveredAt")}
            for endpoint in event["endpoints"]:
                out.setdefault(endpoint, report)
        return out

    def listing(self) -> dict[str, Any]:
        """`{"devices": [...], "unexported": [...], "sources": {...}}`: what `GET /api/devices` answers; `sources`
        names each dialect for the pages (`hubd.dialects.enabled.labels`)."""
        reports = self._reports()
        return {"devices": self._device_list(reports), "unexported": self._unexported(reports), "sources": SOURCES}

    async def _devices(self, request: web.Request) -> web.Response:
        return web.json_response(self.listing())

    async def status(self) -> dict[str, Any]:
        """Everything the page shows, as `GET /api/status` answers it."""
        journal = self._journal
        return {
            "now": time.time(),
            "ready": self._health.ready,
            "checks": self._health.snapshot(),
            **self.listing(),
            "users": self._user_list(),
            "pendingEvents": self._outbox.depth(),
            "events": journal.events(EVENTS_SHOWN) if journal is not None else [],
            "problems": {"rejected": journal.rejected_messages() if journal is not None else [],
                         "deliveries": journal.failed_deliveries() if journal is not None else [],
                         "other": self._storage_problem() + (journal.notices() if journal is not None else [])},
            "webhooks": await self._webhooks.usage() if self._webhooks is not None else [],
        }

    def _storage_problem(self) -> list[dict[str, Any]]:
        """The problem while the `storage` check fails (the disk refuses writes): hubd stops acknowledging device
        messages, so what reaches the platform now depends on how much the broker queues for it."""
        storage = self._health.snapshot().get("storage")
        if storage is None or storage["ok"] or storage["detail"] == STORAGE_NOT_OPEN:
            return []
        return [{"subject": "storage", "problem": f"{storage['detail']}. hubd does not acknowledge device messages "
                 "until it can store them; the broker keeps them meanwhile, but only up to its own limit "
                 "(mosquitto: max_queued_messages, 1000 by default, and max_queued_bytes) and drops what comes "
                 "after. Free space on the disk now; `hubd doctor` checks the broker's limits",
                 "firstSeen": None, "lastSeen": time.time(), "count": 1}]

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(await self.status(), headers={"Cache-Control": "no-store"})

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=PAGE.render(await self.status()), content_type="text/html", charset="utf-8",
                            headers=PAGE.headers)


def _entities(device: Device) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for note in device.origin.entities:
        item: dict[str, Any] = {"name": note.name, "exported": note.exported}
        if note.reason:  # why not; for an exported one, what it is for (e.g. a declared doorbell)
            item["reason"] = note.reason
        out.append(item)
    return out
