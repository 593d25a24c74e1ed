"""SLO gates: latency percentiles, failure ratio and minimum throughput, checked after a run.

A breach makes ``tritonkit loadtest`` exit non-zero and is named in the report. The same gate
checks one ramp step (so the ramp can stop at the knee) and a whole run. Pure: numbers in,
breaches out. Also owns the latency histogram the gates read (µs keys, mergeable across Locust
processes), because Locust's own percentiles are rounded to whole milliseconds, with the confidence
interval of a percentile from its sample count (the ranks come from
:func:`tritonkit.measure.stats.quantile_ci_ranks`): a p99 of 110 requests has no upper bound inside the sample.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from tritonkit.errors import LoadTestError
from tritonkit.measure.stats import quantile_ci_ranks

__all__ = ["SLO", "Breach", "Histogram", "Totals", "check_slo"]

#: latencies under this many µs are kept exactly; above, to 4 significant digits
_EXACT_BELOW_US = 10_000
#: exit code of ``tritonkit loadtest`` when a gate broke (1 is for errors)
EXIT_SLO_BREACH = 3


class Histogram:
    """Latencies at microsecond resolution, mergeable across Locust processes by adding counts.

    A key is a latency in whole µs: exact below 10 ms, rounded to 4 significant digits above (at
    most 0.05 % off; a 1.2345 s answer counts as 1.235 s). Percentiles are the latency of the
    request at that rank (nearest-rank), so they are as fine as the keys, never Locust's whole
    milliseconds.
    """

    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        self.counts: dict[int, int] = dict(counts or {})

    @staticmethod
    def bucket(ms: float) -> int:
        us = max(1, round(ms * 1000.0))
        if us < _EXACT_BELOW_US:
            return us
        scale = int(10 ** (len(str(us)) - 4))
        return round(us / scale) * scale

    def add(self, ms: float, count: int = 1) -> None:
        key = self.bucket(ms)
        self.counts[key] = self.counts.get(key, 0) + count

    def merge(self, other: Histogram | Mapping[int, int]) -> None:
        counts = other.counts if isinstance(other, Histogram) else other
        for key, count in counts.items():
            self.counts[int(key)] = self.counts.get(int(key), 0) + int(count)

    def copy(self) -> Histogram:
        return Histogram(self.counts)

    def minus(self, earlier: Histogram) -> Histogram:
        """What was added since ``earlier`` (a copy of this histogram taken before)."""
        return Histogram(
            {k: n - earlier.counts.get(k, 0) for k, n in self.counts.items() if n > earlier.counts.get(k, 0)}
        )

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def at_rank(self, rank: int) -> float:
        """The latency (ms) of the request at 1-based ``rank`` in ascending order."""
        seen = 0
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen >= rank:
                return key / 1000.0
        return max(self.counts) / 1000.0

    def quantile_ci(self, q: float, confidence: float = 0.95) -> tuple[float | None, float | None]:
        """The ``confidence`` interval (ms) of the ``q`` quantile from these samples (see
        :func:`quantile_ci_ranks`; None: the bound lies outside the sample)."""
        lower, upper = quantile_ci_ranks(self.total, q, confidence)
        return (
            None if lower is None else self.at_rank(lower),
            None if upper is None else self.at_rank(upper),
        )

    def percentile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) in ms (nearest rank); ``None`` when empty."""
        total = self.total
        return self.at_rank(max(1, math.ceil(q * total))) if total else None


@dataclasses.dataclass(frozen=True)
class Totals:
    """What the gates look at for one scope (a model, a ramp step, the whole run)."""

    requests: int
    failures: int
    seconds: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    #: the 95 % confidence interval of ``p99_ms`` (None: a bound outside the sample), and its sample count
    p99_ci_ms: tuple[float | None, float | None] = (None, None)
    samples: int = 0

    @property
    def rps(self) -> float:
        """Successes per second: a failed (e.g. rejected by a full queue) request is no throughput."""
        return (self.requests - self.failures) / self.seconds if self.seconds > 0 else 0.0

    @property
    def failures_per_s(self) -> float:
        return self.failures / self.seconds if self.seconds > 0 else 0.0

    @property
    def failure_ratio(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    @classmethod
    def from_histogram(
        cls, hist: Histogram, failures: int, seconds: float, requests: int | None = None
    ) -> Totals:
        return cls(
            requests=hist.total if requests is None else requests,
            failures=failures,
            seconds=seconds,
            p50_ms=hist.percentile(0.50),
            p95_ms=hist.percentile(0.95),
            p99_ms=hist.percentile(0.99),
            p99_ci_ms=hist.quantile_ci(0.99),
            samples=hist.total,
        )


class Breach(NamedTuple):
    """One broken gate (a plain record, printed as its one-line message): ``gate`` is ``p95_ms``,
    ``p99_ms``, ``failure_ratio`` or ``min_rps``."""

    gate: str
    limit: float
    measured: float
    scope: str = "overall"

    def __str__(self) -> str:
        if self.gate == "min_rps":
            return (
                f"{self.scope}: throughput {self.measured:,.1f} req/s is below the minimum {self.limit:,.1f}"
            )
        if self.gate == "failure_ratio":
            return f"{self.scope}: failure ratio {self.measured:.4f} exceeds {self.limit:.4f}"
        return f"{self.scope}: {self.gate[:3]} latency {self.measured:.2f} ms exceeds {self.limit:.2f} ms"


@dataclasses.dataclass(frozen=True)
class SLO:
    """Latency budget and health limits; ``None`` disables a gate."""

    p95_ms: float | None = None
    p99_ms: float | None = None
    max_failure_ratio: float | None = 0.0
    min_rps: float | None = None

    def __post_init__(self) -> None:
        for name in ("p95_ms", "p99_ms", "min_rps"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise LoadTestError(f"SLO `{name}` {value}: expected a positive number")
        ratio = self.max_failure_ratio
        if ratio is not None and not 0.0 <= ratio <= 1.0:
            raise LoadTestError(f"SLO `max_failure_ratio` {ratio}: expected a ratio between 0 and 1")

    @property
    def latency_gated(self) -> bool:
        return self.p95_ms is not None or self.p99_ms is not None

    def to_json(self) -> dict[str, float | None]:
        return dataclasses.asdict(self)


def check_slo(slo: SLO, totals: Totals, scope: str = "overall", *, throughput: bool = True) -> list[Breach]:
    """Every gate ``totals`` breaks (``throughput=False`` skips ``min_rps``, e.g. for ramp steps)."""
    breaches: list[Breach] = []
    for gate, limit, measured in (
        ("p95_ms", slo.p95_ms, totals.p95_ms),
        ("p99_ms", slo.p99_ms, totals.p99_ms),
    ):
        if limit is not None and measured is not None and measured > limit:
            breaches.append(Breach(gate, limit, measured, scope))
    if slo.max_failure_ratio is not None and totals.failure_ratio > slo.max_failure_ratio:
        breaches.append(Breach("failure_ratio", slo.max_failure_ratio, totals.failure_ratio, scope))
    if throughput and slo.min_rps is not None and totals.rps < slo.min_rps:
        breaches.append(Breach("min_rps", slo.min_rps, totals.rps, scope))
    return breaches


def describe(breaches: Iterable[Breach]) -> str:
    return "; ".join(str(b) for b in breaches)
