"""The session's subscriptions: what the broker holds for hubd, kept equal to what the dialects need.

hubd's session is persistent, so the broker keeps its subscriptions across restarts and delivers every message on
them, queued while hubd is away. `Subscriptions` keeps them right:
- on every connection (`connected`) it subscribes to what the dialects need, and on a session the broker kept it
  first unsubscribes what the last runs subscribed to (kept in SQLite: MQTT 3.1.1 cannot ask the broker) that no
  dialect needs any more: the topics of entities deleted while hubd was down, a dialect turned off;
- while connected, the dialects learn topics from configs (a discovered entity's state topic) and free them when
  their last entity goes: `changes()` collects both after each batch; the bridge subscribes to new ones before it
  commits the batch (`subscribe_now`: a device reaches the platform only once its states can reach hubd) and
  hands the rest to `later`, which `run()` applies, unsubscribing freed topics, so 50,000 entities created and
  deleted leave nothing behind on the broker;
- the dialects' announcements (Home Assistant's birth message, on which every discovery device on the bus sends
  its config and states again) go out once per connection and, while new devices keep appearing, at most once
  every BIRTH_EVERY_S: never once per device;
- the dialects' questions to single devices (`Dialect.requests`: a Shelly asked who it is) are collected with the
  subscriptions of the same batch (`changes()`) and handed to `hubd.mqtt.requests.DeviceRequests` once those are
  made (subscribe first, then ask), and on a connection once its own subscriptions are: at once, at a bounded
  rate, never at the birth message's pace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol, TypeVar

from hubd.dialects.base import Dialect, Outgoing, PublishRules
from hubd.dialects.topics import CommandTopics
from hubd.errors import StoreError
from hubd.lifecycle import Clock
from hubd.metrics import Metrics
from hubd.mqtt.client import MqttClient
from hubd.mqtt.overlaps import Needed
from hubd.mqtt.requests import DeviceRequests

log = logging.getLogger(__name__)

BIRTH_EVERY_S = 10.0
MAX_FILTERS_PER_PACKET = 500  # topics per SUBSCRIBE / UNSUBSCRIBE packet


class Changes(NamedTuple):
    """What the dialects learned since the last call: filters to subscribe to, topics to drop, and the questions to
    single devices to send once `added` is subscribed ((dialect name, publish), in order)."""

    added: list[tuple[str, int]]
    removed: list[str]
    requests: list[tuple[str, Outgoing]]


Item = tuple[list[tuple[str, int]], list[str], bool, list[tuple[str, Outgoing]]]


class SubscriptionStore(Protocol):
    """Where the filters the session is subscribed to are kept (hubd.store.subscriptions.SubscriptionBook)."""

    async def load(self) -> set[str]:
        """The filters kept."""

    async def change(self, added: Iterable[str], removed: Iterable[str]) -> None:
        """Note filters subscribed to and unsubscribed from."""


class Subscriptions:
    """The broker's subscriptions for hubd's session, the dialects' announcements, and when their questions go."""

    def __init__(self, client: MqttClient, dialects: Sequence[Dialect], *, clock: Clock, metrics: Metrics,
                 store: SubscriptionStore | None = None, timeout_s: float = 10.0,
                 requests: DeviceRequests | None = None) -> None:
        self._client = client
        self._dialects = tuple(dialects)
        self._store = store
        self._clock = clock
        self._timeout_s = timeout_s
        self._subscribed: set[str] = set()
        self._needed = Needed()  # what the dialects need; the session holds no filter another held one covers
        self._unsaved: set[str] = set()  # subscribed by subscribe_now, to be kept by run()
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        # The questions' sender (its rule: the fixed rules of a default config, when the bridge hands none).
        self._requests = requests if requests is not None else DeviceRequests(
            client, CommandTopics(PublishRules(), self._dialects), metrics=metrics, timeout_s=timeout_s)
        self._last_birth: float | None = None
        self._birth_due: float | None = None
        metrics.gauge("hubd_mqtt_subscriptions", "topic filters hubd's MQTT session is subscribed to",
                      lambda: float(len(self._subscribed)))

    def new_session(self) -> None:
        """A connection begins (before anything of it runs): the last one's unsent questions are dropped, and none
        goes before `connected` has subscribed."""
        self._requests.new_session()

    async def ask(self) -> None:
        """Send the dialects' questions as they are handed over (the session's task, beside `run()`)."""
        await self._requests.run()

    async def connected(self, session_present: bool) -> int:
        """Subscribe to everything the dialects need, drop what a kept session holds that none needs, let the
        questions go (the dialects ask their known devices again on every connection), announce. The number of
        filters subscribed to."""
        self._needed.reset({dialect.name: dialect.subscriptions() for dialect in self._dialects})
        self._needed.take_touched()
        filters = list(self._needed.held().items())  # in the dialects' claim order
        needed = {topic for topic, _ in filters}
        # Counted afresh: what the pump subscribes to meanwhile (subscribe_now, run) is added as it goes, not lost.
        self._subscribed = set()
        kept = await self._load()
        stale = sorted(kept - needed) if session_present else []
        for names in _chunks(stale):
            await self._client.unsubscribe(names, timeout_s=self._timeout_s)
        if stale:
            log.info("unsubscribed from %d topics no device uses any more", len(stale))
        for chunk in _chunks(filters):
            await self._client.subscribe(chunk, timeout_s=self._timeout_s)
        self._subscribed |= needed
        await self._save(needed - kept, kept - needed)
        self._requests.add(self._questions())
        self._requests.open()
        await self._birth()
        return len(filters)

    def changes(self) -> Changes:
        """What the dialects learned since the last call: filters to subscribe to, topics to drop (also those a
        filter now held covers: the broker would send their messages twice), and their questions to single devices,
        to send once those filters are subscribed (`subscribe_now`, `later`)."""
        for dialect in self._dialects:
            self._needed.add(dialect.name, dialect.pending_subscriptions())
            self._needed.remove(dialect.name, dialect.pending_unsubscriptions())
        touched = self._needed.take_touched()
        if touched is None:  # a wildcard filter came or went: any topic's holding may have changed
            touched = self._subscribed | set(self._needed.held())
        added: list[tuple[str, int]] = []
        removed: list[str] = []
        for topic in sorted(touched):
            qos = self._needed.qos(topic)
            if qos is not None and topic not in self._subscribed:
                added.append((topic, qos))
            elif qos is None and topic in self._subscribed:
                removed.append(topic)
        return Changes(added, removed, self._questions())

    async def subscribe_now(self, filters: list[tuple[str, int]],
                            requests: Sequence[tuple[str, Outgoing]] = ()) -> None:
        """Subscribe and await the SUBACK (the bridge does it before it commits the batch that needs them), then hand
        on the questions whose answers come there."""
        for chunk in _chunks(filters):
            await self._client.subscribe(chunk, timeout_s=self._timeout_s)
        self._subscribed |= {topic for topic, _ in filters}
        self._unsaved |= {topic for topic, _ in filters}
        self._requests.add(requests)
        self._queue.put_nowait(([], [], True, []))  # to be kept, and announced (a new device appeared)
        log.debug("subscribed to %d more topics", len(filters))

    def later(self, added: list[tuple[str, int]], removed: list[str],
              requests: Sequence[tuple[str, Outgoing]] = ()) -> None:
        """Subscribe to `added` and drop `removed` from `run()`'s task, then hand on `requests`."""
        if added or removed or requests:
            self._queue.put_nowait((added, removed, False, list(requests)))

    async def run(self) -> None:
        """Apply what `later` and `subscribe_now` queued, keep it, and send the announcements they call for."""
        while True:
            timeout = None if self._birth_due is None else max(0.0, self._birth_due - self._clock.monotonic())
            try:
                async with asyncio.timeout(timeout):
                    first = await self._queue.get()
            except TimeoutError:
                self._birth_due = None
                await self._birth()
                continue
            items = [first]
            while not self._queue.empty():
                items.append(self._queue.get_nowait())
            await self._apply(items)

    async def _apply(self, items: list[Item]) -> None:
        wanted: dict[str, int | None] = {}  # topic → qos to subscribe, None to drop; the last word wins
        announce = False
        for added, removed, subscribed, _ in items:
            announce = announce or subscribed or bool(added)
            wanted.update((topic, qos) for topic, qos in added)
            wanted.update((topic, None) for topic in removed)
        subscribe = [(topic, qos) for topic, qos in wanted.items() if qos is not None and topic not in self._subscribed]
        drop = [topic for topic, qos in wanted.items() if qos is None and topic in self._subscribed]
        for chunk in _chunks(subscribe):
            await self._client.subscribe(chunk, timeout_s=self._timeout_s)
        for names in _chunks(drop):
            await self._client.unsubscribe(names, timeout_s=self._timeout_s)
        self._subscribed |= {topic for topic, _ in subscribe}
        self._subscribed -= set(drop)
        self._requests.add(question for *_, questions in items for question in questions)  # now subscribed
        if subscribe or drop:
            log.debug("subscribed to %d more topics, unsubscribed from %d", len(subscribe), len(drop))
        kept, self._unsaved = {t for t, _ in subscribe} | (self._unsaved - set(drop)), set()
        await self._save(kept, drop)
        if announce:
            self._birth_soon()

    def _birth_soon(self) -> None:
        """Announce now if the last announcement is BIRTH_EVERY_S old, else once when it will be."""
        now = self._clock.monotonic()
        due = now if self._last_birth is None else self._last_birth + BIRTH_EVERY_S
        if self._birth_due is None or due < self._birth_due:
            self._birth_due = max(due, now)

    def _questions(self) -> list[tuple[str, Outgoing]]:
        return [(dialect.name, message) for dialect in self._dialects for message in dialect.requests()]

    async def _birth(self) -> None:
        self._last_birth = self._clock.monotonic()
        for dialect in self._dialects:
            for message in dialect.announcements():
                await self._client.publish(message.topic, message.payload, qos=message.qos, retain=message.retain,
                                           timeout_s=self._timeout_s)

    async def _load(self) -> set[str]:
        if self._store is None:
            return set()
        try:
            return await self._store.load()
        except StoreError as err:
            log.warning("cannot read the kept MQTT subscriptions (%s); topics no device uses any more stay "
                        "subscribed until the next reconnect", err)
            return set()

    async def _save(self, added: Iterable[str], removed: Iterable[str]) -> None:
        if self._store is None:
            return
        try:
            await self._store.change(added, removed)
        except StoreError as err:
            log.warning("cannot keep the MQTT subscriptions (%s); a later reconnect may leave some subscribed", err)


T = TypeVar("T")


def _chunks(items: Sequence[T]) -> list[list[T]]:
    return [list(items[i:i + MAX_FILTERS_PER_PACKET]) for i in range(0, len(items), MAX_FILTERS_PER_PACKET)]
