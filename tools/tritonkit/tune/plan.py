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
for another device (L4 replicas from T4 measurements) is refused unless ``capacity_ratio`` translates
it, which the first line of ``plan.md`` then says. A config of KIND_CPU instances is never a GPU
replica: its replicas are CPU *pods*, priced per pod-hour (``price_per_pod_hour``), and a GPU type or
price for it is refused.

``p99_ms`` re-plans for another p99 budget from the tune's measured curve (the priced config's levels):
one replica carries the highest measured throughput whose p99 fits the new budget (a single search
measurement, said so), refused when no measured level fits it, flagged when every measured level fits it
(the tune never reached that budget's limit: the figure is a lower bound). The HPA target read off the
curve at a load outside the measured levels is flagged too (``outside_measured``), and the provenance
header describes the config priced (its instances and kind), not the model's config the tune began with.
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
from tritonkit.measure.generators import choose, measurer_of
from tritonkit.measure.levels import MeasureOptions, find_max, wait_ready
from tritonkit.measure.loadgen import Target, WindowSpec
from tritonkit.measure.provenance import Provenance, markdown_lines
from tritonkit.measure.stats import StabilityRule
from tritonkit.serve.endpoint import endpoint

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
    #: what one replica is: ``GPU`` (a GPU of type ``gpu``) or ``pod`` (a CPU pod: KIND_CPU instances)
    unit: str = "GPU"
    #: the p99 budget the plan is for (the tune's, or ``--p99-ms``) and where the figure came from
    figure_source: str = ""
    #: the plan's figures that stand outside what the tune measured (each a sentence)
    outside_measured: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["provenance"] = dict(self.provenance) if self.provenance is not None else None
        return out

    @property
    def replica(self) -> str:
        """What one replica is, in words (``T4 GPU``, ``CPU pod``)."""
        return "CPU pod" if self.unit == "pod" else f"{self.gpu} GPU"

    def translation_line(self) -> str | None:
        """The first line of ``plan.md`` when the capacity was translated from another device."""
        if self.capacity_ratio is None:
            return None
        return (
            f"> **Translated, not measured**: one {self.replica} replica is taken to serve {self.capacity_ratio:g} x "
            f"the {self.measured_rps:,.1f} req/s measured on {self.measured_on} (--capacity-ratio, the user's figure)."
        )

    def markdown(self) -> str:
        which = (
            f"the model's own config `{self.config_key}` (the tune's winner did not beat it beyond the spread)"
            if self.own_config
            else f"the tuned config `{self.config_key}`"
        )
        head = [line for line in (self.translation_line(),) if line]
        unit = "pod" if self.unit == "pod" else "GPU"
        replicas = "CPU pods" if self.unit == "pod" else f"{self.gpu} replicas"
        return "\n".join(
            [
                *([*head, ""] if head else []),
                f"# Capacity plan: `{self.model}` (p99 <= {self.budget_ms:g} ms)",
                "",
                *markdown_lines(self.provenance),
                *[f"> **Outside what the tune measured**: {line}" for line in self.outside_measured],
                *([""] if self.outside_measured else []),
                f"- Priced: {which}.",
                f"- One replica ({self.replica}) sustains {self.per_replica_rps:,.1f} req/s within the budget "
                f"(concurrency {self.concurrency}, {self.instances} instance(s)"
                + (f"; {self.measured_rps:,.1f} req/s measured on {self.measured_on}" if head else "")
                + (f"; {self.figure_source}" if self.figure_source else "")
                + ").",
                f"- Target {self.target_rps:,.1f} req/s with {self.headroom:.0%} headroom: **{self.replicas} {replicas}** "
                f"({self.load_per_replica_rps:,.1f} req/s each); HPA min {self.min_replicas}, max {self.max_replicas}.",
                f"- HPA target: {self.hpa_queue_us} µs queue time per request "
                f"(`{HPA_METRIC}` at {self.load_per_replica_rps:,.1f} req/s per replica).",
                f"- Cost at ${self.price_per_gpu_hour:g}/{unit}-hour: ${self.cost_per_million:,.4f} per million "
                f"inferences at the planned fleet, ${self.cost_per_million_at_capacity:,.4f} at full capacity.",
                "",
            ]
        )


def _within(level: Mapping[str, Any], budget_ms: float) -> bool:
    """A measured level that served within ``budget_ms``: successes only, p99 inside, no failures, and
    not limited by the generator (its figure is the generator's, not the server's)."""
    return (
        float(level.get("throughput") or 0) > 0
        and level.get("p99_ms") is not None
        and float(level["p99_ms"]) <= budget_ms
        and not level.get("failures")
        and not level.get("generator_limited")
    )


def _curve(trial: Mapping[str, Any], budget_ms: float | None = None) -> list[tuple[float, float]]:
    """(throughput, queue µs) of the config's measured levels (within ``budget_ms`` when given), by
    throughput."""
    points = [
        (float(level["throughput"]), float(level.get("queue_us", 0.0)))
        for level in trial.get("levels", [])
        if level.get("throughput", 0) > 0
        and (budget_ms is None or level.get("p99_ms") is None or float(level["p99_ms"]) <= budget_ms)
    ]
    return sorted(points)


def _at_budget(
    row: Mapping[str, Any], p99_ms: float, tune_budget_ms: float
) -> tuple[float, int, str, list[str]]:
    """(one replica's figure, its concurrency, where it came from, what lies outside the measured) for a
    re-plan at ``p99_ms`` from the priced config's measured levels; refused when none fits."""
    levels = [lv for lv in row.get("levels") or [] if lv.get("p99_ms") is not None]
    fits = [lv for lv in levels if _within(lv, p99_ms)]
    if not fits:
        lowest = min((float(lv["p99_ms"]) for lv in levels), default=None)
        seen = f"its lowest measured p99 was {lowest:.2f} ms" if lowest is not None else "it has no levels"
        raise TritonKitError(
            f"--p99-ms {p99_ms:g}: no level the tune measured for `{row.get('key')}` served within it ({seen}); "
            f"expected a budget the tune's curve reaches, or a tune with --latency-budget-ms {p99_ms:g}"
        )
    best = max(fits, key=lambda lv: float(lv["throughput"]))
    source = (
        f"re-planned for p99 {p99_ms:g} ms from the tune's curve (tuned for {tune_budget_ms:g} ms): a single "
        f"search measurement at concurrency {best.get('level')}, p99 {float(best['p99_ms']):.2f} ms"
    )
    outside = []
    if len(fits) == len(levels):
        top = max(levels, key=lambda lv: float(lv["throughput"]))
        outside.append(
            f"every level the tune measured for this config fits p99 {p99_ms:g} ms (the highest, concurrency "
            f"{top.get('level')}, p99 {float(top['p99_ms']):.2f} ms): the tune never reached this budget's limit, "
            f"so {float(best['throughput']):,.1f} req/s per replica is a lower bound; tune with "
            f"--latency-budget-ms {p99_ms:g} for the figure"
        )
    return float(best["throughput"]), int(best.get("level") or 0), source, outside


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


def _kind(row: Mapping[str, Any]) -> str:
    """The instance kind of the priced config: its point's, else its config's first instance group's."""
    kind = (row.get("point") or {}).get("kind")
    if not kind:
        groups = (row.get("config") or {}).get("instance_group") or (row.get("config") or {}).get(
            "instanceGroup"
        )
        kind = (groups or [{}])[0].get("kind") if groups else None
    return str(kind or "KIND_GPU")


def _priced_provenance(data: Mapping[str, Any] | None, model: str, row: Mapping[str, Any]) -> Any:
    """The tune's provenance with the model's line describing the config priced (instances, kind): the
    tune recorded the model as it stood when it began, not the config it chose."""
    if not data:
        return data
    point = row.get("point") or {}
    out = json.loads(json.dumps(data))
    for entry in out.get("models") or []:
        if entry.get("name") == model:
            if "instances" in point:
                entry["instances"] = int(point["instances"])
            if point.get("kind"):
                entry["instance_kind"] = str(point["kind"])
    return out


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
    tune_result: Mapping[str, Any],
    row: Mapping[str, Any],
    gpu: str,
    capacity_ratio: float | None,
    measured: float,
    pods: bool = False,
) -> tuple[float, str]:
    """(one replica's capacity on ``gpu``, what it was measured on): the measured figure itself when the
    tune ran on that GPU (a CPU pod: on a CPU); else the user's translation, or a refusal naming both
    devices."""
    kind, name = measured_device(tune_result, row)
    if capacity_ratio is not None:
        if not capacity_ratio > 0:
            raise TritonKitError(f"--capacity-ratio {capacity_ratio}: expected a positive number")
        return measured * capacity_ratio, name
    if pods and kind == "cpu":
        return measured, name
    if pods:
        raise TritonKitError(
            f"the tune measured `{tune_result.get('model')}` on {name}; pricing CPU pods needs --capacity-ratio R "
            "(one pod serves R x the measured throughput; 1 assumes the same)"
        )
    if kind == "gpu" and gpu.upper() in name.upper():
        return measured, name
    raise TritonKitError(
        f"the tune measured `{tune_result.get('model')}` on {name}, not on a {gpu}; pricing {gpu} replicas "
        f"needs --capacity-ratio R (one {gpu} replica serves R x the measured throughput; 1 assumes the same)"
    )


