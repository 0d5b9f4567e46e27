"""Waiting for a device to reach a state: who waits for which device, woken when its batch is committed (pure
asyncio). The registry wakes them; a directive's control waits on them (`DeviceRegistry.wait_for_state`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable


class Waiters:
    """Futures by device id, woken (all of a device's) once a commit changed that device."""

    def __init__(self) -> None:
        self._futures: dict[str, list[asyncio.Future[None]]] = {}

    async def wait(self, device_id: str, satisfied: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `satisfied()` holds, checked now and after each commit that changed the device; False on
        timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if satisfied():
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            future: asyncio.Future[None] = loop.create_future()
            self._futures.setdefault(device_id, []).append(future)
            try:
                async with asyncio.timeout(remaining):
                    await future
            except TimeoutError:
                return False
            finally:
                waiting = self._futures.get(device_id, [])
                if future in waiting:
                    waiting.remove(future)
                if not waiting:
                    self._futures.pop(device_id, None)

    def wake(self, device_ids: Iterable[str]) -> None:
        """The devices changed (committed): their waiters look again."""
        for device_id in device_ids:
            for future in self._futures.pop(device_id, []):
                if not future.done():
                    future.set_result(None)
