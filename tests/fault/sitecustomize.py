"""Test-only fault injection: a hubd started with this directory on PYTHONPATH and HUBD_TEST_POISON=<text> dies
while it reads a device message whose payload holds <text>, as a real poison would (a decoder bug, a payload that
takes all the memory left). HUBD_TEST_POISON_BY says how: `kill` (default) SIGKILLs itself, as systemd's watchdog
or a crash would; `memory` allocates until the memory cgroup it runs in has the kernel's OOM killer kill it (past
512 MiB without a limit, it SIGKILLs itself instead). The bridge has noted the message as in flight by then: hubd
dies where the in-flight record (hubd/mqtt/inflight.py) must catch it. Nothing of hubd reads these variables."""

from __future__ import annotations

import os
import signal
from typing import Any

_POISON = os.environ.get("HUBD_TEST_POISON", "").encode()
_BY = os.environ.get("HUBD_TEST_POISON_BY", "kill")
_CHUNK = 8 * 1024 * 1024
_MAX_CHUNKS = 64


def _die() -> None:
    if _BY == "memory":
        hoard = [b"\x01" * _CHUNK for _ in range(_MAX_CHUNKS)]  # each chunk written: charged to the cgroup
        del hoard
    os.kill(os.getpid(), signal.SIGKILL)


def _install() -> None:
    from hubd.mqtt.bridge import MqttBridge

    decode_one = MqttBridge._decode_one

    def poisoned(self: MqttBridge, message: Any, now: float) -> Any:
        if _POISON in message.payload:
            _die()
        return decode_one(self, message, now)

    MqttBridge._decode_one = poisoned  # type: ignore[method-assign]


if _POISON:
    _install()
