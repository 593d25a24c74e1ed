"""Locust ``LoadTestShape`` wrappers around the plans of :mod:`.scenarios`.

:class:`PlanShape` replays any plan. :class:`RampShape` also measures each step (requests,
failures, µs latency percentiles with the p99's sample count and 95 % interval, throughput) from the
per-request records the locustfile's listeners collect (:class:`Live`), never from Locust's 10 s rolling
window (which smears one step into the next), and only after the step's settling period (the users just
added, their connections opening: :func:`settle_seconds`), stops the ramp at the end of the first step
that breaks the SLO (the knee is the step before), and keeps the steps for the report's "throughput vs
p99" plot. :func:`request_stop` ends either shape at its next tick (once a second), Locust's own end of
a shape: users stopped within ``--stop-timeout``, the stop hooks run, the statistics written. Importing
this module imports Locust.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from locust import LoadTestShape

from tritonkit.loadtest.scenarios import Plan, Ramp
from tritonkit.loadtest.slo import SLO, Histogram, Totals, check_slo

__all__ = ["Live", "PlanShape", "RampShape", "request_stop", "settle_seconds", "shape_for"]

#: non-empty once :func:`request_stop` was called in this process
_STOP: list[bool] = []


def request_stop(*_: Any) -> None:
    """End the run at the shape's next tick (a signal handler: its arguments are ignored)."""
    _STOP.append(True)


def settle_seconds(step_duration: float) -> float:
    """How long a ramp step runs before it is measured: a fifth of it, at most 5 s (Locust's shape ticks
    once a second, so the measured part starts at the first tick after this)."""
    return min(5.0, 0.2 * step_duration)


class PlanShape(LoadTestShape):
    """Follows ``plan`` (a class attribute, set by :func:`shape_for`)."""

    abstract = True
    plan: ClassVar[Plan]

    def tick(self) -> tuple[int, float] | None:
        if _STOP:
            return None
        return self.plan.tick(self.get_run_time())  # type: ignore[no-untyped-call]


@dataclasses.dataclass
class Live:
    """Every request so far as the process running the shape sees it: counts and µs latencies.

    Standalone, the locustfile's request listener adds to it; on a master, the workers' reports
    (``report_to_master`` → ``worker_report``) do, as Locust's own statistics travel.
    """

    requests: int = 0
    failures: int = 0
    hist: Histogram = dataclasses.field(default_factory=Histogram)

    def add(self, ms: float, failed: bool) -> None:
        self.requests += 1
        self.failures += int(failed)
        if not failed:  # a failure's time is no latency (a dead server answers in 1 ms)
            self.hist.add(ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "failures": self.failures,
            "histogram": {str(k): v for k, v in self.hist.counts.items()},
        }

    def take(self) -> dict[str, Any]:
        """:meth:`to_json`, then empty: what a worker has not reported yet, reported once."""
        data = self.to_json()
        self.requests = self.failures = 0
        self.hist = Histogram()
        return data

    def merge_json(self, data: Mapping[str, Any]) -> None:
        self.requests += int(data["requests"])
        self.failures += int(data["failures"])
        self.hist.merge({int(k): int(v) for k, v in data["histogram"].items()})


class RampShape(PlanShape):
    """A ramp that measures its steps and stops at the first one that breaks ``slo``.

    A step's percentiles come from :class:`Live` (µs keys), not from Locust's statistics, whose
    response times are rounded to whole milliseconds: the SLO decision is taken on the former.
    """

    abstract = True
    plan: ClassVar[Ramp]
    slo: ClassVar[SLO] = SLO()
    #: one record per finished step, in order (read by the locustfile's quitting hook)
    steps: ClassVar[list[dict[str, Any]]] = []
    #: what the locustfile's listeners collect
    live: ClassVar[Live] = Live()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._step = -1
        self._mark: tuple[float, int, int, Histogram] | None = None
        #: run time at which the running step's measurement starts (after its settling period), and the
        #: requests completed when the step began (those of the settling period are counted apart)
        self._measure_from: float | None = None
        self._step_start_requests = 0
        self._settle_requests = 0

    def _snapshot(self, t: float) -> tuple[float, int, int, Histogram]:
        live = self.live
        return t, live.requests, live.failures, live.hist.copy()

    def finish_step(self, t: float) -> None:
        """Close the running step: measure it and gate it."""
        if self._mark is None:
            self._measure_from = None
            return
        start, requests0, failures0, hist0 = self._mark
        _, requests1, failures1, hist1 = self._snapshot(t)
        hist = hist1.minus(hist0)
        totals = Totals.from_histogram(hist, failures1 - failures0, t - start, requests=requests1 - requests0)
        breaches = check_slo(self.slo, totals, scope=f"ramp step {self._step + 1}", throughput=False)
        type(self).steps.append(
            {
                "step": self._step + 1,
                "users": self.plan.step_users_at(self._step),
                "seconds": round(totals.seconds, 3),
                "requests": totals.requests,
                "failures": totals.failures,
                "rps": totals.rps,
                "p50_ms": totals.p50_ms,
                "p95_ms": totals.p95_ms,
                "p99_ms": totals.p99_ms,
                "p99_ci_ms": list(totals.p99_ci_ms),
                "samples": totals.samples,
                "settle_s": round(start - self.plan.step_duration * self._step, 3),
                "settle_requests": self._settle_requests,
                "breaches": [str(b) for b in breaches],
            }
        )
        if breaches:
            self.plan.breach(self._step)
        self._mark = self._measure_from = None

    def tick(self) -> tuple[int, float] | None:
        if _STOP:
            return None  # the quitting hook closes the running step (finish_step)
        t = self.get_run_time()  # type: ignore[no-untyped-call]
        step = self.plan.step_at(t)
        if step != self._step:
            self.finish_step(t)
            self._step = step
            if self.plan.tick(t) is not None:
                self._measure_from = step * self.plan.step_duration + settle_seconds(self.plan.step_duration)
                self._step_start_requests = self.live.requests
        if self._measure_from is not None and self._mark is None and t >= self._measure_from:
            self._mark = self._snapshot(t)
            self._settle_requests = self.live.requests - self._step_start_requests
        return self.plan.tick(t)


def shape_for(plan: Plan, slo: SLO | None = None) -> type[PlanShape]:
    """A concrete shape class for ``plan`` (Locust picks up exactly one shape per locustfile)."""
    if isinstance(plan, Ramp):
        return type(
            "TritonRampShape", (RampShape,), {"plan": plan, "slo": slo or SLO(), "steps": [], "live": Live()}
        )
    return type(f"Triton{plan.name.title()}Shape", (PlanShape,), {"plan": plan})
