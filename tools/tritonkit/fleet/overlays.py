"""A kustomize overlay per group of a fleet plan, with an HPA on queue time, or a KEDA ScaledObject instead.

Owns :class:`OverlaySpec`, :func:`write_tree` and :func:`check_group`. The plan's ``k8s/`` folder is a
copy of the project's tree (base, overlays, bundled schemas) plus ``fleet/<group>/`` per group: the
``t4`` overlay (or ``dev`` for a ``cpu`` group) in a namespace of its own, the Triton container switched
to ``--model-control-mode=explicit`` with one ``--load-model`` per model of the group (a JSON patch
that first tests the base's flag), node affinity and the engine build for the group's GPU type, the
measured host memory as the container's request, the tuned instance counts as pod annotations, and
the HPA's replicas and queue-time target from the plan; ``fleet/<group>-keda/`` is that overlay with
the HPA removed and a KEDA ``ScaledObject`` (Prometheus scaler, the same queue time per request, over
the group's namespace, ``metricType: Value``) in its place. Each rendering passes strict schemas
(``kubernetes-validate`` for built-in kinds, the bundled ``scaledobject-keda.sh-v1alpha1.json`` for
KEDA) and the deployment checklist of ``tritonkit k8s check`` for its type.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tritonkit import deploy
from tritonkit.convert.spec.gpu_profiles import PROFILES
from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.checks.scaling import check_adapter_rule, check_autoscaling
from tritonkit.deploy.objects import Obj, find, ref
from tritonkit.errors import DeployError
from tritonkit.fleet.devices import CPU

__all__ = ["DEFAULT_PROMETHEUS", "OverlaySpec", "check_group", "write_tree"]

#: where KEDA's Prometheus scaler asks (kube-prometheus-stack's service); ``--prometheus-url`` changes it
DEFAULT_PROMETHEUS = "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
_COPIED = ("base", "overlays/t4", "overlays/dev", "schemas")
_HPA_MISSING = "HorizontalPodAutoscaler: expected an HPA scaling Deployment/triton"


@dataclasses.dataclass(frozen=True)
class OverlaySpec:
    name: str
    gpu_type: str
    models: tuple[str, ...]
    instances: dict[str, int]
    min_replicas: int
    max_replicas: int
    queue_us: int
    #: the pod's measured host memory (MB: server plus every instance), None where not measured
    host_mb: float | None

    @property
    def namespace(self) -> str:
        return f"tritonkit-{self.name}"

    @property
    def base(self) -> str:
        return "dev" if self.gpu_type == CPU else "t4"


def _dump(path: Path, docs: Sequence[Any], head: str = "") -> None:
    path.write_text(head + yaml.safe_dump_all(list(docs), sort_keys=False), encoding="utf-8")


def _args_patch(spec: OverlaySpec) -> list[dict[str, Any]]:
    path = "/spec/template/spec/containers/0/args"
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"{path}/1", "value": "--model-control-mode=none"},
        {"op": "replace", "path": f"{path}/1", "value": "--model-control-mode=explicit"},
    ]
    return ops + [{"op": "add", "path": f"{path}/-", "value": f"--load-model={m}"} for m in spec.models]


def _memory(spec: OverlaySpec) -> dict[str, Any]:
    if spec.host_mb is None:
        return {}
    request = max(1024, math.ceil(spec.host_mb * 1.25 / 256) * 256)
    # the limit covers the 1 GiB /dev/shm the python backend's tensors pass through, which counts as memory
    return {"requests": {"memory": f"{request}Mi"}, "limits": {"memory": f"{request + 2048}Mi"}}


def _affinity(gpu_type: str) -> dict[str, Any]:
    values = sorted(deploy.GPU_PRODUCTS[gpu_type])
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _deployment(spec: OverlaySpec) -> dict[str, Any]:
    annotations = {"tritonkit.io/fleet-group": spec.name, "tritonkit.io/models": ",".join(spec.models)}
    annotations.update(
        {f"tritonkit.io/instances-{m.replace('_', '-')}": str(n) for m, n in spec.instances.items()}
    )
    pod: dict[str, Any] = {"containers": [{"name": "triton", "resources": _memory(spec)}]}
    if spec.gpu_type != CPU:
        pod["affinity"] = _affinity(spec.gpu_type)
    body: dict[str, Any] = {"template": {"metadata": {"annotations": annotations}, "spec": pod}}
    if spec.gpu_type == CPU:
        body["replicas"] = None  # the HPA owns the count (the dev overlay fixes 1)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "triton"}, "spec": body}


def _hpa(spec: OverlaySpec) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "triton"},
        "spec": {
            "minReplicas": spec.min_replicas,
            "maxReplicas": spec.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": deploy.ADAPTER_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(spec.queue_us)},
                    },
                }
            ],
        },
    }


def _query(namespace: str) -> str:
    selector = f'{{namespace="{namespace}"}}'
    return (
        f"sum(delta(nv_inference_queue_duration_us{selector}[30s])) / "
        f"(1 + sum(delta(nv_inference_request_success{selector}[30s])))"
    )


def _scaled_object(spec: OverlaySpec, hpa_behavior: dict[str, Any], prometheus: str) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "triton", "labels": {"app.kubernetes.io/name": "triton"}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton"},
            "pollingInterval": 15,
            "cooldownPeriod": 300,
            "minReplicaCount": spec.min_replicas,
            "maxReplicaCount": spec.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": hpa_behavior}},
            "triggers": [
                {
                    "type": "prometheus",
                    # queue time per request is a ratio, not a sum over pods: Value, not AverageValue
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": prometheus,
                        "query": _query(spec.namespace),
                        "threshold": str(spec.queue_us),
                    },
                }
            ],
        },
    }


def _engine_env(source: Path, gpu_type: str) -> tuple[str, str]:
    """(engine-build env, server-args env) of the t4 overlay, rewritten for ``gpu_type``."""
    build = (source / "overlays" / "t4" / "engine-build.env").read_text(encoding="utf-8")
    args = (source / "overlays" / "t4" / "triton-server-args.env").read_text(encoding="utf-8")
    sm = "sm" + PROFILES[gpu_type].compute_capability.replace(".", "")
    build = "\n".join(
        f"BUILD_GPU={gpu_type}" if line.startswith("BUILD_GPU=") else line for line in build.splitlines()
    )
    args = "\n".join(
        line.rsplit("-sm", 1)[0] + f"-{sm}" if line.startswith("TRITON_REPOSITORY_READY_MARKER=") else line
        for line in args.splitlines()
    )
    return build + "\n", args + "\n"


def _group(root: Path, spec: OverlaySpec, prometheus: str) -> None:
    folder = root / "fleet" / spec.name
    folder.mkdir(parents=True)
    head = f"# Written by `tritonkit plan --fleet`: group {spec.name} ({', '.join(spec.models)}) on {spec.gpu_type}.\n"
    patches: list[dict[str, Any]] = [
        {"path": "deployment.yaml"},
        {"path": "hpa.yaml"},
        {"target": {"kind": "Deployment", "name": "triton"}, "path": "load-models.yaml"},
    ]
    resources = [f"../../overlays/{spec.base}"]
    generators: list[dict[str, Any]] = []
    _dump(folder / "deployment.yaml", [_deployment(spec)], head)
    _dump(folder / "hpa.yaml", [_hpa(spec)], head)
    (folder / "load-models.yaml").write_text(head + yaml.safe_dump(_args_patch(spec), sort_keys=False))
    if spec.base == "t4":
        monitor = [{"op": "replace", "path": "/spec/namespaceSelector/matchNames", "value": [spec.namespace]}]
        (folder / "servicemonitor.yaml").write_text(head + yaml.safe_dump(monitor, sort_keys=False))
        patches.append(
            {"target": {"kind": "ServiceMonitor", "name": "triton"}, "path": "servicemonitor.yaml"}
        )
        if spec.gpu_type != "T4":
            build, args = _engine_env(root, spec.gpu_type)
            (folder / "engine-build.env").write_text(build)
            (folder / "triton-server-args.env").write_text(args)
            generators = [
                {"name": "triton-engine-build", "behavior": "replace", "envs": ["engine-build.env"]},
                {"name": "triton-server-args", "behavior": "merge", "envs": ["triton-server-args.env"]},
            ]
            job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "triton-engine-build"},
                   "spec": {"template": {"spec": {"affinity": _affinity(spec.gpu_type)}}}}  # fmt: skip
            _dump(folder / "engine-build-job.yaml", [job], head)
            patches.append({"path": "engine-build-job.yaml"})
    else:  # the dev overlay has no autoscaling: the HPA and the adapter rule it reads come with the group
        resources.append("hpa-base.yaml")
        resources.append("prometheus-adapter-rules.yaml")
        shutil.copyfile(root / "overlays" / "t4" / "hpa.yaml", folder / "hpa-base.yaml")
        shutil.copyfile(
            root / "overlays" / "t4" / "prometheus-adapter-rules.yaml",
            folder / "prometheus-adapter-rules.yaml",
        )
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": spec.namespace,
        "resources": resources,
        "patches": patches,
    }
    if generators:
        kustomization["configMapGenerator"] = generators
    _dump(folder / "kustomization.yaml", [kustomization], head)
    behavior = yaml.safe_load((root / "overlays" / "t4" / "hpa.yaml").read_text())["spec"]["behavior"]
    keda = root / "fleet" / f"{spec.name}-keda"
    keda.mkdir()
    _dump(keda / "scaledobject.yaml", [_scaled_object(spec, behavior, prometheus)], head)
    delete = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "triton"},
        "$patch": "delete",
    }
    _dump(keda / "no-hpa.yaml", [delete], head)
    kustom = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"../{spec.name}", "scaledobject.yaml"],
        "patches": [{"path": "no-hpa.yaml"}],
    }
    _dump(keda / "kustomization.yaml", [kustom], head.replace("group", "group (KEDA instead of the HPA)", 1))


def write_tree(
    out: Path, source: Path, specs: Sequence[OverlaySpec], *, prometheus: str = DEFAULT_PROMETHEUS
) -> None:
    """Copy the project's kustomize tree to ``out`` and write each group's overlays under ``out/fleet``."""
    for part in _COPIED:
        if not (source / part).is_dir():
            raise DeployError(f"no {source / part}; expected the project's kustomize tree (k8s/) with {part}")
        shutil.copytree(source / part, out / part)
    schema = Path(__file__).resolve().parents[3] / "k8s" / "schemas" / "scaledobject-keda.sh-v1alpha1.json"
    if not (out / "schemas" / schema.name).exists() and schema.exists():
        shutil.copyfile(schema, out / "schemas" / schema.name)
    for spec in specs:
        _group(out, spec, prometheus)


def _keda_checks(p: Problems, objects: Sequence[Obj], spec: OverlaySpec) -> None:
    scaled = find(objects, "ScaledObject")
    if not p.expect(len(scaled) == 1, "ScaledObject", f"expected one KEDA ScaledObject, found {len(scaled)}"):
        return
    so = scaled[0]["spec"]
    p.expect(
        not find(objects, "HorizontalPodAutoscaler"),
        ref(scaled[0]),
        "expected no HPA beside it (KEDA makes its own)",
    )
    p.expect(
        so["scaleTargetRef"].get("name") == "triton", ref(scaled[0]), "expected it to scale Deployment/triton"
    )
    p.expect(
        so.get("minReplicaCount", 0) >= 2,
        ref(scaled[0]),
        "expected minReplicaCount >= 2 (one pod may be disrupted)",
    )
    triggers = [t for t in so.get("triggers", []) if t.get("type") == "prometheus"]
    if not p.expect(len(triggers) == 1, ref(scaled[0]), "expected one prometheus trigger"):
        return
    meta = triggers[0].get("metadata", {})
    query = meta.get("query", "")
    for part in (
        "nv_inference_queue_duration_us",
        "nv_inference_request_success",
        f'namespace="{spec.namespace}"',
    ):
        p.expect(part in query, ref(scaled[0]), f"expected `{part}` in the trigger's query, found `{query}`")
    p.expect(bool(meta.get("serverAddress")), ref(scaled[0]), "expected the trigger's serverAddress")
    p.expect(
        meta.get("threshold", "").isdigit(),
        ref(scaled[0]),
        f"expected a whole-µs threshold, found {meta.get('threshold')}",
    )
    p.expect(
        triggers[0].get("metricType") == "Value",
        ref(scaled[0]),
        "expected metricType Value (a ratio, not a sum)",
    )


def check_group(root: Path, spec: OverlaySpec, *, keda: bool = False) -> tuple[int, list[str]]:
    """Render a group's overlay (or its KEDA twin) and check it: (objects, problems, one line each)."""
    folder = root / "fleet" / (f"{spec.name}-keda" if keda else spec.name)
    objects = deploy.parse_objects(deploy.kustomize(folder), source=f"overlay {folder.name}")
    problems = deploy.validate(objects, schemas_dir=root / "schemas")
    lines = deploy.checklist(objects, spec.base, gpu=spec.gpu_type if spec.base == "t4" else "T4")
    if keda:
        lines = [line for line in lines if not line.endswith(_HPA_MISSING)]
    p = Problems(folder.name)
    if spec.base == "dev":
        deployment = find(objects, "Deployment", "triton")
        if not keda and p.expect(bool(deployment), "Deployment", "expected Deployment/triton"):
            check_autoscaling(p, objects, deployment[0])
        check_adapter_rule(p, objects)
    if keda:
        _keda_checks(p, objects, spec)
    load = [
        a
        for o in find(objects, "Deployment", "triton")
        for c in o["spec"]["template"]["spec"]["containers"]
        for a in c.get("args", [])
        if str(a).startswith("--load-model=")
    ]
    p.expect(
        sorted(a.split("=", 1)[1] for a in load) == sorted(spec.models),
        "Deployment/triton",
        f"expected --load-model for {sorted(spec.models)}, found {json.dumps(load)}",
    )
    return len(objects), [*problems, *lines, *p.lines]
