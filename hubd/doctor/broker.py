"""The `mqtt` check: connect to the broker with hubd's settings (host, port, login, TLS) under a client id of
the doctor's own and a clean session, so hubd's session is never taken over nor left with a twin; then read
hubd's retained status (`<base_topic>/status`) to see whether hubd itself is online there.
"""

from __future__ import annotations

import asyncio
import secrets

from hubd.config.model import MqttConfig
from hubd.doctor.report import Result, failed, passed, warned
from hubd.errors import ConfigError, MqttRejected, MqttUnavailable
from hubd.mqtt.bridge import status_topic
from hubd.mqtt.client import MqttClient

MQTT = "mqtt"
CONNECT_TIMEOUT_S = 5.0
STATUS_WAIT_S = 2.0  # a broker sends the retained message right after the SUBACK


def doctor_client_id(hubd_client_id: str, role: str = "doctor") -> str:
    """A client id beside hubd's for a one-off check (`role`: at most 6 letters; the whole at most 23 characters,
    MQTT 3.1.1), never equal to it: hubd's session is never touched."""
    return f"{hubd_client_id[:16 - len(role)]}-{role}-{secrets.token_hex(2)}"


def login_client(mqtt: MqttConfig, role: str = "doctor") -> MqttClient:
    """A clean-session client with hubd's broker settings (host, port, login, TLS) under a client id of its own, to
    try the login (the doctor, `hubd setup`); ConfigError if the TLS settings cannot be used."""
    return MqttClient(host=mqtt.host, port=mqtt.port, client_id=doctor_client_id(mqtt.client_id, role),
                      clean_session=True, username=mqtt.username,
                      password=mqtt.password.get_secret_value() if mqtt.password else None,
                      tls=mqtt.tls, ca_file=str(mqtt.ca_file) if mqtt.ca_file else None,
                      keepalive_s=mqtt.keepalive_s)


async def check_broker(mqtt: MqttConfig) -> Result:
    """The broker takes hubd's login, and hubd's own status on it is `online`."""
    where = f"{mqtt.host}:{mqtt.port}"
    try:
        client = login_client(mqtt)
    except ConfigError as err:
        return failed(MQTT, "; ".join(err.problems))
    try:
        await client.connect(timeout_s=CONNECT_TIMEOUT_S)
    except MqttRejected as err:
        return failed(MQTT, f"the broker at {where} refused hubd's login: {err}; check mqtt.username and "
                            "mqtt.password against the broker's password file")
    except MqttUnavailable as err:
        fix = ("the embedded broker runs inside hubd: is hubd running (`systemctl status hubd`)?" if mqtt.embedded
               else "is the broker running (`systemctl status mosquitto`), and are mqtt.host, mqtt.port and "
                    "mqtt.tls right?")
        return failed(MQTT, f"cannot connect to {where}: {err}; {fix}")
    try:
        status = await _hubd_status(client, status_topic(mqtt.base_topic))
    finally:
        await client.disconnect()
    topic = status_topic(mqtt.base_topic)
    if status == "online":
        return passed(MQTT, f"{where} takes hubd's login; hubd is online there ({topic})")
    if status is None:
        return warned(MQTT, f"{where} takes hubd's login, but {topic} holds no status: hubd has not connected to "
                            "this broker (is it running? is mqtt.base_topic the same?)")
    return warned(MQTT, f"{where} takes hubd's login, but {topic} says {status!r}: hubd is not connected to it "
                        "(`systemctl status hubd`, `journalctl -u hubd`)")


async def _hubd_status(client: MqttClient, topic: str) -> str | None:
    """The retained payload of hubd's status topic, or None if there is none (or it cannot be read)."""
    try:
        await client.subscribe([(topic, 0)])
        async with asyncio.timeout(STATUS_WAIT_S):
            while True:
                for message in await client.next_batch():
                    if message.topic == topic:
                        return message.payload.decode("utf-8", "replace")
    except (TimeoutError, MqttUnavailable):
        return None
