"""The client library: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio), twins over
``tritonclient`` HTTP and gRPC with the same methods and keyword arguments.

Thin: tritonclient does the wire work. This package adds validation before sending, one error
hierarchy for both protocols, bounded retries with backoff, optional shared-memory transport, and
documented thread safety. Modules: ``errors`` (classes and mapping), ``retry`` (policy), ``spec``
(model knowledge and validation), ``core`` (shared state, the shape of an I/O step), ``ops``
(every operation written once, sans-I/O), ``protocol`` (what each protocol sends and reads),
``transport``/``aio_transport`` (the blocking and asyncio sends), ``sync``/``aio`` (the clients:
drivers of the operations), ``shm`` (shared memory), ``cli_args`` (arguments of ``tritonkit
infer``/``models``), ``codec`` (the bytes of an infer call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tritonkit.client.aio import AsyncClient
from tritonkit.client.core import ClientStats
from tritonkit.client.errors import (
    ClientError,
    InferenceTimeoutError,
    InternalServerError,
    InvalidArgumentError,
    InvalidInputError,
    ModelNotFoundError,
    QueueFullError,
    RestrictedApiError,
    ServerUnavailableError,
    UnexpectedAnswerError,
)
from tritonkit.client.retry import RetryPolicy
from tritonkit.client.spec import ModelInfo, ModelMetadata, ModelStatistics, TensorSpec
from tritonkit.client.sync import Client

if TYPE_CHECKING:
    from tritonkit.client.aio import AsyncClient

__all__ = [
    "AsyncClient",
    "Client",
    "ClientError",
    "ClientStats",
    "InferenceTimeoutError",
    "InternalServerError",
    "InvalidArgumentError",
    "InvalidInputError",
    "ModelInfo",
    "ModelMetadata",
    "ModelNotFoundError",
    "ModelStatistics",
    "QueueFullError",
    "RestrictedApiError",
    "RetryPolicy",
    "ServerUnavailableError",
    "TensorSpec",
    "UnexpectedAnswerError",
]


def __getattr__(name: str) -> Any:
    # AsyncClient pulls in aiohttp and grpc.aio; load them only when asked for.
    if name == "AsyncClient":
        return AsyncClient
    raise AttributeError(f"module 'tritonkit.client' has no attribute {name!r}")
