"""Locust users that drive Triton: :class:`TritonHttpUser` and :class:`TritonGrpcUser`.

Both report every request as one Locust request event (``request_type`` ``"http"``/``"grpc"``,
``name`` ``"model:version"``, response time in ms, response bytes, and on failure an exception
whose text is Triton's own), and both validate every answer (output names, dtypes, shapes, finite
values): a wrong answer is a failure. Importing this module imports Locust (and so gevent's
monkey-patching); only Locust processes import it.

Configure a user by subclassing (``model = "minilm_int8"``, ``url = "127.0.0.1:8000"``,
``batch_mix = {1: 0.8, 8: 0.2}``), or let :mod:`tritonkit.loadtest.locustfile` build the classes
from a run's options. The users are closed-loop (``wait_time = constant(0)``) unless told otherwise.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.parse
from typing import Any, ClassVar

import gevent.lock
from locust import User, constant, task

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.payloads import (
    BatchMix,
    ModelSpec,
    PayloadSet,
    fetch_model_spec,
    make_payloads,
    request_body,
)
from tritonkit.loadtest.transports.engine_client import GrpcEngineClient
from tritonkit.loadtest.transports.h2 import H2GrpcConnection, parse_answer
from tritonkit.loadtest.transports.wire import WireGrpcConnection
from tritonkit.loadtest.validation import check_outputs

__all__ = ["TritonGrpcUser", "TritonHttpUser", "TritonInferenceError", "TritonUser", "WrongAnswerError"]


class TritonInferenceError(LoadTestError):
    """Triton answered a request with an error; the text is Triton's."""


class WrongAnswerError(LoadTestError):
    """Triton answered, but the outputs are not what the model's metadata promises."""


_SETUP_LOCK = gevent.lock.RLock()
_PAYLOADS: dict[tuple[Any, ...], PayloadSet] = {}


class TritonUser(User):
    """What both users share: model, addresses, payloads drawn by the batch mix, event reporting."""

    abstract = True
    wait_time = constant(0)
    #: Triton's HTTP endpoint ``host:port`` (metadata is always read there).
    http_url: ClassVar[str] = "127.0.0.1:8000"
    #: Triton's gRPC endpoint ``host:port``.
    grpc_url: ClassVar[str] = "127.0.0.1:8001"
    model: ClassVar[str] = ""
    model_version: ClassVar[str] = ""
    batch_mix: ClassVar[BatchMix] = {1: 1.0}
    payload_source: ClassVar[str] = "auto"
    payloads_per_batch: ClassVar[int] = 4
    seed: ClassVar[int] = 0
    #: seconds a request may take before it counts as failed
    request_timeout: ClassVar[float] = 60.0
    protocol: ClassVar[str] = ""
    #: the model's spec as JSON (``ModelSpec.to_json``); read from the server when left ``None``
    model_spec: ClassVar[dict[str, Any] | None] = None

    _user_ids: ClassVar[int] = 0

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        cls = type(self)
        TritonUser._user_ids += 1
        # Each user draws its own repeatable sequence from the batch mix.
        self.rng = random.Random(cls.seed * 1_000_003 + TritonUser._user_ids)
        self.payload_set = self.shared_payloads()
        self.spec: ModelSpec = self.payload_set.spec
        self.request_name = self.spec.label

    @classmethod
    def shared_payloads(cls) -> PayloadSet:
        """Payloads are built once per process and model (many users share them)."""
        key = (
            cls.http_url,
            cls.model,
            cls.model_version,
            tuple(sorted(cls.batch_mix.items())),
            cls.seed,
            cls.payload_source,
            cls.payloads_per_batch,
        )
        with _SETUP_LOCK:
            if key not in _PAYLOADS:
                if not cls.model:
                    raise LoadTestError(f"{cls.__name__}.model is empty; expected a model name")
                if cls.model_spec is not None:
                    spec = ModelSpec.from_json(cls.model_spec)
                else:
                    spec = fetch_model_spec(cls.http_url, cls.model, cls.model_version)
                _PAYLOADS[key] = make_payloads(
                    spec,
                    cls.batch_mix,
                    per_batch=cls.payloads_per_batch,
                    seed=cls.seed,
                    source=cls.payload_source,
                )
            return _PAYLOADS[key]

    def report(self, seconds: float, length: int, exception: BaseException | None) -> None:
        self.environment.events.request.fire(
            request_type=self.protocol,
            name=self.request_name,
            response_time=seconds * 1000.0,
            response_length=length,
            exception=exception,
            context={},
        )


