"""The table of device dialects: one row per dialect owns every fact of it that hubd uses outside its folder.

A row (`DialectKind`) says how to build the dialect, its config section (a `hubd.config.model.DialectConfig`: whether
it is enabled, its include/exclude, which keys a reload applies live), the labels the status and devices pages
give its devices' source, the topic prefixes no device command may go under (`publish_rules`), what of its section
the fixed rules forbid (`config_problems`: `hubd check-config`, and `hubd run` refuses to start) and the block
`hubd init` writes for its section. Whoever needs one of these facts (the reload, the pages, `hubd init`) walks
the table, so a new dialect is its folder, its section's class and one row here, and nothing else names it.

A topic is decoded by the first dialect that claims it, so the order is the table's: hubd's own topics, then the
dialects that import a maker natively (zigbee2mqtt, Tasmota, Shelly), then Home Assistant discovery, which gets the
dialects before it and leaves to them the devices they import natively (`Dialect.imports_natively`): "left to
the native import" is each native dialect's own data, not a flag between dialects. `build_dialects` builds the
enabled ones, `selections` says what each imports and which buttons are doorbells, for a change at run time. Each
row imports its dialect only when enabled (Jinja2, say, is loaded only with Home Assistant discovery on).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hubd.config.model import DialectConfig, HubdConfig
from hubd.dialects.base import Dialect, PublishRules, Selection
from hubd.dialects.topics import CommandTopics
from hubd.errors import ConfigError


@dataclass(frozen=True, slots=True)
class DialectKind:
    """One row: everything hubd knows of a dialect outside its folder.

    `name` is its Route's dialect, its devices' `source` and its config section's key (`section`: False for
    hubd's own topics, which have no section); the section's model class is HubdConfig's for that key, and its
    live keys (what SIGHUP applies) are `DialectConfig.LIVE`. `label` names its devices' source on the status
    page, `short` on the devices page. `reserved` gives the topic prefixes hubd never publishes a device command
    under (`publish_rules`), enabled or not, and `trees` the topic trees it owns with the dialects that may publish
    there (zigbee2mqtt's base topic: its own devices and those it announces through discovery), and `groups` the
    topic levels that reach every device of its kind at once (Tasmota's `tasmotas`); `problems` says what of its
    section the fixed rules of the whole table forbid (Shelly's declared prefixes under another's topics), one
    `<key>: <why and the fix>` line each; `init` is the block `hubd init` writes for its section."""

    name: str
    label: str
    short: str
    # Given the dialects built before it, in claim order, and the one rule of where commands may go (bound to them
    # all once built).
    build: Callable[[HubdConfig, Sequence[Dialect], CommandTopics], Dialect]
    section: bool = True
    reserved: Callable[[HubdConfig], tuple[str, ...]] = lambda config: ()
    trees: Callable[[HubdConfig], tuple[tuple[str, tuple[str, ...]], ...]] = lambda config: ()
    groups: tuple[str, ...] = ()  # topic levels that address every device of its kind at once (never published to)
    problems: Callable[[HubdConfig, PublishRules], list[str]] = lambda config, rules: []
    init: str = ""

    @property
    def model(self) -> type[DialectConfig] | None:
        """Its config section's class (None: no section)."""
        if not self.section:
            return None
        model = HubdConfig.model_fields[self.name].annotation
        assert isinstance(model, type) and issubclass(model, DialectConfig), f"{self.name}: not a DialectConfig"
        return model

    @property
    def live_keys(self) -> tuple[str, ...]:
        """The dotted keys of its section that a reload applies at once (`zigbee2mqtt.include`, ...)."""
        model = self.model
        return tuple(f"{self.name}.{key}" for key in model.LIVE) if model is not None else ()

    def settings(self, config: HubdConfig) -> DialectConfig | None:
        """Its section of `config` (None: it has none)."""
        if not self.section:
            return None
        settings = getattr(config, self.name)
        assert isinstance(settings, DialectConfig)
        return settings

    def enabled(self, config: HubdConfig) -> bool:
        """Whether `config` enables it (hubd's own topics always are)."""
        settings = self.settings(config)
        return settings is None or settings.enabled

    def live(self, running: HubdConfig, new: HubdConfig) -> DialectConfig | None:
        """Its running section with the live keys of `new`'s (None: no section): what a reload applies."""
        settings, given = self.settings(running), self.settings(new)
        if settings is None or given is None:
            return None
        return settings.model_copy(update={key: getattr(given, key) for key in given.LIVE})


def _native(config: HubdConfig, before: Sequence[Dialect], topics: CommandTopics) -> Dialect:
    from hubd.dialects.native.dialect import NativeDialect

    return NativeDialect(config.mqtt.base_topic, namespace=config.platform.namespace)


def _zigbee2mqtt(config: HubdConfig, before: Sequence[Dialect], topics: CommandTopics) -> Dialect:
    from hubd.dialects.zigbee2mqtt.dialect import Zigbee2MqttDialect

    return Zigbee2MqttDialect(config.zigbee2mqtt, config.doorbells)


def _tasmota(config: HubdConfig, before: Sequence[Dialect], topics: CommandTopics) -> Dialect:
    from hubd.dialects.tasmota.dialect import TasmotaDialect

    return TasmotaDialect(config.tasmota, config.doorbells, topics=topics)


def _shelly(config: HubdConfig, before: Sequence[Dialect], topics: CommandTopics) -> Dialect:
    from hubd.dialects.shelly.dialect import ShellyDialect

    return ShellyDialect(config.shelly, config.doorbells, client_id=config.mqtt.client_id, topics=topics)


def _shelly_problems(config: HubdConfig, rules: PublishRules) -> list[str]:
    from hubd.dialects.shelly.dialect import prefix_problems

    return prefix_problems(config.shelly, rules)


def _homeassistant(config: HubdConfig, before: Sequence[Dialect], topics: CommandTopics) -> Dialect:
    from hubd.dialects.homeassistant.dialect import HomeAssistantDialect

    return HomeAssistantDialect(config.homeassistant, config.doorbells, natives=before, topics=topics)


KINDS: tuple[DialectKind, ...] = (
    DialectKind("native", "native (hubd topics)", "native", _native, section=False),
    DialectKind("zigbee2mqtt", "zigbee2mqtt", "zigbee2mqtt", _zigbee2mqtt,
                reserved=lambda config: (f"{config.zigbee2mqtt.base_topic}/bridge/",),
                trees=lambda config: ((f"{config.zigbee2mqtt.base_topic}/", ("zigbee2mqtt", "homeassistant")),),
                init="zigbee2mqtt:\n"
                     "  enabled: true                     # zigbee2mqtt's devices, as zigbee2mqtt describes them\n"),
    DialectKind("tasmota", "Tasmota", "Tasmota", _tasmota,
                reserved=lambda config: (f"{config.tasmota.discovery_prefix}/",), groups=("tasmotas",),
                init="tasmota:\n"
                     "  enabled: true                     # Tasmota devices, from Tasmota's own discovery\n"),
    DialectKind("shelly", "Shelly", "Shelly", _shelly,
                reserved=lambda config: (f"hubd-{config.mqtt.client_id}/",), problems=_shelly_problems,
                init="shelly:\n"
                     "  enabled: true                     # Shelly devices, Gen2+ over RPC and Gen1, from their own "
                     "MQTT\n"),
    DialectKind("homeassistant", "Home Assistant discovery", "Home Assistant", _homeassistant,
                reserved=lambda config: (f"{config.homeassistant.discovery_prefix}/",),
                init="homeassistant:\n"
                     "  enabled: true                     # devices announced with Home Assistant MQTT discovery "
                     "(ESPHome, ...)\n"),
)


def publish_rules(config: HubdConfig) -> PublishRules:
    """The fixed rules of where hubd may publish device commands: never under its own topics (but its devices' set
    and command), a prefix a dialect's row reserves (a discovery prefix, a zigbee2mqtt bridge's requests), `$` topics
    or Tasmota's group topic; under a tree a row owns only for the dialects it names (zigbee2mqtt's base topic: its
    own devices and the ones it announces through Home Assistant discovery)."""
    return PublishRules(config.mqtt.base_topic, tuple(prefix for kind in KINDS for prefix in kind.reserved(config)),
                        tuple(tree for kind in KINDS for tree in kind.trees(config)),
                        tuple(level for kind in KINDS for level in kind.groups))


def labels() -> dict[str, dict[str, str]]:
    """Each dialect's names for its devices' source, by dialect name: `label` (the status page), `short` (the
    devices page)."""
    return {kind.name: {"label": kind.label, "short": kind.short} for kind in KINDS}


def config_problems(config: HubdConfig) -> list[str]:
    """What the enabled dialects' sections ask that the table's fixed rules forbid, one line each (`hubd
    check-config`; `build_dialects` refuses to build with any)."""
    rules = publish_rules(config)
    return [line for kind in KINDS if kind.enabled(config) for line in kind.problems(config, rules)]


def build_dialects(config: HubdConfig) -> list[Dialect]:
    """The enabled dialects, in claim order (the first that claims a topic decodes it), bound to one rule of where
    their devices' commands may go (`hubd.dialects.topics`); ConfigError with `config_problems`, if any."""
    problems = config_problems(config)
    if problems:
        raise ConfigError(problems)
    topics = CommandTopics(publish_rules(config))
    built: list[Dialect] = []
    for kind in KINDS:
        if kind.enabled(config):
            built.append(kind.build(config, tuple(built), topics))
    topics.bind(built)
    return built


def selections(config: HubdConfig, doorbells: Sequence[tuple[str, str]] = (),
               exposed: frozenset[str] = frozenset()) -> dict[str, Selection]:
    """Each enabled dialect's selection now (`Dialect.reconfigure`): its section's include/exclude, the config's
    doorbells followed by `doorbells` (the owner's, `(glob, event)`), and the endpointIds whose kept-back entities
    the owner exposed, by dialect name."""
    declared = (*((d.device, d.event) for d in config.doorbells), *doorbells)
    out: dict[str, Selection] = {}
    for kind in KINDS:
        settings = kind.settings(config)
        if settings is not None and settings.enabled:
            out[kind.name] = Selection(tuple(settings.include), tuple(settings.exclude), declared, exposed)
    return out
