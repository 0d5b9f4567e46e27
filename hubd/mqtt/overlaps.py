"""Which topic filters hubd's session holds, so that the broker never sends hubd one message twice.

Under MQTT 5 a broker may send a client one copy of a message per subscription it matches, and mosquitto does:
with `+/+/BTtoMQTT/<MAC>` (one gateway's device announced with a wildcard) and `home/gw/BTtoMQTT/<MAC>` (another
gateway's, exact) both held, one button press would arrive twice and ring twice; so would a message under
zigbee2mqtt's `<base>/#` that a discovered entity also reads. `Needed` keeps what every dialect needs (its own
filters: two dialects needing one filter hold it once, and it goes when the last lets it go) and answers the
filters to hold: each needed filter unless another needed filter already covers it (every topic it matches, the
other matches too, at the same or a higher QoS). What a covered filter reads still reaches hubd, once, through
the filter that covers it; the dialects match topics themselves, so nothing after the bridge sees the difference.

When a covering filter comes, the bridge subscribes to it before it drops what it covers; when it goes, the
filters it covered are subscribed to again before it is dropped: a message may come twice in that moment, never
not at all. Adding or removing an exact topic costs a walk of the wildcard filters' trie; a wildcard filter
coming or going re-checks the topics held (its own kind are few: at most a few hundred).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hubd.dialects.wildcards import FilterIndex, is_wildcard


def covers(wide: str, narrow: str) -> bool:
    """Whether every topic `narrow` matches, `wide` matches too (a filter covers itself)."""
    w, n = wide.split("/"), narrow.split("/")
    if w[0] in ("+", "#") and n[0].startswith("$"):
        return False  # a filter opening with a wildcard matches no `$` topic (MQTT 4.7.2)
    for index, level in enumerate(w):
        if level == "#":
            return True
        if index >= len(n):
            return False
        if n[index] == "#":
            return False
        if level != "+" and level != n[index]:
            return False
    return len(n) == len(w)


class Needed:
    """The filters the dialects need, each by who needs it, and the ones to hold (`held`)."""

    def __init__(self) -> None:
        self._by_owner: dict[str, dict[str, int]] = {}
        self._qos: dict[str, int] = {}  # every needed filter, at the highest QoS any owner asks
        self._wild = FilterIndex()  # the needed wildcard filters
        self._held: dict[str, int] = {}  # filter → QoS: what the session should hold
        self._touched: set[str] | None = set()  # whose holding may have changed since `take_touched` (None: any)

    def reset(self, needs: Mapping[str, Iterable[tuple[str, int]]]) -> None:
        """Every owner's needs at once (a new connection)."""
        self._by_owner = {owner: {} for owner in needs}
        for owner, filters in needs.items():
            for topic, qos in filters:
                self._by_owner[owner][topic] = max(qos, self._by_owner[owner].get(topic, 0))
        self._rebuild()

    def add(self, owner: str, filters: Iterable[tuple[str, int]]) -> None:
        """`owner` needs these filters too."""
        mine = self._by_owner.setdefault(owner, {})
        wild = False
        for topic, qos in filters:
            mine[topic] = max(qos, mine.get(topic, 0))
            wild = wild or is_wildcard(topic)
            if not wild:
                self._need(topic)
        if wild:
            self._rebuild()

    def remove(self, owner: str, topics: Iterable[str]) -> None:
        """`owner` needs these filters no more."""
        mine = self._by_owner.get(owner, {})
        wild = False
        for topic in topics:
            if mine.pop(topic, None) is None:
                continue
            wild = wild or is_wildcard(topic)
            if not wild:
                self._unneed(topic)
        if wild:
            self._rebuild()

    def held(self) -> dict[str, int]:
        """The filters to hold, with their QoS."""
        return dict(self._held)

    def qos(self, topic: str) -> int | None:
        """The QoS `topic` is held at (None: it is not held)."""
        return self._held.get(topic)

    def take_touched(self) -> set[str] | None:
        """The filters whose holding may have changed since the last call (None: any of them)."""
        touched, self._touched = self._touched, set()
        return touched

    def _need(self, topic: str) -> None:
        """An exact topic: held unless a needed wildcard filter at a QoS as high matches it."""
        qos = max((m.get(topic, -1) for m in self._by_owner.values()), default=-1)
        if qos < 0:
            return
        if self._touched is not None:
            self._touched.add(topic)
        self._qos[topic] = qos
        if any(self._qos.get(f, -1) >= qos for f in self._wild.matches(topic)):
            self._held.pop(topic, None)
        else:
            self._held[topic] = qos

    def _unneed(self, topic: str) -> None:
        if any(topic in m for m in self._by_owner.values()):
            self._need(topic)  # another owner still needs it (at its QoS)
            return
        self._qos.pop(topic, None)
        self._held.pop(topic, None)
        if self._touched is not None:
            self._touched.add(topic)

    def _rebuild(self) -> None:
        self._qos = {}
        for mine in self._by_owner.values():
            for topic, qos in mine.items():
                self._qos[topic] = max(qos, self._qos.get(topic, 0))
        wild = sorted(t for t in self._qos if is_wildcard(t))
        self._wild = FilterIndex()
        for topic in wild:
            self._wild.add(topic)
        kept_wild = {topic for topic in wild if not any(  # of two that cover each other, the first in order is held
            other != topic and self._qos[other] >= self._qos[topic] and covers(other, topic)
            and (not covers(topic, other) or other < topic) for other in wild)}
        held: dict[str, int] = {}  # in the order the dialects need them (the claim order: retained messages come so)
        for topic, qos in self._qos.items():
            if topic in kept_wild or (not is_wildcard(topic)
                                      and not any(self._qos[f] >= qos for f in self._wild.matches(topic))):
                held[topic] = qos
        self._held = held
        self._touched = None
