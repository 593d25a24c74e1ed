"""The asyncio :class:`AsyncClient`: the same methods and keyword arguments as :class:`Client`, awaited.

Runs the same operations as the blocking client (:mod:`tritonkit.client.ops`) with :func:`adrive`,
which awaits their I/O steps: only the waiting differs (``asyncio.sleep`` between attempts,
``asyncio.timeout`` per attempt). ``infer_batch`` sends its chunks concurrently. One
``AsyncClient`` serves every task of the event loop it is first used in (aiohttp sessions and
``grpc.aio`` channels are bound to a loop); use one per loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from tritonkit.client.aio_transport import AsyncGrpcTransport, AsyncHttpTransport
from tritonkit.client.core import Op
from tritonkit.client.ops import ClientOps, public

__all__ = ["AsyncClient", "adrive", "awaited"]

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")


async def adrive(op: Op[T]) -> T:
    """Run ``op`` to its end in the event loop: await each step it yields and resume it with the
    result, or throw in the error (cancellation too, so shared memory is released)."""
    failed = False
    value: Any = None
    while True:
        try:
            fn, args = op.throw(value) if failed else op.send(value)
        except StopIteration as done:
            result: T = done.value
            return result
        try:
            value, failed = await fn(*args), False
        except BaseException as exc:
            value, failed = exc, True


def awaited(op: Callable[Concatenate[S, P], Op[T]]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The coroutine method that runs operation ``op`` with :func:`adrive`."""

    async def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await adrive(op(self, *args, **kwargs))

    return public(method, op)


class AsyncClient(ClientOps):
    """asyncio twin of :class:`tritonkit.client.Client`; see it for the arguments.

    With ``shared_memory``, concurrent tasks each take their own region set from the client's pool.
    """

    _transports = (AsyncHttpTransport, AsyncGrpcTransport)

    metadata = awaited(ClientOps._metadata)
    config = awaited(ClientOps._config)
    statistics = awaited(ClientOps._statistics)
    models = awaited(ClientOps._models)
    is_live = awaited(ClientOps._is_live)
    is_ready = awaited(ClientOps._is_ready)
    wait_until_ready = awaited(ClientOps._wait_until_ready)
    infer = awaited(ClientOps._infer)
    infer_batch = awaited(ClientOps._infer_batch)
    close = awaited(ClientOps._close)

    @staticmethod
    def _sleep(seconds: float) -> Awaitable[None]:
        return asyncio.sleep(seconds)

    _concurrent = True

    async def _gather(self, *ops: Op[T]) -> list[T]:
        # return_exceptions: wait for every operation, so none is left running unobserved, then
        # raise the first error.
        results = await asyncio.gather(*(adrive(op) for op in ops), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return [r for r in results if not isinstance(r, BaseException)]

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
