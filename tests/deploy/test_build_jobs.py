"""The repository-build Jobs' scripts (T4 engine build, dev CPU build), run by ``sh`` as the pod would.

What is under test is the script's own logic: one ``tritonkit build`` per spec with the overlay's flags,
the TensorRT check before anything is built, the marker written last and atomically, nothing written
when a build fails, and a finished build not repeated. ``tritonkit`` and the TensorRT import are
stand-ins that record their calls: the builds themselves are tested in tests/convert (and need a T4)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tritonkit import deploy

Obj = dict[str, Any]

TRITONKIT_STUB = """#!/bin/sh
echo "$*" >> "$STUB_LOG"
case "$*" in *"$STUB_FAIL_ON"*) [ -n "$STUB_FAIL_ON" ] && { echo "build failed" >&2; exit 3; } ;; esac
exit 0
"""
PYTHON_STUB = """#!/bin/sh
echo "$STUB_TRT_VERSION"
"""


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
    run_env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        **env,
        "TRITON_MODEL_REPOSITORY": str(tmp_path / "models"),  # the PVC mount
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
        f"build model_repository/{spec}.yaml {expected_flags} --repo {models}"
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


def test_failed_build_leaves_no_marker(rendered: Callable[[str], list[Obj]], tmp_path: Path) -> None:
    script, env = _job(rendered("t4"), "engine-build")
    first = env["BUILD_SPECS"].split()[0]
    result = _run(script, env, tmp_path, fail_on=f"{first}.yaml")
    assert result.returncode == 3 and "build failed" in result.stderr
    assert list((tmp_path / "models").iterdir()) == []  # the Triton pods keep waiting
