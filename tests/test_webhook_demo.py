"""The webhook in `hubd demo`: one doorbell webhook however often it runs; odd replies do not stop the automation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from hubd.demo.automation import DOORBELL_WEBHOOK, doorbell_webhook_blocking, ring
from hubd.store.db import Database
from hubd.webhook import store
from hubd.webhook.trigger import parse


def test_the_demo_keeps_one_doorbell_webhook(tmp_path: Path) -> None:
    db = Database(tmp_path / "hubd.db")
    first = db.call_blocking(doorbell_webhook_blocking, 1000.0)
    second = db.call_blocking(doorbell_webhook_blocking, 2000.0)
    assert first != second
    hooks = db.call_blocking(store.list_blocking, 2000.0)
    assert [(h.name, h.revoked_at) for h in hooks] == [(DOORBELL_WEBHOOK, None)]
    assert isinstance(db.call_blocking(store.lookup_blocking, second), store.LiveToken)
    assert db.call_blocking(store.lookup_blocking, first) == store.RetiredToken(hooks[0].id, "rotated", 2000.0)


def test_a_doorbell_webhook_with_another_action_is_replaced(tmp_path: Path) -> None:
    db = Database(tmp_path / "hubd.db")
    other = parse({"type": "tts", "devices": {"isAll": True}, "data": {"text": "an older demo said this"}})
    old_id, _ = db.call_blocking(store.create_blocking, DOORBELL_WEBHOOK, other, 1000.0)
    token = db.call_blocking(doorbell_webhook_blocking, 2000.0)
    live = db.call_blocking(store.lookup_blocking, token)
    assert isinstance(live, store.LiveToken)
    assert live.id != old_id
    assert live.default_action is not None
    assert live.default_action["data"] == {"text": "Someone is at the front door"}
    assert [h.revoked_at for h in db.call_blocking(store.list_blocking, 2000.0)] == [2000.0, None]


@pytest.fixture
async def odd_hub() -> AsyncIterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback that answers like a hub having a bad day; the requests it got."""
    seen: list[str] = []
    replies = {
        "/trigger/with/html": web.Response(status=502, text="<html>Bad Gateway</html>", content_type="text/html"),
        "/trigger/with/odd": web.json_response({"id": "c1"}),  # no devices
        "/trigger/with/ok": web.json_response({"id": "c2", "type": "tts", "devices": [{"endpointId": "spk"}]}),
        "/api/commands/c2": web.Response(text="not json"),
    }

    async def answer(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        return replies[request.path]

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_the_automation_shows_odd_replies_and_goes_on(
    odd_hub: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, seen = odd_hub
    async with aiohttp.ClientSession() as session:
        for name in ("html", "odd", "ok"):
            await ring(session, "doorbell-1", f"{url}/trigger/with/{name}", url)
    out = capsys.readouterr().out.splitlines()
    assert seen == ["POST /trigger/with/html", "POST /trigger/with/odd", "POST /trigger/with/ok",
                    "GET /api/commands/c2"]
    assert "webhook for doorbell-1: HTTP 502 <html>Bad Gateway</html>" in out[0]
    assert "webhook for doorbell-1: HTTP 200 None" in out[1]
    assert "doorbell-1 pressed, tts to spk (command c2)" in out[2]
    assert "speakers ▶ no results: HTTP 200 not json" in out[3]
