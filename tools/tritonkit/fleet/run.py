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
import importlib.util
import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonkit import deploy
from tritonkit.errors import DeployError, TritonKitError
from tritonkit.fleet.devices import CPU
from tritonkit.fleet.overlays import DEFAULT_PROMETHEUS, OverlaySpec, check_group, write_tree
from tritonkit.fleet.packing import Group, Packing
from tritonkit.fleet.planner import FleetPlan, PlanOptions, plan_fleet
from tritonkit.fleet.plots import from_json
from tritonkit.fleet.report import markdown, to_json
from tritonkit.fleet.spec import load_fleet
from tritonkit.fleet.verify import verify_group
from tritonkit.repository.views import write_configs
from tritonkit.tune.plan import queue_at

__all__ = ["FleetRunOptions", "check_overlays", "finish", "run_fleet", "specs_from_json"]

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
        configs = write_configs(staging / "configs", {m: t.config for m, t in tuned.items()})
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
            "instances": spec.instances,
            "host_mb": spec.host_mb,
            "namespace": spec.namespace,
            "overlay": f"k8s/fleet/{name}",
            "keda_overlay": f"k8s/fleet/{name}-keda",
        })  # fmt: skip
    return placement, specs


def _checker_missing() -> str | None:
    """Why overlays cannot be checked here (no kubectl, no kubernetes-validate: a GPU host), or None."""
    try:
        deploy.find_kubectl()
    except DeployError as exc:
        return str(exc)
    missing = [m for m in ("kubernetes_validate", "jsonschema") if importlib.util.find_spec(m) is None]
    return f"{', '.join(missing)} not installed" if missing else None


def check_overlays(root: Path, specs: Sequence[OverlaySpec]) -> list[dict[str, Any]]:
    """Render and check each group's overlay and its KEDA twin under ``root`` (the plan's ``k8s/``)."""
    missing = _checker_missing()
    out = []
    for spec in specs:
        for keda in (False, True):
            path = f"k8s/fleet/{spec.name}" + ("-keda" if keda else "")
            entry: dict[str, Any] = {
                "group": spec.name,
                "path": path,
                "keda": keda,
                "objects": 0,
                "problems": [],
            }
            if missing is not None:
                entry["unchecked"] = (
                    f"not checked here: {missing} (`python -m tritonkit_bench.fleet --finish DIR` checks it)"
                )
            else:
                entry["objects"], entry["problems"] = check_group(root, spec, keda=keda)
            out.append(entry)
    return out


def specs_from_json(data: Mapping[str, Any]) -> list[OverlaySpec]:
    return [
        OverlaySpec(
            p["group"],
            p["gpu_type"],
            tuple(p["models"]),
            dict(p["instances"]),
            p["replicas"],
            p["max_replicas"],
            p["hpa_queue_us"],
            p["host_mb"],
        )
        for p in data["placement"]
    ]


def finish(folder: Path) -> dict[str, Any]:
    """Check the overlays and draw the pictures of a plan written where that could not be done (a GPU host),
    then rewrite its ``fleet-plan.json`` and ``fleet-plan.md``."""
    path = folder / "fleet-plan.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    data["overlays"] = check_overlays(folder / "k8s", specs_from_json(data))
    from_json(folder)
    data["notes"] = [n for n in data["notes"] if not n.startswith("pictures not drawn here")]
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    (folder / "fleet-plan.md").write_text(markdown(data), encoding="utf-8")
    return data


def _weights(plan: FleetPlan, packing: Packing) -> dict[str, float]:
    """Each model's target over its capacity alone on its group's type (the packing picture's block sizes)."""
    return {
        m: plan.fleet.model(m).rate / max(plan.capacity_alone(group.gpu_type, m), 1e-9)
        for group in packing.groups
        for m in group.models
    }


def _pictures(staging: Path, plan: FleetPlan) -> None:
    try:
        from_json(staging)
    except ImportError as exc:  # a GPU host without matplotlib: draw them where the plan is copied
        plan.notes.append(
            f"pictures not drawn here ({exc}); `python -m tritonkit_bench.fleet --finish DIR` draws them"
        )


def _publish(staging: Path, out: Path, force: bool) -> None:
    old: Path | None = None
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
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
    load = [os.getloadavg()[0]]
    try:
        plan = plan_fleet(fleet, options.plan, staging)
        packing = plan.result.cheapest
        if packing is None:
            why = "; ".join(f"{t}: {w}" for t, w in plan.result.excluded.items())
            raise TritonKitError(
                f"no fleet serves every model on the GPU types given ({why}); expected a type with capacity and memory for each"
            )
        placement, specs = _placement(plan, packing, staging)
        write_tree(staging / "k8s", source, specs, prometheus=options.prometheus_url)
        overlays = check_overlays(staging / "k8s", specs)
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
        load.append(os.getloadavg()[0])
        data = to_json(plan, placement, overlays, checks)
        data["load_average"] = {"start": round(load[0], 2), "end": round(load[1], 2), "cores": os.cpu_count()}
        data["packing_weights"] = _weights(plan, packing)
        (staging / "fleet-plan.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        if options.plots:
            _pictures(staging, plan)
            data["notes"] = plan.notes
            (staging / "fleet-plan.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        (staging / "fleet-plan.md").write_text(markdown(data), encoding="utf-8")
        _publish(staging, out, options.force)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    code = 1 if any(o["problems"] for o in overlays) else (3 if any(not c["ok"] for c in checks) else 0)
    return data, code
