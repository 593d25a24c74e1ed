"""``tritonkit plan --fleet`` as a function: plan, place, write overlays, check, verify, report; all or nothing.

Owns :class:`FleetRunOptions` and :func:`run_fleet`: the fleet file is read strictly first, then
everything is made in a staging folder beside the output (tune runs made now, the tuned
``config.pbtxt`` of each model, the ``k8s/`` tree with one overlay per group and its KEDA twin, the
separate load tests, ``fleet-plan.json``, ``fleet-plan.md``, ``packing.png``, ``cost.png``), which is
renamed into place only when the plan is complete: a bad fleet file, a budget no config meets, a model
no type's memory fits, or an interruption leave nothing behind. The placement is the cheapest fleet's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tritonkit import deploy
from tritonkit.config import save
from tritonkit.errors import TritonKitError
from tritonkit.fleet.devices import CPU
from tritonkit.fleet.overlays import DEFAULT_PROMETHEUS, OverlaySpec, check_group, write_tree
from tritonkit.fleet.packing import Group, Packing
from tritonkit.fleet.planner import FleetPlan, PlanOptions, plan_fleet
from tritonkit.fleet.plots import cost_figure, packing_figure
from tritonkit.fleet.report import markdown, to_json, type_rows
from tritonkit.fleet.spec import load_fleet
from tritonkit.fleet.verify import verify_group
from tritonkit.tune.plan import queue_at

__all__ = ["FleetRunOptions", "run_fleet"]

#: the HPA target where nothing was measured for a group (the t4 overlay's own default, 10 ms)
DEFAULT_QUEUE_US = 10_000


@dataclasses.dataclass
class FleetRunOptions:
    fleet_file: Path
    out_dir: Path
    plan: PlanOptions = dataclasses.field(default_factory=PlanOptions)
    verify: bool = False
    verify_seconds: float = 30.0
    verify_tolerance: float = 0.15
    k8s_dir: Path | None = None
    prometheus_url: str = DEFAULT_PROMETHEUS
    plots: bool = True
    force: bool = False


def _queue_us(plan: FleetPlan, group: Group) -> int:
    """Triton's queue time per request at the group's planned per-pod load: measured here, else the tune's curve."""
    if group.gpu_type == plan.local_type:
        key = tuple(sorted(group.models))
        result = plan.groups.get(key) or (plan.alone.get(group.models[0]) if len(group.models) == 1 else None)
        if result is not None and result.best is not None:
            return max(1, round(result.queue_us_at(1.0 / group.replicas)))
    if len(group.models) == 1:
        tuned = plan.tuned[group.gpu_type][group.models[0]]
        if tuned.curve:
            return max(1, round(queue_at(list(tuned.curve), group.per_pod_rps[group.models[0]])))
    return DEFAULT_QUEUE_US


def _host_mb(plan: FleetPlan, group: Group) -> float | None:
    if group.gpu_type != plan.local_type or any(m not in plan.memory for m in group.models):
        return None
    per = sum(plan.memory[m].host_rss_mb * plan.tuned[group.gpu_type][m].instances for m in group.models)
    return per + (plan.base_mb.get(CPU, 0.0) if plan.local_type == CPU else 0.0)


def _placement(
    plan: FleetPlan, packing: Packing, staging: Path
) -> tuple[list[dict[str, Any]], list[OverlaySpec]]:
    placement: list[dict[str, Any]] = []
    specs: list[OverlaySpec] = []
    for i, group in enumerate(packing.groups, 1):
        name = f"group-{i}"
        tuned = {m: plan.tuned[group.gpu_type][m] for m in group.models}
        configs: dict[str, str] = {}
        for model, t in tuned.items():
            target = staging / "configs" / model / "config.pbtxt"
            target.parent.mkdir(parents=True, exist_ok=True)
            save(t.config, target)
            configs[model] = f"configs/{model}/config.pbtxt"
        queue = _queue_us(plan, group)
        top = max(group.replicas + 1, math.ceil(group.replicas * plan.fleet.peak_factor))
        spec = OverlaySpec(
            name, group.gpu_type, group.models, {m: t.instances for m, t in tuned.items()},
            group.replicas, top, queue, _host_mb(plan, group),
        )  # fmt: skip
        specs.append(spec)
        placement.append({
            "group": name,
            "gpu_type": group.gpu_type,
            "models": list(group.models),
            "replicas": group.replicas,
            "max_replicas": top,
            "per_pod_rps": {m: round(r, 3) for m, r in group.per_pod_rps.items()},
            "args": ["--model-control-mode=explicit", *(f"--load-model={m}" for m in group.models)],
            "instance_groups": {
                m: ", ".join(f"{g.count} x {g.kind}" for g in t.config.instance_groups) or "1 x KIND_AUTO"
                for m, t in tuned.items()
            },
            "configs": configs,
            "hpa_queue_us": queue,
            "namespace": spec.namespace,
            "overlay": f"k8s/fleet/{name}",
            "keda_overlay": f"k8s/fleet/{name}-keda",
        })  # fmt: skip
    return placement, specs


