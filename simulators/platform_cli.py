"""`python -m simulators platform serve|bind|discover|control|report-state`: the platform simulator's command line.

Owns the command line only: serve runs a simulators.platform.PlatformSimulator until SIGINT/SIGTERM and
prints its URL; bind binds a user to a running hub (simulators.platform_binding) and prints the outcome
as JSON; discover, control and report-state are simulators.platform_directives'. Never imports hubd.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys

import simulators.platform
from simulators import platform_directives
from simulators.platform import PlatformSimulator
from simulators.platform_binding import BindError, bind_user


def main(argv: list[str]) -> int:
    """`python -m simulators platform serve|bind|discover|control|report-state ...`; argv starts at the command."""
    # The help describes the simulator, as the server module's docstring does.
    parser = argparse.ArgumentParser(prog="python -m simulators platform", description=simulators.platform.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the platform simulator until SIGINT/SIGTERM")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=9000)
    serve.add_argument("--client-id", default="sim-client")
    serve.add_argument("--client-secret", default="sim-secret")
    serve.add_argument("--access-ttl", type=int, default=3600, help="access token lifetime in seconds")
    serve.add_argument("--client-auth", choices=["any", "basic", "body"], default="any")
    serve.add_argument("--namespace", default="Service", help="the brand word in namespaces")
    serve.add_argument("--allow-unknown-endpoints", action="store_true")
    bind = sub.add_parser("bind", help="bind a user to a hub as the platform does")
    bind.add_argument("--hub", required=True, help="the hub's base URL")
    bind.add_argument("--sim", required=True, help="the running simulator's URL (mints the platform code)")
    bind.add_argument("--username", required=True)
    bind.add_argument("--password", required=True)
    bind.add_argument("--user-id", required=True, help="the platform userId to bind")
    bind.add_argument("--vendor-path", default="/vendor")
    platform_directives.add_commands(sub)
    args = parser.parse_args(argv)
    if args.command in platform_directives.COMMANDS:
        return platform_directives.run_command(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        sim = PlatformSimulator(
            host=args.host, port=args.port, client_id=args.client_id, client_secret=args.client_secret,
            client_auth=args.client_auth, access_ttl_s=args.access_ttl, namespace=args.namespace,
            require_known_endpoints=not args.allow_unknown_endpoints,
        )
        asyncio.run(_serve(sim))
        return 0
    try:
        result = asyncio.run(bind_user(
            hub_url=args.hub, vendor_path=args.vendor_path, sim=args.sim, username=args.username,
            password=args.password, user_id=args.user_id,
        ))
    except BindError as err:
        print(err, file=sys.stderr)
        return 2
    summary = {"ok": result.ok, "userId": result.user_id, "authMode": result.auth_mode,
               "userToken": result.user_token, "reply": result.reply}
    print(json.dumps(summary))
    return 0 if result.ok else 1


async def _serve(sim: PlatformSimulator) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sim.start()
    print(f"platform simulator on {sim.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await sim.stop()
