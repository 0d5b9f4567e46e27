"""The home automation of `hubd demo`: what Home Assistant or Node-RED would be, beside hubd.

On every doorbell press on hubd's MQTT topics it calls hubd's webhook without a body (its default action: tts to
the speakers tagged `announce`) and, a second later, shows what the speakers said. The webhook is made once per
state directory (`doorbell_webhook_blocking`); an odd reply is shown, never fatal.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import time
from typing import Any

import aiohttp

from hubd.errors import MqttUnavailable
from hubd.mqtt.client import MqttClient
from hubd.webhook import store
from hubd.webhook.trigger import parse

DOORBELL_ACTION = {"type": "tts", "devices": {"tag": "announce"}, "data": {"text": "Someone is at the front door"}}
DOORBELL_WEBHOOK = "demo doorbell"


def doorbell_webhook_blocking(conn: sqlite3.Connection, now: float) -> str:
    """A token for the demo's doorbell webhook: the one from an earlier run with a new token, else a new one.

    Tokens are stored only as hashes, so an earlier run's token cannot be reused; rotating keeps
    one webhook however often the demo runs in the same state directory.
    """
    action = parse(DOORBELL_ACTION)
    for hook in store.find_blocking(conn, DOORBELL_WEBHOOK):
        if hook.default_action == action.as_body():  # find_blocking by name finds live webhooks only
            token = store.rotate_blocking(conn, hook.id, now)
            if token is not None:
                return token
        store.revoke_blocking(conn, hook.id, now)
    return store.create_blocking(conn, DOORBELL_WEBHOOK, action, now)[1]


async def doorbell_automation(mqtt_port: int, webhook_url: str, hub_url: str, ready: asyncio.Event) -> None:
    """What a user's home automation does: on every doorbell event, POST the webhook (no body: its default)."""
    client = MqttClient(host="127.0.0.1", port=mqtt_port, client_id=f"demo-automation-{secrets.token_hex(3)}")
    try:
        try:
            await client.connect()
            await client.subscribe([("hubd/device/+/event", 1)])
        except MqttUnavailable as err:
            print(f"{time.strftime('%H:%M:%S')}  automation ▶ cannot listen for doorbells: {err}", flush=True)
            raise
        finally:
            ready.set()
        async with aiohttp.ClientSession() as session:
            while True:
                batch = await client.next_batch()
                client.ack(batch)
                for message in batch:
                    # amqtt hands a new subscriber every retained message, whatever its filter: check the topic.
                    if message.retain or not message.topic.endswith("/event"):
                        continue
                    doorbell = message.topic.split("/")[2]
                    try:
                        await ring(session, doorbell, webhook_url, hub_url)
                    except aiohttp.ClientConnectionError:
                        raise
                    except aiohttp.ClientError as err:  # one failed call; the next press tries again
                        print(f"{time.strftime('%H:%M:%S')}  automation ▶ webhook for {doorbell} failed: {err}",
                              flush=True)
    except (MqttUnavailable, aiohttp.ClientConnectionError):
        return  # the hub, and with it the embedded broker, is stopping
    finally:
        await client.disconnect()


async def ring(session: aiohttp.ClientSession, doorbell: str, webhook_url: str, hub_url: str) -> None:
    """One doorbell press: call the webhook, then show what the speakers said. An odd reply is shown, not fatal."""
    status, body = await call(session, "POST", webhook_url)
    clock = time.strftime("%H:%M:%S")
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("devices"), list):
        error = body.get("error") if isinstance(body, dict) else body
        print(f"{clock}  automation ▶ webhook for {doorbell}: HTTP {status} {str(error)[:200]}", flush=True)
        return
    command_id = str(body.get("id"))
    speakers = ", ".join(str(d.get("endpointId")) for d in body["devices"] if isinstance(d, dict))
    print(f"{clock}  automation ▶ webhook: {doorbell} pressed, tts to {speakers} (command {command_id[:8]})",
          flush=True)
    await asyncio.sleep(1.0)  # what the demo shows: the results a second later, whatever they are by then
    status, shown = await call(session, "GET", f"{hub_url}/api/commands/{command_id}")
    targets = shown.get("targets") if isinstance(shown, dict) else None
    if status != 200 or not isinstance(targets, list):
        print(f"{time.strftime('%H:%M:%S')}  speakers ▶ no results: HTTP {status} {str(shown)[:200]}", flush=True)
        return
    results = ", ".join(f"{t.get('endpointId')} {t.get('status')}" for t in targets if isinstance(t, dict))
    print(f"{time.strftime('%H:%M:%S')}  speakers ▶ {results}", flush=True)


async def call(session: aiohttp.ClientSession, method: str, url: str) -> tuple[int, Any]:
    """Status and JSON body (or the text, when the reply is not JSON)."""
    async with session.request(method, url) as response:
        text = await response.text(errors="replace")
    try:
        return response.status, json.loads(text)
    except json.JSONDecodeError:
        return response.status, text
