"""Locust ``LoadTestShape`` wrappers around the plans of :mod:`.scenarios`.

:class:`PlanShape` replays any plan. :class:`RampShape` also measures each step from Locust's
statistics (requests, failures, latency percentiles, throughput), stops the ramp at the end of the
first step that breaks the SLO (the knee is the step before), and keeps the steps for the report's
"throughput vs p99" plot. Importing this module imports Locust.
"""

from __future__ import annotations

from typing import Any, ClassVar

from locust import LoadTestShape

from tritonkit.loadtest.scenarios import Plan, Ramp
from tritonkit.loadtest.slo import SLO, Histogram, Totals, check_slo

__all__ = ["PlanShape", "RampShape", "shape_for"]


class PlanShape(LoadTestShape):
    """Follows ``plan`` (a class attribute, set by :func:`shape_for`)."""

    abstract = True
    plan: ClassVar[Plan]

    def tick(self) -> tuple[int, float] | None:
        return self.plan.tick(self.get_run_time())  # type: ignore[no-untyped-call]


class RampShape(PlanShape):
    """A ramp that measures its steps and stops at the first one that breaks ``slo``."""

    abstract = True
    plan: ClassVar[Ramp]
    slo: ClassVar[SLO] = SLO()
    #: one record per finished step, in order (read by the locustfile's quitting hook)
    steps: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._step = -1
        self._mark: tuple[float, int, int, dict[int, int]] | None = None

    def _snapshot(self, t: float) -> tuple[float, int, int, dict[int, int]]:
        total = self.runner.stats.total if self.runner is not None else None
        if total is None:
            return t, 0, 0, {}
        return t, total.num_requests, total.num_failures, dict(total.response_times)

    def finish_step(self, t: float) -> None:
        """Close the running step: measure it and gate it."""
        if self._mark is None:
            return
        start, requests0, failures0, times0 = self._mark
        _, requests1, failures1, times1 = self._snapshot(t)
        hist = Histogram()
        for ms, count in times1.items():
            delta = count - times0.get(ms, 0)
            if delta > 0:
                hist.add(max(float(ms), 0.001), delta)
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
                "breaches": [str(b) for b in breaches],
            }
        )
        if breaches:
            self.plan.breach(self._step)
        self._mark = None

    def tick(self) -> tuple[int, float] | None:
        t = self.get_run_time()  # type: ignore[no-untyped-call]
        step = self.plan.step_at(t)
        if step != self._step:
            self.finish_step(t)
            self._step = step
            if self.plan.tick(t) is not None:
                self._mark = self._snapshot(t)
        return self.plan.tick(t)


def shape_for(plan: Plan, slo: SLO | None = None) -> type[PlanShape]:
    """A concrete shape class for ``plan`` (Locust picks up exactly one shape per locustfile)."""
    if isinstance(plan, Ramp):
        return type("TritonRampShape", (RampShape,), {"plan": plan, "slo": slo or SLO(), "steps": []})
    return type(f"Triton{plan.name.title()}Shape", (PlanShape,), {"plan": plan})
