"""The embedded MQTT broker for `mqtt.embedded: true` and `hubd demo`: amqtt 0.12.1 in hubd's process.

Owns amqtt: the only module in hubd that imports it.
Real deployments should use mosquitto; this broker is for a machine that has none.

How it is configured, and why:
- One TCP listener on exactly `host:port` (amqtt's default is 0.0.0.0:1883). No $SYS plugin, no event or
  packet logging plugins, and amqtt's loggers are quietened to WARNING.
- Authentication is our own plugin (`_UsersAuthPlugin`). amqtt keeps the session of a client with
  clean_session=False, including QoS 1 messages published while it is offline, only if the session is
  not flagged anonymous; its stock AnonymousAuthPlugin flags EVERY session anonymous when
  anonymous access is on, even one that logged in with a username, so hubd's persistent session
  would silently lose offline messages (measured on amqtt 0.12.1). Our plugin:
    * a client that sends a username must match `users` (else CONNACK "not authorised"); its session
      is not anonymous, so it persists. hubd connects this way, with a fixed client id.
    * a client without a username is accepted when allow_anonymous is true (the default, so the
      demo's simulated devices need no credentials) and is flagged anonymous: amqtt keeps no session
      for it. Devices only lose QoS 1 commands sent while they are offline; what they publish is
      not affected. Anonymous access is as wide as `host`: on 127.0.0.1 only local processes get in.
      Pass allow_anonymous=False to require a login from every client.

What amqtt does NOT give, unlike mosquitto (so the bridge must not rely on it here):
- Sessions and retained messages live in memory: they end when hubd (and so the broker) stops.
- QoS 1 messages delivered but not yet acknowledged when hubd's connection drops are NOT redelivered
  on reconnect (amqtt forgets them when the connection ends, and after 5 s without a PUBACK); only
  messages published while hubd was offline are queued for it.
- No in-flight window: amqtt sends every queued QoS 1 message at once.
- Messages queued while offline arrive with the retain flag set, and every message arrives with the
  subscription's QoS rather than the publisher's.
- amqtt looks up (and, for clean_session=True, discards) the session of a client id BEFORE it
  authenticates, so any local client connecting with hubd's client id can disturb hubd's session,
  even if it is refused. hubd therefore connects to its embedded broker with a client id of its own
  process that nobody can guess (app.py): the session could not outlive the process anyway.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from amqtt.broker import Broker
from amqtt.errors import BrokerError
from amqtt.plugins.base import BaseAuthPlugin
from amqtt.session import Session

from hubd.errors import MqttUnavailable

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 1.5
_AMQTT_LOGGERS = ("amqtt", "transitions")  # transitions is amqtt's state machine library


class EmbeddedBroker:
    """An in-process MQTT 3.1.1 broker listening on host:port only."""

    name = "broker"

    def __init__(self, *, host: str, port: int, users: dict[str, str], allow_anonymous: bool = True) -> None:
        self.host = host
        self.port = port
        self._users = dict(users)
        self._allow_anonymous = allow_anonymous
        self._broker: Broker | None = None

    async def start(self) -> None:
        """Bind host:port and start serving; raises MqttUnavailable at once if the port is taken."""
        if self._broker is not None:
            return
        for name in _AMQTT_LOGGERS:
            amqtt_log = logging.getLogger(name)
            if amqtt_log.getEffectiveLevel() < logging.WARNING:  # quieten, but never louder than asked
                amqtt_log.setLevel(logging.WARNING)
        # amqtt would report a taken port with a logged traceback; check first to say it plainly.
        self._check_port_free()
        broker = Broker(self._config())
        # amqtt 0.12.1 walks its subscriptions with an await between topics when a client with a session
        # connects; hubd subscribing to a newly discovered device's topic meanwhile made that walk fail
        # ("dictionary changed size during iteration") and drop the connecting client. Walk a snapshot.
        broker._subscriptions = _SnapshotDict(broker._subscriptions)
        try:
            await broker.start()
        except BrokerError as err:
            raise MqttUnavailable(f"embedded MQTT broker cannot listen on {self._where}: {err}") from err
        self._broker = broker
        log.info("embedded MQTT broker listening on %s", self._where)

    async def run(self) -> None:
        """Serve until cancelled (amqtt runs its own tasks; this only keeps the component alive)."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Close all client connections and the listener; idempotent, bounded by STOP_TIMEOUT_S."""
        broker, self._broker = self._broker, None
        if broker is None:
            return
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await broker.shutdown()
        except TimeoutError:
            log.warning("embedded MQTT broker did not shut down within %s s", STOP_TIMEOUT_S)
        log.info("embedded MQTT broker stopped")

    @property
    def _where(self) -> str:
        return f"{self.host}:{self.port}"

    def _check_port_free(self) -> None:
        try:
            # create_server sets SO_REUSEADDR like amqtt's listener, so TIME_WAIT is not "taken".
            probe = socket.create_server((self.host, self.port))
        except OSError as err:
            raise MqttUnavailable(
                f"embedded MQTT broker cannot listen on {self._where}: {err.strerror or err}"
                " (is another MQTT broker running? set mqtt.port, or mqtt.embedded: false to use it)"
            ) from err
        probe.close()

    def _config(self) -> dict[str, object]:
        return {
            "listeners": {"default": {"type": "tcp", "bind": self._where}},
            # Replaces amqtt's defaults: no $SYS, no event/packet logging, our own authentication.
            "plugins": {
                f"{__name__}._UsersAuthPlugin": {
                    "users": self._users,
                    "allow_anonymous": self._allow_anonymous,
                },
            },
        }


class _UsersAuthPlugin(BaseAuthPlugin):  # type: ignore[misc]
    """Username/password from `users` (session persists), or anonymous (no session kept)."""

    @dataclass
    class Config:
        users: dict[str, str] = field(default_factory=dict)
        allow_anonymous: bool = True

    async def authenticate(self, *, session: Session) -> bool:
        config: _UsersAuthPlugin.Config = self.config
        if not session.username:
            session.is_anonymous = True
            return config.allow_anonymous
        # amqtt reuses the session object of a client id across connections: clear a flag an earlier
        # anonymous connection with the same client id left on it, or the session would not persist.
        session.is_anonymous = False
        expected = config.users.get(session.username)
        given = session.password or ""
        return expected is not None and hmac.compare_digest(expected.encode(), given.encode())


class _SnapshotDict(dict[Any, Any]):
    """A dict whose iteration walks a copy of its keys or items: changing it meanwhile is allowed."""

    def __iter__(self) -> Iterator[Any]:
        return iter(list(super().__iter__()))

    def items(self) -> Any:
        return list(super().items())
