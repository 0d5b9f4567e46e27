"""`hubd demo` on a fresh machine: one process, binds a demo user, prints what the platform receives."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# The demo's Home Assistant discovery devices (simulators.discovery_demo): endpointIds from their identifiers.
# The bulb and button are of a zigbee2mqtt on base topic `zigbee2mqtt`, beside the one hubd imports natively.
ESPHOME_SENSOR = "a4cf12f3c2d1"
DISCOVERY_BULB = "zigbee2mqtt_0x000b57fffec6a5b2"
DISCOVERY_BUTTON = "zigbee2mqtt_0x0017880104e45520"
# The demo's zigbee2mqtt home (simulators.zigbee2mqtt_bridge), imported natively: endpointIds are ieee_addresses.
Z2M_CONTACT = "0x00158d00091e7bd6"
Z2M_BULB = "0x000b57fffec6a5c2"
Z2M_BUTTON = "0x00158d0002b5c7e1"
# The demo's Tasmota bulb (simulators.discovery_tasmota), imported natively from Tasmota's discovery: its MAC.
TASMOTA_BULB = "A4CF12D4E5F6"
# The demo's Shelly Plus 1PM (simulators.discovery_shelly), imported natively over RPC: its device id.
SHELLY = "shellyplus1pm-a8032ab12345"
BUTTON_PRESSED = re.compile(rf"DoorbellPress +user=demo-user +{Z2M_BUTTON} ")
DISCOVERY_BUTTON_PRESSED = re.compile(rf"DoorbellPress +user=demo-user +{DISCOVERY_BUTTON} ")
DOOR_OPENED = re.compile(rf"ChangeReport +user=demo-user +{Z2M_CONTACT}: Switch=On\b")
RENAMED = "AddOrUpdateReport user=demo-user  sim-light-1 (Counter Light)"


def test_demo_binds_reports_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    # Ask for ports that are taken (something listens on each, as a mosquitto on 1883 would): the demo must
    # pick others.
    held = [socket.create_server(("127.0.0.1", 0)) for _ in range(3)]
    http_port, mqtt_port, platform_port = (s.getsockname()[1] for s in held)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hubd", "demo", "--state-dir", str(tmp_path), "--http-port", str(http_port),
         "--mqtt-port", str(mqtt_port), "--platform-port", str(platform_port), "--doorbell-every-s", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            text = "".join(lines)
            if "speakers ▶ sim-speaker-1 done" in text and "Living Room Bulb obeyed" in text and RENAMED in text \
                    and "Hallway Bulb obeyed" in text and "Kitchen Light obeyed" in text \
                    and "Porch Switch obeyed Switch.Set" in text \
                    and BUTTON_PRESSED.search(text) \
                    and DISCOVERY_BUTTON_PRESSED.search(text) and DOOR_OPENED.search(text):
                break
        text = "".join(lines)
        used = re.search(r"hub http://127\.0\.0\.1:(\d+), MQTT broker 127\.0\.0\.1:(\d+) \(embedded\), "
                         r"platform simulator http://127\.0\.0\.1:(\d+)", text)
        assert used is not None, text
        assert not {int(p) for p in used.groups()} & {http_port, mqtt_port, platform_port}, text
        assert "open the status page at http://" in text, text
        assert re.search(r"devices page at http://127\.0\.0\.1:\d+/devices \(sign in as demo, password \S+\)", text)
        # The owner renames the demo light once, through the devices page's API: the platform hears of it.
        assert "owner ▶ renamed sim-light-1 (Kitchen Light) to 'Counter Light' with PATCH /api/devices/sim-light-1" \
            in text, text
        assert RENAMED in text, text
        assert "bound platform user 'demo-user'" in text, text
        assert "AddOrUpdateReport user=demo-user" in text and "sim-light-1" in text, text
        assert "DoorbellPress" in text, text
        # The demo's automation rang the speakers tagged 'announce' through the webhook, and they answered.
        assert "automation ▶ webhook: sim-doorbell-1 pressed, tts to sim-speaker-1" in text, text
        assert "speakers ▶ sim-speaker-1 done" in text, text
        # The devices that announce themselves with Home Assistant discovery: imported, reporting, the declared
        # button a doorbell, and the bulb obeys a control.
        added = " ".join(line for line in lines if "AddOrUpdateReport user=demo-user" in line)
        for device in (f"{ESPHOME_SENSOR} (Porch Climate)", f"{DISCOVERY_BULB} (Hallway Bulb)",
                       f"{DISCOVERY_BUTTON} (Front Door Button)"):
            assert device in added, text
        assert re.search(rf"ChangeReport +user=demo-user +{ESPHOME_SENSOR}: Temperature=22\b", text), text
        assert ("zigbee2mqtt ▶ Front Door Button clicked 'single' on zigbee2mqtt/Front Door Button: a doorbell, "
                "declared in doorbells as {device: 'Front Door Button', event: 'single'}") in text, text
        assert DISCOVERY_BUTTON_PRESSED.search(text), text
        assert f"Brightness.Set 40 to {DISCOVERY_BULB}: Response Brightness=40" in text, text
        assert ('Hallway Bulb obeyed {"state":"ON","brightness":102} on zigbee2mqtt/Hallway Bulb/set: state ON, '
                "brightness 102/254") in text, text
        # The zigbee2mqtt home, imported natively: a door opens, the declared button is a doorbell, the bulb obeys.
        for device in (f"{Z2M_CONTACT} (Back Door Contact)", f"{Z2M_BULB} (Living Room Bulb)",
                       f"{Z2M_BUTTON} (Garden Gate Button)"):
            assert device in added, text
        opened = "zigbee2mqtt ▶ Back Door Contact opened: contact false on zigbee2mqtt-home/Back Door Contact"
        assert opened in text, text
        assert DOOR_OPENED.search(text), text
        assert ("zigbee2mqtt ▶ Garden Gate Button clicked 'single' on zigbee2mqtt-home/Garden Gate Button: a doorbell, "
                "declared in doorbells as {device: 'Garden Gate Button', event: 'single'}") in text, text
        assert BUTTON_PRESSED.search(text), text
        assert f"Brightness.Set 40 to {Z2M_BULB}: Response Brightness=40" in text, text
        assert ('Living Room Bulb obeyed {"brightness":102} on zigbee2mqtt-home/Living Room Bulb/set: state ON, '
                "brightness 102/254") in text, text
        # The Tasmota bulb, imported natively: switched on at the wall, then dimmed from the platform.
        assert f"{TASMOTA_BULB} (Kitchen Light)" in added, text
        assert re.search(rf"ChangeReport +user=demo-user +{TASMOTA_BULB}: Switch=On\b", text), text
        assert f"Brightness.Set 40 to {TASMOTA_BULB}: Response Brightness=40" in text, text
        assert "tasmota ▶ Kitchen Light obeyed 40 on cmnd/tasmota_D4E5F6/Dimmer: power ON, dimmer 40" in text, text
        # The Shelly, asked over RPC: switched on at the wall, then off from the platform by Switch.Set.
        assert f"{SHELLY} (Porch Switch)" in added, text
        assert re.search(rf"ChangeReport +user=demo-user +{SHELLY}: Switch=On\b", text), text
        assert f"Switch.Off to {SHELLY}: Response Switch=Off" in text, text
        assert f"shelly ▶ Porch Switch obeyed Switch.Set {{'id': 0, 'on': False}} on {SHELLY}/rpc" in text, text
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, text + rest
        assert "Traceback" not in text + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for server in held:
            server.close()
