"""Locust users that drive Triton: :class:`TritonHttpUser` and :class:`TritonGrpcUser`.

Locust's "client class + abstract user" pattern: a client (:class:`HttpLeanClient`,
:class:`HttpTritonClient`, :class:`GrpcClient`, all :class:`InferClient`) sends one request per
call and fires exactly one Locust request event for it (``request_type`` ``"http"``/``"grpc"``,
``name`` ``"model:version"``, response time in ms, response bytes, and on failure an exception
whose text is Triton's own); every answer is validated (output names, dtypes, shapes, finite
values): a wrong answer is a failure. An abstract user (``abstract = True``) builds its client
from its class attributes and its task sends one request. Importing this module imports Locust
(and so gevent's monkey-patching); only Locust processes import it.

Configure a user by subclassing (``model = "minilm_int8"``, ``url = "127.0.0.1:8000"``,
``batch_mix = {1: 0.8, 8: 0.2}``), or let :mod:`tritonkit.loadtest.locustfile` build the classes
from a run's options. The users are closed-loop (``wait_time = constant(0)``) unless told otherwise.

Stopping never cancels a request Triton is answering (tritonserver 2.51's gRPC front end crashes when
a call is cancelled while its answer races the cancel: triton-inference-server/server#7368, fixed in
2.53). Importing this module makes every Locust process that runs these users raise its stop timeout
to cover their request timeout (:func:`~tritonkit.loadtest.options.stop_timeout`; Locust's default, 0,
kills users mid-request), so a stopping user finishes the request it is in; and once the users have
stopped, the process's gRPC connections close only after the calls still open are answered.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import gevent.lock
import tritonclient.http as httpclient
from geventhttpclient import HTTPClient
from locust import User, constant, events, task
from tritonclient.utils import InferenceServerException

from tritonkit.client.buckets import pad_request
from tritonkit.client.codec import HEADER_LENGTH, grpc_answer, http_error, http_result
from tritonkit.client.errors import InvalidInputError
from tritonkit.errors import LoadTestError
from tritonkit.loadtest.options import HTTP_TRANSPORTS, stop_timeout
from tritonkit.loadtest.transports.hub import GrpcTransport, HubConnection
from tritonkit.loadtest.transports.wire import WireGrpcConnection, WireGrpcError
from tritonkit.measure.payloads import (
    BatchMix,
    ModelSpec,
    PayloadSet,
    fetch_model_spec,
    http_request,
    make_payloads,
    request_body,
)
from tritonkit.measure.validation import OutputCheck, check_outputs

__all__ = [
    "Backoff",
    "GrpcClient",
    "HttpLeanClient",
    "HttpTritonClient",
    "InferClient",
    "TritonGrpcUser",
    "TritonHttpUser",
    "TritonInferenceError",
    "TritonUser",
    "WrongAnswerError",
    "bucketed",
]

#: what builds a user's client: (Locust environment, ``host:port``, payloads, timeout) -> client
ClientClass = Callable[[Any, str, "PayloadSet", float], "InferClient"]


class TritonInferenceError(LoadTestError):
    """Triton answered a request with an error; the text is Triton's."""


class WrongAnswerError(LoadTestError):
    """Triton answered, but the outputs are not what the model's metadata promises."""


#: back-off after a connection error: first delay, and the cap it doubles up to (seconds)
BACKOFF_FIRST_S = 0.01
BACKOFF_CAP_S = 1.0


class Backoff:
    """Exponential back-off of one user after connection errors, so a dead or restarting server
    sees a bounded request rate instead of one refused connection per microsecond.

    Each consecutive connection error doubles the delay (``BACKOFF_FIRST_S`` up to ``BACKOFF_CAP_S``),
    jittered to between half and all of it so users do not retry in step; any answer from the server
    (even an error answer) resets it. With the jitter's lower half a dead server sees at most about
    ``7 + 2 * (seconds - 0.64)`` connection errors per user over ``seconds`` (plus what the requests'
    own time allows).
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self.failures = 0
        self._rng = rng or random.Random()

    def record(self, exception: BaseException | None) -> None:
        if exception is not None and isinstance(exception, OSError | WireGrpcError):
            self.failures += 1
        else:
            self.failures = 0

    def delay(self) -> float:
        """Seconds to wait before the next request (0 after an answer)."""
        if not self.failures:
            return 0.0
        full = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2 ** min(self.failures - 1, 30))
        return float(full * self._rng.uniform(0.5, 1.0))


#: what one request gave: seconds to the answer, answer bytes, and the failure (None: a success)
Sent = tuple[float, int, BaseException | None]

_SETUP_LOCK = gevent.lock.RLock()
_PAYLOADS: dict[tuple[Any, ...], PayloadSet] = {}


class InferClient(Protocol):
    """A client of one user: each :meth:`infer` sends one request and fires exactly one event."""

    def infer(self, index: int) -> None:
        """Send the payload ``index`` of the user's payload set; report it; never raise."""

    def close(self) -> None:
        """Release what the client holds (its connections)."""