def _pricing(
    row: Mapping[str, Any],
    gpu: str | None,
    price_per_gpu_hour: float | None,
    price_per_pod_hour: float | None,
) -> tuple[bool, float]:
    """(whether the priced config's replicas are CPU pods, the price of one replica per hour): a KIND_CPU
    config is priced per pod and refuses a GPU type or price; a GPU config refuses a pod price."""
    pods = _kind(row) == "KIND_CPU"
    key = row.get("key", "")
    if pods and (gpu is not None or price_per_gpu_hour is not None):
        raise TritonKitError(
            f"the priced config `{key}` runs KIND_CPU instances: its replicas are CPU pods, not "
            f"{gpu or 'GPU'} replicas; expected --pod-hour-price PRICE and no --gpu/--gpu-hour-price"
        )
    if pods and price_per_pod_hour is None:
        raise TritonKitError(
            f"the priced config `{key}` runs KIND_CPU instances: its replicas are CPU pods; expected "
            "--pod-hour-price PRICE (the price of one such pod per hour)"
        )
    if not pods and price_per_pod_hour is not None:
        raise TritonKitError(
            f"--pod-hour-price: the priced config `{key}` runs {_kind(row)} instances (GPU replicas); "
            "expected --gpu-hour-price PRICE"
        )
    price = price_per_pod_hour if pods else price_per_gpu_hour
    price = 0.526 if price is None else price
    return pods, price


