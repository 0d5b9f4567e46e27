"""`ConfigReload`: SIGHUP (`systemctl reload hubd`) reads the config file again and applies what can change live.

What takes effect at once, without dropping the MQTT or HTTP connections: `log.level`, the `include`/`exclude` of
every dialect's section (its row's live keys in `hubd.dialects.enabled.KINDS`), and `doorbells` (through
`hubd.owner.live.LiveSelection`: a device newly excluded gets its DeleteReport, a newly included one its
AddOrUpdateReport). Any other key that changed is named in the log as needing a restart (never its value: it may be
a secret), and keeps its running value. A file that does not check (what `hubd check-config` refuses) changes
nothing: the running config stays, and the log says why, one line per problem. The supervisor calls `reload`
(`hubd.lifecycle.Reloadable`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from hubd.config.model import HubdConfig, load_config
from hubd.dialects.doorbells import DoorbellCheck
from hubd.dialects.enabled import KINDS
from hubd.driver.policy import config_problems
from hubd.errors import ConfigError
from hubd.owner.live import LiveSelection

log = logging.getLogger(__name__)

# The keys a reload applies (dotted, as in the file); every other one needs a restart.
LIVE_KEYS = frozenset({"log.level", "doorbells", *(key for kind in KINDS for key in kind.live_keys)})


class ConfigReload:
    """Applies the config file again on SIGHUP: the live keys now, the others named for a restart."""

    name = "reload"

    def __init__(self, path: Path | None, selection: LiveSelection, *, log_level_fixed: bool = False,
                 doorbells: DoorbellCheck | None = None) -> None:
        self._path = path
        self._selection = selection
        self._doorbells = doorbells  # names the doorbells entries that cannot ring again after each reload
        self._log_level_fixed = log_level_fixed  # `hubd run --log-level` wins over log.level, also on reload

    async def start(self) -> None:
        """Nothing to acquire."""

    async def run(self) -> None:
        """Nothing runs between start and stop: the supervisor calls `reload` on SIGHUP."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Nothing to release."""

    async def reload(self) -> None:
        """Read the file again; apply the live keys, name the others that changed; on a bad file change nothing."""
        if self._path is None:
            log.warning("SIGHUP: this hubd was started without a config file (hubd demo): nothing to read again")
            return
        await self._reload(self._path)  # one at a time: the supervisor awaits each reload before the next SIGHUP's

    async def _reload(self, path: Path) -> None:
        log.info("SIGHUP: reading %s again", path)
        try:
            new = await asyncio.to_thread(load_config, path)
            problems = config_problems(new)
        except ConfigError as err:
            problems = err.problems
        if problems:
            for problem in problems:
                log.error("reload: %s", problem)
            log.error("reload: %s does not check (%d problems above); hubd keeps running with the config it has",
                      path, len(problems))
            return
        running = self._selection.config
        before = _leaves(running)
        changed = sorted(key for key, value in _leaves(new).items() if before.get(key, _MISSING) != value)
        later = [key for key in changed if key not in LIVE_KEYS]
        live = [key for key in changed if key in LIVE_KEYS]
        if "log.level" in live:
            self._log_level(new.log.level)
        update: dict[str, Any] = {"log": running.log.model_copy(update={"level": new.log.level}),
                                  "doorbells": new.doorbells}
        for kind in KINDS:
            section = kind.live(running, new)
            if section is not None:
                update[kind.name] = section
        applied = running.model_copy(update=update)
        if any(key != "log.level" for key in live):
            await self._selection.apply(applied)
        else:
            self._selection.keep(applied)  # their part is unchanged: nothing to hand the dialects
        if self._doorbells is not None:
            self._doorbells.say_again()
        if later:
            log.warning("reload: %s changed, which takes a restart (systemctl restart hubd); until then hubd keeps "
                        "the values it started with", ", ".join(later))
        log.info("reload: done; %s", f"applied {', '.join(live)}" if live else "nothing that applies live changed")

    def _log_level(self, level: str) -> None:
        if self._log_level_fixed:
            log.warning("reload: log.level is now %s in the file, but hubd run --log-level keeps the level it was "
                        "given", level)
            return
        logging.getLogger().setLevel(level.upper())
        log.warning("reload: log level now %s", level)  # a warning: it shows whatever the new level


_MISSING = object()


def _leaves(config: HubdConfig) -> dict[str, Any]:
    """Every key of the config, dotted (`mqtt.host`), with its value; lists (accounts, doorbells) as one value."""
    out: dict[str, Any] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
        else:
            out[path] = value

    walk(config.model_dump(), "")
    return out
