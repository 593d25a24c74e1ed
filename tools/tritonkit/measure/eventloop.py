"""The one asyncio event loop of a process's load generation: a daemon thread that runs it, never closed.

Why one loop, kept for the life of the process: ``grpc.aio`` delivers every completion through one
process-wide completion queue whose poller hands each event to the loop its call was made on. A call
cancelled at the end of a load level completes a moment later; had that level's loop been closed
(``asyncio.run`` per level), the loop of the next level would deliver it into the closed one and
asyncio would print "Event loop is closed" tracebacks. Every level, every measurer and every client of a
``profile``, ``tune`` or ``compare`` run (and of each ``--workers`` process) therefore runs here, and
their channels are closed on this loop while it still runs. aiohttp sessions are bound to a loop too.

The loop's thread runs only what is submitted to it; load levels run one at a time, so the thread's CPU
time (:func:`time.thread_time` called on it) is the generator's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["host_loop", "run", "submit"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid = 0


def host_loop() -> asyncio.AbstractEventLoop:
    """This process's load loop, started on first use (again in a forked child, whose copy has no thread)."""
    global _loop, _pid
    with _lock:
        if _loop is None or _pid != os.getpid():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def body() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=body, name="tritonkit-load", daemon=True).start()
            ready.wait()
            _loop, _pid = loop, os.getpid()
        return _loop


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on the load loop; its future (cancelling the future cancels the task)."""
    return asyncio.run_coroutine_threadsafe(coro, host_loop())


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None, *, cancel: bool = True) -> T:
    """Run ``coro`` on the load loop and wait for its result up to ``timeout``; then it is cancelled,
    or with ``cancel=False`` left to run (a close that must still happen when the loop gets to it)."""
    future = submit(coro)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        if cancel:
            future.cancel()
        raise