class TritonHttpUser(TritonUser):
    """A user calling Triton's HTTP/REST endpoint (KServe v2, binary tensor extension).

    ``http_transport`` ``lean`` (default): request bodies are encoded once per payload by
    ``tritonclient.http`` and posted with geventhttpclient (the HTTP library under
    ``tritonclient.http``) on one keep-alive connection per user; answers are read as their JSON
    header plus raw output bytes. ``tritonclient``: every request through
    ``tritonclient.http.InferenceServerClient.infer``, as applications call it (about 1.5x the CPU
    per request, see ``docs/benchmarks.md``).
    """

    abstract = True
    protocol = "http"
    http_transport: ClassVar[str] = os.environ.get("TRITONKIT_HTTP_TRANSPORT", "lean")

    def on_start(self) -> None:
        import tritonclient.http as httpclient

        from tritonkit.loadtest.payloads import http_request

        if self.http_transport not in ("lean", "tritonclient"):
            raise LoadTestError(f"HTTP transport {self.http_transport!r}: expected lean or tritonclient")
        self.client = httpclient.InferenceServerClient(
            self.http_url, connection_timeout=self.request_timeout, network_timeout=self.request_timeout
        )
        self._path = f"/v2/models/{urllib.parse.quote(self.spec.name)}/versions/{self.spec.version}/infer"
        # Inputs are encoded once per payload: the hot path only sends bytes and reads answers.
        self._requests = []
        for payload in self.payload_set.payloads:
            inputs, outputs, body, json_size = http_request(payload)
            headers = {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(json_size),
            }
            self._requests.append((inputs, outputs, payload, body, headers))
        if self.http_transport == "lean":
            from geventhttpclient import HTTPClient

            host, _, port = self.http_url.rpartition(":")
            self._http = HTTPClient(
                host,
                int(port),
                concurrency=1,
                connection_timeout=self.request_timeout,
                network_timeout=self.request_timeout,
            )

    def on_stop(self) -> None:
        self.client.close()
        if self.http_transport == "lean":
            self._http.close()

    @task
    def infer(self) -> None:
        if self.http_transport == "tritonclient":
            self._infer_tritonclient()
            return
        _, _, payload, body, headers = self._requests[self.payload_set.pick(self.rng)]
        start = time.perf_counter()
        length = 0
        exception: BaseException | None = None
        try:
            response = self._http.request("POST", self._path, body=body, headers=headers)
            data = response.read()
            seconds = time.perf_counter() - start
            length = len(data)
            if response.status_code != 200:
                exception = TritonInferenceError(_http_error(data, response.status_code))
            else:
                header_length = response.get("Inference-Header-Content-Length")
                got = _http_outputs(data, header_length if isinstance(header_length, str) else None)
                problem = check_outputs(payload.checks, got)
                if problem:
                    exception = WrongAnswerError(problem)
        except Exception as exc:  # connection errors, timeouts: counted, never fatal to the user
            seconds = time.perf_counter() - start
            exception = exc
        self.report(seconds, length, exception)

    def _infer_tritonclient(self) -> None:
        from tritonclient.utils import InferenceServerException

        inputs, outputs, payload, _, _ = self._requests[self.payload_set.pick(self.rng)]
        start = time.perf_counter()
        length = 0
        exception: BaseException | None = None
        try:
            result = self.client.infer(
                self.spec.name, inputs, model_version=self.spec.version, outputs=outputs
            )
            seconds = time.perf_counter() - start
            response = result.get_response()
            got = {}
            for out in response.get("outputs", []):
                array = result.as_numpy(out["name"])
                length += int(array.nbytes) if array is not None else 0
                got[out["name"]] = (out["datatype"], out["shape"], array if array is not None else b"")
            problem = check_outputs(payload.checks, got)
            if problem:
                exception = WrongAnswerError(problem)
        except InferenceServerException as exc:
            seconds = time.perf_counter() - start
            exception = TritonInferenceError(exc.message() or str(exc))
        except Exception as exc:  # connection errors, timeouts: counted, never fatal to the user
            seconds = time.perf_counter() - start
            exception = exc
        self.report(seconds, length, exception)


def _http_error(data: bytes, status: int) -> str:
    """Triton's error text from an HTTP error answer (``{"error": "..."}``)."""
    try:
        return str(json.loads(data)["error"])
    except Exception:
        return f"HTTP {status}: {data[:200].decode(errors='replace')}"


