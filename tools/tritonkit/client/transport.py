"""Blocking protocol adapters: the only code of the sync client that touches ``tritonclient``.

:class:`HttpTransport` and :class:`GrpcTransport` have the same methods and return the same
protocol-neutral types (:mod:`tritonkit.client.spec`); errors pass through unmapped (the client
maps them, once, in its retry loop).

Thread safety, verified in tritonclient's code: ``tritonclient.http.InferenceServerClient`` is "not
thread safe" (its docstring) and its geventhttpclient sockets belong to the gevent hub of the
thread that created them, so :class:`HttpTransport` keeps **one tritonclient client per thread**
(``threading.local``); each keeps its keep-alive connection, so a thread reuses its connection
across calls. The gRPC client is documented thread-safe (except streaming) and a gRPC channel
multiplexes calls over one HTTP/2 connection, so :class:`GrpcTransport` shares one client.

``infer`` sends a request :mod:`tritonkit.client.codec` encoded, on the connection objects of
tritonclient's own clients (``_client_stub``: geventhttpclient's ``HTTPClient`` for HTTP, the gRPC
service stub on the client's channel). It is the one place that reaches past tritonclient's public
API, to skip the per-call ``InferInput``/``InferResult`` objects; the supported tritonclient range
is pinned in ``pyproject.toml`` and every infer test exercises it. The shared-memory path keeps
tritonclient's ``infer`` (``infer_objects``).

Per-call timeouts: gRPC takes ``client_timeout`` natively. The HTTP client only has a
per-connection ``network_timeout``, so a call runs under ``gevent.Timeout``; a timed-out call
leaves its connection mid-response, so that thread's client is thrown away and rebuilt.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import gevent
import grpc
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2, service_pb2

from tritonkit.client.codec import (
    HEADER_LENGTH,
    HTTP_HEADERS,
    HttpRequest,
    grpc_error,
    grpc_request,
    grpc_result,
    http_answer,
    http_request,
)
from tritonkit.client.spec import (
    ModelInfo,
    ModelMetadata,
    ModelStatistics,
    config_from_json,
    index_from_json,
    index_from_proto,
    metadata_from_proto,
    statistics_from_json,
    statistics_from_proto,
)

__all__ = ["GRPC_RESTRICTED_PREFIX", "GrpcTransport", "HttpTransport", "grpc_headers"]

#: Triton reads a restricted gRPC protocol's key header with this prefix (server: grpc_server.cc).
GRPC_RESTRICTED_PREFIX = "triton-grpc-protocol-"
_NETWORK_TIMEOUT_S = 60.0


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


class HttpTransport:
    """KServe v2 over HTTP/1.1 (``tritonclient.http``): one tritonclient client per thread."""

    protocol = "http"
    InferInput = httpclient.InferInput

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, network_timeout: float | None = None
    ):
        self.url = url
        self._headers = dict(headers) if headers else None
        # infer's headers: the caller's, then the codec's (which must win), then the length per call
        self._infer_headers = {**(self._headers or {}), **HTTP_HEADERS}
        self._network_timeout = network_timeout or _NETWORK_TIMEOUT_S
        self._local = threading.local()
        self._lock = threading.Lock()
        self._clients: list[httpclient.InferenceServerClient] = []
        self._closed = False

    # -- per-thread clients -----------------------------------------------------------------
    def _client(self) -> httpclient.InferenceServerClient:
        client: httpclient.InferenceServerClient | None = getattr(self._local, "client", None)
        if client is None:
            client = httpclient.InferenceServerClient(
                self.url,
                concurrency=1,
                connection_timeout=self._network_timeout,
                network_timeout=self._network_timeout,
            )
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def _discard(self) -> None:
        client = getattr(self._local, "client", None)
        if client is not None:
            self._local.client = None
            with self._lock:
                if client in self._clients:
                    self._clients.remove(client)
            client.close()

    def _h(self) -> dict[str, str] | None:
        # tritonclient adds keys to the dict it is given: hand it a fresh one every call.
        return dict(self._headers) if self._headers else None

    def _run(self, timeout: float | None, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if timeout is None:
            return fn(*args, **kwargs)
        timer = gevent.Timeout(max(timeout, 0.001))
        timer.start()
        try:
            return fn(*args, **kwargs)
        except gevent.Timeout as fired:
            if fired is not timer:
                raise
            # gevent.Timeout is a BaseException: turn it into the TimeoutError the client maps.
            self._discard()
            raise TimeoutError(f"no answer within {timeout:.3g} s") from None
        finally:
            timer.cancel()

    # -- API ------------------------------------------------------------------------------------
    def is_live(self, timeout: float | None = None) -> bool:
        return bool(self._run(timeout, self._client().is_server_live, headers=self._h()))

    def is_ready(self, timeout: float | None = None) -> bool:
        return bool(self._run(timeout, self._client().is_server_ready, headers=self._h()))

    def is_model_ready(self, model: str, version: str, timeout: float | None = None) -> bool:
        c = self._client()
        return bool(self._run(timeout, c.is_model_ready, model, version, headers=self._h()))

    def metadata(self, model: str, version: str, timeout: float | None = None) -> ModelMetadata:
        c = self._client()
        return ModelMetadata.from_json(
            self._run(timeout, c.get_model_metadata, model, version, headers=self._h())
        )

    def config(self, model: str, version: str, timeout: float | None = None) -> model_config_pb2.ModelConfig:
        c = self._client()
        return config_from_json(self._run(timeout, c.get_model_config, model, version, headers=self._h()))

    def index(self, timeout: float | None = None) -> list[ModelInfo]:
        return index_from_json(
            self._run(timeout, self._client().get_model_repository_index, headers=self._h())
        )

    def statistics(self, model: str, version: str, timeout: float | None = None) -> list[ModelStatistics]:
        c = self._client()
        return statistics_from_json(
            self._run(timeout, c.get_inference_statistics, model, version, headers=self._h())
        )

    def make_output(self, name: str) -> httpclient.InferRequestedOutput:
        return httpclient.InferRequestedOutput(name, binary_data=True)

    #: The request of one infer call, built once and sent as is by every attempt.
    encode = staticmethod(http_request)

    def infer(self, request: HttpRequest, names: tuple[str, ...], timeout: float | None) -> dict[str, Any]:
        """Send an encoded request on this thread's connection; ``{name: array}`` of the answer."""
        c = getattr(self._local, "client", None) or self._client()
        if timeout is None:
            return self._post(c._client_stub, request, names)
        result: dict[str, Any] = self._run(timeout, self._post, c._client_stub, request, names)
        return result

    def _post(self, stub: Any, request: HttpRequest, names: tuple[str, ...]) -> dict[str, Any]:
        path, body, header_length = request
        headers = {**self._infer_headers, HEADER_LENGTH: str(header_length)}
        response = stub.post(path, body=body, headers=headers)
        return http_answer(response.status_code, response.read(), response.get, names)

    def infer_objects(
        self,
        model: str,
        version: str,
        inputs: Sequence[httpclient.InferInput],
        outputs: Sequence[httpclient.InferRequestedOutput] | None,
        timeout: float | None,
    ) -> httpclient.InferResult:
        """``tritonclient``'s own infer with its input objects (the shared-memory path uses it)."""
        c = getattr(self._local, "client", None) or self._client()
        return self._run(timeout, c.infer, model, inputs, version, outputs, headers=self._h())

    # -- shared memory ----------------------------------------------------------------------
    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        self._client().register_system_shared_memory(name, key, byte_size, headers=self._h())

    def unregister_system_shm(self, name: str) -> None:
        self._client().unregister_system_shared_memory(name, headers=self._h())

    def register_cuda_shm(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        self._client().register_cuda_shared_memory(name, raw_handle, device_id, byte_size, headers=self._h())

    def unregister_cuda_shm(self, name: str) -> None:
        self._client().unregister_cuda_shared_memory(name, headers=self._h())

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
            self._closed = True
        for client in clients:
            # Clients made by other threads hold sockets of those threads' hubs: closing them
            # from here only closes file descriptors, which is all that is left to do.
            with contextlib.suppress(Exception):
                client.close()
        self._local = threading.local()


class GrpcTransport:
    """KServe v2 over gRPC (``tritonclient.grpc``): one thread-safe client and channel."""

    protocol = "grpc"
    InferInput = grpcclient.InferInput

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, network_timeout: float | None = None
    ):
        self.url = url
        self._headers = grpc_headers(headers)
        self._metadata = tuple(self._headers.items()) if self._headers else None
        self._client = grpcclient.InferenceServerClient(url)
        # tritonclient's stub of the channel: infer sends encoded requests on it (see codec).
        self._stub = self._client._client_stub

    def is_live(self, timeout: float | None = None) -> bool:
        return bool(self._client.is_server_live(headers=self._headers, client_timeout=timeout))

    def is_ready(self, timeout: float | None = None) -> bool:
        return bool(self._client.is_server_ready(headers=self._headers, client_timeout=timeout))

    def is_model_ready(self, model: str, version: str, timeout: float | None = None) -> bool:
        return bool(
            self._client.is_model_ready(model, version, headers=self._headers, client_timeout=timeout)
        )

    def metadata(self, model: str, version: str, timeout: float | None = None) -> ModelMetadata:
        pb = self._client.get_model_metadata(model, version, headers=self._headers, client_timeout=timeout)
        return metadata_from_proto(pb)

    def config(self, model: str, version: str, timeout: float | None = None) -> model_config_pb2.ModelConfig:
        pb = self._client.get_model_config(model, version, headers=self._headers, client_timeout=timeout)
        return pb.config

    def index(self, timeout: float | None = None) -> list[ModelInfo]:
        pb = self._client.get_model_repository_index(headers=self._headers, client_timeout=timeout)
        return index_from_proto(pb)

    def statistics(self, model: str, version: str, timeout: float | None = None) -> list[ModelStatistics]:
        pb = self._client.get_inference_statistics(
            model, version, headers=self._headers, client_timeout=timeout
        )
        return statistics_from_proto(pb)

    def make_output(self, name: str) -> grpcclient.InferRequestedOutput:
        return grpcclient.InferRequestedOutput(name)

    #: The request of one infer call, built once and sent as is by every attempt.
    encode = staticmethod(grpc_request)

    def infer(
        self, request: service_pb2.ModelInferRequest, names: tuple[str, ...], timeout: float | None
    ) -> dict[str, Any]:
        """Send an encoded request on the shared channel; ``{name: array}`` of the answer."""
        try:
            response = self._stub.ModelInfer(request=request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as exc:
            raise grpc_error(exc) from None
        return grpc_result(response, names)

    def infer_objects(
        self,
        model: str,
        version: str,
        inputs: Sequence[grpcclient.InferInput],
        outputs: Sequence[grpcclient.InferRequestedOutput] | None,
        timeout: float | None,
    ) -> grpcclient.InferResult:
        """``tritonclient``'s own infer with its input objects (the shared-memory path uses it)."""
        return self._client.infer(
            model, inputs, version, outputs, headers=self._headers, client_timeout=timeout
        )

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        self._client.register_system_shared_memory(name, key, byte_size, headers=self._headers)

    def unregister_system_shm(self, name: str) -> None:
        self._client.unregister_system_shared_memory(name, headers=self._headers)

    def register_cuda_shm(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        self._client.register_cuda_shared_memory(
            name, raw_handle, device_id, byte_size, headers=self._headers
        )

    def unregister_cuda_shm(self, name: str) -> None:
        self._client.unregister_cuda_shared_memory(name, headers=self._headers)

    def close(self) -> None:
        self._client.close()
