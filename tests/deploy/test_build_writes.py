"""Where the build Jobs may write, on the rendered t4 and dev overlays and on copies where it regresses.

The engine build used to fail on first contact: the TensorRT timing cache defaulted to ``.cache/`` beside
the spec, on the builder image's read-only root filesystem (and would have died with the pod even when
writable). The checklist now asserts that every path a build Job writes (working directory, HOME, TMPDIR,
caches, the workspace and the repository) lies on a mounted writable volume, that the root filesystem is
read-only, and that the timing cache is set, on a persistent volume, keyed by GPU and TensorRT version.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tritonkit import deploy
from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.checks.security import check_security

Obj = dict[str, Any]
Rendered = Callable[[str], list[Obj]]
JOBS = {"t4": "triton-engine-build", "dev": "triton-model-build"}


def _build(objects: list[Obj], overlay: str) -> tuple[Obj, Obj]:
    for obj in objects:
        if obj["kind"] == "Job" and obj["metadata"]["name"] == JOBS[overlay]:
            pod: Obj = obj["spec"]["template"]["spec"]
            return pod, pod["containers"][0]
    raise AssertionError(f"no Job {JOBS[overlay]}")


def _set_env(container: Obj, name: str, value: str | None) -> None:
    env = [item for item in container["env"] if item["name"] != name]
    if value is not None:
        env.append({"name": name, "value": value})
    container["env"] = env


@pytest.mark.parametrize("overlay", deploy.SERVER_OVERLAYS)
def test_build_job_writes_only_to_mounted_writable_volumes(rendered: Rendered, overlay: str) -> None:
    objects = rendered(overlay)
    assert deploy.checklist(objects, overlay) == []
    pod, build = _build(objects, overlay)
    env, _ = deploy.container_env(build, objects)
    assert build["securityContext"]["readOnlyRootFilesystem"] is True
    claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
    mounts = {m["mountPath"]: claims[m["name"]] for m in build["volumeMounts"]}
    cache = env[deploy.TIMING_CACHE_ENV]
    assert cache.startswith(env[deploy.WORKSPACE_ENV] + "/")
    assert mounts[env[deploy.WORKSPACE_ENV]] == "triton-build-workspace"  # not the model repository
    for name in ("HOME", "TMPDIR", "XDG_CACHE_HOME"):
        assert mounts[env[name].split("/.cache")[0]] is None  # the emptyDir
    if overlay == "t4":
        assert f"/{env['BUILD_GPU']}-trt{env['TENSORRT_VERSION']}/" in cache


def _old_job(pod: Obj, build: Obj) -> None:
    """The Job as it was: HOME only, the image's working directory, the spec's default timing cache."""
    build["env"] = [{"name": "HOME", "value": "/tmp"}]
    del build["workingDir"]


def _cache_beside_spec(pod: Obj, build: Obj) -> None:
    _set_env(build, deploy.TIMING_CACHE_ENV, "/app/model_repository/.cache/tensorrt/timing.cache")


def _cache_on_emptydir(pod: Obj, build: Obj) -> None:
    _set_env(build, deploy.TIMING_CACHE_ENV, "/tmp/.cache/tensorrt/timing.cache")


def _no_tmp_volume(pod: Obj, build: Obj) -> None:
    build["volumeMounts"] = [m for m in build["volumeMounts"] if m["mountPath"] != "/tmp"]


def _tmp_read_only(pod: Obj, build: Obj) -> None:
    for mount in build["volumeMounts"]:
        if mount["mountPath"] == "/tmp":
            mount["readOnly"] = True


def _torch_cache_in_image(pod: Obj, build: Obj) -> None:
    _set_env(build, "TORCH_HOME", "/app/.cache/torch")


def _writable_root(pod: Obj, build: Obj) -> None:
    build["securityContext"]["readOnlyRootFilesystem"] = False


def _workdir_in_image(pod: Obj, build: Obj) -> None:
    build["workingDir"] = "/app"


def _workspace_is_the_repository(pod: Obj, build: Obj) -> None:
    for volume in pod["volumes"]:
        if volume["name"] == "build-workspace":
            volume["persistentVolumeClaim"]["claimName"] = "triton-model-repository"


def _inputs_not_built(pod: Obj, build: Obj) -> None:
    build["args"] = [build["args"][0].replace('"$work/inputs"/*', '"$work/other"/*')]


REGRESSIONS: list[tuple[Callable[[Obj, Obj], None], str]] = [
    (_old_job, f"expected env {deploy.TIMING_CACHE_ENV} set to a path on a writable volume, found none"),
    (_old_job, "expected workingDir on a writable volume, found none"),
    (
        _cache_beside_spec,
        f"env {deploy.TIMING_CACHE_ENV} `/app/model_repository/.cache/tensorrt/timing.cache` must lie on a "
        "mounted writable volume; it is on the image's root filesystem",
    ),
    (_cache_on_emptydir, "must lie on a persistent volume (it outlives the pod), found emptyDir"),
    (_no_tmp_volume, "env HOME `/tmp` must lie on a mounted writable volume; it is on the image's root"),
    (
        _tmp_read_only,
        "env TMPDIR `/tmp` must lie on a mounted writable volume; it is on volume `tmp` mounted read-only",
    ),
    (_torch_cache_in_image, "env TORCH_HOME `/app/.cache/torch` must lie on a mounted writable volume"),
    (_writable_root, "expected readOnlyRootFilesystem: true, found False"),
    (_workdir_in_image, "workingDir `/app` must lie on a mounted writable volume"),
    (_workspace_is_the_repository, "must be a writable claim other than the model repository"),
    (
        _inputs_not_built,
        "expected the script to build each `$TRITONKIT_BUILD_WORKSPACE/inputs/<model>/spec.yaml`",
    ),
]


@pytest.mark.parametrize("overlay", deploy.SERVER_OVERLAYS)
@pytest.mark.parametrize(
    ("mutate", "expected"),
    REGRESSIONS,
    ids=[f"{m.__name__.strip('_')}-{i}" for i, (m, _) in enumerate(REGRESSIONS)],
)
def test_build_write_rule_bites(
    rendered: Rendered, overlay: str, mutate: Callable[[Obj, Obj], None], expected: str
) -> None:
    objects = rendered(overlay)
    mutate(*_build(objects, overlay))
    problems = deploy.checklist(objects, overlay)
    assert any(expected in line and JOBS[overlay] in line for line in problems), problems


def test_t4_timing_cache_keyed_by_gpu_and_tensorrt(rendered: Rendered) -> None:
    objects = rendered("t4")
    _, build = _build(objects, "t4")
    _set_env(build, deploy.TIMING_CACHE_ENV, "/workspace/cache/tensorrt/timing.cache")
    problems = deploy.checklist(objects, "t4")
    assert any(
        f"expected {deploy.TIMING_CACHE_ENV} keyed by GPU `T4` and TensorRT `trt10.5.0`" in line
        for line in problems
    ), problems


def test_upload_pod_mounts_the_workspace_the_jobs_build_from(rendered: Rendered) -> None:

    path = Path(__file__).resolve().parents[2] / "k8s" / "upload" / "inputs-upload-pod.yaml"
    objects = deploy.parse_objects(path.read_text())
    assert deploy.validate(objects) == []
    (pod_obj,) = objects
    wrapped = {
        "kind": "Pod",
        "metadata": pod_obj["metadata"],
        "spec": {"template": {"spec": pod_obj["spec"]}},
    }
    problems = Problems("upload")
    check_security(problems, wrapped)
    assert problems.lines == []
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod_obj["spec"]["volumes"]}
    for overlay in deploy.SERVER_OVERLAYS:
        objects = rendered(overlay)
        job_pod, build = _build(objects, overlay)
        env, _ = deploy.container_env(build, objects)
        job_claims = {
            v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in job_pod["volumes"]
        }
        workspace = {m["mountPath"]: job_claims[m["name"]] for m in build["volumeMounts"]}[
            env[deploy.WORKSPACE_ENV]
        ]
        upload = {m["mountPath"]: claims[m["name"]] for m in pod_obj["spec"]["containers"][0]["volumeMounts"]}
        assert upload[env[deploy.WORKSPACE_ENV]] == workspace  # `tar -C /workspace` lands where the Job reads
