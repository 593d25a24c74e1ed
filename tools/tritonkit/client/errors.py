"""Client error classes and the one place where transport failures become them.

Every failure a caller of :class:`~tritonkit.client.Client` / :class:`~tritonkit.client.AsyncClient`
can meet is a :class:`~tritonkit.errors.ClientError` subclass, whatever the protocol. Server answers
keep Triton's own text; the class says what kind of failure it was, and ``retryable`` says whether
the retry loop may try again (see :mod:`tritonkit.client.retry`).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket

import rapidjson
from tritonclient.utils import InferenceServerException

from tritonkit.client.codec import AnswerError, RequestError
from tritonkit.errors import ClientError

__all__ = [
    "ClientError",
    "InferenceTimeoutError",
    "InternalServerError",
    "InvalidArgumentError",
    "InvalidInputError",
    "ModelNotFoundError",
    "QueueFullError",
    "RestrictedApiError",
    "ServerUnavailableError",
    "UnexpectedAnswerError",
    "map_error",
]


class _CallError(ClientError):
    """Common base of this package's errors; ``retryable`` is set per instance by :func:`map_error`."""

    retryable: bool = False


class InvalidArgumentError(_CallError):
    """The server rejected the request as invalid (gRPC INVALID_ARGUMENT, HTTP 400). Never retried."""


class InvalidInputError(InvalidArgumentError):
    """The request was refused *before sending*: names, dtypes, shapes or batch size do not match the model.

    A subclass of :class:`InvalidArgumentError` so one ``except`` catches both sides' verdicts.
    """


class ModelNotFoundError(_CallError):
    """The model, or the requested version of it, is not served (gRPC NOT_FOUND, HTTP 404)."""


class ServerUnavailableError(_CallError):
    """The server cannot take the request now: not reachable, not ready, shutting down (UNAVAILABLE, 503)."""


class QueueFullError(ServerUnavailableError):
    """Triton's dynamic-batching queue is full ("Exceeds maximum queue size").

    Retried only when the retry policy opts in (``RetryPolicy(retry_queue_full=True)``): a full queue
    means the server is saturated, and retrying by default would add load exactly then.
    """


class InferenceTimeoutError(_CallError):
    """The call's deadline passed (client-side timeout, gRPC DEADLINE_EXCEEDED, HTTP 408/504)."""


class InternalServerError(_CallError):
    """The server failed while handling the request (gRPC INTERNAL/UNKNOWN, HTTP 5xx)."""


class UnexpectedAnswerError(InternalServerError):
    """The server answered, but not as the model's cached metadata says it would (an output missing,
    a datatype the client cannot read): the model may have been reloaded, so the cache is dropped."""


class RestrictedApiError(_CallError):
    """The endpoint is restricted (``--http-restricted-api``/``--grpc-restricted-protocol``) and the
    client did not send the key header; pass it with ``Client(..., headers={...})``."""


_GRPC_KINDS: dict[str, type[_CallError]] = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "OUT_OF_RANGE": InvalidArgumentError,
    "FAILED_PRECONDITION": InvalidArgumentError,
    "RESOURCE_EXHAUSTED": InvalidArgumentError,  # message above the size limit
    "UNIMPLEMENTED": InvalidArgumentError,
    "ALREADY_EXISTS": InvalidArgumentError,
    "NOT_FOUND": ModelNotFoundError,
    "UNAVAILABLE": ServerUnavailableError,
    "DEADLINE_EXCEEDED": InferenceTimeoutError,
    "CANCELLED": ServerUnavailableError,
    "PERMISSION_DENIED": RestrictedApiError,
    "UNAUTHENTICATED": RestrictedApiError,
    "INTERNAL": InternalServerError,
    "UNKNOWN": InternalServerError,
    "ABORTED": InternalServerError,
    "DATA_LOSS": InternalServerError,
}

_HTTP_KINDS: dict[str, type[_CallError]] = {
    "400": InvalidArgumentError,
    "413": InvalidArgumentError,
    "404": ModelNotFoundError,
    "401": RestrictedApiError,
    "403": RestrictedApiError,
    "408": InferenceTimeoutError,
    "504": InferenceTimeoutError,
    "429": ServerUnavailableError,
    "502": ServerUnavailableError,
    "503": ServerUnavailableError,
}

_QUEUE_FULL = "exceeds maximum queue size"
_NO_VERSIONS = "has no available versions"


