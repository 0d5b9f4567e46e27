"""The demo's Home Assistant discovery devices, and `python -m simulators discovery` that runs them.

Owns make_demo_discovery_devices (an ESPHome sensor board, a zigbee2mqtt bulb and a zigbee2mqtt button, as
a newcomer's Raspberry Pi might have them; hubd.demo runs them too) and the command line that keeps them
running until Ctrl-C: a new temperature reading every interval, and a button press now and then if asked.
The devices are simulators.discovery_esphome's and simulators.discovery_zigbee2mqtt's. Must not import hubd.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import signal
from typing import Any

from simulators.device_fleet import LOG_FORMAT, BrokerRefused, DeviceStopped
from simulators.discovery_esphome import EspHomeClimateSensor
from simulators.discovery_zigbee2mqtt import Zigbee2MqttButton, Zigbee2MqttLight

log = logging.getLogger(__name__)


def make_demo_discovery_devices(host: str, port: int, *, username: str | None = None, password: str | None = None,
                                ) -> tuple[EspHomeClimateSensor, Zigbee2MqttLight, Zigbee2MqttButton]:
    """One of each, as a newcomer's Raspberry Pi might have them: the demo's and the CLI's devices."""
    broker: dict[str, Any] = {"username": username, "password": password}
    return (EspHomeClimateSensor(host, port, node="porch-climate", friendly_name="Porch Climate", area="Porch",
                                 **broker),
            Zigbee2MqttLight(host, port, name="Hallway Bulb", **broker),
            Zigbee2MqttButton(host, port, name="Front Door Button", **broker))


def main(argv: list[str]) -> int:
    """`python -m simulators discovery ...`: an ESPHome sensor, a zigbee2mqtt bulb and button until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m simulators discovery", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="MQTT broker host")
    parser.add_argument("--port", type=int, default=1883, help="MQTT broker port")
    parser.add_argument("--username", help="broker login")
    parser.add_argument("--password", help="broker password")
    parser.add_argument("--interval-s", type=float, default=10.0, help="seconds between temperature readings")
    parser.add_argument("--press-every-s", type=float, help="press the button about this often")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    return asyncio.run(_serve(make_demo_discovery_devices(args.host, args.port, username=args.username,
                                                          password=args.password),
                              interval_s=args.interval_s, press_every_s=args.press_every_s))


async def _serve(devices: tuple[EspHomeClimateSensor, Zigbee2MqttLight, Zigbee2MqttButton], *, interval_s: float,
                 press_every_s: float | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sensor, _light, button = devices
    try:
        for device in devices:
            await device.start()
    except (TimeoutError, BrokerRefused) as err:
        log.error("cannot start: %s", err)
        for device in devices:
            await device.stop()
        return 1
    rng = random.Random()
    next_press = loop.time() + (press_every_s or 0)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await stop.wait()
        if stop.is_set():
            break
        with contextlib.suppress(TimeoutError, DeviceStopped):
            await sensor.set_temperature(round(sensor.temperature_c + rng.choice((-0.3, -0.1, 0.1, 0.3)), 1))
            if press_every_s and loop.time() >= next_press:
                await button.press()
                next_press = loop.time() + press_every_s
    for device in devices:
        await device.stop()
    return 0


__all__ = ["main", "make_demo_discovery_devices"]