def bucketed(payload_set: PayloadSet) -> PayloadSet:
    """``payload_set`` as a model with ``shape_buckets`` takes it: a payload above the last edge
    refused (one line), and where the config says ``pad_at: client`` every payload padded up to its
    edge once, before it is encoded (answers keep the padded length: the checks accept any length
    on a dynamic axis)."""
    buckets = payload_set.spec.buckets
    if buckets is None:
        return payload_set
    try:
        padded = [
            dataclasses.replace(
                p, inputs=pad_request(p.inputs, buckets, f"model `{payload_set.spec.label}`")[0]
            )
            for p in payload_set.payloads
        ]
    except InvalidInputError as exc:
        raise LoadTestError(f"load-test payload: {exc}") from None
    if buckets.pad_at != "client":
        return payload_set  # the server pads: the payloads go as they are
    return dataclasses.replace(payload_set, payloads=padded)


class _Client:
    """What the clients share: the payloads, the request name and timeout, the one event per request."""

    request_type: ClassVar[str] = ""

    def __init__(self, environment: Any, payload_set: PayloadSet, timeout: float) -> None:
        self.payload_set = payload_set
        self.spec: ModelSpec = payload_set.spec
        self.name = payload_set.spec.label
        self.timeout = timeout
        self._fire = environment.events.request.fire
        self.backoff = Backoff()

    def timed(self, call: Callable[[float], Sent]) -> None:
        """Send one request and report it: ``call(start)`` sends and validates; anything it raises
        (connection errors, timeouts) is a failed request (:meth:`failure`), never fatal to the user."""
        start = time.perf_counter()
        try:
            seconds, length, exception = call(start)
        except Exception as exc:
            seconds, length, exception = time.perf_counter() - start, 0, self.failure(exc)
        self.report(seconds, length, exception)

    def failure(self, exc: Exception) -> BaseException:
        """What a request that raised ``exc`` is reported as."""
        return exc

    def report(self, seconds: float, length: int, exception: BaseException | None) -> None:
        self.backoff.record(exception)
        self._fire(
            request_type=self.request_type,
            name=self.name,
            response_time=seconds * 1000.0,
            response_length=length,
            exception=exception,
            context={},
        )

    def close(self) -> None:
        pass


class HttpLeanClient(_Client):
    """HTTP/REST requests encoded once per payload by the client's codec and posted with
    geventhttpclient (the HTTP library under ``tritonclient.http``) on one keep-alive connection;
    answers decoded by the codec (:func:`~tritonkit.client.codec.http_result`) and validated."""

    request_type = "http"

    def __init__(self, environment: Any, url: str, payload_set: PayloadSet, timeout: float) -> None:

        super().__init__(environment, payload_set, timeout)
        self._path = f"/v2/models/{urllib.parse.quote(self.spec.name)}/versions/{self.spec.version}/infer"
        # Inputs are encoded once per payload: the hot path only sends bytes and reads answers.
        self._requests = []
        for payload in payload_set.payloads:
            _, _, body, json_size = http_request(payload)
            headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(json_size)}
            self._requests.append((payload, body, headers))
        host, _, port = url.rpartition(":")
        self._http = HTTPClient(  # connects on the first request
            host, int(port), concurrency=1, connection_timeout=timeout, network_timeout=timeout
        )

    def infer(self, index: int) -> None:
        payload, body, headers = self._requests[index]

        def call(start: float) -> Sent:
            response = self._http.request("POST", self._path, body=body, headers=headers)
            data = response.read()
            seconds = time.perf_counter() - start
            if response.status_code != 200:
                return (
                    seconds,
                    len(data),
                    TritonInferenceError(http_error(response.status_code, data).message()),
                )
            length = response.get(HEADER_LENGTH)
            wrong = _wrong(
                payload.checks, http_result, data, int(length) if isinstance(length, str) else None
            )
            return seconds, len(data), wrong

        self.timed(call)

    def close(self) -> None:
        self._http.close()


