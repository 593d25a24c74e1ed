"""The client library: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio), twins over HTTP
and gRPC with the same methods and keyword arguments.

Infer calls are this package's bytes on tritonclient's connections: ``codec`` builds each request
body (the HTTP JSON header and binary tensors, the gRPC ``ModelInferRequest``) and reads each answer,
and the connection objects of tritonclient's own clients (geventhttpclient, aiohttp, the gRPC
channel) carry them; every other call (health, metadata, statistics, shared-memory registration)
is tritonclient's public API. On top: validation before sending, one error hierarchy for both
protocols, bounded retries with backoff, optional shared-memory transport, and documented thread
safety. Modules: ``errors`` (classes and mapping), ``retry`` (policy), ``spec`` (model knowledge and
validation), ``core`` (shared state, the shape of an I/O step), ``ops`` (every operation written
once, sans-I/O), ``protocol`` (what each protocol sends and reads), ``transport``/``aio_transport``
(the blocking and asyncio sends), ``sync``/``aio`` (the clients: drivers of the operations), ``shm``
(shared memory), ``codec`` (the bytes of an infer call, shared with the load tests' users).
"""

from __future__ import annotations

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
