"""A capacity plan from a tune: replicas, cost, the HPA target, the t4 overlay's patch, and the knee check.

Owns the arithmetic (:func:`make_plan`): one replica sustains what the config the tune chose sustained
within the budget (its winner, or the model's own config when the winner did not beat it beyond the
spread; the finals median where there were finals); the fleet for a target rate with headroom is ``ceil(rate * (1 + headroom) / per_replica)``
(at least two: one pod may be disrupted); cost per million inferences is the fleet's GPU-hours per
second of traffic at that rate; the HPA target is Triton's queue time per request at the load each
replica carries when the fleet runs at the planned rate, read off the tuned curve (linear between
measured levels). :func:`kustomize_patch` turns it into a patch of the t4 overlay (HPA min/max replicas
and target on ``triton_queue_time_us_per_request``; the tuned instance count as a pod-template
annotation, so a new plan rolls the pods that load the new ``config.pbtxt``), :func:`apply_patch` adds
it to a kustomize tree and :func:`check_patch` renders and validates the result. :func:`check_knee`
measures the priced config again with the tune's own method (generator, protocol, windows, stability)
and says whether its highest load within the budget lies where the plan says.

A plan prices replicas of one GPU type; the tune's provenance says what it was measured on, and a plan
for another device (T4 replicas from CPU measurements) is refused unless ``capacity_ratio`` translates
it, which the first line of ``plan.md`` then says.
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
from tritonkit.loadtest.provenance import Provenance, markdown_lines
from tritonkit.serve.endpoint import endpoint
from tritonkit.tune.loadgen import Target, WindowSpec
from tritonkit.tune.measure import MeasureOptions, Measurer, find_max, wait_ready
from tritonkit.tune.stats import StabilityRule

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
    #: the GPU type priced, what the figure was measured on, and the user's translation between them
    gpu: str = "T4"
    measured_rps: float = 0.0
    measured_on: str = ""
    capacity_ratio: float | None = None
    #: the config priced: the tune's winner, or the model's own config when the winner did not beat it
    config_key: str = ""
    own_config: bool = False
    provenance: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["provenance"] = dict(self.provenance) if self.provenance is not None else None
        return out

    def translation_line(self) -> str | None:
        """The first line of ``plan.md`` when the capacity was translated from another device."""
        if self.capacity_ratio is None:
            return None
        return (
            f"> **Translated, not measured**: one {self.gpu} replica is taken to serve {self.capacity_ratio:g} x the "
            f"{self.measured_rps:,.1f} req/s measured on {self.measured_on} (--capacity-ratio, the user's figure)."
        )

    def markdown(self) -> str:
        which = (
            f"the model's own config `{self.config_key}` (the tune's winner did not beat it beyond the spread)"
            if self.own_config
            else f"the tuned config `{self.config_key}`"
        )
        head = [line for line in (self.translation_line(),) if line]
        return "\n".join(
            [
                *([*head, ""] if head else []),
                f"# Capacity plan: `{self.model}` (p99 <= {self.budget_ms:g} ms)",
                "",
                *markdown_lines(self.provenance),
                f"- Priced: {which}.",
                f"- One replica sustains {self.per_replica_rps:,.1f} req/s within the budget "
                f"(concurrency {self.concurrency}, {self.instances} instance(s)"
                + (f"; {self.measured_rps:,.1f} req/s measured on {self.measured_on}" if head else "")
                + ").",
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


def _chosen(tune_result: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """(the config to price, whether it is the model's own): the winner, unless the tune kept the own config
    (its winner did not beat it beyond the spread; ``chosen`` in ``tune.json``)."""
    winner, baseline = tune_result.get("winner"), tune_result.get("baseline")
    if not winner or not winner.get("throughput"):
        raise TritonKitError(
            "the tune has no winner (no config met the budget); expected a tune.json with one"
        )
    chosen = tune_result.get("chosen") or {}
    if chosen.get("own_config") and baseline and baseline.get("feasible"):
        return baseline, True
    return winner, False


def measured_device(tune_result: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[str, str]:
    """(cpu | gpu | unknown, the device's name) the priced config was measured on (tune.json's provenance)."""
    data = tune_result.get("provenance")
    if not data:
        return "unknown", "a device the tune did not record (a tune.json written before provenance)"
    kind = (row.get("point") or {}).get("kind")
    return Provenance.from_dict(data).measured_on(str(tune_result.get("model", "")) or None, kind)


def _per_replica(
    tune_result: Mapping[str, Any], row: Mapping[str, Any], gpu: str, capacity_ratio: float | None
) -> tuple[float, str]:
    """(one replica's capacity on ``gpu``, what it was measured on): the measured figure itself when the
    tune ran on that GPU; else the user's translation, or a refusal naming both devices."""
    # The finals' median when the tune had finals: the search's figure is the best of many noisy ones.
    measured = float(row.get("confirmed_throughput") or row["throughput"])
    kind, name = measured_device(tune_result, row)
    if capacity_ratio is not None:
        if not capacity_ratio > 0:
            raise TritonKitError(f"--capacity-ratio {capacity_ratio}: expected a positive number")
        return measured * capacity_ratio, name
    if kind == "gpu" and gpu.upper() in name.upper():
        return measured, name
    raise TritonKitError(
        f"the tune measured `{tune_result.get('model')}` on {name}, not on a {gpu}; pricing {gpu} replicas "
        f"needs --capacity-ratio R (one {gpu} replica serves R x the measured throughput; 1 assumes the same)"
    )


def make_plan(
    tune_result: Mapping[str, Any],
    *,
    target_rps: float,
    price_per_gpu_hour: float,
    headroom: float = 0.3,
    peak_factor: float = 2.0,
    gpu: str = "T4",
    capacity_ratio: float | None = None,
) -> Plan:
    """The plan for ``target_rps`` from a ``tune.json`` (the config it chose and that config's curve), for
    replicas on ``gpu``: refused when the tune measured another device, unless ``capacity_ratio`` says how
    one ``gpu`` replica compares with what was measured."""
    if not target_rps > 0:
        raise TritonKitError(f"target rate {target_rps}: expected requests/s > 0")
    if price_per_gpu_hour < 0 or not 0 <= headroom < 10 or peak_factor < 1:
        raise TritonKitError(
            f"price {price_per_gpu_hour}, headroom {headroom}, peak factor {peak_factor}: "
            "expected price >= 0, 0 <= headroom < 10 and peak factor >= 1"
        )
    row, own = _chosen(tune_result)
    per_replica, measured_on = _per_replica(tune_result, row, gpu, capacity_ratio)
    replicas = max(2, math.ceil(target_rps * (1 + headroom) / per_replica))
    load = target_rps / replicas
    gpu_hours_per_s = replicas / 3600.0
    ratio = capacity_ratio or 1.0
    return Plan(
        model=str(tune_result.get("model", "")),
        budget_ms=float(tune_result.get("latency_budget_ms", 0.0)),
        per_replica_rps=round(per_replica, 3),
        concurrency=int(row.get("concurrency") or 0),
        target_rps=target_rps,
        headroom=headroom,
        replicas=replicas,
        min_replicas=replicas,
        max_replicas=max(replicas + 1, math.ceil(replicas * peak_factor)),
        load_per_replica_rps=round(load, 3),
        hpa_queue_us=max(1, round(queue_at(_curve(row), load / ratio))),
        instances=int((row.get("point") or {}).get("instances", 1)),
        price_per_gpu_hour=price_per_gpu_hour,
        cost_per_million=round(price_per_gpu_hour * gpu_hours_per_s / target_rps * 1e6, 6),
        cost_per_million_at_capacity=round(price_per_gpu_hour / 3600.0 / per_replica * 1e6, 6),
        gpu=gpu,
        measured_rps=round(float(row.get("confirmed_throughput") or row["throughput"]), 3),
        measured_on=measured_on,
        capacity_ratio=capacity_ratio,
        config_key=str(row.get("key", "")),
        own_config=own,
        provenance=tune_result.get("provenance"),
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


def _measure_options(method: Mapping[str, Any]) -> tuple[MeasureOptions, bool]:
    """The tune's measurement settings (``tune.json``'s ``method``), and whether it required stability."""
    count = method.get("window_count")
    options = MeasureOptions(
        window=WindowSpec(float(method.get("window_s", 1.0)), int(count) if count else None),
        stability=StabilityRule(
            int(method.get("stability_windows", 3)), float(method.get("stability_pct", 10.0)) / 100.0
        ),
        max_windows=int(method.get("max_windows", 10)),
        workers=int(method.get("workers", 1)),
    )
    return options, bool(method.get("require_stable", True))


def check_knee(
    plan: Plan,
    *,
    method: Mapping[str, Any],
    repo: str | os.PathLike[str] | None,
    url: str | None,
    report_dir: str | os.PathLike[str],
    tolerance: float = 0.15,
    admin_key: str | None = None,
) -> dict[str, Any]:
    """Measure the planned config again the way the tune measured it and compare with the plan.

    Like with like: the tune's generator, protocol, batch size, windows and stability rule (``method``,
    from ``tune.json``), the highest concurrency within the budget searched from the plan's concurrency up
    to twice it (halved when it breaks the budget), against the figure the tune measured (before any
    ``--capacity-ratio``). A Locust ramp measures with other users and another clock, so its knee is a
    different figure (``tritonkit loadtest --scenario ramp`` reports it)."""
    options, require_stable = _measure_options(method)
    protocol = str(method.get("protocol", "http"))
    start = max(1, plan.concurrency)
    where = endpoint(
        url, protocol=protocol, repo=repo or "model_repository", admin_key=admin_key, load=[plan.model],
        exit_timeout=1,
    )  # fmt: skip
    with where as server:
        wait_ready(server.url(protocol), protocol, plan.model, server.headers)
        target = Target(
            server.url(protocol), plan.model, protocol, headers=server.headers,
            shared_memory=str(method.get("shared_memory", "none")), batch_size=int(method.get("batch_size", 1)),
        )  # fmt: skip
        with Measurer(target, options) as measurer:
            best, levels = find_max(
                measurer.measure, plan.budget_ms, start=start, limit=2 * start, refine=1,
                require_stable=require_stable,
            )  # fmt: skip
    measured = best.throughput if best is not None else 0.0
    planned = plan.measured_rps or plan.per_replica_rps
    ratio = measured / planned if planned else 0.0
    result = {
        "method": dict(method),
        "planned_rps": planned,
        "planned_concurrency": plan.concurrency,
        "knee_rps": round(measured, 3),
        "knee_concurrency": int(best.level.value) if best is not None else None,
        "levels": [r.summary() for r in levels],
        "ratio": round(ratio, 4),
        "tolerance": tolerance,
        "ok": best is not None and abs(ratio - 1) <= tolerance,
    }
    folder = Path(report_dir)
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / "knee_check.json", json.dumps(result, indent=2) + "\n")
    return result