class HttpTritonClient(_Client):
    """Every request through ``tritonclient.http.InferenceServerClient.infer``, as applications
    call it (about 1.5x the CPU per request of :class:`HttpLeanClient`)."""

    request_type = "http"

    def __init__(self, environment: Any, url: str, payload_set: PayloadSet, timeout: float) -> None:

        super().__init__(environment, payload_set, timeout)
        self.client = httpclient.InferenceServerClient(  # connects on the first request
            url, connection_timeout=timeout, network_timeout=timeout
        )
        self._requests = [http_request(p)[:2] for p in payload_set.payloads]

    def infer(self, index: int) -> None:
        inputs, outputs = self._requests[index]
        payload = self.payload_set.payloads[index]

        def call(start: float) -> Sent:
            result = self.client.infer(
                self.spec.name, inputs, model_version=self.spec.version, outputs=outputs
            )
            seconds = time.perf_counter() - start
            names = [out["name"] for out in result.get_response().get("outputs", [])]
            got = {name: array for name in names if (array := result.as_numpy(name)) is not None}
            problem = check_outputs(payload.checks, got)
            return (
                seconds,
                sum(a.nbytes for a in got.values()),
                WrongAnswerError(problem) if problem else None,
            )

        self.timed(call)

    def failure(self, exc: Exception) -> BaseException:

        if isinstance(exc, InferenceServerException):
            return TritonInferenceError(exc.message() or str(exc))
        return exc

    def close(self) -> None:
        self.client.close()


class GrpcClient(_Client):
    """Unary ``ModelInfer`` calls on the process's shared gRPC connection (a :class:`GrpcTransport`:
    :class:`~tritonkit.loadtest.transports.wire.WireGrpcConnection`, HTTP/2 framed by hand and
    driven by the gevent hub); request bodies serialized once per payload, answers decoded by the
    client's codec (:func:`~tritonkit.client.codec.grpc_answer`) and validated here. The connection is taken on the first request (a connect failure is a failed
    request) and replaced when it dies, wears out or drains after a GOAWAY."""

    request_type = "grpc"

    def __init__(self, environment: Any, url: str, payload_set: PayloadSet, timeout: float) -> None:
        super().__init__(environment, payload_set, timeout)
        self.url = url
        bodies = _BODIES.get(id(payload_set))
        if bodies is None:
            bodies = _BODIES[id(payload_set)] = [
                request_body(self.spec.name, self.spec.version, p.inputs, [c.name for c in p.checks])
                for p in payload_set.payloads
            ]
        self.bodies = bodies
        self.connection: GrpcTransport | None = None

    def infer(self, index: int) -> None:
        start = time.perf_counter()
        try:
            connection = self.connection
            if connection is None or not connection.usable():  # closed, worn, draining: a fresh one
                connection = self.connection = WireGrpcConnection.shared(self.url)
            seconds, message, _, error = connection.infer(self.bodies[index], self.timeout)
        except LoadTestError as exc:
            self.report(time.perf_counter() - start, 0, exc)
            return
        exception: BaseException | None
        if error is not None or message is None:
            exception = TritonInferenceError(error or "empty answer")
        else:
            exception = _wrong(self.payload_set.payloads[index].checks, grpc_answer, message)
        self.report(seconds, len(message or b""), exception)


#: request bodies per payload set (id), shared by the users of a process
_BODIES: dict[int, list[bytes]] = {}


