"""Every client operation, written once for :class:`Client` and :class:`AsyncClient` (sans-I/O).

An operation (:data:`~tritonkit.client.core.Op`) is a generator: it checks the arguments, prepares
the request and reads the answer, and where it needs I/O it yields a *step* ``(fn, args)``: a
transport method (``call``, ``infer``, ``close``) or the client's ``_sleep``. The client runs the
step and resumes the operation with its result, or throws in what it raised. The blocking
:class:`~tritonkit.client.Client` runs steps with ``fn(*args)`` (``sync.drive``); the asyncio
:class:`~tritonkit.client.AsyncClient` awaits them (``aio.adrive``). So the retry loop, deadlines,
the metadata cache, readiness probes, shared memory and closing exist once; the clients only name
their transports and sleep, and drive.

Cost on the hot path: one generator per ``infer`` and one resume per step (about 1 µs), no more.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from numpy.typing import NDArray
from tritonclient.grpc import model_config_pb2

from tritonkit.client.buckets import cut_outputs, pad_request
from tritonkit.client.codec import RequestError
from tritonkit.client.core import (
    ClientCore,
    Op,
    Transport,
    Where,
    batch_length,
    chunk_size,
    join_batches,
    send,
    split_batch,
)
from tritonkit.client.errors import (
    InferenceTimeoutError,
    InvalidArgumentError,
    InvalidInputError,
    ModelNotFoundError,
    ServerUnavailableError,
    UnexpectedAnswerError,
    map_error,
)
from tritonkit.client.protocol import CONFIG, INDEX, IS_LIVE, IS_MODEL_READY, IS_READY, METADATA, STATISTICS
from tritonkit.client.retry import RetryPolicy
from tritonkit.client.shm import ShmPool
from tritonkit.client.spec import ModelInfo, ModelMetadata, ModelSpec, ModelStatistics
from tritonkit.errors import ClientError

__all__ = ["ClientOps", "public"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: How a client makes its transport: (url, headers, network timeout) -> transport.
TransportFactory = Callable[[str, Mapping[str, str] | None, float | None], Transport]


def public(method: F, op: Callable[..., Any]) -> F:
    """``method``, the blocking or asyncio face of operation ``op``: named as ``op`` without its
    underscore, with its docstring and signature, returning what the operation returns (``Op[X]``
    shows as ``X``). So each public method's parameters are written once, for both clients."""
    functools.update_wrapper(method, op)
    method.__name__ = op.__name__.removeprefix("_")
    method.__qualname__ = op.__qualname__.replace("._", ".")
    signature = inspect.signature(op)
    returns = str(signature.return_annotation).removeprefix("Op[").removesuffix("]")
    method.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
    return method


def _cut(spec: ModelSpec, out: dict[str, NDArray[Any]], lengths: dict[str, int]) -> dict[str, NDArray[Any]]:
    """The answer of a request padded to its shape bucket, cut back to the request's own lengths."""
    assert spec.buckets is not None
    return cut_outputs(out, spec.buckets, lengths)