def _overlays(staging: Path, source: Path, specs: list[OverlaySpec], prometheus: str) -> list[dict[str, Any]]:
    root = staging / "k8s"
    write_tree(root, source, specs, prometheus=prometheus)
    out = []
    for spec in specs:
        for keda in (False, True):
            objects, problems = check_group(root, spec, keda=keda)
            path = f"k8s/fleet/{spec.name}" + ("-keda" if keda else "")
            out.append(
                {"group": spec.name, "path": path, "keda": keda, "objects": objects, "problems": problems}
            )
    return out


def _pictures(plan: FleetPlan, packing: Packing, staging: Path) -> None:
    weights: dict[str, float] = {}
    for group in packing.groups:
        for m in group.models:
            weights[m] = plan.fleet.model(m).rate / max(plan.capacity_alone(group.gpu_type, m), 1e-9)
    single = plan.result.single.get(packing.groups[0].gpu_type) if packing.groups else None
    packing_figure(staging / "packing.png", packing, single, weights, plan.fleet.headroom)
    cost_figure(staging / "cost.png", type_rows(plan))


def _publish(staging: Path, out: Path, force: bool) -> None:
    old: Path | None = None
    if out.exists():
        if not force:
            raise TritonKitError(f"{out} exists; expected a new output folder or --force")
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
    staging.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def run_fleet(options: FleetRunOptions) -> tuple[dict[str, Any], int]:
    """Plan the fleet and write everything to ``options.out_dir``; (the plan as JSON data, exit code:
    0 ok, 1 an overlay failed its checks, 3 the separate load test did not confirm the plan)."""
    fleet = load_fleet(options.fleet_file)
    out = options.out_dir
    if out.exists() and any(out.iterdir()) and not options.force:
        raise TritonKitError(f"{out} exists and is not empty; expected a new output folder or --force")
    out.parent.mkdir(parents=True, exist_ok=True)
    source = deploy.manifests_dir(options.k8s_dir)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    try:
        plan = plan_fleet(fleet, options.plan, staging)
        packing = plan.result.cheapest
        if packing is None:
            why = "; ".join(f"{t}: {w}" for t, w in plan.result.excluded.items())
            raise TritonKitError(
                f"no fleet serves every model on the GPU types given ({why}); expected a type with capacity and memory for each"
            )
        placement, specs = _placement(plan, packing, staging)
        overlays = _overlays(staging, source, specs, options.prometheus_url)
        checks = []
        if options.verify:
            for spec, group in zip(specs, packing.groups, strict=True):
                if group.gpu_type != plan.local_type:
                    plan.notes.append(
                        f"{spec.name} runs on {group.gpu_type}, not this machine's type: not load-tested here"
                    )
                    continue
                configs = {m: plan.tuned[group.gpu_type][m].config for m in group.models}
                check = verify_group(
                    fleet, group, configs, staging / "verify" / spec.name, seconds=options.verify_seconds,
                    tolerance=options.verify_tolerance, protocol=options.plan.settings.protocol,
                )  # fmt: skip
                checks.append({"group": spec.name, **check.as_dict()})
        data = to_json(plan, placement, overlays, checks)
        (staging / "fleet-plan.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        (staging / "fleet-plan.md").write_text(markdown(data), encoding="utf-8")
        if options.plots:
            _pictures(plan, packing, staging)
        _publish(staging, out, options.force)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    code = 1 if any(o["problems"] for o in overlays) else (3 if any(not c["ok"] for c in checks) else 0)
    return data, code
