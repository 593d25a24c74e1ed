"""What the load generator sends: its target, the requests, validated and encoded once, and the
connections they are sent on.

Owns :class:`Target` (one model of one server, and how its requests are made), :class:`Session` (a
loop's clients and request pool, kept from level to level), :class:`Requests` (a target's pool of
payloads, each checked against the model (:meth:`~tritonkit.client.spec.ModelSpec.prepare`) and laid
out by the client's codec once, padded to its shape bucket first where the config says ``pad_at
client``, before any level: HTTP bodies, gRPC ``ModelInferRequest`` messages) and :class:`Lanes` (the
asyncio transports of one process, pools of :data:`~tritonkit.measure.capacity.HTTP_POOL` HTTP
connections opened as requests in flight need them). A request is then sent as it was encoded, with
no per-request validation, copy or encoding: through :class:`~tritonkit.client.AsyncClient` the
client prepared and encoded every call again (``tobytes`` of each tensor and the body's join, two
copies of a 786 KB image per request; on gRPC a copy into the message). Answers are read by the codec
into views of the answer's bytes (:func:`~tritonkit.client.codec.http_answer`,
:func:`~tritonkit.client.codec.grpc_result`): every output the model declares must be there with the
bytes its shape needs, and nothing is copied out. Shared memory keeps the client's own path (its
regions are the client's).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from numpy.typing import NDArray

from tritonkit.client import AsyncClient, Client
from tritonkit.client.aio_transport import AsyncGrpcTransport, AsyncHttpTransport
from tritonkit.client.buckets import pad_request
from tritonkit.client.codec import grpc_request, http_request
from tritonkit.client.ops import ClientOps
from tritonkit.client.spec import ModelSpec
from tritonkit.client.transport import GrpcTransport, HttpTransport
from tritonkit.errors import TritonKitError
from tritonkit.measure.capacity import HTTP_POOL
from tritonkit.measure.lone_grpc import LoneGrpcTransport
from tritonkit.measure.payloads import INPUT_DATA, make_payloads

__all__ = ["Lanes", "OpenLoop", "Requests", "Session", "Target", "blocking_transport"]

C = TypeVar("C", bound=ClientOps)


@dataclasses.dataclass(frozen=True)
class OpenLoop:
    """How an open-loop level judges its own pace: a send that starts more than ``late_us`` after its
    slot is late; one that finds ``max_in_flight`` requests outstanding is dropped."""

    late_us: float = 1000.0
    max_in_flight: int = 4096


@dataclasses.dataclass(frozen=True)
class Target:
    """What the generator sends: one model of one server, the same request every time."""

    url: str
    model: str
    protocol: str = "http"
    version: str = ""
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    shared_memory: str = "none"
    batch_size: int = 1
    #: size of every variable (-1) dimension other than the batch
    variable_dim: int = 16
    timeout_s: float = 30.0
    open_loop: OpenLoop = OpenLoop()
    seed: int = 0
    #: a perf_analyzer ``--input-data`` JSON file: its entries are the requests (default: generated data)
    input_data: str | None = None
    #: one request in flight is sent with blocking calls (:meth:`_Loop._single`); False: on the asyncio
    #: path like any other level (benchmarks compare the two; worker processes get it with the target)
    blocking_single: bool = True
    #: a lone gRPC request goes on :class:`~tritonkit.measure.lone_grpc.LoneGrpcTransport`'s socket; False:
    #: on tritonclient's grpcio stub (benchmarks compare the two)
    lone_grpc_socket: bool = True


@dataclasses.dataclass(frozen=True)
class Requests:
    """A target's request pool: the inputs (the shared-memory path sends these through the client),
    each request encoded once for ``protocol``, the outputs every answer must carry, and the tensor
    bytes of the largest request (what the generator's sizing reads)."""

    inputs: list[dict[str, NDArray[Any]]]
    encoded: list[Any]
    names: tuple[str, ...]
    nbytes: int

    @classmethod
    def encode(
        cls, spec: ModelSpec, pool: Sequence[Mapping[str, Any]], protocol: str, model: str, version: str
    ) -> Requests:
        encode = grpc_request if protocol == "grpc" else http_request
        inputs, encoded, sizes = [], [], []
        pad = spec.buckets if spec.buckets is not None and spec.buckets.pad_at == "client" else None
        for given in pool:
            # a TensorRT version's shape buckets: padded to its edge, as the client does
            payload = pad_request(given, pad, f"model `{model}`")[0] if pad is not None else given
            prepared, _ = spec.prepare(payload)
            inputs.append({name: array for name, _, array in prepared})
            encoded.append(encode(model, version, prepared, None))  # None: every output, binary
            sizes.append(sum(int(array.nbytes) for _, _, array in prepared))
        return cls(inputs, encoded, spec.output_names, max(sizes, default=0))


class Lanes:
    """One process's asyncio transports: lane ``i`` is the pool of requests in flight ``100 i`` to
    ``100 i + 99`` (HTTP; gRPC has one channel), made on first use inside the load loop."""

    def __init__(self, url: str, protocol: str, headers: Mapping[str, str] | None, timeout_s: float) -> None:
        self.url, self.protocol, self.headers, self.timeout_s = url, protocol, headers, timeout_s
        self._transports: list[AsyncHttpTransport | AsyncGrpcTransport] = []

    def lane(self, in_flight: int) -> AsyncHttpTransport | AsyncGrpcTransport:
        """The transport for a request sent with ``in_flight`` others outstanding."""
        index = 0 if self.protocol == "grpc" else in_flight // HTTP_POOL
        while len(self._transports) <= index:
            kind = AsyncGrpcTransport if self.protocol == "grpc" else AsyncHttpTransport
            self._transports.append(kind(self.url, self.headers, self.timeout_s))
        return self._transports[index]

    @property
    def pools(self) -> int:
        return len(self._transports)

    async def close(self) -> None:
        transports, self._transports = self._transports, []
        await asyncio.gather(*(t.close() for t in transports), return_exceptions=True)


#: a lone request's blocking transport (one connection, this thread's)
Blocking = HttpTransport | GrpcTransport | LoneGrpcTransport


def blocking_transport(
    url: str, protocol: str, headers: Mapping[str, str] | None, timeout_s: float, socket: bool = True
) -> Blocking:
    """The blocking transport of a lone request (one connection, this thread's): on gRPC
    :class:`~tritonkit.measure.lone_grpc.LoneGrpcTransport`, HTTP/2 spoken on a socket (grpcio's Python
    call path cost a lone request about 0.2 ms more than perf_analyzer's C++ client:
    docs/benchmarks-lone-request.md), or with ``socket=False`` tritonclient's grpcio stub; on HTTP
    tritonclient's keep-alive connection."""
    if protocol != "grpc":
        return HttpTransport(url, headers, timeout_s)
    return (LoneGrpcTransport if socket else GrpcTransport)(url, headers, timeout_s)


class Session:
    """One generator's clients and request pool, kept from level to level on the load loop.

    Made on first use (inside the loop: grpc.aio channels and aiohttp sessions bind to it), closed by
    :meth:`close` on the same loop, which keeps running afterwards (:mod:`tritonkit.measure.eventloop`).
    The :class:`~tritonkit.client.AsyncClient` reads the model and, with shared memory, sends; without,
    requests go as encoded once (:class:`~tritonkit.measure.sender.Requests`) on the :class:`Lanes`.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self._client: AsyncClient | None = None
        self._blocking: Client | Blocking | None = None
        self._requests: Requests | None = None
        #: the loop's transports (None: shared memory, sent through the client)
        self.lanes: Lanes | None = None

    def _new(self, kind: type[C]) -> C:
        """A client of ``kind`` (both are made alike) on the target's server, protocol, headers and transport."""
        t = self.target
        return kind(t.url, t.protocol, timeout=t.timeout_s, retries=None, headers=dict(t.headers) or None,
                    shared_memory=t.shared_memory)  # fmt: skip

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            raise TritonKitError("the load generator's session is not ready")
        return self._client

    @property
    def requests(self) -> Requests:
        if self._requests is None:
            raise TritonKitError("the load generator's session is not ready")
        return self._requests

    async def ready(self) -> tuple[AsyncClient, list[dict[str, Any]]]:
        t = self.target
        if self._client is None:
            self._client = self._new(AsyncClient)
        if self._requests is None:
            version = t.version or None
            spec = ModelSpec(
                await self._client.metadata(t.model, version), await self._client.config(t.model, version)
            )
            source = f"{INPUT_DATA}{t.input_data}" if t.input_data else "auto"
            pool = make_payloads(
                spec, {t.batch_size: 1.0}, seed=t.seed, source=source, variable_dim=t.variable_dim
            )
            requests = Requests.encode(
                spec, [p.inputs for p in pool.payloads], t.protocol, t.model, t.version
            )
            if t.shared_memory == "none":
                self.lanes = Lanes(self._client.url, t.protocol, dict(t.headers) or None, t.timeout_s)
            self._requests = requests
            with contextlib.suppress(Exception):  # warm the connection; a failure shows in the windows
                if self.lanes is not None:
                    await self.lanes.lane(0).infer(requests.encoded[0], requests.names, t.timeout_s)
                else:
                    await self._client.infer(
                        t.model, requests.inputs[0], version=version, timeout=t.timeout_s
                    )
        return self._client, self._requests.inputs

    def blocking(self, inputs: Sequence[Mapping[str, Any]]) -> Client | Blocking:
        """The blocking sender of one request in flight (a :class:`~tritonkit.client.Client` with shared
        memory, else the protocol's blocking transport), warmed as the session's is: its connection (and
        shared-memory regions) made before any timing."""
        t = self.target
        if self._blocking is None:
            with contextlib.suppress(Exception):  # a failure shows in the windows
                if t.shared_memory == "none":
                    requests = self.requests
                    url, headers = self.client.url, dict(t.headers) or None
                    self._blocking = blocking_transport(
                        url, t.protocol, headers, t.timeout_s, t.lone_grpc_socket
                    )
                    self._blocking.infer(requests.encoded[0], requests.names, t.timeout_s)
                else:
                    self._blocking = self._new(Client)
                    self._blocking.infer(t.model, inputs[0], version=t.version or None, timeout=t.timeout_s)
        if self._blocking is None:
            raise TritonKitError(f"cannot open a blocking {t.protocol} connection to {t.url}")
        return self._blocking

    def blocking_send(self) -> Callable[[int], object]:
        """Send pool entry ``i`` and wait for its answer (on :meth:`blocking`'s sender)."""
        t, requests, sender = self.target, self.requests, self.blocking(self.requests.inputs)
        if isinstance(sender, Client):
            client, version = sender, t.version or None
            return lambda i: client.infer(t.model, requests.inputs[i], version=version, timeout=t.timeout_s)
        encoded, names, timeout, infer = requests.encoded, requests.names, t.timeout_s, sender.infer
        return lambda i: infer(encoded[i], names, timeout)

    @property
    def opened(self) -> bool:
        return self._client is not None or self._blocking is not None

    async def close(self) -> None:
        """Close every client and transport, concurrently. A close can wait on a server that stopped
        answering (each shared-memory region's unregister up to the client's timeout): the blocking
        client closes on a daemon thread, off the load loop, and all run to their end under a shield
        when the caller stops waiting (``eventloop.run(..., cancel=False)``), so neither the loop nor the
        process's exit waits for them."""
        closing: list[Any] = []
        if self._blocking is not None:
            blocking, self._blocking = self._blocking, None
            closing.append(_off_loop(blocking.close))
        if self.lanes is not None:
            lanes, self.lanes = self.lanes, None
            closing.append(lanes.close())
        if self._client is not None:
            client, self._client = self._client, None
            closing.append(client.close())
        if closing:
            await asyncio.shield(asyncio.gather(*closing, return_exceptions=True))


def _off_loop(fn: Callable[[], object]) -> asyncio.Future[None]:
    """``fn()`` on a daemon thread (an executor's thread would hold the interpreter's exit); its outcome
    as a future of the running loop (a failure is swallowed: closing is best effort)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def body() -> None:
        try:
            with contextlib.suppress(Exception):  # best effort: the client is gone either way
                fn()
        finally:
            loop.call_soon_threadsafe(settle)

    threading.Thread(target=body, name="tritonkit-close", daemon=True).start()
    return done
