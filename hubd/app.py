"""The wiring: build every component from the config, in start order. Only the command line (hubd.cli) imports it.

Start order (stop is the reverse): store, embedded broker, driver, platform side (tokens, outbox sender),
registry, MQTT bridge, the dialects' live selection, directives, webhook, config reload, HTTP, zeroconf.
The flow is one-way:
MQTT bridge (dialects) -> registry -> outbox writer -> outbox (SQLite) -> outbox sender -> platform client;
HTTP -> directives / webhook -> device commands (dialects) -> MQTT bridge for what goes to devices.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from pathlib import Path

from hubd.cloud.client import PlatformClient
from hubd.cloud.tokens import TokenManager
from hubd.config.model import HubdConfig
from hubd.dialects.commands import DeviceCommands
from hubd.dialects.doorbells import DoorbellCheck
from hubd.dialects.enabled import build_dialects, publish_rules
from hubd.directives.control import Controls
from hubd.directives.discovery import Discovery
from hubd.directives.endpoint import DirectiveEndpoint
from hubd.directives.grant import AcceptGrant
from hubd.directives.replay import Replay
from hubd.driver.limits import LoginLimiter
from hubd.driver.service import DriverService
from hubd.lifecycle import Component, Health, Supervisor, SystemClock
from hubd.metrics import Metrics
from hubd.mqtt.bridge import MqttBridge, status_topic
from hubd.mqtt.client import PACKET_HEADROOM_BYTES, MqttClient, Will
from hubd.mqtt.inflight import InflightRecord
from hubd.outbox.feed import OutboxFeed
from hubd.outbox.journal import EventJournal
from hubd.outbox.sender import OutboxSender
from hubd.outbox.writer import OutboxWriter
from hubd.owner.guard import OwnerGuard
from hubd.owner.live import LiveSelection
from hubd.owner.reload import ConfigReload
from hubd.owner.routes import OwnerRoutes
from hubd.owner.signin import Sessions
from hubd.registry import DeviceRegistry
from hubd.status.routes import StatusRoutes
from hubd.store.admin_tokens import AdminTokens
from hubd.store.db import Database
from hubd.store.grants import GrantRepo
from hubd.store.identity import InstanceIdentity
from hubd.store.receipts import ReceiptBook
from hubd.store.replies import DirectiveReplyRepo
from hubd.store.subscriptions import SubscriptionBook
from hubd.systemd import Notifier
from hubd.web.server import HttpServer, RouteSource
from hubd.webhook.service import WebhookService
from hubd.webhook.store import record_results_blocking

log = logging.getLogger(__name__)


def build(config: HubdConfig, environ: Mapping[str, str] | None = None, *, config_path: Path | None = None,
          log_level_fixed: bool = False) -> Supervisor:
    """Construct the supervisor and its components; nothing starts here. `config_path`: the file SIGHUP reads
    again (None: nothing to read, as in the demo); `log_level_fixed`: `hubd run --log-level` was given."""
    health = Health()
    metrics = Metrics()
    components: list[Component] = []

    db = Database.of(config.storage, health=health, metrics=metrics)  # its `storage` check: the disk takes writes
    components.append(db)

    mqtt_username = config.mqtt.username
    mqtt_password = config.mqtt.password.get_secret_value() if config.mqtt.password else None
    mqtt_client_id = config.mqtt.client_id
    if config.mqtt.embedded:
        from hubd.mqtt.broker import EmbeddedBroker

        if mqtt_username is None:
            # The embedded broker keeps persistent sessions only for authenticated clients.
            mqtt_username, mqtt_password = "hubd", secrets.token_urlsafe(24)
        # Its sessions end with the process anyway, and amqtt lets any local client that connects with
        # hubd's client id take hubd's session over, even one it then refuses (mqtt/broker.py): so
        # a client id of this process's own that nobody can guess (at most 23 characters, MQTT 3.1.1).
        mqtt_client_id = f"{config.mqtt.client_id[:14]}-{secrets.token_hex(4)}"
        components.append(EmbeddedBroker(host=config.mqtt.host, port=config.mqtt.port,
                                         users={mqtt_username: mqtt_password or ""}))

    # One count of failed sign-ins for the authorize page and the devices page: an account's lock-out is one budget.
    logins = LoginLimiter()
    driver = DriverService(db, config.driver, public_url=config.http.base_url, metrics=metrics,
                           auth_url=config.platform.auth_url, trusted_proxies=config.http.trusted_proxies,
                           limiter=logins)
    components.append(driver)

    clock = SystemClock()
    outbox_wakeup = asyncio.Event()
    platform = PlatformClient(config.platform)
    tokens = TokenManager(GrantRepo(db), platform, clock=clock, failure_report=config.platform.failure_report,
                          metrics=metrics, outbox_wakeup=outbox_wakeup)
    # A passive, bounded record of the latest events and problems for the status page; the outbox sender and the
    # registry tell it what happens (the info line per delivered event is the sender's, `log.events`).
    journal = EventJournal()
    # The writer hands what it committed to the sender in memory; the outbox on disk stays the truth.
    feed = OutboxFeed()
    outbox = OutboxSender(db, platform, tokens, clock=clock, metrics=metrics, wakeup=outbox_wakeup, observer=journal,
                          log_events=config.log.events, feed=feed,
                          label=lambda device_id: registry.label(device_id))  # log lines name devices
    components += [platform, tokens, outbox]
    if not config.platform.reporting_enabled:
        log.warning("state reporting is off: set platform.base_url, auth_url, client_id and client_secret")

    # Speakers' command results go to the webhook's tables, in the writer's transaction.
    writer = OutboxWriter(db, namespace=config.platform.namespace, metrics=metrics, outbox_wakeup=outbox_wakeup,
                          results=record_results_blocking, feed=feed)
    registry = DeviceRegistry(db, writer, metrics, namespace=config.platform.namespace, rejections=journal)
    components.append(registry)

    client = MqttClient(
        host=config.mqtt.host, port=config.mqtt.port, client_id=mqtt_client_id, clean_session=False,
        username=mqtt_username, password=mqtt_password, tls=config.mqtt.tls,
        ca_file=str(config.mqtt.ca_file) if config.mqtt.ca_file else None,
        will=Will(status_topic(config.mqtt.base_topic), b"offline", qos=1, retain=True),
        keepalive_s=config.mqtt.keepalive_s, max_packet_bytes=max_packet_bytes(config),
    )
    # The device dialects in claim order (hubd's own topics first, the native imports before discovery): each claims
    # its topics and turns messages into typed inputs; the first that claims a topic decodes it.
    dialects = build_dialects(config)
    rules = publish_rules(config)  # where a device command, or a dialect's question to one device, may go
    bridge = MqttBridge(client, base_topic=config.mqtt.base_topic, dialects=dialects, sink=registry, routes=registry,
                        receipts=ReceiptBook(db), health=health, metrics=metrics,
                        inflight=InflightRecord(config.storage.path.with_name(config.storage.path.name + ".inflight")),
                        subscriptions=SubscriptionBook(db), subscribe_before_report=not config.mqtt.embedded,
                        max_message_bytes=config.mqtt.max_message_bytes, publish_rules=rules)
    components.append(bridge)
    commands = DeviceCommands(dialects, bridge, rules)
    # What the dialects import and which buttons are doorbells: the config's, and the owner's doorbells (before the
    # first message is read, then whenever the devices page or SIGHUP changes them).
    selection = LiveSelection(config, bridge, registry)
    components.append(selection)

    # The directive endpoint routes to its handlers; the control component also runs the replay's writes.
    directives = DirectiveEndpoint(path=config.http.vendor_path, namespace=config.platform.namespace, verifier=driver,
                                   metrics=metrics)
    replay = Replay(DirectiveReplyRepo(db), metrics)
    AcceptGrant(namespace=config.platform.namespace, tokens=tokens, writer=writer,
                reporting_enabled=config.platform.reporting_enabled).register(directives)
    Discovery(namespace=config.platform.namespace, registry=registry, replay=replay).register(directives)
    controls = Controls(namespace=config.platform.namespace, registry=registry, commands=commands, events=writer,
                        grants=GrantRepo(db), replay=replay, metrics=metrics)
    controls.register(directives)
    components.append(controls)
    webhook = WebhookService(db, registry, commands, per_minute=config.webhook.per_minute,
                             per_day=config.webhook.per_day, metrics=metrics,
                             trusted_proxies=config.http.trusted_proxies, notices=journal)
    components.append(webhook)
    # The doorbells entries that cannot ring (an event the device never announces, no device): named at start and on
    # reload, in the log and under the status page's problems.
    doorbell_check = DoorbellCheck(dialects, journal)
    components.append(doorbell_check)
    components.append(ConfigReload(config_path, selection, log_level_fixed=log_level_fixed,  # SIGHUP
                                   doorbells=doorbell_check))
    # Public: what the platform (directives, account linking) and a browser logging in must reach. Local: the
    # status page and API, and the webhook, for the LAN only (a listener of their own with http.local_port).
    public: list[RouteSource] = [driver, directives]
    status = StatusRoutes(registry, health, tokens, outbox,
                          imports=dialects,  # what each leaves out
                          journal=journal, webhooks=webhook)
    # The owner's devices page and its API: writes need an admin token or a signed-in owner (an admin account).
    sessions = Sessions(config.driver.accounts, logins)
    owner = OwnerRoutes(registry, status, OwnerGuard(sessions, AdminTokens(db)), sessions, selection, dialects)
    local: list[RouteSource] = [status, owner, webhook]
    components.append(HttpServer(host=config.http.host, port=config.http.port,
                                 max_body_bytes=config.http.max_body_bytes, health=health, metrics=metrics,
                                 sources=public, local_sources=local, local_host=config.http.local_host,
                                 local_port=config.http.local_port, request_timeout_s=config.http.request_timeout_s,
                                 max_connections=config.http.max_connections, host_names=config.http.host_names,
                                 identity=InstanceIdentity(db)))  # answers `hubd doctor`'s /healthz challenge

    if config.zeroconf.enabled:
        from hubd.advertiser import Advertiser

        # The listener LAN tools want: the status page's and the API's (the local one, when there is one).
        http = config.http
        host, port = (http.local_host, http.local_port) if http.local_port is not None else (http.host, http.port)
        components.append(Advertiser(host=host, port=port, name=config.driver.hub_name))

    return Supervisor(components, health, Notifier(environ))


def max_packet_bytes(config: HubdConfig) -> int | None:
    """The largest packet the broker may send hubd (MQTT 5 Maximum Packet Size): the largest message any topic takes,
    with room for its topic. None with the embedded broker: amqtt speaks only MQTT 3.1.1, and reads every message
    whole in hubd's own process anyway (docs/mqtt.md)."""
    if config.mqtt.embedded:
        return None
    largest = config.mqtt.max_message_bytes
    if config.zigbee2mqtt.enabled:
        largest = max(largest, config.zigbee2mqtt.max_devices_bytes)
    return largest + PACKET_HEADROOM_BYTES


async def run(config: HubdConfig, *, config_path: Path | None = None, log_level_fixed: bool = False) -> int:
    """Build and run until stopped; the process exit code."""
    return await build(config, config_path=config_path, log_level_fixed=log_level_fixed).run()
