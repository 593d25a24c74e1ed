"""The T4 overlay's items of the checklist: GPU scheduling, the engine-build Jobs and their priority.

Owns: one GPU per pod with required T4 node affinity and the GPU taint tolerated (Triton and the build
Jobs alike); each build Job runs ``tritonkit build --target tensorrt --gpu T4``, outranks the Triton pods
(which hold their T4 while waiting for it), names its TensorRT version in the marker the pods wait for,
and keys its TensorRT timing cache by GPU and TensorRT version. Autoscaling and monitoring, also T4-only, are in :mod:`tritonkit.deploy.checks.scaling`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.checks.jobs import repository_jobs
from tritonkit.deploy.checks.scaling import check_adapter_rule, check_autoscaling, check_monitoring
from tritonkit.deploy.checks.security import check_security
from tritonkit.deploy.objects import Obj, container_env, find, flags, gpu_limit, pod_spec, ref
from tritonkit.deploy.package import TIMING_CACHE_ENV

__all__ = ["GPU_PRODUCTS", "T4_PRODUCTS", "check_t4"]

T4_PRODUCTS = frozenset({"Tesla-T4", "Tesla-T4-SHARED"})
#: The ``nvidia.com/gpu.product`` node labels (GPU feature discovery: the product name, dashes for spaces;
#: ``-SHARED`` when time-slicing is on) of each GPU profile. The T4 overlay runs on T4s; a fleet plan's
#: group overlay on the type its group was planned for (same checklist, that type's labels and ``--gpu``).
GPU_PRODUCTS: dict[str, frozenset[str]] = {
    "T4": T4_PRODUCTS,
    "L4": frozenset({"NVIDIA-L4", "NVIDIA-L4-SHARED"}),
    "A10": frozenset({"NVIDIA-A10", "NVIDIA-A10G"}),
    "A100": frozenset({"NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"}),
    "A100-40GB": frozenset({"NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"}),
    "H100": frozenset({"NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"}),
}


def _check_t4_scheduling(p: Problems, workload: Obj, container: Obj, gpu: str = "T4") -> None:
    """One GPU, required node affinity to ``gpu``'s products in every term, the GPU taint tolerated."""
    products = GPU_PRODUCTS[gpu]
    where = ref(workload)
    gpu = gpu_limit(container)
    p.expect(
        str(gpu) == "1",
        f"{where} container `{container.get('name')}`",
        f"expected limits nvidia.com/gpu: 1, found {gpu}",
    )
    pod = pod_spec(workload)
    terms = (
        ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    t4_terms = [
        term
        for term in terms
        if any(
            e.get("key") == "nvidia.com/gpu.product"
            and e.get("operator") == "In"
            and set(e.get("values", [])) == products
            for e in term.get("matchExpressions", [])
        )
    ]
    p.expect(
        bool(terms) and len(t4_terms) == len(terms),
        where,
        f"expected required node affinity nvidia.com/gpu.product In {sorted(products)} in every term, found {terms or 'none'}",
    )
    tolerations = pod.get("tolerations") or []
    p.expect(
        any(
            t.get("key") == "nvidia.com/gpu"
            and t.get("operator") == "Exists"
            and t.get("effect") == "NoSchedule"
            for t in tolerations
        ),
        where,
        f"expected toleration nvidia.com/gpu Exists NoSchedule, found {tolerations or 'none'}",
    )


def _check_build_priority(p: Problems, objects: Sequence[Obj], job: Obj, deployment: Obj) -> None:
    """The engine build outranks the Triton pods, which hold their T4 while waiting for it (no deadlock)."""

    def priority(workload: Obj) -> int:
        name = pod_spec(workload).get("priorityClassName")
        classes = find(objects, "PriorityClass", name) if name else []
        return int(classes[0].get("value", 0)) if classes else 0

    name = pod_spec(job).get("priorityClassName")
    p.expect(
        bool(name) and bool(find(objects, "PriorityClass", name)),
        ref(job),
        f"expected a priorityClassName defined in the overlay, found {name or 'none'}",
    )
    p.expect(
        priority(job) > priority(deployment),
        ref(job),
        f"expected a priority above the Triton pods' ({priority(job)} <= {priority(deployment)}): "
        "waiting Triton pods hold every T4 otherwise",
    )


def check_t4(p: Problems, objects: Sequence[Obj], deployment: Obj, container: Obj, gpu: str = "T4") -> None:
    """One T4 (or ``gpu``) per pod; the engine build on that GPU for the Triton image's TensorRT; scaling;
    monitoring."""
    _check_t4_scheduling(p, deployment, container, gpu)
    server_env, _ = container_env(container, objects)
    for job, build, script in repository_jobs(p, objects, deployment, container):
        env, _ = container_env(build, objects)
        build_flags = flags(script.split())
        p.expect(
            build_flags.get("--target") == ["tensorrt"],
            ref(job),
            f"expected `tritonkit build --target tensorrt`, found {build_flags.get('--target')}",
        )
        p.expect(
            build_flags.get("--gpu") == [gpu],
            ref(job),
            f"expected `--gpu {gpu}`, found {build_flags.get('--gpu')}",
        )
        _check_t4_scheduling(p, job, build, gpu)
        _check_build_priority(p, objects, job, deployment)
        trt = env.get("TENSORRT_VERSION", "")
        marker = server_env.get("TRITON_REPOSITORY_READY_MARKER", "")
        p.expect(
            bool(trt) and f"trt{trt}" in marker,
            ref(job),
            f"expected the marker `{marker}` to name TensorRT `{trt or '(unset)'}`",
        )
        cache = env.get(TIMING_CACHE_ENV, "")
        gpu = env.get("BUILD_GPU", "")
        p.expect(
            bool(trt and gpu) and f"trt{trt}" in cache and gpu in cache,
            ref(job),
            f"expected {TIMING_CACHE_ENV} keyed by GPU `{gpu}` and TensorRT `trt{trt}` (another GPU or "
            f"TensorRT must not reuse it), found `{cache or '(unset)'}`",
        )
        check_security(p, job)
    check_autoscaling(p, objects, deployment)
    check_adapter_rule(p, objects)
    check_monitoring(p, objects, deployment)
