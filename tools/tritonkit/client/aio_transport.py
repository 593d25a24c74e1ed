"""asyncio protocol adapters: the only code of :class:`AsyncClient` that touches ``tritonclient``.

The asyncio side of :mod:`tritonkit.client.transport`: the same ``call``, ``infer`` and ``close``,
awaited, on what :mod:`tritonkit.client.protocol` says each protocol sends and reads, over
``tritonclient.http.aio`` (aiohttp, a pooled connector: many concurrent requests share keep-alive connections) and
``tritonclient.grpc.aio`` (one ``grpc.aio`` channel, calls multiplexed over HTTP/2). Both
underlying clients belong to the event loop they were created in, so they are created lazily on
first use inside the loop; one :class:`AsyncClient` serves any number of tasks of that loop.

``infer`` sends requests :mod:`tritonkit.client.codec` encoded on those clients' own connection
objects (the aiohttp session and the gRPC stub), as :mod:`tritonkit.client.transport` does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from tritonclient.grpc import service_pb2

from tritonkit.client.codec import HEADER_LENGTH, HttpRequest, grpc_error, grpc_result, http_answer
from tritonkit.client.protocol import GrpcProtocol, HttpProtocol

__all__ = ["AsyncGrpcTransport", "AsyncHttpTransport"]


class AsyncHttpTransport(HttpProtocol):
    """KServe v2 over HTTP with aiohttp; per-call timeouts via ``asyncio.timeout``."""

    _client_obj: httpaio.InferenceServerClient | None = None

    def _client(self) -> httpaio.InferenceServerClient:
        if self._client_obj is None:
            self._client_obj = httpaio.InferenceServerClient(self.url, conn_timeout=self._network_timeout)
        return self._client_obj

    async def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None) -> Any:
        """``tritonclient`` method ``method(*args)``, awaited within ``timeout``; its answer, read."""
        async with asyncio.timeout(timeout):
            answer = await getattr(self._client(), method)(*args, headers=self._h())
        return self._read(method, answer)

    async def infer(
        self, request: HttpRequest, names: tuple[str, ...], timeout: float | None
    ) -> dict[str, Any]:
        """Send an encoded request on the client's connection pool; ``{name: array}`` of the answer."""
        client = self._client()
        if timeout is None:
            return await self._post(client, request, names)
        async with asyncio.timeout(timeout):
            return await self._post(client, request, names)

    async def _post(
        self, client: httpaio.InferenceServerClient, request: HttpRequest, names: tuple[str, ...]
    ) -> dict[str, Any]:
        path, body, header_length = request
        headers = {**self._infer_headers, HEADER_LENGTH: str(header_length)}
        async with client._stub.post(client._url + path, data=body, headers=headers) as response:
            data = await response.read()
            return http_answer(response.status, data, response.headers.get, names)

    async def close(self) -> None:
        if self._client_obj is not None:
            client, self._client_obj = self._client_obj, None
            await client.close()


class AsyncGrpcTransport(GrpcProtocol):
    """KServe v2 over gRPC with ``grpc.aio``; per-call deadlines are gRPC deadlines."""

    _client_obj: grpcaio.InferenceServerClient | None = None
    _stub: Any = None

    def _client(self) -> grpcaio.InferenceServerClient:
        if self._client_obj is None:
            self._client_obj = grpcaio.InferenceServerClient(self.url)
            self._stub = self._client_obj._client_stub
        return self._client_obj

    async def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None) -> Any:
        """``tritonclient`` method ``method(*args)`` with a gRPC deadline, awaited; its answer, read."""
        answer = await getattr(self._client(), method)(*args, headers=self._headers, client_timeout=timeout)
        return self._read(method, answer)

    async def infer(
        self, request: service_pb2.ModelInferRequest, names: tuple[str, ...], timeout: float | None
    ) -> dict[str, Any]:
        """Send an encoded request on the client's channel; ``{name: array}`` of the answer."""
        stub = self._stub or self._client()._client_stub
        try:
            response = await stub.ModelInfer(request=request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as exc:
            raise grpc_error(exc) from None
        return grpc_result(response, names)

    async def close(self) -> None:
        if self._client_obj is not None:
            client, self._client_obj, self._stub = self._client_obj, None, None
            await client.close()
