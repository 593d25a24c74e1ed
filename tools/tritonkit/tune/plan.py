"""A capacity plan from a tune: replicas, cost, the HPA target, the t4 overlay's patch, and the knee check.

Owns the arithmetic (:func:`make_plan`): one replica sustains the winner's throughput within the
budget; the fleet for a target rate with headroom is ``ceil(rate * (1 + headroom) / per_replica)``
(at least two: one pod may be disrupted); cost per million inferences is the fleet's GPU-hours per
second of traffic at that rate; the HPA target is Triton's queue time per request at the load each
replica carries when the fleet runs at the planned rate, read off the tuned curve (linear between
measured levels). :func:`kustomize_patch` turns it into a patch of the t4 overlay (HPA min/max replicas
and target on ``triton_queue_time_us_per_request``; the tuned instance count as a pod-template
annotation, so a new plan rolls the pods that load the new ``config.pbtxt``), :func:`apply_patch` adds
it to a kustomize tree and :func:`check_patch` renders and validates the result. :func:`check_knee`
runs ``tritonkit loadtest``'s ramp and says whether the knee lies where the plan says.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tritonkit import deploy
from tritonkit.atomic import write_text
from tritonkit.errors import TritonKitError
from tritonkit.loadtest.run import LoadTestOptions, parse_model
from tritonkit.loadtest.run import run as run_loadtest
from tritonkit.loadtest.slo import SLO

__all__ = ["PATCH_FILE", "Plan", "apply_patch", "check_knee", "check_patch", "kustomize_patch", "make_plan"]

PATCH_FILE = "capacity-plan.yaml"
HPA_METRIC = "triton_queue_time_us_per_request"


@dataclasses.dataclass(frozen=True)
class Plan:
    model: str
    budget_ms: float
    per_replica_rps: float
    concurrency: int
    target_rps: float
    headroom: float
    replicas: int
    min_replicas: int
    max_replicas: int
    load_per_replica_rps: float
    hpa_queue_us: int
    instances: int
    price_per_gpu_hour: float
    cost_per_million: float
    cost_per_million_at_capacity: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def markdown(self) -> str:
        return "\n".join(
            [
                f"# Capacity plan: `{self.model}` (p99 <= {self.budget_ms:g} ms)",
                "",
                f"- One replica sustains {self.per_replica_rps:,.1f} req/s within the budget "
                f"(concurrency {self.concurrency}, {self.instances} instance(s)).",
                f"- Target {self.target_rps:,.1f} req/s with {self.headroom:.0%} headroom: **{self.replicas} replicas** "
                f"({self.load_per_replica_rps:,.1f} req/s each); HPA min {self.min_replicas}, max {self.max_replicas}.",
                f"- HPA target: {self.hpa_queue_us} µs queue time per request "
                f"(`{HPA_METRIC}` at {self.load_per_replica_rps:,.1f} req/s per replica).",
                f"- Cost at ${self.price_per_gpu_hour:g}/GPU-hour: ${self.cost_per_million:,.4f} per million inferences "
                f"at the planned fleet, ${self.cost_per_million_at_capacity:,.4f} at full capacity.",
                "",
            ]
        )


def _curve(trial: Mapping[str, Any]) -> list[tuple[float, float]]:
    """(throughput, queue µs) of the winner's measured levels within the budget, by throughput."""
    points = [
        (float(level["throughput"]), float(level.get("queue_us", 0.0)))
        for level in trial.get("levels", [])
        if level.get("throughput", 0) > 0
    ]
    return sorted(points)