def _http_outputs(data: bytes, header_length: str | None) -> dict[str, tuple[str, Any, Any]]:
    """Outputs of a KServe v2 answer: name → (datatype, shape, raw bytes or JSON values)."""
    import numpy as np

    from tritonkit.loadtest.validation import dtype_of

    size = int(header_length) if header_length else len(data)
    header = json.loads(data[:size])
    offset = size
    got: dict[str, tuple[str, Any, Any]] = {}
    for out in header.get("outputs", []):
        binary = out.get("parameters", {}).get("binary_data_size")
        if binary is not None:
            raw: Any = data[offset : offset + int(binary)]
            offset += int(binary)
        else:  # JSON data: the values themselves
            dtype = dtype_of(out["datatype"])
            raw = np.asarray(out.get("data", []), dtype=dtype) if dtype is not None else b""
        got[out["name"]] = (out["datatype"], out["shape"], raw)
    return got


class TritonGrpcUser(TritonUser):
    """A user whose requests travel over gRPC, by one of three transports (``grpc_transport``).

    ``wire`` (default): gRPC's unary calls framed by hand on one HTTP/2 connection per process,
    driven by the gevent hub (:mod:`.grpc_wire`); the leanest. ``h2``: the same over the ``h2``
    library's state machine (:mod:`.grpc_h2`). ``engine``: grpcio's ``grpc.aio`` in a gevent-free
    child process per Locust process (:mod:`.grpc_engine`), which also validates; the Locust
    process only exchanges small frames with it. With ``wire`` and ``h2`` answers are parsed and
    validated here.
    """

    abstract = True
    protocol = "grpc"
    grpc_transport: ClassVar[str] = os.environ.get("TRITONKIT_GRPC_TRANSPORT", "wire")
    #: engine processes per Locust process (``engine`` transport; users are spread over them)
    engines: ClassVar[int] = int(os.environ.get("TRITONKIT_GRPC_ENGINES", "1"))

    def on_start(self) -> None:
        bodies = _BODIES.get(id(self.payload_set))
        if bodies is None:
            bodies = _BODIES[id(self.payload_set)] = [
                request_body(self.spec.name, self.spec.version, p.inputs, [c.name for c in p.checks])
                for p in self.payload_set.payloads
            ]
        self.bodies = bodies
        if self.grpc_transport == "engine":
            self.engine = GrpcEngineClient.shared(self.grpc_url, self.engines)
            key = (id(self.engine), id(self.payload_set))
            registered = _REGISTERED.get(key)
            if registered is None or registered[0] is not self.engine:
                ids = [
                    self.engine.add_payload(b, p.checks)
                    for b, p in zip(bodies, self.payload_set.payloads, strict=True)
                ]
                registered = _REGISTERED[key] = (self.engine, ids)
            self.payload_ids = registered[1]
        elif self.grpc_transport == "wire":
            self.connection: WireGrpcConnection | H2GrpcConnection = WireGrpcConnection.shared(self.grpc_url)
        elif self.grpc_transport == "h2":
            self.connection = H2GrpcConnection.shared(self.grpc_url)
        else:
            raise LoadTestError(f"gRPC transport {self.grpc_transport!r}: expected wire, h2 or engine")

    @task
    def infer(self) -> None:
        index = self.payload_set.pick(self.rng)
        if self.grpc_transport == "engine":
            self._infer_engine(index)
            return
        start = time.perf_counter()
        try:
            if not self.connection.usable():  # closed (the server went away) or worn: a fresh one
                self.connection = type(self.connection).shared(self.grpc_url)
            seconds, message, error = self.connection.infer(self.bodies[index], self.request_timeout)
        except LoadTestError as exc:
            self.report(time.perf_counter() - start, 0, exc)
            return
        exception: BaseException | None = None
        if error is not None or message is None:
            exception = TritonInferenceError(error or "empty answer")
        else:
            try:
                response = parse_answer(message)
                got = {
                    out.name: (out.datatype, tuple(out.shape), response.raw_output_contents[i])
                    for i, out in enumerate(response.outputs)
                }
                problem = check_outputs(self.payload_set.payloads[index].checks, got)
            except Exception as exc:  # an answer that does not even parse is a wrong answer
                problem = f"answer does not parse as ModelInferResponse: {exc}"
            if problem:
                exception = WrongAnswerError(problem)
        self.report(seconds, len(message or b""), exception)

    def _infer_engine(self, index: int) -> None:
        start = time.perf_counter()
        try:
            seconds, length, error = self.engine.infer(self.payload_ids[index], self.request_timeout)
        except LoadTestError as exc:
            self.report(time.perf_counter() - start, 0, exc)
            return
        exception: BaseException | None = None
        if error is not None:
            # Triton's own text; the engine's validation problems read "output ... expected ...".
            exception = (
                WrongAnswerError(error)
                if error.startswith(("output `", "wrong outputs"))
                else TritonInferenceError(error)
            )
        self.report(seconds, length, exception)


_BODIES: dict[int, list[bytes]] = {}
_REGISTERED: dict[tuple[int, int], tuple[GrpcEngineClient, list[int]]] = {}
