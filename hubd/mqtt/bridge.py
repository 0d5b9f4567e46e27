"""The MQTT bridge component: keeps the broker session, feeds device messages downstream, publishes.

Upstream flow: broker -> `MqttClient.next_batch` -> `MessageSink.handle` (which persists what the
messages cause) -> manual PUBACK. Acking only after the sink returns is what makes "nothing the
broker handed over is lost" true across a SIGKILL: unacked QoS 1 messages are redelivered. A sink that
waits out a disk refusing writes (the registry does) holds the batch unacked meanwhile: the broker keeps
the rest, and the pump goes on once the commit went through.
Downstream: `publish()` for set/command messages, waiting briefly for a connection; the dialects' questions to
single devices go from a task of the session (`hubd.mqtt.requests`), after the subscriptions of their batch.
Owns hubd's own status topic (`B/status`): `online` once subscribed, `offline` on stop and as the will.
`reconfigure()` hands the dialects a new selection (include/exclude, doorbells: SIGHUP, the devices page) and the
sink what that changes, as a batch of its own between two of the pump's, connected or not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from hubd.devices.model import Route
from hubd.dialects.base import Decoded, Dialect, InputRejected, Outgoing, PublishRules, Selection, input_kind
from hubd.dialects.topics import CommandTopics
from hubd.errors import MqttRejected, MqttUnavailable, StoreError
from hubd.failures import MessageFailures
from hubd.lifecycle import Backoff, Clock, Health, SystemClock
from hubd.metrics import Metrics, event_stages
from hubd.mqtt.client import MqttClient
from hubd.mqtt.inbox import Message
from hubd.mqtt.inflight import InflightRecord, Step
from hubd.mqtt.requests import DeviceRequests
from hubd.mqtt.subscriptions import Subscriptions, SubscriptionStore
from hubd.store.receipts import Receipt, receipt

log = logging.getLogger(__name__)

BATCH_MAX = 500
PUBLISH_WAIT_S = 5.0
# A connection that lasted this long was a real one: the next loss starts the backoff afresh.
STABLE_AFTER_S = 10.0
# How long the SUBACK of our subscriptions and the PUBACK of `online` may take before the session is
# given up (and retried with the backoff).
ANNOUNCE_TIMEOUT_S = 10.0
# Decoding a batch gives the loop back once it has held it this long (templates' renders can take up to their
# deadline each), for long enough that an HTTP request waiting meanwhile is answered.
YIELD_AFTER_S = 0.05
YIELD_FOR_S = 0.005


def status_topic(base: str) -> str:
    """hubd's own retained online/offline topic (the bridge's birth message; app.py makes it the will)."""
    return f"{base}/status"


class MessageSink(Protocol):
    """The next stage: takes a batch of decoded device messages and returns once their effects are durable."""

    async def handle(self, batch: Sequence[Decoded], receipts: Sequence[Receipt] = ()) -> None:
        """Process (and persist the effects of) a batch, in order, with the receipts of its QoS 1 messages."""


class ReceiptLookup(Protocol):
    """The receipts committed batches recorded (hubd.store.receipts.ReceiptBook)."""

    async def stored(self, receipts: Iterable[Receipt]) -> set[Receipt]:
        """The receipts among `receipts` that a committed batch recorded."""


class RouteBook(Protocol):
    """The routes kept with the devices (the registry), for the dialects to restore at start."""

    def routes(self, dialect: str) -> list[tuple[str, Route]]:
        """(device_id, route) of each device of one dialect."""


class MqttBridge:
    """Owns the broker connection: reconnects with backoff, re-subscribes, publishes birth and will."""

    name = "mqtt"

    def __init__(self, client: MqttClient, *, base_topic: str, dialects: Sequence[Dialect], sink: MessageSink,
                 health: Health, metrics: Metrics, routes: RouteBook | None = None, backoff: Backoff | None = None,
                 clock: Clock | None = None, receipts: ReceiptLookup | None = None,
                 inflight: InflightRecord | None = None, subscriptions: SubscriptionStore | None = None,
                 subscribe_before_report: bool = True, max_message_bytes: int | None = None,
                 publish_rules: PublishRules | None = None) -> None:
        self._client = client
        # Larger messages are refused unread, but on the dialects' large topics (the broker was asked for the
        # largest of all: MqttClient's max_packet_bytes). None: no bound (tests).
        self._max_bytes = max_message_bytes
        self._large_topics = frozenset(topic for dialect in dialects for topic in dialect.large_topics())
        self._inflight = inflight if inflight is not None else InflightRecord(None)
        # amqtt (the embedded broker) reads no SUBSCRIBE while our acknowledgements are due: with it, a batch's new
        # subscriptions go out after the batch is committed (a state sent right after its device reached the
        # platform may then be missed, until the birth message makes the device send it again).
        self._subscribe_first = subscribe_before_report
        self._receipts = receipts  # None: a redelivered message is applied again (tests without a database)
        self._dialects = tuple(dialects)
        self._routes = routes
        self._clock: Clock = clock or SystemClock()
        # The dialects' questions to single devices go where a device command may (the one rule, asked before each).
        topics = CommandTopics(publish_rules if publish_rules is not None else PublishRules(base_topic),
                               self._dialects)
        self._subscriptions = Subscriptions(client, self._dialects, clock=self._clock, metrics=metrics,
                                            store=subscriptions, timeout_s=ANNOUNCE_TIMEOUT_S,
                                            requests=DeviceRequests(client, topics, metrics=metrics,
                                                                    timeout_s=ANNOUNCE_TIMEOUT_S))
        self._up_since: float | None = None
        self._base = base_topic
        self._sink = sink
        self._health = health
        self._backoff = backoff or Backoff(initial_s=0.5, cap_s=30.0)
        self._short_sessions = 0  # sessions in a row that the broker ended soon after they began
        self._batch_lock = asyncio.Lock()  # a batch of the pump's, or a reconfiguration: one at a time
        self._connected = asyncio.Event()
        self._received = metrics.counter("hubd_mqtt_messages_total", "MQTT messages received, by kind", "kind")
        self._ignored = metrics.counter("hubd_mqtt_ignored_total", "MQTT messages on topics hubd does not use")
        self._redelivered = metrics.counter("hubd_mqtt_redelivered_total",
                                            "messages the broker sent again that hubd had already stored, acked only")
        self._failures = MessageFailures(metrics)
        self._stages = event_stages(metrics)
        self._connects = metrics.counter("hubd_mqtt_connects_total", "successful connections to the broker")
        self._too_large = metrics.counter("hubd_mqtt_too_large_total",
                                          "device messages over mqtt.max_message_bytes, refused unread")
        self._poison = metrics.counter("hubd_mqtt_set_aside_total",
                                       "distinct device messages hubd stopped on while reading them, set aside unread")
        health.require("mqtt", "not connected yet")

    async def start(self) -> None:
        """Prime the dialects from the kept routes; connecting is part of run(), so a broker that is down delays
        readiness."""
        self._inflight.load()
        self._poison.inc(self._inflight.set_aside_total)  # messages, across starts: a retained copy counts once
        if self._routes is not None:
            for dialect in self._dialects:
                dialect.restore(self._routes.routes(dialect.name))

    async def run(self) -> None:
        """Connect, subscribe, announce, pump messages; on loss back off and do it all again.

        The backoff starts again from its first delay only after a connection that stayed up for
        STABLE_AFTER_S: a broker that accepts us and drops us at once (another client with our client
        id, a broker that refuses our subscriptions) is retried ever more slowly, never in a tight loop.
        """
        while True:
            self._up_since = None
            try:
                await self._session()
            except MqttRejected as err:
                self._lost(f"broker refused us: {err}")
                log.error("MQTT broker refused us: %s (check mqtt.username, mqtt.password and the broker's ACL)",
                          err)
            except MqttUnavailable as err:
                self._lost(str(err))
                up_for = self._uptime()
                # A broker restart drops us once and refuses us until it is back; another client with our
                # client id takes the session over again and again while the broker stays up. So the hint
                # comes only after a second short session in a row, with no failed connect between them.
                self._short_sessions = self._short_sessions + 1 if up_for is not None and up_for < STABLE_AFTER_S \
                    else 0
                if self._short_sessions >= 2:
                    log.warning("MQTT connection lost %.1f s after connecting, again: %s (is another client "
                                "connected with client id %r? the broker drops the older of two; set a unique "
                                "mqtt.client_id)", up_for, err, self._client.client_id)
                else:
                    log.warning("MQTT connection lost or unavailable: %s", err)
            up_for = self._uptime()
            if up_for is not None and up_for >= STABLE_AFTER_S:
                self._backoff.reset()
            await self._backoff.sleep()

    async def stop(self) -> None:
        """Say `offline` ourselves (a clean DISCONNECT suppresses the will), then disconnect."""
        if self._client.connected:
            try:
                await self._client.publish(status_topic(self._base), b"offline", qos=1, retain=True,
                                           timeout_s=1.0)
            except MqttUnavailable as err:
                log.debug("could not publish offline status: %s", err)
        await self._client.disconnect()
        self._connected.clear()
        self._inflight.close()
        for dialect in self._dialects:
            dialect.close()

    @property
    def connected(self) -> bool:
        """True while the session is up."""
        return self._connected.is_set()

    async def publish(self, message: Outgoing, *, timeout_s: float | None = None) -> None:
        """Publish one message a dialect made (a control, a speaker command); waits up to PUBLISH_WAIT_S for a
        connection.

        With timeout_s, the whole call is bounded by it, and MqttUnconfirmed says the message went out
        but its PUBACK did not come in time (see MqttClient.publish).
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        try:
            async with asyncio.timeout(PUBLISH_WAIT_S if timeout_s is None else min(PUBLISH_WAIT_S, timeout_s)):
                await self._connected.wait()
        except TimeoutError as err:
            raise MqttUnavailable("not connected to the MQTT broker") from err
        if deadline is None:
            await self._client.publish(message.topic, message.payload, qos=message.qos, retain=message.retain)
        else:
            await self._client.publish(message.topic, message.payload, qos=message.qos, retain=message.retain,
                                       timeout_s=max(0.0, deadline - loop.time()))

    async def reconfigure(self, selections: Mapping[str, Selection]) -> None:
        """Give each dialect named its new selection and hand the sink what that changes (devices announced again,
        gone), as one batch between two of the pump's; returns once committed. A dialect that fails is logged
        and keeps what it had."""
        async with self._batch_lock:
            now = time.time()
            decoded: list[Decoded] = []
            for dialect in self._dialects:
                selection = selections.get(dialect.name)
                if selection is None:
                    continue
                try:
                    inputs = tuple(dialect.reconfigure(selection))
                except Exception as err:  # one dialect's bug must not stop the others (nor hubd)
                    self._failures.record(log, f"(the {dialect.name} selection)", f"the {dialect.name} dialect", err)
                    continue
                if inputs:
                    decoded.append(Decoded(f"(the {dialect.name} selection)", now, True, inputs, dialect.name))
            changes = self._subscriptions.changes()
            self._subscriptions.later(changes.added, changes.removed, changes.requests)
            if decoded:
                await self._sink.handle(decoded)
        log.info("the dialects took their new selection (%s): %d changes handed on",
                 ", ".join(sorted(selections)) or "none", sum(len(d.inputs) for d in decoded))

    async def _session(self) -> None:
        """One connection: subscribe and announce while already taking in what the broker sends.

        Messages queued for our session arrive right after CONNACK, before the SUBACK. amqtt does not
        even read our SUBSCRIBE before each of them is acknowledged (or 5 s have passed, after which it
        forgets it), so waiting for the SUBACK before pumping would stall every reconnect.
        """
        session_present = await self._client.connect()
        try:
            await self._serve(session_present)
        except Exception as err:
            # Whatever ended the session (a refused SUBSCRIBE, no SUBACK or PUBACK in time, a lost
            # connection), the connection may still be open: abort it, without DISCONNECT, so the
            # broker publishes the will (`offline`) and the next connect() starts afresh.
            self._client.abort(f"session ended: {err}")
            raise

    async def _serve(self, session_present: bool) -> None:
        """Pump and announce until the connection fails; raises the first MqttUnavailable."""
        failure: MqttUnavailable | None = None
        self._subscriptions.new_session()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._pump(), name="mqtt-pump")
                group.create_task(self._announce(session_present), name="mqtt-announce")
                group.create_task(self._subscriptions.run(), name="mqtt-subscribe")
                group.create_task(self._subscriptions.ask(), name="mqtt-ask")
        except* MqttUnavailable as errors:
            failure = errors.exceptions[0]  # type: ignore[assignment]  # the only leaf type except* let through
        if failure is not None:
            raise failure

    async def _announce(self, session_present: bool) -> None:
        # Subscribed again on every connection: a broker that lost its state knows nothing of us, and one that kept
        # it may hold topics no device uses any more.
        filters = await self._subscriptions.connected(session_present)
        await self._client.publish(status_topic(self._base), b"online", qos=1, retain=True,
                                   timeout_s=ANNOUNCE_TIMEOUT_S)
        self._connects.inc()
        self._up_since = self._clock.monotonic()
        self._connected.set()
        self._health.set("mqtt", True, "connected")
        log.info("MQTT connected (session present: %s), subscribed to %d topic filters (%s)", session_present,
                 filters, ", ".join(d.name for d in self._dialects))

    async def _pump(self) -> None:
        while True:
            await self._pump_next()

    async def _pump_next(self) -> None:
        """One batch, in a call of its own: its messages (a device list of megabytes) are freed once it returns,
        not held while the next is awaited."""
        batch = await self._client.next_batch(BATCH_MAX)
        async with self._batch_lock:
            fresh = await self._pump_batch(batch)
        committed = time.monotonic()  # the messages' clock (Message.received_at), not the injected one
        observe = self._stages.observe
        for message in fresh:
            if message.received_at:
                observe(committed - message.received_at, "mqtt_to_commit")

    async def _pump_batch(self, batch: Sequence[Message]) -> Sequence[Message]:
        """Decode a batch and hand it on; the messages not yet stored (what it committed)."""
        fresh = await self._not_yet_stored(batch)
        if len(fresh) < len(batch):
            kept = {id(m) for m in fresh}
            self._client.ack([m for m in batch if id(m) not in kept])  # stored already: acknowledged only
        # Noted as in flight before they are decoded, cleared once committed: a message hubd dies on alone is set
        # aside unread at the next start; after a death in a batch, every message is read alone for a while
        # (hubd/mqtt/inflight.py).
        # Each step is acknowledged once committed: the receipts of the last few commits are all that is kept
        # (hubd.store.receipts), so a batch read in many steps must not wait for its last one to be acknowledged.
        for step in self._inflight.plan(fresh):
            self._inflight.begin(step)
            try:
                await self._read_step(step)
            except asyncio.CancelledError:  # hubd stops: no death (a redelivery is recognised by its receipt)
                self._inflight.cancelled()
                raise
            self._inflight.end(step)
            self._client.ack(step.messages)
        return fresh

    async def _read_step(self, step: Step[Message]) -> None:
        """Decode a step's messages (or set its one aside) and hand them on with their receipts."""
        if step.set_aside:
            decoded = [self._set_aside(step.messages[0], step.deaths)]
        else:
            decoded = await self._decode(step.messages)
        self._inflight.decoded(step)  # what follows is committing: a death now is most likely not these messages'

        decoded = self._pending_inputs() + decoded  # before: a device another dialect just took over
        added, removed, requests = self._subscriptions.changes()
        if added and self._subscribe_first:  # a device reaches the platform once its states reach hubd
            await self._subscriptions.subscribe_now(added, requests)  # subscribed first, then the devices asked
            added, requests = [], []
        self._subscriptions.later(added, removed, requests)
        await self._sink.handle(decoded, [receipt(m.mid, m.topic, m.payload) for m in step.messages if m.qos])

    async def _not_yet_stored(self, batch: Sequence[Message]) -> Sequence[Message]:
        """The batch without the redeliveries (DUP) of messages whose effects a commit already holds: hubd
        stopped between that commit and the PUBACK. Applied again, an older value would overwrite a newer one."""
        again = {receipt(m.mid, m.topic, m.payload): m for m in batch if m.dup and m.qos}
        if not again or self._receipts is None:
            return batch
        try:
            stored = await self._receipts.stored(again)
        except StoreError as err:  # then at least once: applied again, as without receipts
            log.warning("could not look up %d redelivered messages (%s); applying them again", len(again), err)
            return batch
        if not stored:
            return batch
        self._redelivered.inc(len(stored))
        log.info("%d messages the broker sent again were already stored before hubd stopped; acknowledged only",
                 len(stored))
        skip = {id(again[r]) for r in stored}
        return [m for m in batch if id(m) not in skip]

    async def _decode(self, batch: Sequence[Message]) -> list[Decoded]:
        """The batch's readings. A reading may wait on a template's render (each bounded by the render process's
        deadline): once the loop has been held for `YIELD_AFTER_S`, it is given back before the next message, so a
        burst of slow templates never keeps /healthz, the webhook or a directive waiting longer than one render."""
        now = time.time()
        out: list[Decoded] = []
        held_since = time.monotonic()
        for message in batch:
            if time.monotonic() - held_since > YIELD_AFTER_S:
                await asyncio.sleep(YIELD_FOR_S)
                held_since = time.monotonic()
            decoded = self._decode_one(message, now)
            if decoded is None:
                self._ignored.inc()
                continue
            self._received.inc(label=input_kind(decoded.inputs[0]) if decoded.inputs else "none")
            out.append(decoded)
        return out

    def _pending_inputs(self) -> list[Decoded]:
        """What the dialects made outside a decode (a device another dialect now imports natively: gone)."""
        out = []
        for dialect in self._dialects:
            inputs = dialect.pending_inputs()
            if inputs:
                out.append(Decoded(f"({dialect.name}: devices now imported by another dialect)", time.time(), False,
                                   tuple(inputs), dialect.name))
        return out

    def _set_aside(self, message: Message, deaths: int) -> Decoded:
        """A message hubd stopped on while reading it alone: acknowledged unread, a problem to list."""
        if self._inflight.first_set_aside(message):
            self._poison.inc()
        times = "once" if deaths == 1 else f"{deaths} times"
        log.error("%s: hubd stopped %s while reading this message alone (%d bytes); it is acknowledged unread and "
                  "listed under the status page's problems", message.topic, times, len(message.payload))
        reason = (f"hubd stopped {times} while reading this message alone ({len(message.payload)} bytes), so it was "
                  "set aside unread; if the device sends it again, report it with hubd's log")
        return Decoded(message.topic, time.time(), message.retain, (InputRejected("other", reason),))

    def _decode_one(self, message: Message, now: float) -> Decoded | None:
        """The first claiming dialect's reading; a dialect's failure is this message's, never the batch's."""
        for dialect in self._dialects:
            if not dialect.claims(message.topic):
                continue
            if self._max_bytes is not None and len(message.payload) > self._max_bytes \
                    and message.topic not in self._large_topics:
                self._too_large.inc()  # logged (at most once a minute a topic) and listed by the registry
                reason = (f"a message of {len(message.payload)} bytes, over mqtt.max_message_bytes "
                          f"({self._max_bytes}): refused unread")
                return Decoded(message.topic, now, message.retain, (InputRejected("other", reason),), dialect.name)
            try:
                inputs = tuple(dialect.decode(message.topic, message.payload, now, message.retain))
            except Exception as err:  # a dialect's bug for this message must not stop the others (nor hubd)
                self._failures.record(log, message.topic, f"the {dialect.name} dialect", err)
                inputs = (InputRejected("other", f"the {dialect.name} dialect failed on it ({type(err).__name__})"),)
            return Decoded(message.topic, now, message.retain, inputs, dialect.name)
        return None

    def _uptime(self) -> float | None:
        """Seconds the last session was up, or None if it never got that far."""
        return None if self._up_since is None else self._clock.monotonic() - self._up_since

    def _lost(self, detail: str) -> None:
        self._connected.clear()
        self._health.set("mqtt", False, detail)

