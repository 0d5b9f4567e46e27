"""`python -m simulators platform|devices|speaker|discovery|zigbee2mqtt ...`."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "platform": ("simulators.platform_cli", "the smart-speaker platform: token endpoint, event API, failure report"),
    "devices": ("simulators.devices", "MQTT devices: sensors, contact, motion, light, curtain, ac, doorbell"),
    "speaker": ("simulators.speaker", "an MQTT speaker that runs tts/audio/asr commands"),
    "discovery": ("simulators.discovery_demo",
                  "Home Assistant discovery: an ESPHome sensor, a zigbee2mqtt light and button"),
    "zigbee2mqtt": ("simulators.zigbee2mqtt_bridge",
                    "a zigbee2mqtt 2.x bridge: bridge/devices, states, availability, /set, one device per model"),
}


def main(argv: list[str]) -> int:
    """Dispatch to a simulator's own main()."""
    if not argv or argv[0] not in COMMANDS:
        print("usage: python -m simulators {platform|devices|speaker|discovery|zigbee2mqtt} [--help]\n",
              file=sys.stderr)
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:11} {text}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    code: int = module.main(argv[1:])
    return code


sys.exit(main(sys.argv[1:]))