class TritonUser(User):
    """What both users share: model, addresses, payloads drawn by the batch mix, a client per user."""

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
    #: seconds a request may take before it counts as failed (sent as gRPC's ``grpc-timeout``)
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
        self.client: InferClient = self.make_client()

    def client_class(self) -> ClientClass:
        """The class of the user's client (each protocol's user says which)."""
        raise NotImplementedError

    def make_client(self) -> InferClient:
        """The user's client, of :meth:`client_class`, on its protocol's URL."""
        url = self.grpc_url if self.protocol == "grpc" else self.http_url
        return self.client_class()(self.environment, url, self.payload_set, self.request_timeout)

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
                _PAYLOADS[key] = bucketed(
                    make_payloads(
                        spec,
                        cls.batch_mix,
                        per_batch=cls.payloads_per_batch,
                        seed=cls.seed,
                        source=cls.payload_source,
                    )
                )
            return _PAYLOADS[key]

    @task
    def infer(self) -> None:
        self.client.infer(self.payload_set.pick(self.rng))
        backoff: Backoff | None = getattr(self.client, "backoff", None)
        delay = backoff.delay() if backoff is not None else 0.0
        if delay:  # the server is unreachable: wait (cooperatively) before the next request
            gevent.sleep(delay)

    def on_stop(self) -> None:
        self.client.close()


class TritonHttpUser(TritonUser):
    """A user calling Triton's HTTP/REST endpoint (KServe v2, binary tensor extension).

    ``http_transport`` ``lean`` (default): :class:`HttpLeanClient`; ``tritonclient``:
    :class:`HttpTritonClient` (about 1.5x the CPU per request, see ``docs/benchmarks.md``).
    """

    abstract = True
    protocol = "http"
    http_transport: ClassVar[str] = os.environ.get("TRITONKIT_HTTP_TRANSPORT", "lean")
    #: transport name -> the client class that speaks it
    clients: ClassVar[Mapping[str, ClientClass]] = dict(
        zip(HTTP_TRANSPORTS, (HttpLeanClient, HttpTritonClient), strict=True)
    )

    def client_class(self) -> ClientClass:
        client = self.clients.get(self.http_transport)
        if client is None:
            raise LoadTestError(
                f"HTTP transport {self.http_transport!r}: expected {' or '.join(self.clients)}"
            )
        return client


class TritonGrpcUser(TritonUser):
    """A user whose requests travel over gRPC: :class:`GrpcClient` on the ``wire`` transport.

    ``wire``: gRPC's unary calls framed by hand on one HTTP/2 connection per process, driven by
    the gevent hub (:mod:`tritonkit.loadtest.transports.wire`). It is the one gRPC transport: the
    ``h2`` library's state machine was slower and stalled when SETTINGS grew the window, and the
    grpcio child process (``engine``) leaned on grpcio's private API and a blocking pipe.
    """

    abstract = True
    protocol = "grpc"

    def client_class(self) -> ClientClass:
        return GrpcClient


def _wrong(
    checks: Sequence[OutputCheck], decode: Callable[..., Mapping[str, Any]], *answer: Any
) -> BaseException | None:
    """The failure an answer is reported as (None: a right answer): ``decode(*answer)`` (the client's
    codec) checked against ``checks``; an answer the codec cannot read is a wrong answer too."""
    try:
        problem = check_outputs(checks, decode(*answer, None))
    except Exception as exc:
        problem = f"the answer does not parse: {exc}"
    return WrongAnswerError(problem) if problem else None


def _users_stop_timeout(environment: Any) -> int | None:
    """The stop timeout the environment's Triton users need (None: it runs none)."""
    timeouts = [
        cls.request_timeout
        for cls in getattr(environment, "user_classes", None) or ()
        if isinstance(cls, type) and issubclass(cls, TritonUser)
    ]
    return stop_timeout(max(timeouts)) if timeouts else None


@events.init.add_listener  # type: ignore[untyped-decorator]
def _finish_requests_when_stopping(environment: Any, **_: Any) -> None:
    """Locust's stop timeout covers the users' request timeout: a stopping user ends the request it
    is in before it stops, instead of being killed mid-call (a master passes it on to its workers)."""
    needed = _users_stop_timeout(environment)
    if needed is not None and (environment.stop_timeout or 0) < needed:
        environment.stop_timeout = needed


@events.test_stop.add_listener  # type: ignore[untyped-decorator]
def _drain_connections(environment: Any, **_: Any) -> None:
    """The users have stopped: close this process's gRPC connections once the calls still open (those
    of users killed anyway) are answered, so that the process never exits under a call in flight."""
    HubConnection.drain_shared(float(_users_stop_timeout(environment) or 0))
