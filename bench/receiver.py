"""The receiver process: the strict platform simulator plus a small control API for the bench driver.

Every contender (hubd, the bare forwarder, Node-RED) POSTs its ChangeReports to the same simulator,
each with its own user's valid token, and the simulator validates every message strictly. The
simulator stamps each accepted event with its receipt time (`received_at`, before the body is read);
a task moves the records into compact per-user arrays every few milliseconds so a 50,000-event run
does not keep 50,000 message bodies around.

`python -m bench.receiver --port P --control-port C`: P serves the platform (`/async/events`,
`/oauth/token`, ...), C serves `/bench/*` for the driver.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from array import array
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from simulators.platform import PlatformSimulator
from simulators.platform_records import EventRecord

CLIENT_ID = "bench-client"
CLIENT_SECRET = "bench-secret"
DRAIN_INTERVAL_S = 0.02


@dataclass
class UserReceipts:
    """What one user's events came to: known endpoints, and (seq, receipt time) pairs."""

    endpoints: set[str] = field(default_factory=set)
    seqs: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]
    times: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]


class Receiver:
    """Runs the simulator and keeps compact receipts."""

    def __init__(self, sim: PlatformSimulator) -> None:
        self.sim = sim
        self.users: dict[str, UserReceipts] = {}

    async def drain_forever(self) -> None:
        while True:
            await asyncio.sleep(DRAIN_INTERVAL_S)
            self.drain()

    def drain(self) -> None:
        records, self.sim.events = self.sim.events, []
        for record in records:
            self._note(record)
        self.sim.duplicates.clear()

    def _note(self, record: EventRecord) -> None:
        user = self.users.setdefault(record.user_id, UserReceipts())
        if record.name == "AddOrUpdateReport":
            user.endpoints.update(record.endpoint_ids)
        elif record.name == "ChangeReport":
            for state in record.message["payload"]["change"]["states"]:
                if state["interface"] == "Temperature":
                    user.seqs.append(float(state["value"]))
                    user.times.append(record.received_at)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/bench/token", self._token)
        app.router.add_post("/bench/outage", self._outage)
        app.router.add_get("/bench/stats", self._stats)
        app.router.add_post("/bench/take", self._take)
        app.router.add_post("/bench/endpoints", self._endpoints)
        return app

    async def _token(self, request: web.Request) -> web.Response:
        """A valid access token for a user, minted as if the user had bound (for the forwarder and Node-RED)."""
        user_id = str((await request.json())["userId"])
        issued = self.sim.tokens.exchange_code(self.sim.issue_code(user_id))
        return web.json_response({"token": issued.access_token})

    async def _outage(self, request: web.Request) -> web.Response:
        self.sim.set_outage(bool((await request.json())["on"]))
        return web.json_response({"ok": True})

    async def _stats(self, request: web.Request) -> web.Response:
        self.drain()
        users: dict[str, Any] = {
            uid: {"endpoints": len(u.endpoints), "received": len(u.seqs)} for uid, u in self.users.items()
        }
        rejected: dict[str, int] = {}
        for rejection in self.sim.rejections:
            key = str(rejection.status)
            rejected[key] = rejected.get(key, 0) + 1
        return web.json_response({"users": users, "rejected": rejected,
                                  "lastRejection": self.sim.rejections[-1].error if self.sim.rejections else None})

    async def _endpoints(self, request: web.Request) -> web.Response:
        """The endpointIds a user's AddOrUpdateReports announced (the import scenarios check which ones)."""
        self.drain()
        user = self.users.get(str((await request.json())["userId"])) or UserReceipts()
        return web.json_response({"endpoints": sorted(user.endpoints)})

    async def _take(self, request: web.Request) -> web.Response:
        """Hand over a user's (seq, receipt time) pairs and forget them."""
        self.drain()
        user = self.users.pop(str((await request.json())["userId"]), None) or UserReceipts()
        self.sim.rejections.clear()
        return web.json_response({"seqs": user.seqs.tolist(), "times": user.times.tolist()})


async def main(port: int, control_port: int) -> None:
    sim = PlatformSimulator(host="127.0.0.1", port=port, client_id=CLIENT_ID, client_secret=CLIENT_SECRET,
                            access_ttl_s=24 * 3600)
    await sim.start()
    receiver = Receiver(sim)
    runner = web.AppRunner(receiver.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", control_port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    drain = asyncio.create_task(receiver.drain_forever())
    print(f"receiver on {sim.url}, control on {control_port}", flush=True)
    await stop.wait()
    drain.cancel()
    await runner.cleanup()
    await sim.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.receiver")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(args.port, args.control_port))
