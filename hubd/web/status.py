"""Read-only routes: `GET /api/devices`, `GET /api/users` (JSON) and `GET /` (the status page).

Each device shows where it came from (`source`: native, homeassistant or zigbee2mqtt) and its entities, each
exported or not and why; devices of an import none of whose entities is exported never reach the registry,
so the imports themselves (`DeviceImport`) list them under `unexported`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from aiohttp import web

from hubd.cloud.tokens import TokenManager
from hubd.lifecycle import Health
from hubd.outbox import OutboxSender
from hubd.registry import Device, DeviceRegistry


@runtime_checkable
class DeviceImport(Protocol):
    """A device source that may leave devices out entirely (Home Assistant discovery, zigbee2mqtt)."""

    name: str  # the source: "homeassistant", "zigbee2mqtt"

    def unexported_devices(self) -> dict[str, list[str]]:
        """Devices none of whose entities is exported, by name, with a reason per entity."""


class StatusRoutes:
    """Shows what hubd knows: devices, where they came from, their states and readiness."""

    def __init__(self, registry: DeviceRegistry, health: Health, tokens: TokenManager, outbox: OutboxSender,
                 imports: Sequence[DeviceImport] = ()) -> None:
        self._registry = registry
        self._health = health
        self._tokens = tokens
        self._outbox = outbox
        self._imports = imports

    def routes(self) -> list[web.RouteDef]:
        """The routes this module serves."""
        return [web.get("/api/devices", self._devices), web.get("/api/users", self._users), web.get("/", self._page)]

    def _user_list(self) -> list[dict[str, Any]]:
        return [{"userId": g.user_id, "status": g.status, "tokenExpiresAt": g.expires_at,
                 "pendingEvents": self._outbox.depth(g.user_id), "lastError": g.last_error}
                for g in sorted(self._tokens.grants(), key=lambda g: g.user_id)]

    async def _users(self, request: web.Request) -> web.Response:
        return web.json_response({"users": self._user_list(), "pendingEvents": self._outbox.depth()})

    def _device_list(self) -> list[dict[str, Any]]:
        out = []
        for device in self._registry.devices():
            item = device.endpoint()
            item["online"] = device.online
            if device.config.displayType == "speaker":
                item["sn"] = device.config.sn or device.device_id
                item["tags"] = list(device.config.tags)
            item["source"] = device.origin.source
            item["entities"] = _entities(device)
            out.append(item)
        return out

    def _unexported(self) -> list[dict[str, Any]]:
        return [{"source": source.name, "name": name, "entities": list(reasons)}
                for source in self._imports
                for name, reasons in sorted(source.unexported_devices().items())]

    async def _devices(self, request: web.Request) -> web.Response:
        return web.json_response({"devices": self._device_list(), "unexported": self._unexported()})

    async def _page(self, request: web.Request) -> web.Response:
        rows = []
        for d in self._device_list():
            states = ", ".join(f"{s['interface']}={s['value']}" for s in d["states"]) or "–"
            online = {True: "online", False: "offline", None: "?"}[d["online"]]
            left_out = "<br>".join(html.escape(f"{e['name']}: {e.get('reason', '')}") for e in d["entities"]
                                   if not e["exported"])
            rows.append(f"<tr><td>{html.escape(d['endpointId'])}</td><td>{html.escape(d['displayName'])}</td>"
                        f"<td>{html.escape(d['displayType'])}</td><td>{html.escape(d['source'])}</td>"
                        f"<td>{online}</td><td>{html.escape(states)}</td><td>{left_out}</td></tr>")
        unexported = "".join(
            f"<tr><td>{html.escape(u['name'])}</td><td>{html.escape(u['source'])}</td>"
            f"<td>{'<br>'.join(html.escape(r) for r in u['entities'])}</td></tr>" for u in self._unexported())
        users = "".join(
            f"<tr><td>{html.escape(u['userId'])}</td><td>{'linked' if u['status'] == 'active' else 'must link again'}"
            f"</td><td>{u['pendingEvents']}</td><td>{html.escape(u['lastError'] or '')}</td></tr>"
            for u in self._user_list())
        checks = "".join(
            f"<li>{html.escape(name)}: {'✔' if c['ok'] else '✘'} {html.escape(str(c['detail']))}</li>"
            for name, c in self._health.snapshot().items())
        left_out_section = "" if not unexported else (
            "<h2>Not imported</h2><p>Devices none of whose entities the platform can take.</p>"
            f"<table><tr><th>device</th><th>source</th><th>entities, and why not</th></tr>{unexported}</table>")
        body = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>hubd</title>
<style>body{{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}}table{{border-collapse:collapse}}
td,th{{border-bottom:1px solid #ddd;padding:.3rem .6rem;text-align:left;vertical-align:top}}</style></head><body>
<h1>hubd</h1><p>{'Ready' if self._health.ready else 'Not ready'}</p><ul>{checks}</ul>
<h2>Platform users</h2><table><tr><th>user</th><th>link</th><th>events waiting</th><th>last error</th></tr>
{users}</table>
<h2>Devices ({len(rows)})</h2><table><tr><th>id</th><th>name</th><th>type</th><th>source</th><th>availability</th>
<th>states</th><th>not exported</th></tr>{''.join(rows)}</table>{left_out_section}</body></html>"""
        return web.Response(text=body, content_type="text/html", charset="utf-8")


def _entities(device: Device) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for note in device.origin.entities:
        item: dict[str, Any] = {"name": note.name, "exported": note.exported}
        if note.reason:  # why not; for an exported one, what it is for (e.g. a declared doorbell)
            item["reason"] = note.reason
        out.append(item)
    return out
