"""The blocking :class:`Client`: one API over ``tritonclient.http`` and ``tritonclient.grpc``.

Every call goes through :meth:`Client._call`, which maps failures to the
:mod:`tritonkit.client.errors` hierarchy and retries what :class:`RetryPolicy` allows within the
call's deadline. Requests are validated against the model's cached metadata/config before they
are sent (:mod:`tritonkit.client.spec`).

One ``Client`` may be shared by threads: gRPC calls share one channel; HTTP calls use one
connection per thread (see :mod:`tritonkit.client.transport`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from numpy.typing import NDArray
from tritonclient.grpc import model_config_pb2

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
from tritonkit.client.transport import GrpcTransport, HttpTransport
from tritonkit.errors import ClientError

__all__ = ["Client"]

T = TypeVar("T")


class Client:
    """A Triton client with validation, error mapping, retries and optional shared memory.

    ``url`` is ``host:port`` (a scheme is tolerated and dropped). ``timeout`` (seconds) is the default
    total budget of each call, retries included; ``None`` leaves calls bounded by the retry policy's
    deadline. ``retries`` is a :class:`RetryPolicy`, a number of retries, or ``None`` for none.
    ``headers`` go with every request (on gRPC also under Triton's restricted-protocol prefix).
    ``safe_cast`` lets inputs of a narrower dtype be cast when the cast is lossless (int32 -> int64,
    float16 -> float32, ...). ``shared_memory`` is ``"none"``, ``"system"`` (server on this host) or
    ``"cuda"`` (server on this host's GPU).

    Threads may share one client. gRPC calls share one channel (one HTTP/2 connection). The HTTP
    client of tritonclient is not thread-safe, so each calling thread gets its own tritonclient
    client and keep-alive connection on first use; all are closed by :meth:`close`. (Many
    short-lived threads therefore mean many connections until ``close``: prefer a worker pool.)
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
        transport_cls = HttpTransport if protocol == "http" else GrpcTransport
        self._transport: HttpTransport | GrpcTransport = transport_cls(core.url, headers, timeout)
        self._shm: Any = None
        if shared_memory != "none":
            from tritonkit.client.shm import ShmPool

            self._shm = ShmPool(shared_memory, self._transport)
        self._closed = False

    # -- the call loop -----------------------------------------------------------------------------
    def _call(
        self,
        where: Where,
        fn: Callable[..., T],
        timeout: float | None,
        *args: Any,
        failed: tuple[Exception, float] | None = None,
    ) -> T:
        """``fn(*args, per-attempt timeout)`` with error mapping and retries, within the call's deadline.

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
                    return fn(*args, remaining if per_attempt else None)
                except Exception as exc:  # mapped (or re-raised as is) by after_failure
                    error = exc
            pause = core.after_failure(error, where, attempt, started, deadline)
            error = None
            time.sleep(pause)

    # -- model knowledge ----------------------------------------------------------------------------
    def _spec(self, model: str, version: str, timeout: float | None) -> ModelSpec:
        spec = self._core.specs.get((model, version))
        if spec is None:
            t = self._transport

            def fetch(remaining: float | None) -> ModelSpec:
                return ModelSpec(t.metadata(model, version, remaining), t.config(model, version, remaining))

            spec = self._call(("metadata of", model, version), fetch, timeout)
            self._core.specs[(model, version)] = spec
        return spec

    def metadata(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> ModelMetadata:
        """The model's inputs, outputs, versions and platform (cached after the first call)."""
        return self._spec(model, self._core.version(version), timeout).metadata

    def config(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> model_config_pb2.ModelConfig:
        """The model's configuration as the server completed it (a ``model_config_pb2.ModelConfig``)."""
        return self._spec(model, self._core.version(version), timeout).config

    def statistics(
        self, model: str = "", version: int | str | None = None, timeout: float | None = None
    ) -> list[ModelStatistics]:
        """Cumulative statistics per model version (all models when ``model`` is empty)."""
        v = self._core.version(version)
        t = self._transport
        return self._call(("statistics of", model or "*", v), lambda r: t.statistics(model, v, r), timeout)

    def models(self, timeout: float | None = None) -> list[ModelInfo]:
        """The repository index: every model version the server knows, with its state."""
        return self._call(("repository index", None, ""), self._transport.index, timeout)

    # -- health --------------------------------------------------------------------------------------
    def is_live(self, timeout: float | None = None) -> bool:
        """True when the server answers live; False when it cannot be reached."""
        return self._probe(self._transport.is_live, "liveness", timeout)

    def is_ready(
        self, model: str | None = None, version: int | str | None = None, timeout: float | None = None
    ) -> bool:
        """True when the server (and ``model``, if given) is ready; False when unreachable or not ready."""
        if model is None:
            return self._probe(self._transport.is_ready, "readiness", timeout)
        v = self._core.version(version)
        t = self._transport
        return self._probe(lambda r: t.is_model_ready(model, v, r), f"readiness of `{model}`", timeout)

    def _probe(self, fn: Callable[[float | None], bool], what: str, timeout: float | None) -> bool:
        budget = timeout if timeout is not None else (self._core.timeout or 5.0)
        try:
            return bool(fn(budget))
        except Exception as exc:
            err = map_error(exc, self._core.describe((what, None, "")))
            if err is None:
                raise
            if isinstance(err, (ServerUnavailableError, ModelNotFoundError, InferenceTimeoutError)):
                return False
            raise err from None

    def wait_until_ready(
        self, timeout: float = 60.0, model: str | None = None, version: int | str | None = None
    ) -> None:
        """Poll readiness (of the server, and of ``model`` if given) until it holds or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            remaining = deadline - time.monotonic()
            if self.is_ready(model, version, timeout=max(min(remaining, 5.0), 0.05)):
                return
            if time.monotonic() + pause >= deadline:
                target = f"model `{model}`" if model else "server"
                raise ServerUnavailableError(
                    f"{target} at {self.protocol}://{self.url} not ready after {timeout:g} s "
                    "(expected the readiness endpoint to answer true)"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    # -- inference ------------------------------------------------------------------------------------
    def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: int | str | None = None,
        timeout: float | None = None,
    ) -> dict[str, NDArray[Any]]:
        """Validate ``inputs`` against the model, send one request, return ``{output name: array}``."""
        core = self._core
        v = "" if version is None else core.version(version)
        spec = core.specs.get((model, v)) or self._spec(model, v, timeout)
        prepared, _ = spec.prepare(inputs, core.safe_cast)
        requested = None if outputs is None else core.outputs(spec, v, outputs)  # None: every output
        names = spec.output_names if requested is None else requested
        if self._shm is not None:
            out: dict[str, NDArray[Any]] = self._shm.infer(
                self._call, core, model, v, spec, prepared, names, timeout
            )
            return out
        t = self._transport
        request = t.encode(model, v, prepared, requested)
        where = ("infer", model, v)
        try:
            if timeout is not None or core.timeout is not None or self._closed:
                return self._call(where, t.infer, timeout, request, names)
            # No deadline: the first attempt runs here, one call level shallower (the usual case,
            # and the benchmark's); a failure continues in _call's retry loop.
            started = time.monotonic()
            core.attempt(where, 1, started, None)
            try:
                return t.infer(request, names, None)
            except Exception as exc:  # mapped and maybe retried by _call
                failed = (exc, started)
            return self._call(where, t.infer, None, request, names, failed=failed)
        except (ModelNotFoundError, InvalidArgumentError, UnexpectedAnswerError):
            core.forget(model, v)  # the server disagrees with what we cached: re-read next time
            raise

    def infer_batch(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: int | str | None = None,
        timeout: float | None = None,
        batch_size: int | None = None,
    ) -> dict[str, NDArray[Any]]:
        """Like :meth:`infer`, but a batch above ``max_batch_size`` (or ``batch_size``) is sent as
        consecutive chunks and the outputs joined along the batch axis. ``timeout`` bounds all chunks."""
        core = self._core
        v = core.version(version)
        spec = self._spec(model, v, timeout)
        if spec.max_batch_size == 0:
            return self.infer(model, inputs, outputs, version, timeout)
        chunk = chunk_size(spec, batch_size)
        size = batch_length(spec, inputs)
        if size <= chunk:
            return self.infer(model, inputs, outputs, version, timeout)
        budget = core.timeout if timeout is None else timeout
        deadline = None if budget is None else time.monotonic() + budget
        parts: list[dict[str, NDArray[Any]]] = []
        for part in split_batch(inputs, size, chunk):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise InferenceTimeoutError(
                    f"{core.describe(('infer_batch', model, v))}: deadline of {budget:g} s passed after "
                    f"{len(parts)} of {-(-size // chunk)} chunks"
                )
            parts.append(self.infer(model, part, outputs, version, remaining))
        return join_batches(parts)

    # -- life cycle -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release shared-memory regions and connections; later calls raise :class:`ClientError`."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._shm is not None:
                self._shm.close()
        finally:
            self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r}, protocol={self.protocol!r})"
