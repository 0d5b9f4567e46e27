"""Simulated MQTT devices for tests and the demo: the device factory, the demo fleet and the command line.

`python -m simulators devices ...` runs devices until SIGINT/SIGTERM. The behaviour lives in
simulators.device_models and simulators.speaker, the MQTT side in simulators.device_fleet; this module
puts them together. Must not import hubd.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from simulators.device_fleet import LOG_FORMAT, DeviceFleet, add_broker_arguments, serve
from simulators.device_models import (
    AirConditioner,
    ClimateSensor,
    ContactSensor,
    Curtain,
    Doorbell,
    Light,
    MotionSensor,
)
from simulators.sim_device import SimDevice
from simulators.speaker import SimSpeaker

__all__ = ["DEVICE_KINDS", "DeviceFleet", "SimDevice", "main", "make_demo_devices", "make_demo_fleet",
           "make_device"]

log = logging.getLogger(__name__)

DEVICE_KINDS: Mapping[str, type[SimDevice]] = MappingProxyType({
    cls.kind: cls
    for cls in (ClimateSensor, ContactSensor, MotionSensor, Light, Curtain, AirConditioner, Doorbell,
                SimSpeaker)
})
DEFAULT_ROOMS: Mapping[str, str] = MappingProxyType({
    "climate": "Living Room", "contact": "Hallway", "motion": "Hallway", "light": "Kitchen",
    "curtain": "Bedroom", "ac": "Bedroom", "doorbell": "Entrance", "speaker": "Living Room",
})
# Display names carry no digits (the platform refuses them), so the second light of a room is "... Light Two".
NUMBER_WORDS = ("", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten")
DEMO_CURTAIN_TRAVEL_S = 8.0


def make_device(kind: str, endpoint_id: str, **opts: Any) -> SimDevice:
    """A device of one kind (see DEVICE_KINDS); opts are that kind's keyword options (room, delay_s, ...)."""
    cls = DEVICE_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown device kind {kind!r}; known: {sorted(DEVICE_KINDS)}")
    opts.setdefault("room", DEFAULT_ROOMS[kind])
    device: SimDevice = cls(endpoint_id, **opts)
    return device


def make_demo_devices(id_prefix: str = "sim", *, out_dir: Path | None = None,
                      press_every_s: float | None = None) -> list[SimDevice]:
    """One device of each kind (the curtain moves slowly), speakers in two rooms tagged announce and kids."""
    devices = [
        make_device(kind, f"{id_prefix}-{kind}-1", **opts)
        for kind, opts in (
            ("climate", {}), ("contact", {}), ("motion", {}), ("light", {}),
            ("curtain", {"travel_s": DEMO_CURTAIN_TRAVEL_S}), ("ac", {}),
            ("doorbell", {"press_every_s": press_every_s}),
        )
    ]
    devices += [
        SimSpeaker(f"{id_prefix}-speaker-1", room="Living Room", tags=["announce"], out_dir=out_dir),
        SimSpeaker(f"{id_prefix}-speaker-2", room="Bedroom", tags=["kids"], out_dir=out_dir),
    ]
    return devices


def make_demo_fleet(*, host: str, port: int, base_topic: str = "hubd", username: str | None = None,
                    password: str | None = None, id_prefix: str = "sim", out_dir: Path | None = None,
                    press_every_s: float | None = None) -> DeviceFleet:
    """A DeviceFleet of make_demo_devices(), not yet started."""
    return DeviceFleet(host=host, port=port, base_topic=base_topic, username=username, password=password,
                       devices=make_demo_devices(id_prefix, out_dir=out_dir, press_every_s=press_every_s))


def main(argv: list[str]) -> int:
    """`python -m simulators devices ...`: run simulated devices until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m simulators devices", description=main.__doc__)
    add_broker_arguments(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--kind", action="append", choices=sorted(DEVICE_KINDS),
                       help="a device to run (repeatable: --kind light --kind light --kind climate)")
    which.add_argument("--demo", action="store_true", help="one of each kind and two speakers (the default)")
    parser.add_argument("--id-prefix", default="sim", help="endpointIds are <prefix>-<kind>-<n>")
    parser.add_argument("--interval-s", type=float, default=5.0,
                        help="seconds between random changes (sensor drift, doors, motion); 0 turns them off")
    parser.add_argument("--slow", action="append", default=[], metavar="ENDPOINT=SECONDS",
                        help="make a device answer set directives only after SECONDS (repeatable)")
    parser.add_argument("--press-every-s", type=float, help="doorbells press by themselves about this often")
    parser.add_argument("--out-dir", type=Path, help="where speakers write tts WAV files")
    parser.add_argument("--seed", type=int, help="seed the random behaviour (reproducible runs)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)

    if args.kind:
        devices = _devices_of_kinds(args.kind, args.id_prefix, out_dir=args.out_dir,
                                    press_every_s=args.press_every_s)
    else:
        devices = make_demo_devices(args.id_prefix, out_dir=args.out_dir, press_every_s=args.press_every_s)
    by_id = {d.endpoint_id: d for d in devices}
    for spec in args.slow:
        endpoint_id, _, seconds = spec.partition("=")
        if endpoint_id not in by_id:
            parser.error(f"--slow {spec}: no device {endpoint_id!r}; devices: {sorted(by_id)}")
        try:
            by_id[endpoint_id].delay_s = float(seconds)
        except ValueError:
            parser.error(f"--slow {spec}: SECONDS must be a number")
    for i, device in enumerate(devices):
        if args.seed is not None:
            device.rng.seed(args.seed + i)
        slow = f", answers after {device.delay_s} s" if device.delay_s else ""
        log.info("device %s: %s %r in %s%s",
                 device.endpoint_id, device.kind, device.display_name, device.room, slow)
    fleet = DeviceFleet(host=args.host, port=args.port, base_topic=args.base_topic, devices=devices,
                        username=args.username, password=args.password)
    return asyncio.run(serve(fleet, interval_s=args.interval_s or None))


def _devices_of_kinds(kinds: list[str], id_prefix: str, *, out_dir: Path | None,
                      press_every_s: float | None) -> list[SimDevice]:
    devices: list[SimDevice] = []
    counts: dict[str, int] = {}
    for kind in kinds:
        n = counts[kind] = counts.get(kind, 0) + 1
        cls = DEVICE_KINDS[kind]
        room = DEFAULT_ROOMS[kind]
        word = NUMBER_WORDS[(n - 1) % len(NUMBER_WORDS)]
        opts: dict[str, Any] = {"display_name": f"{room} {cls.label} {word}".strip()}
        if kind == "speaker":
            opts["out_dir"] = out_dir
        if kind == "doorbell":
            opts["press_every_s"] = press_every_s
        devices.append(make_device(kind, f"{id_prefix}-{kind}-{n}", room=room, **opts))
    return devices
