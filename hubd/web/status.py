"""Read-only routes: `GET /api/devices`, `GET /api/users` (JSON) and `GET /` (the status page)."""

from __future__ import annotations

import html
from typing import Any

from aiohttp import web

from hubd.cloud.tokens import TokenManager
from hubd.lifecycle import Health
from hubd.outbox import OutboxSender
from hubd.registry import DeviceRegistry


class StatusRoutes:
    """Shows what hubd knows: devices, their states and readiness."""

    def __init__(self, registry: DeviceRegistry, health: Health, tokens: TokenManager, outbox: OutboxSender) -> None:
        self._registry = registry
        self._health = health
        self._tokens = tokens
        self._outbox = outbox

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
            out.append(item)
        return out

    async def _devices(self, request: web.Request) -> web.Response:
        return web.json_response({"devices": self._device_list()})

    async def _page(self, request: web.Request) -> web.Response:
        rows = []
        for d in self._device_list():
            states = ", ".join(f"{s['interface']}={s['value']}" for s in d["states"]) or "–"
            online = {True: "online", False: "offline", None: "?"}[d["online"]]
            rows.append(f"<tr><td>{html.escape(d['endpointId'])}</td><td>{html.escape(d['displayName'])}</td>"
                        f"<td>{html.escape(d['displayType'])}</td><td>{online}</td><td>{html.escape(states)}</td></tr>")
        users = "".join(
            f"<tr><td>{html.escape(u['userId'])}</td><td>{'linked' if u['status'] == 'active' else 'must link again'}"
            f"</td><td>{u['pendingEvents']}</td><td>{html.escape(u['lastError'] or '')}</td></tr>"
            for u in self._user_list())
        checks = "".join(
            f"<li>{html.escape(name)}: {'✔' if c['ok'] else '✘'} {html.escape(str(c['detail']))}</li>"
            for name, c in self._health.snapshot().items())
        body = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>hubd</title>
<style>body{{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}}table{{border-collapse:collapse}}
td,th{{border-bottom:1px solid #ddd;padding:.3rem .6rem;text-align:left}}</style></head><body>
<h1>hubd</h1><p>{'Ready' if self._health.ready else 'Not ready'}</p><ul>{checks}</ul>
<h2>Platform users</h2><table><tr><th>user</th><th>link</th><th>events waiting</th><th>last error</th></tr>
{users}</table>
<h2>Devices ({len(rows)})</h2><table><tr><th>id</th><th>name</th><th>type</th><th>availability</th>
<th>states</th></tr>{''.join(rows)}</table></body></html>"""
        return web.Response(text=body, content_type="text/html", charset="utf-8")