class ClientOps:
    """State and operations of a client; a subclass names its transports and its sleep, and drives.

    See :class:`tritonkit.client.Client` for the arguments.
    """

    #: Whether infer_batch sends its chunks concurrently (with the ``_gather`` step).
    _concurrent = False
    #: (HTTP, gRPC) transport classes.
    _transports: ClassVar[tuple[TransportFactory, TransportFactory]]

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
        http, grpc = self._transports
        self._transport = (http if protocol == "http" else grpc)(core.url, headers, timeout)
        self._shm: Any = None
        if shared_memory != "none":
            self._shm = ShmPool(shared_memory, self._transport, timeout)
        self._closed = False

    @staticmethod
    def _sleep(seconds: float) -> Any:
        """The pause between attempts, a step like any other: ``time.sleep`` or ``asyncio.sleep``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, protocol={self.protocol!r})"

    # -- the call loop -----------------------------------------------------------------------------
    def _call(
        self,
        where: Where,
        timeout: float | None,
        attempt: Callable[..., Op[T]],
        *args: Any,
        failed: tuple[Exception, float] | None = None,
    ) -> Op[T]:
        """``attempt(*args, per-attempt timeout)`` with error mapping and retries, within the call's deadline.

        ``failed`` is (the error, the call's start) of a first attempt the caller made inline
        (:meth:`_infer` does, without a deadline): the loop goes on from there.
        """
        core = self._core
        error: Exception | None = None
        if failed is None:
            if self._closed:
                raise ClientError(f"{core.describe(where)}: the client is closed")
            started = time.monotonic()
            number = 0
        else:
            (error, started), number = failed, 1
        deadline, per_attempt = core.deadline(timeout, started)
        while True:
            if error is None:
                number += 1
                remaining = core.attempt(where, number, started, deadline)
                try:
                    result: T = yield from attempt(*args, remaining if per_attempt else None)
                    return result
                except Exception as exc:  # mapped (or re-raised as is) by after_failure
                    error = exc
            pause = core.after_failure(error, where, number, started, deadline)
            error = None
            yield self._sleep, (pause,)

    # -- model knowledge ----------------------------------------------------------------------------
    def _fetch(self, model: str, version: str, remaining: float | None) -> Op[ModelSpec]:
        t = self._transport
        metadata: ModelMetadata = yield t.call, (METADATA, (model, version), remaining)
        config: model_config_pb2.ModelConfig = yield t.call, (CONFIG, (model, version), remaining)
        return ModelSpec(metadata, config)

    def _spec(self, model: str, version: str, timeout: float | None) -> Op[ModelSpec]:
        spec = self._core.specs.get((model, version))
        if spec is None:
            spec = yield from self._call(
                ("metadata of", model, version), timeout, self._fetch, model, version
            )
            self._core.specs[(model, version)] = spec
        return spec

    def _metadata(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> Op[ModelMetadata]:
        """The model's inputs, outputs, versions and platform (cached after the first call)."""
        return (yield from self._spec(model, self._core.version(version), timeout)).metadata

    def _config(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> Op[model_config_pb2.ModelConfig]:
        """The model's configuration as the server completed it (a ``model_config_pb2.ModelConfig``)."""
        return (yield from self._spec(model, self._core.version(version), timeout)).config

    def _statistics(
        self, model: str = "", version: int | str | None = None, timeout: float | None = None
    ) -> Op[list[ModelStatistics]]:
        """Cumulative statistics per model version (all models when ``model`` is empty)."""
        v = self._core.version(version)
        where = ("statistics of", model or "*", v)
        stats: list[ModelStatistics] = yield from self._call(
            where, timeout, send, self._transport.call, STATISTICS, (model, v)
        )
        return stats

    def _models(self, timeout: float | None = None) -> Op[list[ModelInfo]]:
        """The repository index: every model version the server knows, with its state."""
        where = ("repository index", None, "")
        index: list[ModelInfo] = yield from self._call(where, timeout, send, self._transport.call, INDEX, ())
        return index

    # -- health --------------------------------------------------------------------------------------
    def _is_live(self, timeout: float | None = None) -> Op[bool]:
        """True when the server answers live; False when it cannot be reached."""
        return (yield from self._probe(IS_LIVE, (), "liveness", timeout))

    def _is_ready(
        self, model: str | None = None, version: int | str | None = None, timeout: float | None = None
    ) -> Op[bool]:
        """True when the server (and ``model``, if given) is ready; False when unreachable or not ready."""
        if model is None:
            return (yield from self._probe(IS_READY, (), "readiness", timeout))
        v = self._core.version(version)
        return (yield from self._probe(IS_MODEL_READY, (model, v), f"readiness of `{model}`", timeout))

    def _probe(self, method: str, args: tuple[Any, ...], what: str, timeout: float | None) -> Op[bool]:
        budget = timeout if timeout is not None else (self._core.timeout or 5.0)
        try:
            answer = yield self._transport.call, (method, args, budget)
            return bool(answer)
        except Exception as exc:
            err = map_error(exc, self._core.describe((what, None, "")))
            if err is None:
                raise
            if isinstance(err, (ServerUnavailableError, ModelNotFoundError, InferenceTimeoutError)):
                return False
            raise err from None

    def _wait_until_ready(
        self, timeout: float = 60.0, model: str | None = None, version: int | str | None = None
    ) -> Op[None]:
        """Poll readiness (of the server, and of ``model`` if given) until it holds or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            remaining = deadline - time.monotonic()
            if (yield from self._is_ready(model, version, max(min(remaining, 5.0), 0.05))):
                return
            if time.monotonic() + pause >= deadline:
                target = f"model `{model}`" if model else "server"
                raise ServerUnavailableError(
                    f"{target} at {self.protocol}://{self.url} not ready after {timeout:g} s "
                    "(expected the readiness endpoint to answer true)"
                )
            yield self._sleep, (pause,)
            pause = min(pause * 2, 0.5)

    # -- inference ------------------------------------------------------------------------------------
    def _infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: int | str | None = None,
        timeout: float | None = None,
    ) -> Op[dict[str, NDArray[Any]]]:
        """Validate ``inputs`` against the model, send one request, return ``{output name: array}``.

        A model whose config carries ``shape_buckets`` refuses a request above its last edge before
        sending; with ``pad_at: client`` the inputs are padded up to their edge and the outputs that
        carry the axis cut back to the request's own length (:mod:`tritonkit.client.buckets`)."""
        core = self._core
        v = "" if version is None else core.version(version)
        spec = core.specs.get((model, v)) or (yield from self._spec(model, v, timeout))
        lengths = None
        if spec.buckets is not None and spec.buckets.pad_at == "client":  # TensorRT: padded to its edge
            inputs, lengths = pad_request(inputs, spec.buckets, f"model `{model}`")
        prepared, _ = spec.prepare(inputs, core.safe_cast)
        requested = None if outputs is None else core.outputs(spec, v, outputs)  # None: every output
        names = spec.output_names if requested is None else requested
        out: dict[str, NDArray[Any]]
        if self._shm is not None:
            out = yield from self._shm.infer(self._call, core, model, v, spec, prepared, names, timeout)
            return out if lengths is None else _cut(spec, out, lengths)
        t = self._transport
        where = ("infer", model, v)
        try:
            request = t.encode(model, v, prepared, requested)
        except RequestError as exc:  # a shape that declares more than the bytes Triton can take
            raise InvalidInputError(f"{core.describe(where)}: {exc}") from None
        try:
            if timeout is not None or core.timeout is not None or self._closed:
                out = yield from self._call(where, timeout, send, t.infer, request, names)
                return out if lengths is None else _cut(spec, out, lengths)
            # No deadline: the first attempt is this operation's own step (the usual case, and the
            # benchmark's); a failure continues in _call's retry loop.
            started = time.monotonic()
            core.attempt(where, 1, started, None)
            try:
                out = yield t.infer, (request, names, None)
                return out if lengths is None else _cut(spec, out, lengths)
            except Exception as exc:  # mapped and maybe retried by _call
                failed = (exc, started)
            out = yield from self._call(where, None, send, t.infer, request, names, failed=failed)
            return out if lengths is None else _cut(spec, out, lengths)
        except (ModelNotFoundError, InvalidArgumentError, UnexpectedAnswerError):
            core.forget(model, v)  # the server disagrees with what we cached: re-read next time
            raise

    def _infer_batch(
        self,
        model: str,
        inputs: Mapping[str, Sequence[Any] | NDArray[Any]],
        outputs: Sequence[str] | None = None,
        version: int | str | None = None,
        timeout: float | None = None,
        batch_size: int | None = None,
    ) -> Op[dict[str, NDArray[Any]]]:
        """Like ``infer``, but a batch above ``max_batch_size`` (or ``batch_size``) is sent as chunks and
        the outputs joined along the batch axis; ``timeout`` bounds all chunks. :class:`Client` sends
        the chunks one after the other, :class:`AsyncClient` concurrently."""
        spec = yield from self._spec(model, self._core.version(version), timeout)
        chunks = None
        if spec.max_batch_size > 0:
            chunk = chunk_size(spec, batch_size)
            size = batch_length(spec, inputs)
            if size > chunk:
                chunks = split_batch(inputs, size, chunk)
        out: dict[str, NDArray[Any]]
        if chunks is None:  # one request does
            out = yield from self._infer(model, inputs, outputs, version, timeout)
            return out
        if not self._concurrent:
            parts = yield from self._one_by_one(model, chunks, outputs, version, timeout)
            return join_batches(parts)
        # Every chunk at once, each within the call's timeout; see _gather for errors.
        ops = [self._infer(model, c, outputs, version, timeout) for c in chunks]
        out = join_batches((yield self._gather, tuple(ops)))
        return out

    def _one_by_one(
        self,
        model: str,
        chunks: list[dict[str, Any]],
        outputs: Sequence[str] | None,
        version: int | str | None,
        timeout: float | None,
    ) -> Op[list[dict[str, NDArray[Any]]]]:
        # Each chunk within what is left of the call's one deadline.
        core = self._core
        budget = core.timeout if timeout is None else timeout
        deadline = None if budget is None else time.monotonic() + budget
        parts: list[dict[str, NDArray[Any]]] = []
        for chunk in chunks:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                where = ("infer_batch", model, core.version(version))
                raise InferenceTimeoutError(
                    f"{core.describe(where)}: deadline of {budget:g} s passed after "
                    f"{len(parts)} of {len(chunks)} chunks"
                )
            parts.append((yield from self._infer(model, chunk, outputs, version, remaining)))
        return parts

    def _gather(self, *ops: Op[T]) -> Any:
        """The step that runs ``ops`` concurrently, answering their results in order (asyncio only)."""
        raise NotImplementedError

    # -- life cycle -------------------------------------------------------------------------------------
    def _close(self) -> Op[None]:
        """Release shared-memory regions and connections; later calls raise :class:`ClientError`."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._shm is not None:
                yield from self._shm.close()
        finally:
            yield self._transport.close, ()
