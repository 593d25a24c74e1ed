"""Driving the load generator's loop directly for one-request levels (tests/measure): a level per window
spec on one session, the windows each emitted, and whether the blocking client served them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from tritonkit.measure.loadgen import Level, RawWindow, Target, WindowSpec, _Loop, _Session


def lone_levels(
    target: Target, steps: Sequence[tuple[WindowSpec, int]]
) -> tuple[_Loop, list[RawWindow], bool]:
    """Run one level of one request in flight per (window spec, windows in all when it stops) on one
    session, then close it: (the loop, every window, whether the session's blocking client was used)."""
    loop, session = _Loop(target, time.process_time), _Session(target)
    windows: list[RawWindow] = []
    used: list[bool] = []

    async def levels() -> None:
        try:
            for spec, until in steps:
                await loop.run(
                    session, Level("concurrency", 1), spec, windows.append, lambda n=until: len(windows) >= n
                )
            used.append(session._blocking is not None)
        finally:
            await session.close()
        assert not session.opened  # closed with the session

    asyncio.run(levels())
    return loop, windows, used == [True]
