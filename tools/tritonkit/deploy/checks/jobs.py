"""The Jobs that fill the model repository the Triton pods read (``tritonkit build``), for any server overlay.

Owns finding them (a Job mounting a claim the Triton container mounts read-only), resolving each build
container's script, the marker hand-off (the Job must write the marker the Triton pods wait for), where a
build may write (:func:`check_build_writes`: every cache, scratch and working path on a mounted writable
volume, the root filesystem read-only, the TensorRT timing cache on a persistent volume) and the inputs
hand-off (:func:`check_build_inputs`: the Job builds what ``tritonkit k8s package`` lays out, from the
workspace volume). What a build must target (TensorRT on a T4, ONNX Runtime on CPU) is the overlay's own
item.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.objects import Obj, command_line, container_env, expand_shell, find, pod_spec, ref
from tritonkit.deploy.package import INPUTS_DIR, MODULES_DIR, SPEC_FILE, TIMING_CACHE_ENV, WORKSPACE_ENV

__all__ = [
    "REQUIRED_WRITE_ENV",
    "check_build_inputs",
    "check_build_writes",
    "repository_jobs",
    "writable_mount",
]

#: Environment variables naming a place the build writes (caches, scratch, home, outputs).
_WRITE_ENV = re.compile(r"^(HOME|TMPDIR|TMP|TEMP|TRITON_MODEL_REPOSITORY)$|CACHE|_HOME$|WORKSPACE")
#: Those a build Job must set: unset, each falls back to a place on the read-only image (HOME and TMPDIR
#: to the image's defaults, the timing cache to ``.cache/tensorrt/`` beside the spec).
REQUIRED_WRITE_ENV = ("HOME", "TMPDIR", TIMING_CACHE_ENV, WORKSPACE_ENV)


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
                check_build_writes(p, job, build, env)
                check_build_inputs(p, job, build, env, {str(c) for c in repo_claims})
                jobs.append((job, build, script))
    p.expect(
        bool(jobs), "Job", "expected a Job running `tritonkit build` into the Triton pods' model repository"
    )
    return jobs


def writable_mount(pod: Obj, container: Obj, path: str) -> tuple[str, Obj | None]:
    """The volume kind (``emptyDir``, ``persistentVolumeClaim``...) a path lies on, writable, or why not.

    Returns ``(kind, volume)`` for a writable mount, or ``(reason, None)``: not under any mount (the image's
    root filesystem), under a read-only mount, or on a volume that cannot be written (ConfigMap, Secret,
    a claim mounted read-only).
    """
    norm = posixpath.normpath(path)
    mounts = [
        m
        for m in container.get("volumeMounts", [])
        if norm == posixpath.normpath(str(m.get("mountPath", "")))
        or norm.startswith(posixpath.normpath(str(m.get("mountPath", ""))).rstrip("/") + "/")
    ]
    if not mounts:
        return "on the image's root filesystem (no volume mounted there)", None
    mount = max(mounts, key=lambda m: len(str(m.get("mountPath", ""))))
    volumes = {v.get("name"): v for v in pod.get("volumes", [])}
    volume = volumes.get(mount.get("name"))
    if volume is None:
        return f"on mount `{mount.get('name')}` of no declared volume", None
    if mount.get("readOnly"):
        return f"on volume `{mount.get('name')}` mounted read-only", None
    if "emptyDir" in volume:
        return "emptyDir", volume
    claim = volume.get("persistentVolumeClaim")
    if claim is not None:
        if claim.get("readOnly"):
            return f"on claim `{claim.get('claimName')}` mounted read-only", None
        return "persistentVolumeClaim", volume
    kind = next((k for k in volume if k != "name"), "?")
    return f"on a {kind} volume `{mount.get('name')}`, which cannot be written", None


def check_build_writes(p: Problems, job: Obj, build: Obj, env: Mapping[str, str]) -> None:
    """Every place the build writes lies on a mounted writable volume; the root filesystem is read-only.

    Places: the working directory and each environment variable naming a cache, home, scratch folder,
    workspace or the model repository. The TensorRT timing cache must be set and lie on a persistent
    volume: on the emptyDir it dies with the pod, beside the spec it is on the read-only image.
    """
    pod = pod_spec(job)
    where = f"{ref(job)} container `{build.get('name')}`"
    ro = (build.get("securityContext") or {}).get("readOnlyRootFilesystem")
    p.expect(ro is True, where, f"expected readOnlyRootFilesystem: true, found {ro}")
    for name in REQUIRED_WRITE_ENV:
        p.expect(
            bool(env.get(name)), where, f"expected env {name} set to a path on a writable volume, found none"
        )
    places = {f"env {k}": v for k, v in env.items() if _WRITE_ENV.search(k) and v.startswith("/")}
    working_dir = build.get("workingDir")
    if p.expect(
        bool(working_dir), where, "expected workingDir on a writable volume, found none (the image's)"
    ):
        places["workingDir"] = str(working_dir)
    for label, path in sorted(places.items()):
        kind, volume = writable_mount(pod, build, path)
        p.expect(
            volume is not None, where, f"{label} `{path}` must lie on a mounted writable volume; it is {kind}"
        )
    cache = env.get(TIMING_CACHE_ENV, "")
    if cache:
        kind, _ = writable_mount(pod, build, cache)
        p.expect(
            kind == "persistentVolumeClaim",
            where,
            f"env {TIMING_CACHE_ENV} `{cache}` must lie on a persistent volume (it outlives the pod), found {kind}",
        )


def check_build_inputs(
    p: Problems, job: Obj, build: Obj, env: Mapping[str, str], repo_claims: set[str]
) -> None:
    """The Job builds every input ``tritonkit k8s package`` lays out, from a writable workspace claim."""
    pod = pod_spec(job)
    where = f"{ref(job)} container `{build.get('name')}`"
    workspace = env.get(WORKSPACE_ENV, "")
    if workspace:
        kind, volume = writable_mount(pod, build, workspace)
        claim = ((volume or {}).get("persistentVolumeClaim") or {}).get("claimName")
        p.expect(
            kind == "persistentVolumeClaim" and claim not in repo_claims,
            where,
            f"env {WORKSPACE_ENV} `{workspace}` must be a writable claim other than the model repository "
            f"(Triton loads every folder there), found {claim or kind}",
        )
    script = " ".join(str(a) for a in build.get("args", []))
    for needle in (f'/{INPUTS_DIR}"/*', f'"$dir/{SPEC_FILE}"', f'"$dir/{MODULES_DIR}'):
        p.expect(
            WORKSPACE_ENV in script and needle in script,
            where,
            f"expected the script to build each `${WORKSPACE_ENV}/{INPUTS_DIR}/<model>/{SPEC_FILE}` "
            f"(with {MODULES_DIR}/ on PYTHONPATH) that `tritonkit k8s package` writes; `{needle}` not found",
        )
