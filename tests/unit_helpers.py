"""Small helpers the unit tests share: a clock that stands still, and waiting for a condition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from hubd.dialects.base import Decoded
from hubd.dialects.native.dialect import NativeDialect

NOW = 1_700_000_000.0


@dataclass
class FakeClock:
    """A hubd.lifecycle.Clock: time() and monotonic() both return `now`, which a test moves by hand."""

    now: float = NOW

    def time(self) -> float:
        """Seconds since the epoch."""
        return self.now

    def monotonic(self) -> float:
        """The same `now`: the fake clock never goes back unless a test sets it back."""
        return self.now


async def eventually(check: Callable[[], bool | Awaitable[bool]], what: str, timeout_s: float = 10.0) -> None:
    """Wait until `check` (sync or async) is true; fail naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if await result if isinstance(result, Awaitable) else result:
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def device_message(kind: str, device_id: str, payload: bytes, received_at: float = 0.0, *, base: str = "hubd",
                   namespace: str = "Service") -> Decoded:
    """One message on hubd's own topics (`<base>/device/<id>/<kind>`) as the bridge hands it to the registry."""
    suffix = "command/result" if kind == "command_result" else kind
    topic = f"{base}/device/{device_id}/{suffix}"
    dialect = NativeDialect(base, namespace=namespace)
    assert dialect.claims(topic), topic
    return Decoded(topic, received_at, False, tuple(dialect.decode(topic, payload, received_at, False)))
