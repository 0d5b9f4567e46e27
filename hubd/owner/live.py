"""`LiveSelection`: what the dialects import, which buttons are doorbells and what the owner exposed that hubd keeps
back by rule, as the config and the owner say now.

The config's sections give each dialect its include/exclude globs and the config's `doorbells`; the owner's doorbell
overrides add one declaration per endpointId (its glob escaped: the id matches only itself). The endpointIds the
owner exposed go along (`Selection.exposed`). At start, when the owner declared or exposed any, and whenever the
owner's doorbells or exposure (the devices page) or the config (SIGHUP, `hubd.owner.reload`) change, the selection
goes to the dialects through the MQTT bridge, which hands the registry what that changes between two of its batches
(`hubd.mqtt.bridge.MqttBridge.reconfigure`). An owner's edit and a SIGHUP may come at once: one selection goes at a
time, each made when its turn comes, so the last one the dialects take holds the newest config and doorbells.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Protocol

from hubd.config.model import HubdConfig
from hubd.devices.overrides import Override
from hubd.dialects.base import Selection
from hubd.dialects.enabled import selections

_GLOB_CHARS = re.compile(r"([*?\[])")


class Reconfigure(Protocol):
    """Where a new selection goes (hubd.mqtt.bridge.MqttBridge)."""

    async def reconfigure(self, selections: Mapping[str, Selection]) -> None:
        """Hand the dialects their selections; return once what they change is committed."""


class OverrideSource(Protocol):
    """The owner's overrides (hubd.registry.DeviceRegistry)."""

    def overrides(self) -> dict[str, Override]:
        """Every override, by endpointId."""


def exact_glob(endpoint_id: str) -> str:
    """A glob that matches this endpointId only (`*`, `?` and `[` taken literally)."""
    return _GLOB_CHARS.sub(r"[\1]", endpoint_id)


class LiveSelection:
    """Keeps the dialects' selection current: the config's sections and doorbells, and the owner's doorbells."""

    name = "selection"

    def __init__(self, config: HubdConfig, bridge: Reconfigure, overrides: OverrideSource) -> None:
        self._config = config
        self._bridge = bridge
        self._overrides = overrides
        self._lock = asyncio.Lock()  # one selection to the dialects at a time (an owner's edit, a SIGHUP)

    @property
    def config(self) -> HubdConfig:
        """The config whose sections and doorbells are applied now."""
        return self._config

    async def start(self) -> None:
        """Before the first message is read: the owner's doorbells, if any, go to the dialects."""
        if self._owner_doorbells() or self._owner_exposed():
            await self.apply()

    async def run(self) -> None:
        """Nothing runs between start and stop: changes come through `apply`."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Nothing to release."""

    def keep(self, config: HubdConfig) -> None:
        """Take `config` as the running one, without handing the dialects anything (their part is unchanged)."""
        self._config = config

    async def apply(self, config: HubdConfig | None = None) -> None:
        """Hand the dialects their selection now (with `config`'s sections and doorbells, from now on, if given)."""
        if config is not None:
            self._config = config
        async with self._lock:  # made once it is this call's turn: never older than the one before it
            await self._bridge.reconfigure(selections(self._config, self._owner_doorbells(),
                                                                self._owner_exposed()))

    def _owner_doorbells(self) -> list[tuple[str, str]]:
        return [(exact_glob(endpoint_id), override.doorbell)
                for endpoint_id, override in sorted(self._overrides.overrides().items())
                if override.doorbell is not None]

    def _owner_exposed(self) -> frozenset[str]:
        """The endpointIds whose kept-back entities the owner exposed."""
        return frozenset(endpoint_id for endpoint_id, override in self._overrides.overrides().items()
                         if override.revealed)
