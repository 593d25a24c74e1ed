"""The blocking :class:`Client`: one API over ``tritonclient.http`` and ``tritonclient.grpc``.

Every method runs an operation of :mod:`tritonkit.client.ops` (validation against the model's cached
metadata/config, error mapping to :mod:`tritonkit.client.errors`, retries as :class:`RetryPolicy`
allows within the call's deadline) with :func:`drive`, which performs its I/O steps blocking.

One ``Client`` may be shared by threads: gRPC calls share one channel; HTTP calls use one
connection per thread (see :mod:`tritonkit.client.transport`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from tritonkit.client.core import Op
from tritonkit.client.ops import ClientOps, public
from tritonkit.client.transport import GrpcTransport, HttpTransport

__all__ = ["Client", "blocking", "drive"]

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")


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


def blocking(op: Callable[Concatenate[S, P], Op[T]]) -> Callable[Concatenate[S, P], T]:
    """The blocking method that runs operation ``op`` with :func:`drive`."""

    def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return drive(op(self, *args, **kwargs))

    return public(method, op)


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

    metadata = blocking(ClientOps._metadata)
    config = blocking(ClientOps._config)
    statistics = blocking(ClientOps._statistics)
    models = blocking(ClientOps._models)
    is_live = blocking(ClientOps._is_live)
    is_ready = blocking(ClientOps._is_ready)
    wait_until_ready = blocking(ClientOps._wait_until_ready)
    infer = blocking(ClientOps._infer)
    infer_batch = blocking(ClientOps._infer_batch)
    close = blocking(ClientOps._close)

    @staticmethod
    def _sleep(seconds: float) -> None:
        time.sleep(seconds)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
