"""The protocol- and sync/async-neutral core shared by :class:`Client` and :class:`AsyncClient`.

Owns: the shape of an I/O step (:data:`Step`, :data:`Op`, :class:`Transport`: see
:mod:`tritonkit.client.ops`), argument normalisation (url, protocol, version), the per-(model, version) :class:`ModelSpec`
cache and requested-output cache, deadlines, the retry bookkeeping (:class:`ClientStats`), the
final error message of a call that gave up, and splitting/joining batches for ``infer_batch``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from tritonkit.client.errors import InferenceTimeoutError, InvalidInputError, _CallError, map_error
from tritonkit.client.retry import RetryPolicy, as_policy
from tritonkit.client.spec import ModelSpec, PreparedInput
from tritonkit.errors import ClientError

__all__ = [
    "ClientCore",
    "ClientStats",
    "Op",
    "Step",
    "Transport",
    "Where",
    "join_batches",
    "send",
    "split_batch",
]

T = TypeVar("T")

#: One I/O step of an operation: the client runs ``fn(*args)`` (blocking, or awaited) and resumes
#: the operation with what it returned, or throws in what it raised.
Step = tuple[Callable[..., Any], tuple[Any, ...]]
#: An operation: a generator of steps whose return value is the operation's result.
Op = Generator[Step, Any, T]


def send(fn: Callable[..., Any], *args: Any) -> Op[Any]:
    """The operation of one step, ``fn(*args)``: e.g. one attempt of a call that sends one request."""
    return (yield fn, args)


class Transport(Protocol):
    """What operations use of a transport (:mod:`tritonkit.client.protocol`). The blocking
    transports answer; the asyncio ones return awaitables, which the async client awaits."""

    #: tritonclient's ``InferInput`` of the protocol (the shared-memory path builds them).
    InferInput: Any

    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None) -> Any: ...

    def infer(self, request: Any, names: tuple[str, ...], timeout: float | None) -> Any: ...

    def encode(
        self, model: str, version: str, inputs: Sequence[PreparedInput], outputs: Sequence[str] | None
    ) -> Any: ...

    def make_output(self, name: str) -> Any: ...

    def close(self) -> Any: ...


PROTOCOLS = ("http", "grpc")

#: (action, model or None, version) naming a call; see :meth:`ClientCore.describe`.
Where = tuple[str, str | None, str]


@dataclasses.dataclass
class ClientStats:
    """Counters a client keeps; ``attempts`` counts every request put on the wire (first tries and retries)."""

    calls: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0


class ClientCore:
    """State and helpers common to the sync and async clients (no I/O here)."""

    def __init__(
        self,
        url: str,
        protocol: str,
        timeout: float | None,
        retries: int | RetryPolicy | None,
        safe_cast: bool,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ClientError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
        for scheme in ("http://", "https://", "grpc://"):
            if url.startswith(scheme):
                url = url[len(scheme) :]
        if not url or "/" in url.rstrip("/"):
            raise ClientError(f"url must be host:port (e.g. 127.0.0.1:8000), given {url!r}")
        if timeout is not None and timeout <= 0:
            raise ClientError(f"`timeout` must be > 0 seconds or None, given {timeout}")
        self.url = url.rstrip("/")
        self.protocol = protocol
        self.timeout = timeout
        self.policy = as_policy(retries)
        self.safe_cast = safe_cast
        self.stats = ClientStats()
        self.specs: dict[tuple[str, str], ModelSpec] = {}
        self._outputs: dict[tuple[str, str, tuple[str, ...]], tuple[str, ...]] = {}
        self.stats_lock = threading.Lock()

    # -- retries ---------------------------------------------------------------------
    def count(self, attempts: int = 0, retries: int = 0, failures: int = 0, calls: int = 0) -> None:
        with self.stats_lock:
            s = self.stats
            s.calls += calls
            s.attempts += attempts
            s.retries += retries
            s.failures += failures

    def describe(self, where: Where) -> str:
        """The call named in messages, e.g. "infer `add` version 1 at http://127.0.0.1:8000".

        Built only when a message needs it: formatting on every call would cost the hot path.
        """
        action, model, version = where
        target = (f" `{model}`" + (f" version {version}" if version else "")) if model else ""
        return f"{action}{target} at {self.protocol}://{self.url}"

    def deadline(self, timeout: float | None, started: float) -> tuple[float | None, bool]:
        """(the call's deadline or None, whether each attempt gets the time left as its own timeout).

        ``timeout`` (else the client's) bounds the whole call, retries included; without one, only
        the retry policy's deadline bounds the retries and an attempt waits as long as it takes.
        """
        budget = self.timeout if timeout is None else timeout
        if budget is None:
            return (None if self.policy.deadline is None else started + self.policy.deadline), False
        if budget <= 0:
            raise ClientError(f"`timeout` must be > 0 seconds or None, given {budget}")
        return started + budget, True

    def attempt(self, where: Where, attempt: int, started: float, deadline: float | None) -> float | None:
        """Count attempt number ``attempt`` (1 is the call's first); the seconds left for it, if bounded."""
        remaining = None if deadline is None else deadline - (started if attempt == 1 else time.monotonic())
        if remaining is not None and remaining <= 0:
            raise self.expired(where, started) from None
        with self.stats_lock:
            self.stats.attempts += 1
            if attempt == 1:
                self.stats.calls += 1
        return remaining

    def after_failure(
        self, error: Exception, where: Where, attempt: int, started: float, deadline: float | None
    ) -> float:
        """The pause before retrying after ``error``; raises the mapped error when the call gives up,
        and ``error`` itself when it is not a transport or server failure."""
        err = map_error(error, self.describe(where))
        if err is None:
            raise error
        if not self.policy.should_retry(err, attempt):
            raise self.give_up(err, attempt, started) from None
        pause = self.policy.backoff(attempt)
        if deadline is not None and time.monotonic() + pause >= deadline:
            raise self.give_up(err, attempt, started) from None
        self.count(retries=1)
        return pause

    def give_up(self, err: _CallError, attempts: int, started: float) -> _CallError:
        """The error a call raises in the end: retried calls say how often they tried."""
        self.count(failures=1)
        if attempts <= 1:
            return err
        out = type(err)(f"{err} (gave up after {attempts} attempts in {time.monotonic() - started:.1f} s)")
        out.retryable = err.retryable
        return out

    def expired(self, where: Where, started: float) -> InferenceTimeoutError:
        self.count(failures=1)
        return InferenceTimeoutError(
            f"{self.describe(where)}: deadline passed after {time.monotonic() - started:.1f} s before an answer arrived"
        )

    # -- model specs and requests ----------------------------------------------------------------
    @staticmethod
    def version(version: int | str | None) -> str:
        if version is None:
            return ""
        if isinstance(version, bool) or (isinstance(version, int) and version < 1):
            raise ClientError(f"`version` must be a positive integer, given {version!r}")
        text = str(version)
        if not text.isdigit():
            raise ClientError(f"`version` must be a positive integer, given {version!r}")
        return text

    def outputs(self, spec: ModelSpec, version: str, outputs: Sequence[str]) -> tuple[str, ...] | None:
        """The requested output names, checked against the model once and then cached; None
        (every output) when none are named, as in tritonclient."""
        if isinstance(outputs, str):
            raise InvalidInputError(f"`outputs` must be a list of names, given the string {outputs!r}")
        if len(outputs) == 0:
            return None
        key = (spec.name, version, tuple(outputs))
        hit = self._outputs.get(key)
        if hit is not None:
            return hit
        names = self._outputs[key] = spec.check_outputs(list(outputs))
        return names

    def forget(self, model: str, version: str) -> None:
        """Drop cached knowledge of a model after the server disagreed with it (reloaded, removed)."""
        self.specs.pop((model, version), None)
        for key in [k for k in self._outputs if k[0] == model and k[1] == version]:
            self._outputs.pop(key, None)


def batch_length(spec: ModelSpec, inputs: Mapping[str, Any]) -> int:
    """The leading (batch) dimension the inputs share, for splitting."""
    try:
        sizes = {name: len(value) for name, value in inputs.items()}
    except TypeError:
        raise InvalidInputError(
            f"infer_batch on model `{spec.name}` needs arrays or lists with a batch dimension, given "
            + ", ".join(f"`{n}`: {type(v).__name__}" for n, v in inputs.items())
        ) from None
    distinct = set(sizes.values())
    if len(distinct) > 1:
        raise InvalidInputError(
            f"inputs of model `{spec.name}` must share the batch size, given "
            + ", ".join(f"`{n}`: {s}" for n, s in sizes.items())
        )
    return distinct.pop() if distinct else 0


def split_batch(inputs: Mapping[str, Any], size: int, chunk: int) -> list[dict[str, Any]]:
    """Consecutive slices of at most ``chunk`` rows of every input (arrays and lists alike)."""
    return [{name: value[i : i + chunk] for name, value in inputs.items()} for i in range(0, size, chunk)]


def join_batches(parts: Sequence[Mapping[str, NDArray[Any]]]) -> dict[str, NDArray[Any]]:
    """Concatenate per-chunk results along the batch axis, in order."""
    if len(parts) == 1:
        return dict(parts[0])
    return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}


def chunk_size(spec: ModelSpec, batch_size: int | None) -> int:
    limit = spec.max_batch_size
    if batch_size is None:
        return limit
    if batch_size < 1 or batch_size > limit:
        raise InvalidInputError(
            f"`batch_size` for model `{spec.name}` must be 1..{limit} (its max_batch_size), given {batch_size}"
        )
    return batch_size
