"""The dev overlay's items of the checklist: no GPU anywhere, a CPU Job building ONNX Runtime versions."""

from __future__ import annotations

from collections.abc import Sequence

from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.checks.jobs import repository_jobs
from tritonkit.deploy.checks.security import check_security
from tritonkit.deploy.objects import Obj, all_containers, flags, gpu_limit, pod_spec, ref, workloads

__all__ = ["check_dev"]


def check_dev(p: Problems, objects: Sequence[Obj], deployment: Obj, container: Obj) -> None:
    """No GPU anywhere; a CPU job builds ONNX Runtime versions into the repository."""
    for workload in workloads(objects):
        for c in all_containers(pod_spec(workload)):
            p.expect(
                gpu_limit(c) is None,
                ref(workload),
                f"expected no GPU in the dev overlay, found nvidia.com/gpu {gpu_limit(c)}",
            )
    for job, _, script in repository_jobs(p, objects, deployment, container):
        build_flags = flags(script.split())
        p.expect(
            build_flags.get("--target") == ["onnxruntime"],
            ref(job),
            f"expected `--target onnxruntime` (CPU), found {build_flags.get('--target')}",
        )
        check_security(p, job)
