"""The one rule of where hubd may publish a device command (CONTRACT 6: a device's own command topics only).

`CommandTopics.refusal` says why a topic is not a device's to be commanded on, and is asked twice for every
command topic: by the dialect when the device's config arrives (Home Assistant discovery per entity, Tasmota per
device: a config refused is listed under problems and as not exported) and by the device-command port
(`hubd.dialects.commands`) before every publish, since what the topic is can change after the device was accepted
(a device discovered later reads its state from it). It asks, in this order:

- the fixed rules (`PublishRules`, from the config): wildcards, `$`, hubd's own base topic but a native device's
  set and command, the discovery prefixes, zigbee2mqtt's `bridge/`, another import's tree, Tasmota's group topic;
- every enabled dialect's `guards`: a topic any device's state, availability or attributes are read from
  (whichever dialect reads it, wildcard filters included), a Tasmota group topic as a device's FullTopic makes it;
- every other dialect's `owns_command_topic`: a topic where a device of another import takes commands.

Reads win over commands, whatever the order the devices came in: a topic that becomes a read topic refuses the
publishes of the device that commanded it. A command topic another device of the same dialect already holds is
that dialect's to refuse (Home Assistant's book, Tasmota's command prefixes): the device that holds it keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence

from hubd.dialects.base import Dialect, PublishRules


class CommandTopics:
    """The fixed rules and the dialects (bound once they are all built, `bind`), asked as one."""

    def __init__(self, rules: PublishRules, dialects: Sequence[Dialect] = ()) -> None:
        self.rules = rules
        self._dialects: tuple[Dialect, ...] = tuple(dialects)

    def bind(self, dialects: Sequence[Dialect]) -> None:
        """The enabled dialects, once built (a dialect asks about the others' devices, built after it too)."""
        self._dialects = tuple(dialects)

    def refusal(self, topic: str, device_id: str | None = None, dialect: str = "") -> str | None:
        """Why hubd must not publish a command of `dialect`'s device `device_id` on `topic`; None when it may."""
        why = self.rules.refusal(topic, device_id, dialect)
        if why is not None:
            return why
        for other in self._dialects:
            guarded = other.guards(topic)
            if guarded is not None:
                return f"{topic!r} is {guarded}"
        for other in self._dialects:
            if other.name != dialect and other.owns_command_topic(topic):
                return f"{topic!r} is a topic of the devices hubd imports natively ({other.name})"
        return None
