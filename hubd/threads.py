"""Blocking calls that must neither block the event loop nor hold up the process's exit.

`asyncio.run` waits for the default executor's threads when it ends, so a blocking call (a TCP connect
to a host that never answers, a DNS lookup) left in `run_in_executor` would delay a stop by up to its
own timeout. `in_daemon_thread` runs the call in a daemon thread instead: the caller can give up on it
(cancellation), and the process exits without waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
V = TypeVar("V")


def in_daemon_thread(
    fn: Callable[[], T], *, name: str, on_late: Callable[[T], None] | None = None
) -> asyncio.Future[T]:
    """Start `fn()` in a new daemon thread; the returned future (of the running loop) gets its outcome.

    Cancelling the future does not stop the thread: `fn` must bound itself (a socket timeout). If `fn`
    returns after the future was cancelled, `on_late(result)` runs on the loop to release what it made.
    A caller cancelled after the result arrived but before it resumed (both in one loop iteration) finds
    the future done with that result and must release it itself: on_late does not run then.
    Each call is a thread: for rare calls (connects, lookups), not for every request.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver_result(result: T) -> None:
        if not future.done():
            future.set_result(result)
        elif on_late is not None:
            on_late(result)

    def deliver_error(error: BaseException) -> None:
        if not future.done():
            future.set_exception(error)

    def target() -> None:
        try:
            result = fn()
        except BaseException as err:  # handed to the loop, which raises it in the caller
            _call_soon(loop, deliver_error, err)
        else:
            _call_soon(loop, deliver_result, result)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[V], None], arg: V) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(callback, arg)
