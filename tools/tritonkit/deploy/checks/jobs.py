"""The Jobs that fill the model repository the Triton pods read (``tritonkit build``), for any server overlay.

Owns finding them (a Job mounting a claim the Triton container mounts read-only), resolving each build
container's script, and the marker hand-off: the Job must write the marker the Triton pods wait for.
What a build must target (TensorRT on a T4, ONNX Runtime on CPU) is the overlay's own item.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.objects import Obj, command_line, container_env, expand_shell, find, pod_spec, ref

__all__ = ["repository_jobs"]


def repository_jobs(
    p: Problems, objects: Sequence[Obj], deployment: Obj, container: Obj
) -> list[tuple[Obj, Obj, str]]:
    """Jobs that fill the model repository the Triton pods read, with their container and resolved script."""
    claim = {
        v.get("name"): (v.get("persistentVolumeClaim") or {}).get("claimName")
        for v in pod_spec(deployment).get("volumes", [])
    }
    repo_claims = {
        claim.get(m.get("name")) for m in container.get("volumeMounts", []) if m.get("readOnly")
    } - {None}
    server_env, _ = container_env(container, objects)
    marker = server_env.get("TRITON_REPOSITORY_READY_MARKER")
    jobs: list[tuple[Obj, Obj, str]] = []
    for job in find(objects, "Job"):
        pod = pod_spec(job)
        claims = {(v.get("persistentVolumeClaim") or {}).get("claimName") for v in pod.get("volumes", [])}
        if not claims & repo_claims:
            continue
        for build in pod.get("containers", []):
            env, missing = container_env(build, objects)
            for line in missing:
                p.add(ref(job), line)
            script = " ".join(expand_shell(part, env) for part in command_line(build, env))
            if "tritonkit build" in script:
                p.expect(
                    env.get("TRITON_REPOSITORY_READY_MARKER") == marker
                    and "TRITON_REPOSITORY_READY_MARKER" in " ".join(build.get("args", [])),
                    ref(job),
                    f"expected the Job to write the marker the Triton pods wait for (`{marker}`), found `{env.get('TRITON_REPOSITORY_READY_MARKER')}`",
                )
                jobs.append((job, build, script))
    p.expect(
        bool(jobs), "Job", "expected a Job running `tritonkit build` into the Triton pods' model repository"
    )
    return jobs
