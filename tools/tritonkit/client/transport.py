"""Blocking protocol adapters: the only code of the sync client that touches ``tritonclient``.

:class:`HttpTransport` and :class:`GrpcTransport` add the connection and the blocking send to what
:mod:`tritonkit.client.protocol` says each protocol sends and reads: ``call`` (any ``tritonclient``
method by name, its answer read into the types of :mod:`tritonkit.client.spec`), ``infer`` (an
encoded request) and ``close``. Errors pass through unmapped (the client maps them, once, in its
retry loop).

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
tritonclient's own ``infer`` (through ``call``).

Per-call timeouts: gRPC takes ``client_timeout`` natively. The HTTP client only has a
per-connection ``network_timeout``, so a call runs under ``gevent.Timeout``; a timed-out call
leaves its connection mid-response, so that thread's client is thrown away and rebuilt.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any

import gevent
import grpc
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2

from tritonkit.client.codec import HEADER_LENGTH, HttpRequest, grpc_error, grpc_result, http_answer
from tritonkit.client.protocol import GrpcProtocol, HttpProtocol

__all__ = ["GrpcTransport", "HttpTransport"]


class HttpTransport(HttpProtocol):
    """KServe v2 over HTTP/1.1 (``tritonclient.http``): one tritonclient client per thread."""

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, network_timeout: float | None = None
    ) -> None:
        super().__init__(url, headers, network_timeout)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._clients: list[httpclient.InferenceServerClient] = []

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
    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None) -> Any:
        """``tritonclient`` method ``method(*args)`` on this thread's client; its answer, read."""
        answer = self._run(timeout, getattr(self._client(), method), *args, headers=self._h())
        return self._read(method, answer)

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

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            # Clients made by other threads hold sockets of those threads' hubs: closing them
            # from here only closes file descriptors, which is all that is left to do.
            with contextlib.suppress(Exception):
                client.close()
        self._local = threading.local()


class GrpcTransport(GrpcProtocol):
    """KServe v2 over gRPC (``tritonclient.grpc``): one thread-safe client and channel."""

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, network_timeout: float | None = None
    ) -> None:
        super().__init__(url, headers, network_timeout)
        self._client = grpcclient.InferenceServerClient(url)
        # tritonclient's stub of the channel: infer sends encoded requests on it (see codec).
        self._stub = self._client._client_stub

    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None) -> Any:
        """``tritonclient`` method ``method(*args)`` with a gRPC deadline; its answer, read."""
        answer = getattr(self._client, method)(*args, headers=self._headers, client_timeout=timeout)
        return self._read(method, answer)

    def infer(
        self, request: service_pb2.ModelInferRequest, names: tuple[str, ...], timeout: float | None
    ) -> dict[str, Any]:
        """Send an encoded request on the shared channel; ``{name: array}`` of the answer."""
        try:
            response = self._stub.ModelInfer(request=request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as exc:
            raise grpc_error(exc) from None
        return grpc_result(response, names)

    def close(self) -> None:
        self._client.close()
