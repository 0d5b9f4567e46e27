"""Wildcard read topics (CONTRACT 6 and 10): which MQTT topic filters a device may ask hubd to read from, and the
index that finds the filters a topic matches without walking them all.

Theengs Gateway and OpenMQTTGateway announce a BLE device's state topic as `+/+/BTtoMQTT/<MAC>`: the gateway's
own prefix left open, so that any gateway's message is read. Home Assistant subscribes to that filter as given;
so does hubd, within these rules (`filter_problem`):
- MQTT's own syntax: `+` and `#` are whole levels, `#` only the last; no NUL;
- at least one literal level, and a `#` only after a literal level (`#`, `+/#`, `+/+/#`, `+`, `+/+` are refused:
  they read the whole bus, or a whole level of it);
- never a `$` topic (`$SYS/...`): the broker's, not a device's; a filter opening with a wildcard does not match
  one either (MQTT 4.7.2), and `topic_matches` here agrees;
- at most MAX_FILTERS distinct wildcard filters for a dialect's configs (a config that would add one more is
  refused); entities sharing a filter share its subscription and its index entry.

`FilterIndex` is a trie by level: finding the filters a topic matches walks the topic's levels once (with a `+`
branch and a `#` leaf beside each literal), whatever the number of filters. Exact topics stay in the dialect's
own dict; this index holds only the wildcard filters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_FILTERS = 256


def is_wildcard(topic: str) -> bool:
    """Whether `topic` is a filter with `+` or `#`."""
    return "+" in topic or "#" in topic


def filter_problem(value: str) -> str | None:
    """Why `value` is no topic or filter hubd reads from (None: it may). Plain topics pass when non-empty and
    free of NUL."""
    if not value or "\x00" in value:
        return "is empty or holds NUL"
    if not is_wildcard(value):
        return None
    levels = value.split("/")
    for index, level in enumerate(levels):
        if ("+" in level or "#" in level) and level not in ("+", "#"):
            return "has a wildcard inside a level; + and # must be whole levels"
        if level == "#" and index != len(levels) - 1:
            return "has # before its last level"
    if value.startswith("$"):
        return "is a broker topic ($...)"
    if all(level in ("+", "#") for level in levels):
        return "has no literal level: it would read every device's messages"
    if levels[-1] == "#" and all(level == "+" for level in levels[:-1]):
        return "has # after wildcards only: it would read every device's messages"
    return None


@dataclass(slots=True)
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    here: str | None = None  # the filter that ends at this node
    hash: str | None = None  # the filter that is this node's path followed by `#`


class FilterIndex:
    """The wildcard filters read, as a trie by level."""

    def __init__(self) -> None:
        self._root = _Node()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, pattern: str) -> bool:
        node = self._root
        levels = pattern.split("/")
        for level in levels[:-1]:
            found = node.children.get(level)
            if found is None:
                return False
            node = found
        if levels[-1] == "#":
            return node.hash == pattern
        last = node.children.get(levels[-1])
        return last is not None and last.here == pattern

    def add(self, pattern: str) -> None:
        """Index a filter (once: adding it again does nothing)."""
        if pattern in self:
            return
        node = self._root
        levels = pattern.split("/")
        for level in levels[:-1]:
            node = node.children.setdefault(level, _Node())
        if levels[-1] == "#":
            node.hash = pattern
        else:
            node.children.setdefault(levels[-1], _Node()).here = pattern
        self._count += 1

    def discard(self, pattern: str) -> None:
        """Forget a filter (and the branches only it used)."""
        if pattern not in self:
            return
        levels = pattern.split("/")
        path = [self._root]
        for level in levels[:-1]:
            path.append(path[-1].children[level])
        if levels[-1] == "#":
            path[-1].hash = None
        else:
            path.append(path[-1].children[levels[-1]])
            path[-1].here = None
        self._count -= 1
        names = levels[:-1] if levels[-1] == "#" else levels
        for depth in range(len(names), 0, -1):
            node = path[depth]
            if node.children or node.here is not None or node.hash is not None:
                break
            del path[depth - 1].children[names[depth - 1]]

    def matches(self, topic: str) -> list[str]:
        """The filters that match `topic` (none for a `$` topic at a leading wildcard, as MQTT says)."""
        if self._count == 0:
            return []
        levels = topic.split("/")
        out: list[str] = []
        frontier = [self._root]
        for depth, level in enumerate(levels):
            following: list[_Node] = []
            for node in frontier:
                if node.hash is not None and not (depth == 0 and topic.startswith("$")):
                    out.append(node.hash)
                exact = node.children.get(level)
                if exact is not None:
                    following.append(exact)
                if level != "+" and level != "#" and not (depth == 0 and level.startswith("$")):
                    wild = node.children.get("+")
                    if wild is not None:
                        following.append(wild)
            frontier = following
            if not frontier:
                return out
        for node in frontier:
            if node.here is not None:
                out.append(node.here)
            if node.hash is not None:
                out.append(node.hash)  # `a/#` matches `a` too (the parent level)
        return out
