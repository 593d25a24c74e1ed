"""The blocking :class:`Client`: one API over ``tritonclient.http`` and ``tritonclient.grpc``.

Every method runs an operation of :mod:`tritonkit.client.ops` (validation against the model's cached
metadata/config, error mapping to :mod:`tritonkit.client.errors`, retries as :class:`RetryPolicy`
allows within the call's deadline) with :func:`drive`, which performs its I/O steps blocking.

One ``Client`` may be shared by threads: gRPC calls share one channel; HTTP calls use one
connection per thread (see :mod:`tritonkit.client.transport`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from numpy.typing import NDArray
from tritonclient.grpc import model_config_pb2

from tritonkit.client.core import Op, join_batches
from tritonkit.client.errors import InferenceTimeoutError
from tritonkit.client.ops import ClientOps
from tritonkit.client.spec import ModelInfo, ModelMetadata, ModelStatistics
from tritonkit.client.transport import GrpcTransport, HttpTransport

__all__ = ["Client", "drive"]

T = TypeVar("T")


def drive(op: Op[T]) -> T:
    """Run ``op`` to its end, blocking: call each step it yields and resume it with the result, or
    throw in the error (every error: a KeyboardInterrupt must still let shared memory be released)."""
    failed = False
    value: Any = None
    while True:
        try:
            fn, args = op.throw(value) if failed else op.send(value)
        except StopIteration as done:
            result: T = done.value
            return result
        try:
            value, failed = fn(*args), False
        except BaseException as exc:
            value, failed = exc, True


class Client(ClientOps):
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

    _transports = (HttpTransport, GrpcTransport)

    @staticmethod
    def _sleep(seconds: float) -> None:
        time.sleep(seconds)

    # -- model knowledge ----------------------------------------------------------------------------
    def metadata(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> ModelMetadata:
        """The model's inputs, outputs, versions and platform (cached after the first call)."""
        return drive(self._metadata(model, version, timeout))

    def config(
        self, model: str, version: int | str | None = None, timeout: float | None = None
    ) -> model_config_pb2.ModelConfig:
        """The model's configuration as the server completed it (a ``model_config_pb2.ModelConfig``)."""
        return drive(self._config(model, version, timeout))

    def statistics(
        self, model: str = "", version: int | str | None = None, timeout: float | None = None
    ) -> list[ModelStatistics]:
        """Cumulative statistics per model version (all models when ``model`` is empty)."""
        return drive(self._statistics(model, version, timeout))

    def models(self, timeout: float | None = None) -> list[ModelInfo]:
        """The repository index: every model version the server knows, with its state."""
        return drive(self._models(timeout))

    # -- health --------------------------------------------------------------------------------------
    def is_live(self, timeout: float | None = None) -> bool:
        """True when the server answers live; False when it cannot be reached."""
        return drive(self._is_live(timeout))

    def is_ready(
        self, model: str | None = None, version: int | str | None = None, timeout: float | None = None
    ) -> bool:
        """True when the server (and ``model``, if given) is ready; False when unreachable or not ready."""
        return drive(self._is_ready(model, version, timeout))

    def wait_until_ready(
        self, timeout: float = 60.0, model: str | None = None, version: int | str | None = None
    ) -> None:
        """Poll readiness (of the server, and of ``model`` if given) until it holds or ``timeout`` passes."""
        drive(self._wait_until_ready(timeout, model, version))

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
        return drive(self._infer(model, inputs, outputs, version, timeout))

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
        chunks = drive(self._chunks(model, inputs, version, timeout, batch_size))
        if chunks is None:
            return self.infer(model, inputs, outputs, version, timeout)
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
            parts.append(self.infer(model, chunk, outputs, version, remaining))
        return join_batches(parts)

    # -- life cycle -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release shared-memory regions and connections; later calls raise :class:`ClientError`."""
        drive(self._close())

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
