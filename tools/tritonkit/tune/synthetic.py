"""A deterministic response surface of a GPU-like model, for checking the searches without a server.

Owns :func:`surface`: throughput and p99 of a config point from a small queueing model (per-execution
cost with a fixed part, so batching pays; batches that only form with enough batching delay; preferred
sizes that wait for a full batch; instances that share two cores; a bounded queue that trims the tail at
a small throughput cost), :func:`noisy_surface` (the same with every throughput off by up to a share,
seeded), and :data:`AXES`, the grid ``tritonkit tune`` sweeps for such a model.
Used by the tests and ``tritonkit bench`` (section ``tune``); the figures are a model, not a measurement.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from tritonkit.tune.search import Axis, Outcome

__all__ = ["AXES", "noisy_surface", "surface"]

AXES: tuple[Axis, ...] = (
    Axis("max_batch_size", (1, 2, 4, 8, 16, 32)),
    Axis("delay_us", (0, 100, 500, 1000, 2000, 4000)),
    Axis("preferred", ("none", "max")),
    Axis("instances", (1, 2, 3, 4)),
    Axis("queue", ("unbounded", "bounded")),
)


def surface(point: Mapping[str, Any], budget_ms: float = 20.0, min_throughput: float = 0.0) -> Outcome:
    """What the config sustains within ``budget_ms``: throughput (req/s) at the highest load whose p99 fits,
    and that p99 (ms). Infeasible when even a lone request's p99 breaks the budget."""
    mbs = int(point["max_batch_size"])
    delay_ms = float(point["delay_us"]) / 1000.0
    instances = int(point["instances"])
    preferred = point["preferred"] == "max"
    # Batches form while requests wait: about one more request per 0.35 ms of delay, up to the max.
    formed = min(mbs, 1.0 + delay_ms / 0.35 * (1.6 if preferred else 1.0))
    service_ms = 1.8 + 0.22 * formed  # fixed launch cost + per-item cost
    cores = min(instances, 2) + 0.25 * max(0, instances - 2)  # two cores: more instances contend
    capacity = cores * formed / service_ms * 1000.0
    contention = 1.0 + 0.35 * max(0, instances - 2)
    # p99 of a lone request, and at saturation (queueing behind every instance's batch)
    idle = (1.8 + 0.22 + delay_ms * (1.8 if preferred else 1.0) * 0.5) * contention
    saturated = (2.2 * service_ms + delay_ms * (1.8 if preferred else 1.0)) * contention + 0.4 * instances
    if point["queue"] == "bounded":
        capacity *= 0.97
        saturated *= 0.9
    if idle > budget_ms:
        return Outcome(0.0, round(idle, 3), False)
    # p99 grows from idle to saturated as load approaches capacity: the load that fits is the fraction
    # of the way the budget allows (convex, as queues are).
    share = 1.0 if saturated <= budget_ms else ((budget_ms - idle) / (saturated - idle)) ** 0.5
    p99 = min(saturated, budget_ms)
    sustained = capacity * share
    return Outcome(round(sustained, 3), round(p99, 3), sustained >= min_throughput and sustained > 0)


def noisy_surface(budget_ms: float, seed: int, noise: float) -> Callable[..., Outcome]:
    """``evaluate(point, *_)``: :func:`surface` with each throughput off by a uniform share up to ``noise``
    (a fresh draw per call, so a point measured again reads differently; extra arguments, such as a finals
    round, are ignored)."""
    rng = random.Random(seed)

    def evaluate(point: Mapping[str, Any], *_: int) -> Outcome:
        o = surface(point, budget_ms)
        return Outcome(o.throughput * (1 + rng.uniform(-noise, noise)), o.p99_ms, o.feasible)

    return evaluate
