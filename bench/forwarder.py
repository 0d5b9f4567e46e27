"""The ceiling: a bare MQTT -> HTTP forwarder (paho in, aiohttp POST out; no validation, no storage).

It does the same translation as hubd for the bench's devices, and nothing else: a config becomes an
AddOrUpdateReport, a state a ChangeReport with the same shape hubd sends, both POSTed at once with up to
CONCURRENCY requests in flight. A crash loses whatever it held. It is what the hardware, the broker and
the platform simulator allow, not a design to copy.

`python -m bench.forwarder --mqtt-port P --base fwd --url http://127.0.0.1:Q/async/events --token T`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import uuid
from datetime import UTC, datetime
from typing import Any

import aiohttp
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

CONCURRENCY = 32


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def translate(base: str, topic: str, payload: bytes, token: str) -> dict[str, Any] | None:
    """One MQTT message -> one platform event (or None for what the forwarder does not forward)."""
    parts = topic.split("/")
    if len(parts) != 4 or parts[0] != base or parts[1] != "device" or not payload:
        return None
    endpoint_id, kind = parts[2], parts[3]
    auth = {"type": "BearerToken", "token": token}
    if kind == "config":
        config = json.loads(payload)
        endpoint = {"endpointId": endpoint_id, "displayName": config["displayName"],
                    "displayType": config["displayType"], "additionalInfo": config.get("additionalInfo", {}),
                    "capabilities": config["capabilities"], "states": []}
        if "recommendRoomName" in config:
            endpoint["recommendRoomName"] = config["recommendRoomName"]
        return {"header": {"messageId": str(uuid.uuid4()), "namespace": "Service.Discovery",
                           "name": "AddOrUpdateReport", "payloadVersion": "v1", "authorization": auth},
                "payload": {"endpoints": [endpoint]}}
    if kind == "state":
        now = _now()
        states = [{"interface": k, "value": v, "timeOfSample": now} for k, v in json.loads(payload).items()]
        return {"header": {"messageId": str(uuid.uuid4()), "namespace": "Service", "name": "ChangeReport",
                           "payloadVersion": "v1", "authorization": auth},
                "endpoint": {"endpointId": endpoint_id, "additionalInfo": {}, "states": states},
                "payload": {"change": {"cause": {"type": "PHYSICAL_INTERACTION"}, "states": states}}}
    return None


async def main(mqtt_port: int, base: str, url: str, token: str) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

    def on_message(_client: mqtt.Client, _userdata: object, message: mqtt.MQTTMessage) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (message.topic, bytes(message.payload)))

    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-fwd-{mqtt_port}", clean_session=True)
    client.on_message = on_message
    client.on_connect = lambda c, *_a: c.subscribe(f"{base}/device/+/+", qos=1)
    client.connect("127.0.0.1", mqtt_port, keepalive=60)
    client.loop_start()

    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:

        async def worker() -> None:
            while True:
                topic, payload = await queue.get()
                body = translate(base, topic, payload, token)
                if body is None:
                    continue
                try:
                    async with session.post(url, json=body) as response:
                        await response.read()
                except aiohttp.ClientError:
                    pass  # no retries: the ceiling does not care

        workers = [asyncio.create_task(worker()) for _ in range(CONCURRENCY)]
        print("forwarder ready", flush=True)
        await stop.wait()
        for task in workers:
            task.cancel()
    client.loop_stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.forwarder")
    parser.add_argument("--mqtt-port", type=int, required=True)
    parser.add_argument("--base", default="fwd")
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    asyncio.run(main(args.mqtt_port, args.base, args.url, args.token))
