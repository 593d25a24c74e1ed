"""Open-loop load on several models of one server at once, and each model's client-side p99.

Owns :class:`Stream` (a model, its arrival rate and batch mix, its budget), :class:`ModelResult`,
:class:`GroupLevel` and :func:`measure_streams`. The load is :mod:`tritonkit.measure.loadgen`'s
constant-arrival-rate open loop (``Level("rate", r)``: one request every ``1 / r`` s whatever the
answers do, late sends and drops counted), one generator per model and batch size of its mix at
``rate x weight`` (the superposition is the model's arrivals), all on the process's one load loop, so
every model is loaded at its planned rate at the same time. The requests are the load tests' payloads
(:func:`tritonkit.measure.payloads.make_payloads`, ``auto`` data), drawn by the measuring generator.
Latencies are timed per request in nanoseconds and merged per model; Triton's queue/compute split per
model comes from two statistics snapshots around the measured span. A level whose generator sent more
than 5 % of a model's requests late is marked generator-limited: it measured the client, not the server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from tritonkit.client import Client
from tritonkit.errors import TritonKitError
from tritonkit.measure.loadgen import Level, LoadGenerator, RawWindow, Target, WindowSpec
from tritonkit.measure.stats import ServerSplit, latency_percentiles, server_split

__all__ = ["GroupLevel", "MeasureSettings", "ModelResult", "Stream", "measure_streams"]

#: a level whose generator sent more than this share of a model's requests late measured the client
MAX_LATE_SHARE = 0.05


@dataclasses.dataclass(frozen=True)
class Stream:
    model: str
    rate: float
    batch_mix: Mapping[int, float]
    budget_ms: float


@dataclasses.dataclass(frozen=True)
class MeasureSettings:
    """How long a level runs: a warm-up, then enough seconds for ``min_samples`` of the slowest stream
    (between ``min_seconds`` and ``max_seconds``), cut into ``window_s`` windows."""

    warmup_s: float = 2.0
    min_seconds: float = 5.0
    max_seconds: float = 20.0
    min_samples: int = 100
    window_s: float = 1.0
    protocol: str = "http"
    timeout_s: float = 30.0

    def seconds_for(self, rates: Sequence[float]) -> float:
        slowest = min(rates) if rates else 1.0
        return min(self.max_seconds, max(self.min_seconds, self.min_samples / max(slowest, 1e-9)))


@dataclasses.dataclass
class ModelResult:
    model: str
    offered_rps: float
    throughput: float
    percentiles: dict[str, float]
    successes: int
    failures: int
    sent: int
    late_share: float
    budget_ms: float
    server: ServerSplit
    error: str = ""

    @property
    def p99_ms(self) -> float:
        return self.percentiles["p99_us"] / 1000.0

    @property
    def within(self) -> bool:
        return self.successes > 0 and self.failures == 0 and self.p99_ms <= self.budget_ms

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "offered_rps": round(self.offered_rps, 3),
            "throughput": round(self.throughput, 3),
            "p50_ms": round(self.percentiles["p50_us"] / 1000.0, 3),
            "p99_ms": round(self.p99_ms, 3),
            "budget_ms": self.budget_ms,
            "within": self.within,
            "successes": self.successes,
            "failures": self.failures,
            "late_share": round(self.late_share, 4),
            "queue_us": self.server.queue_us,
            "compute_infer_us": self.server.compute_infer_us,
            "average_batch": round(self.server.average_batch, 3),
            **({"error": self.error} if self.error else {}),
        }


@dataclasses.dataclass
class GroupLevel:
    """One level of a group: every model at ``share`` x its target rate, measured together."""

    share: float
    results: dict[str, ModelResult]
    seconds: float

    @property
    def generator_limited(self) -> bool:
        return any(r.late_share > MAX_LATE_SHARE for r in self.results.values())

    @property
    def ok(self) -> bool:
        return not self.generator_limited and all(r.within for r in self.results.values())

    def queue_us(self) -> float:
        """Triton's queue time per request over the pod's models (what the HPA metric averages)."""
        done = sum(r.server.requests for r in self.results.values())
        if not done:
            return 0.0
        return sum(r.server.queue_us * r.server.requests for r in self.results.values()) / done

    def as_dict(self) -> dict[str, Any]:
        return {
            "share": round(self.share, 5),
            "ok": self.ok,
            "generator_limited": self.generator_limited,
            "seconds": round(self.seconds, 2),
            "queue_us": round(self.queue_us(), 1),
            "models": {k: v.as_dict() for k, v in self.results.items()},
        }


def _snapshot(client: Client, models: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in models:
        with contextlib.suppress(TritonKitError):
            rows = client.statistics(model)
            out[model] = rows[-1] if rows else None
    return out


def _collect(
    generators: Sequence[tuple[str, LoadGenerator]], rounds: int, timeout: float
) -> list[list[RawWindow]]:
    """``rounds`` windows of every generator (they run at once; each one's windows queue until read)."""
    windows: list[list[RawWindow]] = [[] for _ in generators]
    for _ in range(rounds):
        for i, (_, generator) in enumerate(generators):
            windows[i].extend(generator.next_window(timeout))
    return windows


def measure_streams(
    url: str,
    headers: Mapping[str, str],
    streams: Sequence[Stream],
    settings: MeasureSettings = MeasureSettings(),
) -> tuple[dict[str, ModelResult], float]:
    """Send every stream at once (open loop) and return each model's result and the seconds measured."""
    seconds = settings.seconds_for([s.rate for s in streams])
    timeout = settings.window_s + settings.timeout_s + 30
    generators: list[tuple[str, LoadGenerator]] = []
    offered: dict[str, float] = {s.model: s.rate for s in streams}
    try:
        for index, stream in enumerate(streams):
            total = sum(stream.batch_mix.values())
            for batch, weight in sorted(stream.batch_mix.items()):
                target = Target(
                    url, stream.model, settings.protocol, headers=dict(headers), batch_size=batch,
                    timeout_s=settings.timeout_s, seed=index * 1009 + batch,
                )  # fmt: skip
                generator = LoadGenerator(target).__enter__()
                generators.append((stream.model, generator))
                generator.start(Level("rate", stream.rate * weight / total), WindowSpec(settings.window_s))
        _collect(generators, max(1, math.ceil(settings.warmup_s / settings.window_s)), timeout)
        with Client(url, settings.protocol, timeout=10, headers=dict(headers) or None) as client:
            before = _snapshot(client, list(offered))
            raw = _collect(generators, max(1, math.ceil(seconds / settings.window_s)), timeout)
            after = _snapshot(client, list(offered))
    finally:
        for _, generator in generators:
            with contextlib.suppress(Exception):
                generator.__exit__()
    budgets = {s.model: s.budget_ms for s in streams}
    results: dict[str, ModelResult] = {}
    for model, rate in offered.items():
        mine = [w for (name, _), ws in zip(generators, raw, strict=True) if name == model for w in ws]
        walls = [
            sum(w.wall_s for w in ws) for (name, _), ws in zip(generators, raw, strict=True) if name == model
        ]
        latencies = [lat for w in mine for lat in w.latencies_ns]
        sent = sum(w.sent for w in mine)
        dropped = sum(w.dropped for w in mine)
        late = sum(w.late for w in mine) + dropped
        results[model] = ModelResult(
            model, rate, len(latencies) / max(max(walls, default=0.0), 1e-9),
            latency_percentiles(latencies), len(latencies), sum(w.failures for w in mine), sent,
            late / (sent + dropped) if sent + dropped else 0.0, budgets[model],
            server_split(before.get(model), after.get(model)), next((w.error for w in mine if w.error), ""),
        )  # fmt: skip
    return results, seconds
