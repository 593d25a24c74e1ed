"""The numbers of a measurement window, and when a run of windows counts as stable.

Owns: client latency percentiles at microsecond resolution (from nanosecond timings, never rounded to
whole milliseconds); Triton's server-side split of a window (queue, compute input, compute infer,
compute output, per request, from the difference of two statistics snapshots, and the batch sizes the
server formed from ``batch_stats``); the confidence interval of a percentile from the latencies it was
computed from (:func:`quantile_interval_us`: order statistics, so a p99 of a few hundred requests shows
how loose it is; :func:`quantile_ci_ranks`, the distribution-free order-statistic ranks, exact binomial,
which the load test's histograms read too); and perf_analyzer's stability rule: the last ``count`` windows agree within
``tolerance`` on throughput and p99.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "PERCENTILES",
    "ServerSplit",
    "StabilityRule",
    "latency_percentiles",
    "merge_splits",
    "quantile_ci_ranks",
    "quantile_interval_us",
    "server_split",
]

#: Percentiles every window and level reports.
PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)


def _binomial_cdf(n: int, q: float) -> dict[int, float]:
    """P(B <= k) for B ~ Binomial(n, q), for the ks where it is neither 0 nor 1 to double precision
    (outside: 0 below, 1 above). Log-space terms, so n may be in the millions."""
    sd = math.sqrt(n * q * (1 - q))
    low, high = max(0, math.floor(n * q - 12 * sd - 2)), min(n, math.ceil(n * q + 12 * sd + 2))
    log_q, log_p = math.log(q), math.log1p(-q)
    base = math.lgamma(n + 1)
    total, cdf = 0.0, {}
    for k in range(low, high + 1):
        total += math.exp(base - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q + (n - k) * log_p)
        cdf[k] = min(1.0, total)
    return cdf


def quantile_ci_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int | None, int | None]:
    """1-based ranks (j, k) of the sorted sample such that the ``q`` quantile lies between the j-th and
    the k-th smallest value with at least ``confidence``: P(j <= B < k) >= confidence for B ~ Bin(n, q),
    split evenly between the tails. ``None`` for a bound outside the sample: below the smallest or above
    the largest value measured (a p99 of under ~300 samples has no upper bound inside them)."""
    if n < 1 or not 0 < q < 1 or not 0 < confidence < 1:
        return None, None
    tail = (1 - confidence) / 2
    cdf = _binomial_cdf(n, q)
    first, last = min(cdf), max(cdf)

    def at(k: int) -> float:  # P(B <= k)
        return cdf.get(k, 0.0 if k < first else 1.0)

    lower = next((j for j in range(min(n, last + 1), 0, -1) if at(j - 1) <= tail), None)
    upper = next((k for k in range(max(1, first), n + 1) if 1 - at(k - 1) <= tail), None)
    return lower, upper


def latency_percentiles(latencies_ns: Sequence[int] | np.ndarray[Any, Any]) -> dict[str, float]:
    """``{"p50_us": ..., "p99_us": ..., "mean_us": ...}`` from nanosecond latencies (empty: all 0).

    Linear interpolation between order statistics, kept to 0.1 µs: no whole-millisecond buckets.
    """
    values = np.asarray(latencies_ns, dtype=np.float64) / 1000.0
    if values.size == 0:
        return {**{f"p{q}_us": 0.0 for q in PERCENTILES}, "mean_us": 0.0, "max_us": 0.0}
    points = np.percentile(values, PERCENTILES)
    out = {f"p{q}_us": round(float(v), 1) for q, v in zip(PERCENTILES, points, strict=True)}
    out["mean_us"] = round(float(values.mean()), 1)
    out["max_us"] = round(float(values.max()), 1)
    return out


def quantile_interval_us(
    latencies_ns: Sequence[int] | np.ndarray[Any, Any], q: float = 0.99, confidence: float = 0.95
) -> tuple[float | None, float | None]:
    """The ``confidence`` interval (µs) of the ``q`` quantile of these latencies: the order statistics
    :func:`quantile_ci_ranks` names (None: the bound lies outside the sample)."""
    values = np.sort(np.asarray(latencies_ns, dtype=np.float64)) / 1000.0
    lower, upper = quantile_ci_ranks(int(values.size), q, confidence)
    return (
        None if lower is None else round(float(values[lower - 1]), 1),
        None if upper is None else round(float(values[upper - 1]), 1),
    )


@dataclasses.dataclass(frozen=True)
class StabilityRule:
    """Stable when the last ``count`` windows each lie within ``tolerance`` of their mean, on both metrics."""

    count: int = 3
    tolerance: float = 0.10

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"stability count {self.count}: expected >= 1")
        if self.tolerance < 0:
            raise ValueError(f"stability tolerance {self.tolerance}: expected >= 0")

    def stable(self, throughputs: Sequence[float], p99s: Sequence[float]) -> bool:
        """True when the last ``count`` throughputs and p99s each agree within ``tolerance``.

        A window without one success (throughput 0) never counts as stable: nothing was measured.
        """
        if len(throughputs) < self.count or len(p99s) < self.count:
            return False
        for series in (throughputs[-self.count :], p99s[-self.count :]):
            mean = sum(series) / len(series)
            if mean <= 0:
                return False
            if any(abs(x - mean) > self.tolerance * mean for x in series):
                return False
        return True


@dataclasses.dataclass(frozen=True)
class ServerSplit:
    """What Triton spent per successful request in one window (µs), and the batches it formed.

    ``inference_count``/``execution_count``: requests (batch items) and model executions in the window;
    their ratio is the average batch the server formed. ``batches``: batch size -> executions at that
    size (Triton's ``batch_stats``); a model without batching shows every execution at size 1.
    """

    requests: int = 0
    failures: int = 0
    queue_us: float = 0.0
    compute_input_us: float = 0.0
    compute_infer_us: float = 0.0
    compute_output_us: float = 0.0
    total_us: float = 0.0
    inference_count: int = 0
    execution_count: int = 0
    batches: Mapping[int, int] = dataclasses.field(default_factory=dict)

    @property
    def average_batch(self) -> float:
        return self.inference_count / self.execution_count if self.execution_count else 0.0

    @property
    def parts_us(self) -> float:
        """Queue + compute input + compute infer + compute output (the rest of ``total_us`` is overhead)."""
        return self.queue_us + self.compute_input_us + self.compute_infer_us + self.compute_output_us

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["batches"] = {str(k): v for k, v in sorted(self.batches.items())}
        out["average_batch"] = round(self.average_batch, 3)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerSplit:
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["batches"] = {int(k): int(v) for k, v in dict(data.get("batches", {})).items()}
        return cls(**kwargs)


def _value(stats: Any, name: str) -> int:
    return int(getattr(stats, name, 0) or 0)


def server_split(before: Any, after: Any) -> ServerSplit:
    """The split of the window between two :class:`~tritonkit.client.ModelStatistics` snapshots of one
    model version (``before`` may be None: the model had served nothing yet)."""
    if after is None:
        return ServerSplit()

    def delta(name: str) -> int:
        return _value(after, name) - (_value(before, name) if before is not None else 0)

    ok = delta("success_count")
    per = 1000.0 * ok if ok else 0.0

    def avg(name: str) -> float:
        return round(delta(name) / per, 1) if per else 0.0

    old: Mapping[int, int] = getattr(before, "batch_executions", {}) if before is not None else {}
    new: Mapping[int, int] = getattr(after, "batch_executions", {})
    batches = {size: count - old.get(size, 0) for size, count in new.items() if count - old.get(size, 0) > 0}
    return ServerSplit(
        requests=ok,
        failures=delta("fail_count"),
        queue_us=avg("queue_ns"),
        compute_input_us=avg("compute_input_ns"),
        compute_infer_us=avg("compute_infer_ns"),
        compute_output_us=avg("compute_output_ns"),
        total_us=avg("success_ns"),
        inference_count=delta("inference_count"),
        execution_count=delta("execution_count"),
        batches=batches,
    )


def merge_splits(splits: Sequence[ServerSplit]) -> ServerSplit:
    """Several windows' splits as one (request-weighted averages, summed counts)."""
    ok = sum(s.requests for s in splits)

    def weighted(name: str) -> float:
        return round(sum(getattr(s, name) * s.requests for s in splits) / ok, 1) if ok else 0.0

    batches: dict[int, int] = {}
    for s in splits:
        for size, count in s.batches.items():
            batches[size] = batches.get(size, 0) + count
    return ServerSplit(
        requests=ok,
        failures=sum(s.failures for s in splits),
        queue_us=weighted("queue_us"),
        compute_input_us=weighted("compute_input_us"),
        compute_infer_us=weighted("compute_infer_us"),
        compute_output_us=weighted("compute_output_us"),
        total_us=weighted("total_us"),
        inference_count=sum(s.inference_count for s in splits),
        execution_count=sum(s.execution_count for s in splits),
        batches=batches,
    )
