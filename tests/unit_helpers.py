"""Small helpers the unit tests share: a clock that stands still, and waiting for a condition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

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
