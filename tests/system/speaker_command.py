"""Send a speaker one tts command over MQTT and print its result: `python speaker_command.py ID TEXT`.

Runs inside the test container with hubd's venv (for paho), against the container's mosquitto: waits for the
speaker's retained `online`, publishes the command, prints the `command/result` payload; exit 1 if none
came within the deadline.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import paho.mqtt.client as mqtt

BASE_TOPIC = "hubd"
RESULT_TIMEOUT_S = 60.0
COMMAND_ID = "system-test-1"


def main(argv: list[str]) -> int:
    """Command, wait, print."""
    speaker_id, text = argv[1], argv[2]
    topic = f"{BASE_TOPIC}/device/{speaker_id}"
    result: dict[str, Any] = {}
    done = threading.Event()

    def on_connect(client: mqtt.Client, *_: object) -> None:
        client.subscribe(f"{topic}/command/result", qos=1)
        client.subscribe(f"{topic}/availability", qos=1)

    def on_message(client: mqtt.Client, _: object, message: mqtt.MQTTMessage) -> None:
        if message.topic.endswith("/availability") and message.payload == b"online" and not result:
            command = {"id": COMMAND_ID, "type": "tts", "text": text}
            client.publish(f"{topic}/command", json.dumps(command), qos=1)
        elif message.topic.endswith("/command/result"):
            result.update(json.loads(message.payload))
            done.set()

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="system-test")
    client.on_connect = on_connect
    client.on_message = on_message
    client.connect("127.0.0.1", 1883)
    client.loop_start()
    try:
        arrived = done.wait(RESULT_TIMEOUT_S)
    finally:
        client.loop_stop()
    print(json.dumps(result))
    return 0 if arrived else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
