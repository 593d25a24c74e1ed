"""What each protocol sends and how its answers are read, for the blocking and the asyncio transports alike.

A transport does every non-infer request the same way: call a ``tritonclient`` method by name
(``get_model_metadata``, ``register_system_shared_memory``, ...) with the client's headers, and read
the answer into the protocol-neutral types of :mod:`tritonkit.client.spec`. The method names and
signatures are the same on ``tritonclient.http``/``.http.aio`` and ``tritonclient.grpc``/``.grpc.aio``;
only the answers differ (JSON on HTTP, protobuf on gRPC). This module holds that knowledge once:
:class:`HttpProtocol` and :class:`GrpcProtocol` (headers, answer readers, request encoding, the
``InferInput``/``InferRequestedOutput`` classes the shared-memory path builds). The transports
(:mod:`tritonkit.client.transport`, :mod:`tritonkit.client.aio_transport`) subclass them and add only
the connection and the send (blocking or awaited).

Also the few facts the gRPC calls framed by hand share (the load test's ``wire`` transport,
:mod:`tritonkit.loadtest.transports.wire`, and the lone request's, :mod:`tritonkit.measure.lone_grpc`):
the ``ModelInfer`` path (:data:`GRPC_INFER_PATH`), ``grpc-timeout``'s value (:func:`grpc_timeout`) and
HTTP/2's error names (:func:`http2_error_name`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2

from tritonkit.client.codec import HTTP_HEADERS, grpc_request, http_request
from tritonkit.client.spec import (
    ModelMetadata,
    config_from_json,
    index_from_json,
    index_from_proto,
    metadata_from_proto,
    statistics_from_json,
    statistics_from_proto,
)

__all__ = [
    "CONFIG",
    "GRPC_INFER_PATH",
    "GRPC_RESTRICTED_PREFIX",
    "INDEX",
    "INFER_OBJECTS",
    "IS_LIVE",
    "IS_MODEL_READY",
    "IS_READY",
    "METADATA",
    "NETWORK_TIMEOUT_S",
    "STATISTICS",
    "GrpcProtocol",
    "HttpProtocol",
    "grpc_headers",
    "grpc_timeout",
    "http2_error_name",
]

#: The unary RPC of an inference, for the gRPC calls framed by hand (the load test's wire transport,
#: the lone request's).
GRPC_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
#: HTTP/2 error codes (§7)
_HTTP2_ERRORS = [
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
]
#: Triton reads a restricted gRPC protocol's key header with this prefix (server: grpc_server.cc).
GRPC_RESTRICTED_PREFIX = "triton-grpc-protocol-"
#: Connection and read timeout of the HTTP clients when the client has no timeout of its own.
NETWORK_TIMEOUT_S = 60.0

# The tritonclient methods the client calls (same name and positional arguments on every flavour).
IS_LIVE = "is_server_live"
IS_READY = "is_server_ready"
IS_MODEL_READY = "is_model_ready"
METADATA = "get_model_metadata"
CONFIG = "get_model_config"
INDEX = "get_model_repository_index"
STATISTICS = "get_inference_statistics"
#: tritonclient's own infer with ``InferInput`` objects (the shared-memory path).
INFER_OBJECTS = "infer"


def http2_error_name(code: int) -> str:
    """RFC 9113's name of an HTTP/2 error code."""
    return _HTTP2_ERRORS[code] if 0 <= code < len(_HTTP2_ERRORS) else f"error 0x{code:x}"


def grpc_timeout(seconds: float) -> str:
    """``grpc-timeout``'s value: at most 8 digits and a unit, rounded up, as fine as it fits."""
    for unit, scale in (("n", 1e9), ("u", 1e6), ("m", 1e3), ("S", 1.0), ("M", 1 / 60), ("H", 1 / 3600)):
        value = max(1, math.ceil(seconds * scale))
        if value < 100_000_000:
            return f"{value}{unit}"
    return "99999999H"


def grpc_headers(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """gRPC metadata for ``headers``: lower-case keys, plus the prefixed twin restricted APIs look for.

    Lets ``Client(headers=server.admin_headers)`` unlock restricted APIs on both protocols alike.
    """
    if not headers:
        return None
    out: dict[str, str] = {}
    for key, value in headers.items():
        k = key.lower()
        out[k] = value
        if not k.startswith(GRPC_RESTRICTED_PREFIX):
            out[GRPC_RESTRICTED_PREFIX + k] = value
    return out


def _config_of(pb: Any) -> model_config_pb2.ModelConfig:
    return pb.config


#: How each protocol reads the answer of a method: (HTTP reader of the JSON, gRPC reader of the
#: protobuf). A method not named here answers as tritonclient returns it.
_READERS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    IS_LIVE: (bool, bool),
    IS_READY: (bool, bool),
    IS_MODEL_READY: (bool, bool),
    METADATA: (ModelMetadata.from_json, metadata_from_proto),
    CONFIG: (config_from_json, _config_of),
    INDEX: (index_from_json, index_from_proto),
    STATISTICS: (statistics_from_json, statistics_from_proto),
}


class _Protocol:
    """What both protocols share: the server's address, the client's headers, reading answers."""

    #: The column of ``_READERS`` this protocol reads answers with.
    _column: ClassVar[int]

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, network_timeout: float | None = None
    ) -> None:
        self.url = url
        self._network_timeout = network_timeout or NETWORK_TIMEOUT_S
        self._headers = self._own_headers(headers)

    @staticmethod
    def _own_headers(headers: Mapping[str, str] | None) -> dict[str, str] | None:
        return dict(headers) if headers else None

    def _read(self, method: str, answer: Any) -> Any:
        readers = _READERS.get(method)
        return answer if readers is None else readers[self._column](answer)


class HttpProtocol(_Protocol):
    """KServe v2 over HTTP: the caller's headers, JSON answers, the binary-body infer request."""

    _column = 0
    #: The request of one infer call, built once and sent as is by every attempt.
    encode = staticmethod(http_request)
    InferInput = httpclient.InferInput

    @functools.cached_property
    def _infer_headers(self) -> dict[str, str]:
        # infer's headers, made once: the caller's, then the codec's (which must win); the length
        # goes per call
        return {**(self._headers or {}), **HTTP_HEADERS}

    def _h(self) -> dict[str, str] | None:
        # tritonclient adds keys to the dict it is given: hand it a fresh one every call.
        return dict(self._headers) if self._headers else None

    @staticmethod
    def make_output(name: str) -> httpclient.InferRequestedOutput:
        return httpclient.InferRequestedOutput(name, binary_data=True)


class GrpcProtocol(_Protocol):
    """KServe v2 over gRPC: headers as gRPC metadata, protobuf answers, the ``ModelInferRequest``."""

    _column = 1
    #: The request of one infer call, built once and sent as is by every attempt.
    encode = staticmethod(grpc_request)
    InferInput = grpcclient.InferInput
    _own_headers = staticmethod(grpc_headers)

    @functools.cached_property
    def _metadata(self) -> tuple[tuple[str, str], ...] | None:
        # infer's metadata, made once, sent on tritonclient's stub as is
        return tuple(self._headers.items()) if self._headers else None

    @staticmethod
    def make_output(name: str) -> grpcclient.InferRequestedOutput:
        return grpcclient.InferRequestedOutput(name)
