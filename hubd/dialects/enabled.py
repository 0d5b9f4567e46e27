"""The table of device dialects: which ones the config enables, built in claim order (`build_dialects`).

`selections` says what each imports and which buttons are doorbells, for a change at run time. A topic is decoded by
the first dialect that claims it, so the order is the table's: hubd's own topics, then the
dialects that import a maker natively (zigbee2mqtt, Tasmota), then Home Assistant discovery, which gets the
dialects before it and leaves to them the devices they import natively (`Dialect.imports_natively`): "left to
the native import" is each native dialect's own data, not a flag between dialects. `hubd.app` builds them (one
call), `hubd.owner.live` asks for their selection; a new dialect is one row here. Each row imports its dialect
only when enabled (Jinja2, say, is loaded only with Home Assistant discovery on).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hubd.config import HubdConfig
from hubd.dialects.base import Dialect, PublishRules, Selection
from hubd.dialects.topics import CommandTopics


@dataclass(frozen=True, slots=True)
class DialectKind:
    """One row: the dialect's name, whether the config enables it, and how to build it (given the dialects
    built before it, in claim order, and the one rule of where commands may go, bound to them all once built)."""

    name: str
    enabled: Callable[[HubdConfig], bool]
    build: Callable[[HubdConfig, Sequence[Dialect], CommandTopics], Dialect]
    # Its config section's include and exclude globs, for a selection made at run time (None: it selects nothing).
    globs: Callable[[HubdConfig], tuple[Sequence[str], Sequence[str]]] | None = None


def _native(config: HubdConfig, before: Sequence[Dialect], topics: CommandTopics) -> Dialect:
    from hubd.dialects.native.dialect import NativeDialect

    return NativeDialect(config.mqtt.base_topic, namespace=config.platform.namespace)


def _zigbee2mqtt(config: HubdConfig, before: Sequence[Dialect], topics: CommandTopics) -> Dialect:
    from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect

    return Zigbee2MqttDialect(config.zigbee2mqtt, config.doorbells)


def _tasmota(config: HubdConfig, before: Sequence[Dialect], topics: CommandTopics) -> Dialect:
    from hubd.dialects.tasmota.dialect import TasmotaDialect

    return TasmotaDialect(config.tasmota, config.doorbells, topics=topics)


def _homeassistant(config: HubdConfig, before: Sequence[Dialect], topics: CommandTopics) -> Dialect:
    from hubd.dialects.homeassistant.dialect import HomeAssistantDialect

    return HomeAssistantDialect(config.homeassistant, config.doorbells, natives=before, topics=topics)


KINDS: tuple[DialectKind, ...] = (
    DialectKind("native", lambda config: True, _native),
    DialectKind("zigbee2mqtt", lambda config: config.zigbee2mqtt.enabled, _zigbee2mqtt,
                lambda config: (config.zigbee2mqtt.include, config.zigbee2mqtt.exclude)),
    DialectKind("tasmota", lambda config: config.tasmota.enabled, _tasmota,
                lambda config: (config.tasmota.include, config.tasmota.exclude)),
    DialectKind("homeassistant", lambda config: config.homeassistant.enabled, _homeassistant,
                lambda config: (config.homeassistant.include, config.homeassistant.exclude)),
)


def publish_rules(config: HubdConfig) -> PublishRules:
    """The fixed rules of where hubd may publish device commands: never under its own topics (but its devices' set
    and command), a discovery prefix (Home Assistant's, Tasmota's), a zigbee2mqtt bridge's requests, `$` topics or
    Tasmota's group topic; under zigbee2mqtt's base topic only for its own devices and the ones it announces through
    Home Assistant discovery (with its import on, `Zigbee2MqttDialect.owns_command_topic` takes the whole tree)."""
    z2m = config.zigbee2mqtt
    return PublishRules(config.mqtt.base_topic,
                        (f"{config.homeassistant.discovery_prefix}/", f"{z2m.base_topic}/bridge/",
                         f"{config.tasmota.discovery_prefix}/"),
                        ((f"{z2m.base_topic}/", ("zigbee2mqtt", "homeassistant")),))


def build_dialects(config: HubdConfig) -> list[Dialect]:
    """The enabled dialects, in claim order (the first that claims a topic decodes it), bound to one rule of where
    their devices' commands may go (`hubd.dialects.topics`)."""
    topics = CommandTopics(publish_rules(config))
    built: list[Dialect] = []
    for kind in KINDS:
        if kind.enabled(config):
            built.append(kind.build(config, tuple(built), topics))
    topics.bind(built)
    return built


def selections(config: HubdConfig, doorbells: Sequence[tuple[str, str]] = ()) -> dict[str, Selection]:
    """Each enabled dialect's selection now (`Dialect.reconfigure`): its section's include/exclude, and the config's
    doorbells followed by `doorbells` (the owner's, `(glob, event)`), by dialect name."""
    declared = (*((d.device, d.event) for d in config.doorbells), *doorbells)
    out: dict[str, Selection] = {}
    for kind in KINDS:
        if kind.globs is not None and kind.enabled(config):
            include, exclude = kind.globs(config)
            out[kind.name] = Selection(tuple(include), tuple(exclude), declared)
    return out