def _from_server(exc: InferenceServerException, what: str) -> _CallError:
    status = exc.status() or ""
    text = exc.message() or str(exc)
    lowered = text.lower()
    kind: type[_CallError]
    if "is restricted" in lowered:
        # Triton answers a restricted gRPC call with UNAVAILABLE; it is a missing key, not an outage.
        kind = RestrictedApiError
    elif _QUEUE_FULL in lowered:
        kind = QueueFullError
    elif _NO_VERSIONS in lowered:
        # The model exists but has no loaded version right now: the server is unloading it while
        # shutting down (seen on gRPC during SIGTERM) or still loading it. Transient, so retryable.
        kind = ServerUnavailableError
    elif status.startswith("StatusCode."):
        kind = _GRPC_KINDS.get(status.removeprefix("StatusCode."), InternalServerError)
    elif status in _HTTP_KINDS:
        kind = _HTTP_KINDS[status]
    elif status.startswith("5"):
        kind = InternalServerError
    elif status == "":
        kind = InvalidArgumentError  # raised by tritonclient itself, e.g. a malformed argument
    else:
        kind = InvalidArgumentError
    err = kind(f"{what}: {text}")
    err.retryable = kind is ServerUnavailableError  # refined by the retry policy for QueueFullError
    return err


def _transport_kinds() -> tuple[
    tuple[type[BaseException], ...], tuple[type[BaseException], ...], tuple[type[BaseException], ...]
]:
    """(connection-failure, timeout, protocol-garbage) types of the transport libraries."""
    closed: list[type[BaseException]] = [
        ConnectionError,  # refused, reset, aborted, broken pipe
        http.client.RemoteDisconnected,
        socket.gaierror,
    ]
    timeouts: list[type[BaseException]] = [TimeoutError, asyncio.TimeoutError]
    garbage: list[type[BaseException]] = [http.client.BadStatusLine]
    try:
        import gevent  # noqa: PLC0415 (optional dependency: its absence becomes a one-line hint)
        from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError  # noqa: PLC0415 (optional dependency: its absence becomes a one-line hint)

        closed.append(HTTPConnectionClosed)
        timeouts.append(gevent.Timeout)
        garbage.append(HTTPParseError)
    except ImportError:  # pragma: no cover - tritonclient[http] brings both
        pass
    try:
        import aiohttp  # noqa: PLC0415 (optional dependency: its absence becomes a one-line hint)

        closed += [aiohttp.ClientConnectionError]
        timeouts += [aiohttp.ServerTimeoutError]
        garbage += [aiohttp.ClientResponseError]
    except ImportError:  # pragma: no cover
        pass
    return tuple(closed), tuple(timeouts), tuple(garbage)


_CLOSED, _TIMEOUTS, _GARBAGE = _transport_kinds()


def map_error(exc: BaseException, what: str) -> _CallError | None:
    """The :class:`ClientError` for ``exc`` (``None`` when it is not a transport or server failure).

    ``what`` names the call (e.g. ``"infer `add` at 127.0.0.1:8000"``) and prefixes the message.
    Connection failures before an answer arrived are retryable: Triton never saw, or never
    answered, the request (inference on Triton models is treated as idempotent; see README).
    """
    if isinstance(exc, _CallError):
        return exc
    if isinstance(exc, InferenceServerException):
        return _from_server(exc, what)
    if isinstance(exc, RequestError):  # refused before sending, like the spec's checks
        return InvalidInputError(f"{what}: {exc}")
    if isinstance(exc, AnswerError):  # the server's answer cannot be read: its fault, not the caller's
        return UnexpectedAnswerError(f"{what}: {exc}")
    if isinstance(exc, rapidjson.JSONDecodeError | json.JSONDecodeError | UnicodeDecodeError):
        # tritonclient reads every HTTP answer as JSON: an empty or HTML body (the metrics port, a
        # proxy's page) is no Triton answer.
        return UnexpectedAnswerError(
            f"{what}: the answer is not Triton's JSON ({exc}); expected Triton's HTTP port (the metrics "
            "port serves only /metrics)"
        )
    # A closed connection comes first: geventhttpclient's HTTPConnectionClosed subclasses its
    # HTTPParseError, and a server killed mid-call is a connection failure, not a protocol mix-up.
    if isinstance(exc, _CLOSED):
        detail = str(exc) or type(exc).__name__
        err: _CallError = ServerUnavailableError(
            f"{what}: server not reachable ({type(exc).__name__}: {detail})"
        )
        err.retryable = not isinstance(exc, socket.gaierror)
        return err
    if isinstance(exc, _GARBAGE):
        err0: _CallError = ServerUnavailableError(
            f"{what}: the answer is not HTTP ({type(exc).__name__}); expected Triton's HTTP port "
            "(is this the gRPC port? pass protocol='grpc')"
        )
        return err0
    if isinstance(exc, _TIMEOUTS):
        err = InferenceTimeoutError(f"{what}: no answer before the deadline")
        err.retryable = False
        return err
    if isinstance(exc, OSError):
        err = ServerUnavailableError(f"{what}: {type(exc).__name__}: {exc}")
        err.retryable = False
        return err
    return None
