"""The asyncio :class:`AsyncClient`: the same methods and keyword arguments as :class:`Client`, awaited.

Shares the core (validation, error mapping, retry policy, result conversion) with the blocking
client; only the waiting differs (``asyncio.sleep`` between attempts, ``asyncio.timeout`` per
attempt). ``infer_batch`` sends its chunks concurrently. One ``AsyncClient`` serves every task of
the event loop it is first used in (aiohttp sessions and ``grpc.aio`` channels are bound to a loop);
use one per loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from numpy.typing import NDArray
from tritonclient.grpc import model_config_pb2

from tritonkit.client.aio_transport import AsyncGrpcTransport, AsyncHttpTransport
from tritonkit.client.core import ClientCore, Where, batch_length, chunk_size, join_batches, split_batch
from tritonkit.client.errors import (
    InferenceTimeoutError,
    InvalidArgumentError,
    ModelNotFoundError,
    ServerUnavailableError,
    UnexpectedAnswerError,
    map_error,
)
from tritonkit.client.retry import RetryPolicy
from tritonkit.client.spec import ModelInfo, ModelMetadata, ModelSpec, ModelStatistics
from tritonkit.errors import ClientError

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient:
    """asyncio twin of :class:`tritonkit.client.Client`; see it for the arguments.

    With ``shared_memory``, concurrent tasks each take their own region set from the client's pool.
    """

    def __init__(
        self,
        url: str,
        protocol: str = "http",
        timeout: float | None = None,
        retries: int | RetryPolicy | None = RetryPolicy(),  # noqa: B008 - frozen dataclass, never mutated
        *,
        headers: Mapping[str, str] | None = None,
        safe_cast: bool = False,
        shared_memory: str = "none",
    ) -> None:
        self._core = core = ClientCore(url, protocol, timeout, retries, safe_cast)
        self.url = core.url
        self.protocol = core.protocol
        self.stats = core.stats
        cls = AsyncHttpTransport if protocol == "http" else AsyncGrpcTransport
        self._transport: AsyncHttpTransport | AsyncGrpcTransport = cls(core.url, headers, timeout)
        self._shm: Any = None
        if shared_memory != "none":
            from tritonkit.client.shm import ShmPool

            self._shm = ShmPool(shared_memory, self._transport)
        self._closed = False

    async def _call(
        self,
        where: Where,
        fn: Callable[..., Awaitable[T]],
        timeout: float | None,
        *args: Any,
        failed: tuple[Exception, float] | None = None,
    ) -> T:
        """``await fn(*args, per-attempt timeout)`` with error mapping and retries, within the call's deadline.

        ``failed`` is (the error, the call's start) of a first attempt the caller made inline
        (:meth:`infer` does, without a deadline): the loop goes on from there.
        """
        core = self._core
        error: Exception | None = None
        if failed is None:
            if self._closed:
                raise ClientError(f"{core.describe(where)}: the client is closed")
            started = time.monotonic()
            attempt = 0
        else:
            (error, started), attempt = failed, 1
        deadline, per_attempt = core.deadline(timeout, started)
        while True:
            if error is None:
                attempt += 1
                remaining = core.attempt(where, attempt, started, deadline)
                try:
                    return await fn(*args, remaining if per_attempt else None)
                except Exception as exc:  # mapped (or re-raised as is) by after_failure
                    error = exc
            pause = core.after_failure(error, where, attempt, started, deadline)
            error = None
            await asyncio.sleep(pause)

    async def _spec(self, model: str, version: str, timeout: float | None) -> ModelSpec:
        spec = self._core.specs.get((model, version))
        if spec is None:
            t = self._transport

            async def fetch(remaining: float | None) -> ModelSpec:
                return ModelSpec(
                    await t.metadata(model, version, remaining), await t.config(model, version, remaining)
                )

            spec = await self._call(("metadata of", model, version), fetch, timeout)
            self._core.specs[(model, version)] = spec
        return spec

    async def metadata(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> ModelMetadata:
        return (await self._spec(model, self._core.version(version), timeout)).metadata

    async def config(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> model_config_pb2.ModelConfig:
        return (await self._spec(model, self._core.version(version), timeout)).config

    async def statistics(
        self, model: str = "", version: int | str | None = None, timeout: float | None = None
    ) -> list[ModelStatistics]:
        v = self._core.version(version)
        t = self._transport
        return await self._call(
            ("statistics of", model or "*", v), lambda r: t.statistics(model, v, r), timeout
        )

    async def models(self, timeout: float | None = None) -> list[ModelInfo]:
        return await self._call(("repository index", None, ""), self._transport.index, timeout)

    async def is_live(self, timeout: float | None = None) -> bool:
        return await self._probe(self._transport.is_live, "liveness", timeout)

    async def is_ready(
        self, model: str | None = None, version: int | str | None = None, timeout: float | None = None
    ) -> bool:
        if model is None:
            return await self._probe(self._transport.is_ready, "readiness", timeout)
        v = self._core.version(version)
        t = self._transport
        return await self._probe(lambda r: t.is_model_ready(model, v, r), f"readiness of `{model}`", timeout)

    async def _probe(
        self, fn: Callable[[float | None], Awaitable[bool]], what: str, timeout: float | None
    ) -> bool:
        budget = timeout if timeout is not None else (self._core.timeout or 5.0)
        try:
            return bool(await fn(budget))
        except Exception as exc:
            err = map_error(exc, self._core.describe((what, None, "")))
            if err is None:
                raise
            if isinstance(err, (ServerUnavailableError, ModelNotFoundError, InferenceTimeoutError)):
                return False
            raise err from None

    async def wait_until_ready(
        self, timeout: float = 60.0, model: str | None = None, version: int | str | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            remaining = deadline - time.monotonic()
            if await self.is_ready(model, version, timeout=max(min(remaining, 5.0), 0.05)):
                return
            if time.monotonic() + pause >= deadline:
                target = f"model `{model}`" if model else "server"
                raise ServerUnavailableError(
                    f"{target} at {self.protocol}://{self.url} not ready after {timeout:g} s "
                    "(expected the readiness endpoint to answer true)"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: int | str | None = None,
        timeout: float | None = None,
    ) -> dict[str, NDArray[Any]]:
        core = self._core
        v = "" if version is None else core.version(version)
        spec = core.specs.get((model, v)) or await self._spec(model, v, timeout)
        prepared, _ = spec.prepare(inputs, core.safe_cast)
        requested = None if outputs is None else core.outputs(spec, v, outputs)  # None: every output
        names = spec.output_names if requested is None else requested
        if self._shm is not None:
            out: dict[str, NDArray[Any]] = await self._shm.ainfer(
                self._call, core, model, v, spec, prepared, names, timeout
            )
            return out
        t = self._transport
        request = t.encode(model, v, prepared, requested)
        where = ("infer", model, v)
        try:
            if timeout is not None or core.timeout is not None or self._closed:
                return await self._call(where, t.infer, timeout, request, names)
            # No deadline: the first attempt runs here, one call level shallower (the usual case,
            # and the benchmark's); a failure continues in _call's retry loop.
            started = time.monotonic()
            core.attempt(where, 1, started, None)
            try:
                return await t.infer(request, names, None)
            except Exception as exc:  # mapped and maybe retried by _call
                failed = (exc, started)
            return await self._call(where, t.infer, None, request, names, failed=failed)
        except (ModelNotFoundError, InvalidArgumentError, UnexpectedAnswerError):
            core.forget(model, v)  # the server disagrees with what we cached: re-read next time
            raise

    async def infer_batch(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: int | str | None = None,
        timeout: float | None = None,
        batch_size: int | None = None,
    ) -> dict[str, NDArray[Any]]:
        core = self._core
        v = core.version(version)
        spec = await self._spec(model, v, timeout)
        if spec.max_batch_size == 0:
            return await self.infer(model, inputs, outputs, version, timeout)
        chunk = chunk_size(spec, batch_size)
        size = batch_length(spec, inputs)
        if size <= chunk:
            return await self.infer(model, inputs, outputs, version, timeout)
        parts = split_batch(inputs, size, chunk)
        # Chunks run concurrently; every chunk shares the call's one deadline.
        # return_exceptions: wait for every chunk, so none is left running unobserved, then raise the first error.
        results = await asyncio.gather(
            *(self.infer(model, p, outputs, version, timeout) for p in parts), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return join_batches([r for r in results if not isinstance(r, BaseException)])

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._shm is not None:
                await self._shm.aclose()
        finally:
            await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({self.url!r}, protocol={self.protocol!r})"
