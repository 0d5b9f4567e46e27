"""A flood of webhook calls that must all fail: `python -m bench.flood URL... --rate R --duration S`.

Sends R requests/s for S seconds, cycling through the given URLs (unknown tokens, an over-limit token),
over CONNECTIONS keep-alive connections, and prints one JSON line: counts by status and the rate reached.
It speaks HTTP/1.1 over asyncio streams with prebuilt requests rather than through aiohttp's client:
on two cores the flood must not eat the CPU the system under test needs (aiohttp's client costs about
ten times more per request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from urllib.parse import urlsplit

CONNECTIONS = 16
BODY = json.dumps({"type": "tts", "devices": {"isAll": True}, "data": {"text": "flood"}}).encode()


def _request(url: str) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    head = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\n\r\n").encode()
    return parts.hostname or "127.0.0.1", parts.port or 80, head + BODY


async def main(urls: list[str], rate: float, duration_s: float) -> None:
    requests = [_request(u) for u in urls]
    host, port, _ = requests[0]
    statuses: dict[str, int] = {}
    total = int(rate * duration_s)
    start = time.monotonic()
    counter = iter(range(total))

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for n in counter:
                delay = start + n / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                writer.write(requests[n % len(requests)][2])
                head = await reader.readuntil(b"\r\n\r\n")
                status = head[9:12].decode()
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                statuses[status] = statuses.get(status, 0) + 1
                if b"connection: close" in head.lower():
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(CONNECTIONS)))
    took = time.monotonic() - start
    print(json.dumps({"statuses": statuses, "sent": total, "rate": total / took if took else 0.0}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.flood")
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--duration", type=float, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.urls, args.rate, args.duration))