def _outside_measured(
    tune_result: Mapping[str, Any], curve: list[tuple[float, float]], load: float
) -> list[str]:
    """What the plan reads outside what the tune measured: the HPA target's load off the curve, no
    level within the budget, a partial tune."""
    outside: list[str] = []
    if curve and not curve[0][0] <= load <= curve[-1][0]:
        outside.append(
            f"the HPA target is read off the curve at {load:,.1f} req/s per replica, outside the "
            f"{curve[0][0]:,.1f}-{curve[-1][0]:,.1f} req/s the tune measured within the budget: the nearest "
            "measured level's queue time is taken"
        )
    elif not curve:
        outside.append(
            "the tune measured no level of this config within the budget: the HPA target is a guess"
        )
    partial = tune_result.get("partial")
    if partial:
        outside.append(
            f"the tune was partial (its time budget ended it in its {partial.get('stopped')}): its figures are "
            "what was measured by then"
        )
    return outside


def make_plan(
    tune_result: Mapping[str, Any],
    *,
    target_rps: float,
    price_per_gpu_hour: float | None = None,
    headroom: float = 0.3,
    peak_factor: float = 2.0,
    gpu: str | None = None,
    capacity_ratio: float | None = None,
    price_per_pod_hour: float | None = None,
    p99_ms: float | None = None,
) -> Plan:
    """The plan for ``target_rps`` from a ``tune.json`` (the config it chose and that config's curve), for
    replicas on ``gpu`` (default T4 at $0.526/h): refused when the tune measured another device, unless
    ``capacity_ratio`` says how one ``gpu`` replica compares with what was measured. A KIND_CPU config's
    replicas are CPU pods at ``price_per_pod_hour`` (a GPU type or price for it is refused). ``p99_ms``:
    the plan for another p99 budget, from the config's measured levels."""
    if not target_rps > 0:
        raise TritonKitError(f"target rate {target_rps}: expected requests/s > 0")
    row, own = _chosen(tune_result)
    key = row.get("key", "")
    pods, price = _pricing(row, gpu, price_per_gpu_hour, price_per_pod_hour)
    gpu = gpu or "T4"
    if price < 0 or not 0 <= headroom < 10 or peak_factor < 1:
        raise TritonKitError(
            f"price {price}, headroom {headroom}, peak factor {peak_factor}: "
            "expected price >= 0, 0 <= headroom < 10 and peak factor >= 1"
        )
    budget = float(tune_result.get("latency_budget_ms", 0.0))
    if p99_ms is not None and not p99_ms > 0:
        raise TritonKitError(f"--p99-ms {p99_ms}: expected a positive number of ms")
    # The finals' median when the tune had finals: the search's figure is the best of many noisy ones.
    measured = float(row.get("confirmed_throughput") or row["throughput"])
    concurrency, source = int(row.get("concurrency") or 0), ""
    outside: list[str] = []
    if row.get("confirmed_throughput"):
        source = "the finals median"
    if p99_ms is not None and p99_ms != budget:
        measured, concurrency, source, outside = _at_budget(row, p99_ms, budget)
        budget = p99_ms
    per_replica, measured_on = _per_replica(tune_result, row, gpu, capacity_ratio, measured, pods)
    replicas = max(2, math.ceil(target_rps * (1 + headroom) / per_replica))
    load = target_rps / replicas
    gpu_hours_per_s = replicas / 3600.0
    ratio = capacity_ratio or 1.0
    curve = _curve(row, budget)
    outside += _outside_measured(tune_result, curve, load / ratio)
    return Plan(
        model=str(tune_result.get("model", "")),
        budget_ms=budget,
        per_replica_rps=round(per_replica, 3),
        concurrency=concurrency,
        target_rps=target_rps,
        headroom=headroom,
        replicas=replicas,
        min_replicas=replicas,
        max_replicas=max(replicas + 1, math.ceil(replicas * peak_factor)),
        load_per_replica_rps=round(load, 3),
        hpa_queue_us=max(1, round(queue_at(curve or _curve(row), load / ratio))),
        instances=int((row.get("point") or {}).get("instances", 1)),
        price_per_gpu_hour=price,
        cost_per_million=round(price * gpu_hours_per_s / target_rps * 1e6, 6),
        cost_per_million_at_capacity=round(price / 3600.0 / per_replica * 1e6, 6),
        gpu="" if pods else gpu,
        measured_rps=round(measured, 3),
        measured_on=measured_on,
        capacity_ratio=capacity_ratio,
        config_key=str(key),
        own_config=own,
        provenance=_priced_provenance(tune_result.get("provenance"), str(tune_result.get("model", "")), row),
        unit="pod" if pods else "GPU",
        figure_source=source,
        outside_measured=tuple(outside),
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
    shared_memory = str(method.get("shared_memory", "none"))
    # the tune's generator of record (a tune.json from before perf_analyzer could tune: tritonkit's)
    pa = str(method.get("generator", "")).startswith("perf_analyzer")
    binary = choose("perf_analyzer" if pa else "tritonkit", options, shared_memory)
    start = max(1, plan.concurrency)
    where = endpoint(
        url, protocol=protocol, repo=repo or "model_repository", admin_key=admin_key, load=[plan.model],
        exit_timeout=1,
    )  # fmt: skip
    with where as server:
        wait_ready(server.url(protocol), protocol, plan.model, server.headers)
        target = Target(
            server.url(protocol), plan.model, protocol, headers=server.headers,
            shared_memory=shared_memory, batch_size=int(method.get("batch_size", 1)),
        )  # fmt: skip
        with measurer_of(binary, target, options) as measurer:
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
