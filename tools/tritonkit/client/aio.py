"""The asyncio :class:`AsyncClient`: the same methods and keyword arguments as :class:`Client`, awaited.

Runs the same operations as the blocking client (:mod:`tritonkit.client.ops`) with :func:`adrive`,
which awaits their I/O steps: only the waiting differs (``asyncio.sleep`` between attempts,
``asyncio.timeout`` per attempt). ``infer_batch`` sends its chunks concurrently. One
``AsyncClient`` serves every task of the event loop it is first used in (aiohttp sessions and
``grpc.aio`` channels are bound to a loop); use one per loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from numpy.typing import NDArray
from tritonclient.grpc import model_config_pb2

from tritonkit.client.aio_transport import AsyncGrpcTransport, AsyncHttpTransport
from tritonkit.client.core import Op, join_batches
from tritonkit.client.ops import ClientOps
from tritonkit.client.spec import ModelInfo, ModelMetadata, ModelStatistics

__all__ = ["AsyncClient", "adrive"]

T = TypeVar("T")


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


class AsyncClient(ClientOps):
    """asyncio twin of :class:`tritonkit.client.Client`; see it for the arguments.

    With ``shared_memory``, concurrent tasks each take their own region set from the client's pool.
    """

    _transports = (AsyncHttpTransport, AsyncGrpcTransport)

    @staticmethod
    def _sleep(seconds: float) -> Awaitable[None]:
        return asyncio.sleep(seconds)

    async def metadata(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> ModelMetadata:
        return await adrive(self._metadata(model, version, timeout))

    async def config(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> model_config_pb2.ModelConfig:
        return await adrive(self._config(model, version, timeout))

    async def statistics(
        self, model: str = "", version: int | str | None = None, timeout: float | None = None
    ) -> list[ModelStatistics]:
        return await adrive(self._statistics(model, version, timeout))

    async def models(self, timeout: float | None = None) -> list[ModelInfo]:
        return await adrive(self._models(timeout))

    async def is_live(self, timeout: float | None = None) -> bool:
        return await adrive(self._is_live(timeout))

    async def is_ready(
        self, model: str | None = None, version: int | str | None = None, timeout: float | None = None
    ) -> bool:
        return await adrive(self._is_ready(model, version, timeout))

    async def wait_until_ready(
        self, timeout: float = 60.0, model: str | None = None, version: int | str | None = None
    ) -> None:
        await adrive(self._wait_until_ready(timeout, model, version))

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: int | str | None = None,
        timeout: float | None = None,
    ) -> dict[str, NDArray[Any]]:
        return await adrive(self._infer(model, inputs, outputs, version, timeout))

    async def infer_batch(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: int | str | None = None,
        timeout: float | None = None,
        batch_size: int | None = None,
    ) -> dict[str, NDArray[Any]]:
        chunks = await adrive(self._chunks(model, inputs, version, timeout, batch_size))
        if chunks is None:
            return await self.infer(model, inputs, outputs, version, timeout)
        # Chunks run concurrently; every chunk shares the call's one deadline.
        # return_exceptions: wait for every chunk, so none is left running unobserved, then raise the first error.
        results = await asyncio.gather(
            *(self.infer(model, c, outputs, version, timeout) for c in chunks), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return join_batches([r for r in results if not isinstance(r, BaseException)])

    async def close(self) -> None:
        await adrive(self._close())

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