def queue_at(curve: Sequence[tuple[float, float]], rps: float) -> float:
    """Queue µs per request at ``rps``, linear between measured points, flat beyond them."""
    if not curve:
        return 0.0
    if rps <= curve[0][0]:
        return curve[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(curve):
        if x0 <= rps <= x1:
            return y0 + (y1 - y0) * ((rps - x0) / (x1 - x0) if x1 > x0 else 0.0)
    return curve[-1][1]


def make_plan(
    tune_result: Mapping[str, Any],
    *,
    target_rps: float,
    price_per_gpu_hour: float,
    headroom: float = 0.3,
    peak_factor: float = 2.0,
) -> Plan:
    """The plan for ``target_rps`` from a ``tune.json`` (its winner and the winner's curve)."""
    if not target_rps > 0:
        raise TritonKitError(f"target rate {target_rps}: expected requests/s > 0")
    if price_per_gpu_hour < 0 or not 0 <= headroom < 10 or peak_factor < 1:
        raise TritonKitError(
            f"price {price_per_gpu_hour}, headroom {headroom}, peak factor {peak_factor}: "
            "expected price >= 0, 0 <= headroom < 10 and peak factor >= 1"
        )
    winner = tune_result.get("winner")
    if not winner or not winner.get("throughput"):
        raise TritonKitError(
            "the tune has no winner (no config met the budget); expected a tune.json with one"
        )
    # The finals' median when the tune had finals: the search's figure is the best of many noisy ones.
    per_replica = float(winner.get("confirmed_throughput") or winner["throughput"])
    replicas = max(2, math.ceil(target_rps * (1 + headroom) / per_replica))
    load = target_rps / replicas
    gpu_hours_per_s = replicas / 3600.0
    return Plan(
        model=str(tune_result.get("model", "")),
        budget_ms=float(tune_result.get("latency_budget_ms", 0.0)),
        per_replica_rps=per_replica,
        concurrency=int(winner.get("concurrency") or 0),
        target_rps=target_rps,
        headroom=headroom,
        replicas=replicas,
        min_replicas=replicas,
        max_replicas=max(replicas + 1, math.ceil(replicas * peak_factor)),
        load_per_replica_rps=round(load, 3),
        hpa_queue_us=max(1, round(queue_at(_curve(winner), load))),
        instances=int(winner.get("point", {}).get("instances", 1)),
        price_per_gpu_hour=price_per_gpu_hour,
        cost_per_million=round(price_per_gpu_hour * gpu_hours_per_s / target_rps * 1e6, 6),
        cost_per_million_at_capacity=round(price_per_gpu_hour / 3600.0 / per_replica * 1e6, 6),
    )


def kustomize_patch(plan: Plan) -> str:
    """Strategic-merge patches of the t4 overlay's HPA and Deployment (one YAML stream)."""
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "triton"},
        "spec": {
            "minReplicas": plan.min_replicas,
            "maxReplicas": plan.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": HPA_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(plan.hpa_queue_us)},
                    },
                }
            ],
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "triton"},
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {
                        f"tritonkit.io/instances-{plan.model.replace('_', '-')}": str(plan.instances)
                    }
                }
            }
        },
    }
    head = (
        f"# Written by `tritonkit plan` for `{plan.model}`: {plan.replicas} replicas for {plan.target_rps:g} req/s "
        f"within p99 {plan.budget_ms:g} ms ({plan.headroom:.0%} headroom).\n"
    )
    return head + yaml.safe_dump_all([hpa, deployment], sort_keys=False)


def apply_patch(k8s_dir: str | os.PathLike[str], patch: str) -> Path:
    """Write the patch into ``<k8s_dir>/overlays/t4/`` and list it in the overlay's ``patches`` (once)."""
    overlay = Path(k8s_dir) / "overlays" / "t4"
    kustomization = overlay / "kustomization.yaml"
    if not kustomization.is_file():
        raise TritonKitError(f"no t4 overlay at {overlay}; expected {kustomization}")
    target = overlay / PATCH_FILE
    write_text(target, patch)
    text = kustomization.read_text(encoding="utf-8")
    entry = f"  - path: {PATCH_FILE}\n"
    if entry not in text:
        if "\npatches:\n" not in text:
            raise TritonKitError(
                f"{kustomization} has no `patches:` list; expected one to add {PATCH_FILE} to"
            )
        text = text.replace("\npatches:\n", "\npatches:\n" + entry, 1)
        write_text(kustomization, text)
    return target


def check_patch(
    k8s_dir: str | os.PathLike[str], scenarios: Sequence[str] = ()
) -> tuple[list[dict[str, Any]], list[str]]:
    """Render the t4 overlay of ``k8s_dir`` and validate it (strict schemas and the checklist)."""

    objects = deploy.render("t4", root=k8s_dir)
    schemas = Path(k8s_dir) / "schemas"
    problems = deploy.validate(objects, schemas_dir=schemas) + deploy.checklist(
        objects, "t4", scenarios=scenarios
    )
    return objects, problems


def check_knee(
    plan: Plan,
    *,
    repo: str | os.PathLike[str] | None,
    url: str | None,
    report_dir: str | os.PathLike[str],
    duration_s: float = 30.0,
    steps: int = 5,
    tolerance: float = 0.15,
    protocol: str = "http",
    metrics_url: str | None = None,
    http_url: str | None = None,
) -> dict[str, Any]:
    """Ramp ``tritonkit loadtest`` up to twice the plan's concurrency and compare its knee with the plan.

    The knee (the last ramp step within p99 <= budget, or where throughput stopped growing) should carry
    the plan's per-replica throughput within ``tolerance``.
    """

    users = max(steps, 2 * max(plan.concurrency, 1))
    options = LoadTestOptions(
        models=[parse_model(plan.model)],
        report_dir=Path(report_dir),
        url=url,
        http_url=http_url,
        metrics_url=metrics_url,
        protocol=protocol,
        scenario="ramp",
        users=users,
        ramp_steps=steps,
        duration=duration_s,
        slo=SLO(p99_ms=plan.budget_ms),
        repo=Path(repo) if repo is not None else "model_repository",
        plots=False,
        progress=False,
    )
    summary = run_loadtest(options)
    knee = summary["knee"]
    measured = float(knee["rps"]) if knee else 0.0
    ratio = measured / plan.per_replica_rps if plan.per_replica_rps else 0.0
    result = {
        "planned_rps": plan.per_replica_rps,
        "planned_concurrency": plan.concurrency,
        "knee_rps": measured,
        "knee_users": knee["users"] if knee else None,
        "knee_rule": summary["knee_rule"],
        "ratio": round(ratio, 4),
        "tolerance": tolerance,
        "ok": bool(knee) and abs(ratio - 1) <= tolerance,
    }
    write_text(Path(report_dir) / "knee_check.json", json.dumps(result, indent=2) + "\n")
    return result
