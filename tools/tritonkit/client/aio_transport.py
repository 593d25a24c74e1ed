"""asyncio protocol adapters: the only code of :class:`AsyncClient` that touches ``tritonclient``.

Twins of :mod:`tritonkit.client.transport` with ``async`` methods, over ``tritonclient.http.aio``
(aiohttp, a pooled connector: many concurrent requests share keep-alive connections) and
``tritonclient.grpc.aio`` (one ``grpc.aio`` channel, calls multiplexed over HTTP/2). Both
underlying clients belong to the event loop they were created in, so they are created lazily on
first use inside the loop; one :class:`AsyncClient` serves any number of tasks of that loop.

``infer`` sends requests :mod:`tritonkit.client.codec` encoded on those clients' own connection
objects (the aiohttp session and the gRPC stub), as :mod:`tritonkit.client.transport` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
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
from tritonkit.client.transport import grpc_headers

__all__ = ["AsyncGrpcTransport", "AsyncHttpTransport"]


class AsyncHttpTransport:
    """KServe v2 over HTTP with aiohttp; per-call timeouts via ``asyncio.timeout``."""

    protocol = "http"
    InferInput = httpclient.InferInput

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, network_timeout: float | None = None
    ):
        self.url = url
        self._headers = dict(headers) if headers else None
        # infer's headers: the caller's, then the codec's (which must win), then the length per call
        self._infer_headers = {**(self._headers or {}), **HTTP_HEADERS}
        self._network_timeout = network_timeout or 60.0
        self._client_obj: httpaio.InferenceServerClient | None = None

    def _client(self) -> httpaio.InferenceServerClient:
        if self._client_obj is None:
            self._client_obj = httpaio.InferenceServerClient(self.url, conn_timeout=self._network_timeout)
        return self._client_obj

    def _h(self) -> dict[str, str] | None:
        return dict(self._headers) if self._headers else None

    async def is_live(self, timeout: float | None = None) -> bool:
        async with asyncio.timeout(timeout):
            return bool(await self._client().is_server_live(headers=self._h()))

    async def is_ready(self, timeout: float | None = None) -> bool:
        async with asyncio.timeout(timeout):
            return bool(await self._client().is_server_ready(headers=self._h()))

    async def is_model_ready(self, model: str, version: str, timeout: float | None = None) -> bool:
        async with asyncio.timeout(timeout):
            return bool(await self._client().is_model_ready(model, version, headers=self._h()))

    async def metadata(self, model: str, version: str, timeout: float | None = None) -> ModelMetadata:
        async with asyncio.timeout(timeout):
            data = await self._client().get_model_metadata(model, version, headers=self._h())
        return ModelMetadata.from_json(data)

    async def config(
        self, model: str, version: str, timeout: float | None = None
    ) -> model_config_pb2.ModelConfig:
        async with asyncio.timeout(timeout):
            data = await self._client().get_model_config(model, version, headers=self._h())
        return config_from_json(data)

    async def index(self, timeout: float | None = None) -> list[ModelInfo]:
        async with asyncio.timeout(timeout):
            rows = await self._client().get_model_repository_index(headers=self._h())
        return index_from_json(rows)

    async def statistics(
        self, model: str, version: str, timeout: float | None = None
    ) -> list[ModelStatistics]:
        async with asyncio.timeout(timeout):
            data = await self._client().get_inference_statistics(model, version, headers=self._h())
        return statistics_from_json(data)

    def make_output(self, name: str) -> httpclient.InferRequestedOutput:
        return httpclient.InferRequestedOutput(name, binary_data=True)

    #: The request of one infer call, built once and sent as is by every attempt.
    encode = staticmethod(http_request)

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

    async def infer_objects(
        self,
        model: str,
        version: str,
        inputs: Sequence[httpclient.InferInput],
        outputs: Sequence[httpclient.InferRequestedOutput] | None,
        timeout: float | None,
    ) -> Any:
        """``tritonclient``'s own infer with its input objects (the shared-memory path uses it)."""
        async with asyncio.timeout(timeout):
            return await self._client().infer(model, inputs, version, outputs, headers=self._h())

    async def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        await self._client().register_system_shared_memory(name, key, byte_size, headers=self._h())

    async def unregister_system_shm(self, name: str) -> None:
        await self._client().unregister_system_shared_memory(name, headers=self._h())

    async def register_cuda_shm(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        await self._client().register_cuda_shared_memory(
            name, raw_handle, device_id, byte_size, headers=self._h()
        )

    async def unregister_cuda_shm(self, name: str) -> None:
        await self._client().unregister_cuda_shared_memory(name, headers=self._h())

    async def close(self) -> None:
        if self._client_obj is not None:
            client, self._client_obj = self._client_obj, None
            await client.close()


class AsyncGrpcTransport:
    """KServe v2 over gRPC with ``grpc.aio``; per-call deadlines are gRPC deadlines."""

    protocol = "grpc"
    InferInput = grpcclient.InferInput

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, network_timeout: float | None = None
    ):
        self.url = url
        self._headers = grpc_headers(headers)
        self._metadata = tuple(self._headers.items()) if self._headers else None
        self._client_obj: grpcaio.InferenceServerClient | None = None
        self._stub: Any = None

    def _client(self) -> grpcaio.InferenceServerClient:
        if self._client_obj is None:
            self._client_obj = grpcaio.InferenceServerClient(self.url)
            self._stub = self._client_obj._client_stub
        return self._client_obj

    async def is_live(self, timeout: float | None = None) -> bool:
        return bool(await self._client().is_server_live(headers=self._headers, client_timeout=timeout))

    async def is_ready(self, timeout: float | None = None) -> bool:
        return bool(await self._client().is_server_ready(headers=self._headers, client_timeout=timeout))

    async def is_model_ready(self, model: str, version: str, timeout: float | None = None) -> bool:
        c = self._client()
        return bool(await c.is_model_ready(model, version, headers=self._headers, client_timeout=timeout))

    async def metadata(self, model: str, version: str, timeout: float | None = None) -> ModelMetadata:
        c = self._client()
        pb = await c.get_model_metadata(model, version, headers=self._headers, client_timeout=timeout)
        return metadata_from_proto(pb)

    async def config(
        self, model: str, version: str, timeout: float | None = None
    ) -> model_config_pb2.ModelConfig:
        c = self._client()
        pb = await c.get_model_config(model, version, headers=self._headers, client_timeout=timeout)
        return pb.config

    async def index(self, timeout: float | None = None) -> list[ModelInfo]:
        pb = await self._client().get_model_repository_index(headers=self._headers, client_timeout=timeout)
        return index_from_proto(pb)

    async def statistics(
        self, model: str, version: str, timeout: float | None = None
    ) -> list[ModelStatistics]:
        c = self._client()
        pb = await c.get_inference_statistics(model, version, headers=self._headers, client_timeout=timeout)
        return statistics_from_proto(pb)

    def make_output(self, name: str) -> grpcclient.InferRequestedOutput:
        return grpcclient.InferRequestedOutput(name)

    #: The request of one infer call, built once and sent as is by every attempt.
    encode = staticmethod(grpc_request)

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

    async def infer_objects(
        self,
        model: str,
        version: str,
        inputs: Sequence[grpcclient.InferInput],
        outputs: Sequence[grpcclient.InferRequestedOutput] | None,
        timeout: float | None,
    ) -> Any:
        """``tritonclient``'s own infer with its input objects (the shared-memory path uses it)."""
        return await self._client().infer(
            model, inputs, version, outputs, headers=self._headers, client_timeout=timeout
        )

    async def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        await self._client().register_system_shared_memory(name, key, byte_size, headers=self._headers)

    async def unregister_system_shm(self, name: str) -> None:
        await self._client().unregister_system_shared_memory(name, headers=self._headers)

    async def register_cuda_shm(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        await self._client().register_cuda_shared_memory(
            name, raw_handle, device_id, byte_size, headers=self._headers
        )

    async def unregister_cuda_shm(self, name: str) -> None:
        await self._client().unregister_cuda_shared_memory(name, headers=self._headers)

    async def close(self) -> None:
        if self._client_obj is not None:
            client, self._client_obj, self._stub = self._client_obj, None, None
            await client.close()
