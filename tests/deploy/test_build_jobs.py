"""The repository-build Jobs' scripts (T4 engine build, dev CPU build), run by ``sh`` as the pod would.

What is under test is the script's own logic: one ``tritonkit build`` per spec with the overlay's flags,
each input that ``tritonkit k8s package`` wrote built from the workspace volume with its modules on
PYTHONPATH, the TensorRT check before anything is built, the marker written last and atomically, nothing
written when a build fails, and a finished build not repeated (a changed input is). ``tritonkit`` and the
TensorRT import are stand-ins that record their calls: the builds themselves are tested in tests/convert
(and need a T4)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tritonkit import deploy

Obj = dict[str, Any]

REPO_SPECS = Path(__file__).resolve().parents[2] / "model_repository"
TRITONKIT_STUB = """#!/bin/sh
echo "$*" >> "$STUB_LOG"
echo "${PYTHONPATH:-}" >> "$STUB_LOG.pythonpath"
case "$*" in *"$STUB_FAIL_ON"*) [ -n "$STUB_FAIL_ON" ] && { echo "build failed" >&2; exit 3; } ;; esac
exit 0
"""
PYTHON_STUB = """#!/bin/sh
echo "$STUB_TRT_VERSION"
"""

#: A torch entry point with no dynamic axis past the batch (``k8s package`` calls it to learn its axes).
STATIC_MODULE = (
    "import torch\nfrom tritonkit.convert.graph.export import TorchSource\n\n\ndef build():\n"
    "    return TorchSource(torch.nn.Linear(4, 4), [torch.zeros(1, 4)], ['x'], ['y'])\n"
)


def _job(objects: list[Obj], component: str) -> tuple[str, dict[str, str]]:
    for obj in objects:
        labels = obj.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
        if obj["kind"] == "Job" and labels.get("app.kubernetes.io/component") == component:
            container = obj["spec"]["template"]["spec"]["containers"][0]
            assert container["command"] == ["/bin/sh", "-c"]
            env, missing = deploy.container_env(container, objects)
            assert not missing
            return container["args"][0], env
    raise AssertionError(f"no {component} Job")


def _run(script: str, env: dict[str, str], tmp_path: Path, **stub: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        for name, text in (("tritonkit", TRITONKIT_STUB), ("python", PYTHON_STUB)):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
    (tmp_path / "models").mkdir(exist_ok=True)
    specs = tmp_path / "specs"  # the image's model_repository/ specs
    if not specs.exists():
        specs.mkdir()
        for spec in env["BUILD_SPECS"].split():
            shutil.copyfile(REPO_SPECS / f"{spec}.yaml", specs / f"{spec}.yaml")
    workspace = str(tmp_path / "workspace")  # the workspace PVC mount
    run_env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        **env,
        "TRITON_MODEL_REPOSITORY": str(tmp_path / "models"),  # the repository PVC mount
        "BUILD_SPECS_DIR": str(specs),
        "TRITONKIT_BUILD_WORKSPACE": workspace,
        "TRITONKIT_TIMING_CACHE": env["TRITONKIT_TIMING_CACHE"].replace(
            env["TRITONKIT_BUILD_WORKSPACE"], workspace, 1
        ),
        "STUB_LOG": str(tmp_path / "calls.log"),
        "STUB_TRT_VERSION": stub.get("trt", env.get("TENSORRT_VERSION", "")),
        "STUB_FAIL_ON": stub.get("fail_on", ""),
    }
    return subprocess.run(
        ["/bin/sh", "-c", script], env=run_env, capture_output=True, text=True, timeout=60, check=False
    )


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize(("overlay", "component"), [("t4", "engine-build"), ("dev", "model-build")])
def test_build_job_builds_every_spec_then_writes_the_marker_once(
    rendered: Callable[[str], list[Obj]], tmp_path: Path, overlay: str, component: str
) -> None:
    script, env = _job(rendered(overlay), component)
    result = _run(script, env, tmp_path)
    assert result.returncode == 0, result.stderr
    models = tmp_path / "models"
    expected_flags = f"--target {env['BUILD_TARGET']}" + (
        f" --gpu {env['BUILD_GPU']}" if overlay == "t4" else ""
    )
    assert _calls(tmp_path) == [
        f"build {tmp_path}/specs/{spec}.yaml {expected_flags} --repo {models}"
        for spec in env["BUILD_SPECS"].split()
    ]
    marker = models / env["TRITON_REPOSITORY_READY_MARKER"]
    assert marker.is_file() and not marker.with_name(marker.name + ".tmp").exists()
    if overlay == "t4":
        assert f"tensorrt={env['TENSORRT_VERSION']}" in marker.read_text()
    # a finished build is not repeated (a re-created pod, a re-applied Job)
    again = _run(script, env, tmp_path)
    assert again.returncode == 0 and len(_calls(tmp_path)) == len(env["BUILD_SPECS"].split())


def test_engine_build_refuses_another_tensorrt(rendered: Callable[[str], list[Obj]], tmp_path: Path) -> None:
    script, env = _job(rendered("t4"), "engine-build")
    result = _run(script, env, tmp_path, trt="10.7.0")
    assert result.returncode == 1
    assert f"TensorRT 10.7.0 in the builder image; expected {env['TENSORRT_VERSION']}" in result.stderr
    assert _calls(tmp_path) == [] and list((tmp_path / "models").iterdir()) == []
    assert not (tmp_path / "workspace").exists()


def test_failed_build_leaves_no_marker(rendered: Callable[[str], list[Obj]], tmp_path: Path) -> None:
    script, env = _job(rendered("t4"), "engine-build")
    first = env["BUILD_SPECS"].split()[0]
    result = _run(script, env, tmp_path, fail_on=f"{first}.yaml")
    assert result.returncode == 3 and "build failed" in result.stderr
    assert list((tmp_path / "models").iterdir()) == []  # the Triton pods keep waiting


def _package_user_model(root: Path) -> Path:
    """A user's spec with a torch module package, a weights file it reads, and calibration data."""
    (root / "mynet").mkdir(parents=True)
    (root / "mynet" / "__init__.py").write_text("")
    (root / "mynet" / "model.py").write_text(STATIC_MODULE)  # called by package's TensorRT checks
    (root / "weights.bin").write_bytes(b"\0" * 16)
    (root / "cal.txt").write_text("a sentence\n")
    (root / "mynet.yaml").write_text(
        "name: mynet\nsource:\n  torch: mynet.model:build\ncalibration:\n  data: cal.txt\n"
    )
    return deploy.package_spec(root / "mynet.yaml", root / "out", include=["weights.bin"])


