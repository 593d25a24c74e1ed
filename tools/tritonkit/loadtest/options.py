"""What a load test is asked to do: :class:`LoadTestOptions`, :class:`ModelTarget` and their checks.

Owns the option values of one run and every check made on them before a server is touched
(:meth:`LoadTestOptions.validate`: one line naming expected vs given, raised as
:class:`~tritonkit.errors.LoadTestError`), and :func:`parse_model` for ``NAME[:VERSION][@WEIGHT]``.
Checks that need the server (is the model served, does the batch mix fit it) belong to
:mod:`tritonkit.loadtest.run`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.scenarios import SCENARIOS, make_plan, parse_duration
from tritonkit.loadtest.slo import SLO
from tritonkit.measure.payloads import parse_batch_mix

__all__ = [
    "ADMIN_KEY_ENV",
    "HTTP_TRANSPORTS",
    "LoadTestOptions",
    "ModelTarget",
    "parse_model",
    "stop_timeout",
]

HTTP_TRANSPORTS = ("lean", "tritonclient")
#: where ``--admin-key`` is read from when not given
ADMIN_KEY_ENV = "TRITONKIT_ADMIN_KEY"
#: seconds Locust waits for stopping users beyond the request timeout (see :func:`stop_timeout`)
STOP_MARGIN_S = 5.0


def stop_timeout(request_timeout: float) -> int:
    """Locust's stop timeout (whole seconds) for users whose requests time out after ``request_timeout``:
    a stopping user finishes the request it is in, which ends by then, answered or timed out. Killed
    mid-request instead, the user would cancel a call Triton is answering, and a gRPC call cancelled
    while its answer races the cancel crashes tritonserver 2.51 (triton-inference-server/server#7368,
    fixed in 2.53)."""
    return math.ceil(request_timeout + STOP_MARGIN_S)


@dataclasses.dataclass
class ModelTarget:
    """One model of a run: ``name[:version]`` with its share of users and batch mix.

    ``rate`` (requests/s) with ``users``: a paced model instead of a weighted one: exactly ``users``
    users, each sending one request every ``users / rate`` seconds (Locust's ``constant_pacing``), so
    the model receives ``rate`` requests/s while its answers take less than that interval. A run paces
    every model or none (the fleet plan's mixed load test paces each model at its planned rate).
    """

    name: str
    version: str = ""
    weight: int = 1
    batch_mix: dict[int, float] = dataclasses.field(default_factory=lambda: {1: 1.0})
    source: str = "auto"
    rate: float | None = None
    users: int | None = None


def parse_model(text: str, batch_mix: str | None = None, source: str = "auto") -> ModelTarget:
    """``minilm_int8``, ``minilm_int8:2`` or ``minilm_int8:2@3`` (weight 3) → :class:`ModelTarget`."""
    spec, _, weight_text = text.partition("@")
    name, _, version = spec.partition(":")
    if not name or (version and not version.isdigit()):
        raise LoadTestError(
            f"model {text!r}: expected NAME[:VERSION][@WEIGHT], like minilm_int8 or minilm_int8:1@3"
        )
    try:
        weight = int(weight_text) if weight_text else 1
    except ValueError:
        weight = 0
    if weight < 1:
        raise LoadTestError(f"model {text!r}: expected a whole weight >= 1 after '@', got {weight_text!r}")
    mix = parse_batch_mix(batch_mix) if batch_mix else {1: 1.0}
    return ModelTarget(name, version, weight, mix, source)


@dataclasses.dataclass
class LoadTestOptions:
    """Everything a run needs. ``url`` ``None`` starts the embedded server on ``repo``."""

    models: Sequence[ModelTarget]
    report_dir: Path | str
    url: str | None = None
    protocol: str = "http"
    scenario: str = "steady"
    users: int = 16
    duration: float | str = 60.0
    workers: int = 0
    ramp_steps: int = 5
    slo: SLO = dataclasses.field(default_factory=SLO)
    repo: Path | str = "model_repository"
    #: with ``url``: where Triton's other endpoints are (default: same host, ports 8000/8001/8002)
    http_url: str | None = None
    metrics_url: str | None = None
    #: with ``url``: the key of Triton's restricted APIs (statistics, for the batch sizes formed);
    #: default ``$TRITONKIT_ADMIN_KEY``. The embedded server's own key is used without it.
    admin_key: str | None = None
    seed: int = 0
    request_timeout: float = 60.0
    #: HTTP transport of the users: ``lean`` (pre-encoded bodies on geventhttpclient, default) or
    #: ``tritonclient`` (``InferenceServerClient.infer`` per request, as applications call it)
    http_transport: str = "lean"
    wrk: bool = False
    plots: bool = True
    progress: bool = True
    #: where progress lines go (default stderr)
    stream: IO[str] | None = None

    def validate(self) -> None:
        """Raise :class:`LoadTestError` for the first bad value (one line, expected vs given).

        Normalises as it goes: ``duration`` becomes seconds, ``report_dir`` an absolute path
        that was just written to.
        """
        if not self.models:
            raise LoadTestError("no model given; expected at least one --model")
        if self.protocol not in ("http", "grpc"):
            raise LoadTestError(f"protocol {self.protocol!r}: expected http or grpc")
        if self.scenario not in SCENARIOS:
            raise LoadTestError(f"scenario {self.scenario!r}: expected one of {', '.join(SCENARIOS)}")
        if not isinstance(self.users, int) or self.users < 1:
            raise LoadTestError(f"users {self.users!r}: expected a whole number >= 1")
        self.duration = parse_duration(self.duration)
        if not isinstance(self.workers, int) or self.workers < 0:
            raise LoadTestError(f"workers {self.workers!r}: expected a whole number >= 0")
        if self.workers > (os.cpu_count() or 1) * 4:
            raise LoadTestError(
                f"workers {self.workers}: expected at most {(os.cpu_count() or 1) * 4} on this machine"
            )
        if self.http_transport not in HTTP_TRANSPORTS:
            raise LoadTestError(
                f"HTTP transport {self.http_transport!r}: expected one of {', '.join(HTTP_TRANSPORTS)}"
            )
        if self.ramp_steps < 1:
            raise LoadTestError(f"ramp steps {self.ramp_steps}: expected at least 1")
        if not self.request_timeout > 0:
            raise LoadTestError(
                f"request timeout {self.request_timeout}: expected a positive number of seconds"
            )
        paced = [m for m in self.models if m.rate is not None]
        if paced:
            self._check_paced(paced)
        make_plan(self.scenario, self.users, self.duration, ramp_steps=self.ramp_steps)
        self.report_dir = _writable_dir(Path(self.report_dir))

    def _check_paced(self, paced: Sequence[ModelTarget]) -> None:
        if len(paced) != len(self.models):
            raise LoadTestError("paced models: expected a rate for every model or for none")
        for m in paced:
            if not (m.rate or 0) > 0 or not isinstance(m.users, int) or m.users < 1:
                raise LoadTestError(
                    f"model `{m.name}` paced at {m.rate} requests/s by {m.users} users: expected a rate > 0 "
                    "and a whole number of users >= 1"
                )
        total = sum(m.users or 0 for m in paced)
        if self.users != total or self.scenario != "steady":
            raise LoadTestError(
                f"paced models need the steady scenario with users = the sum of their users ({total}); "
                f"got {self.scenario} with {self.users}"
            )


def _writable_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise LoadTestError(f"report directory {path} cannot be written: {exc.strerror or exc}") from None
    return path.resolve()