@pytest.mark.parametrize(("overlay", "component"), [("t4", "engine-build"), ("dev", "model-build")])
def test_build_job_builds_packaged_inputs_with_their_modules(
    rendered: Callable[[str], list[Obj]], tmp_path: Path, overlay: str, component: str
) -> None:
    script, env = _job(rendered(overlay), component)
    packed = _package_user_model(tmp_path / "user")
    inputs = tmp_path / "workspace" / deploy.INPUTS_DIR
    inputs.mkdir(parents=True)
    shutil.copytree(packed, inputs / packed.name)  # what `kubectl exec ... tar -x` leaves on the volume
    result = _run(script, env, tmp_path)
    assert result.returncode == 0, result.stderr
    calls = _calls(tmp_path)
    spec = inputs / "mynet" / "spec.yaml"
    assert calls[-1].startswith(f"build {spec} --target {env['BUILD_TARGET']}"), calls
    assert len(calls) == len(env["BUILD_SPECS"].split()) + 1
    pythonpath = (tmp_path / "calls.log.pythonpath").read_text().splitlines()
    assert pythonpath[-1] == str(inputs / "mynet" / "modules")
    # the timing cache's folder exists on the workspace volume, keyed as the manifest says
    cache = Path(
        env["TRITONKIT_TIMING_CACHE"].replace(
            env["TRITONKIT_BUILD_WORKSPACE"], str(tmp_path / "workspace"), 1
        )
    )
    assert cache.parent.is_dir() and cache.parent.is_relative_to(tmp_path / "workspace")
    # unchanged: nothing is rebuilt; a changed input is built again, the rest is not
    assert _run(script, env, tmp_path).returncode == 0 and len(_calls(tmp_path)) == len(calls)
    (inputs / "mynet" / "data" / "cal.txt").write_text("another sentence\n")
    assert _run(script, env, tmp_path).returncode == 0
    assert _calls(tmp_path)[len(calls) :] == [calls[-1]]
