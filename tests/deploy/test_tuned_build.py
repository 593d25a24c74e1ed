"""The tune → spec → cluster loop: ``tritonkit tune --write spec:PATH`` writes the winner's batching and
instances into the build spec (comments kept), ``tritonkit k8s package`` packs that spec, and the build
Jobs' own scripts (run by ``sh`` as the pod would, with the real ``tritonkit`` on PATH) build a version whose
``config.pbtxt`` has the tuned values.

TensorRT cannot be installed here, so the engine-build Job runs with ``BUILD_TARGET=onnxruntime`` (its
TensorRT check answered by a stand-in): the script, the packed inputs and the spec values are the same, and
every target takes batching and instances from the same spec keys. The tuned model sleeps 20 ms per
execution without a batcher in its own config; the grid offers a 500 µs batcher with two instances, which
serve many times more at eight requests in flight: a difference the sleep sets, not the machine's tail.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import pytest
import yaml
from onnx import TensorProto, helper
from tests.support.slow_model import slow_repository

from tritonkit import deploy
from tritonkit.cli import main
from tritonkit.config import from_pbtxt

Obj = dict[str, Any]
TOOLS = Path(__file__).resolve().parents[2] / "tools"
SPEC = """\
# The build spec of the slow model (kept by the tune: comments and order stay).
name: slow
source:
  onnx: tiny.onnx
precisions: [fp32]
target: portable
batching:
  max_batch_size: 8
  max_queue_delay_us: 2000   # before the tune
instances:
  count: 1
  kind: KIND_CPU
"""


def _user(root: Path) -> Path:
    root.mkdir(parents=True)
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["OUT"])],
        "tiny",
        [helper.make_tensor_value_info("X", f32, ["batch", 4])],
        [helper.make_tensor_value_info("OUT", f32, ["batch", 4])],
        [helper.make_tensor("one", f32, [], [1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, root / "tiny.onnx")
    (root / "slow.yaml").write_text(SPEC)
    return root / "slow.yaml"


def _job(objects: list[Obj], component: str) -> tuple[str, dict[str, str]]:
    for obj in objects:
        labels = obj.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
        if obj["kind"] == "Job" and labels.get("app.kubernetes.io/component") == component:
            container = obj["spec"]["template"]["spec"]["containers"][0]
            env, missing = deploy.container_env(container, objects)
            assert not missing
            return container["args"][0], env
    raise AssertionError(f"no {component} Job")


def _run_job(script: str, env: dict[str, str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """The Job's script with the real tritonkit (this checkout) and a TensorRT-version stand-in."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "tritonkit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tritonkit "$@"\n')
    (bin_dir / "python").write_text('#!/bin/sh\necho "$TENSORRT_VERSION"\n')
    for name in ("tritonkit", "python"):
        (bin_dir / name).chmod(0o755)
    (tmp / "models").mkdir()
    workspace = tmp / "workspace"
    run_env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp),
        "PYTHONPATH": str(TOOLS),
        **env,
        "BUILD_SPECS": "",  # the repository's own specs are not this test's subject
        "BUILD_TARGET": "onnxruntime",
        "TRITON_MODEL_REPOSITORY": str(tmp / "models"),
        "TRITONKIT_BUILD_WORKSPACE": str(workspace),
        "TRITONKIT_TIMING_CACHE": str(workspace / "cache" / "timing.cache"),
    }
    return subprocess.run(
        ["/bin/sh", "-c", script], env=run_env, capture_output=True, text=True, timeout=600, check=False
    )


@dataclass(frozen=True)
class Tuned:
    """What one ``tritonkit tune --write spec:PATH`` run left: its exit code, what it printed, the spec it
    wrote into, the repository whose config it wrote and its report folder."""

    code: int
    out: str
    spec: Path
    repo: Path
    report: Path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    """The tune, run once for every overlay's Job: the tune and the spec it writes are the same whichever
    Job builds that spec (each test reads them and writes only under its own folder)."""
    root = tmp_path_factory.mktemp("tuned")
    spec = _user(root / "user")
    repo = slow_repository(root, "slow_fp32", batching=False)
    args = [
        "tune", "--model", "slow_fp32", "--repo", str(repo), "--report", str(root / "report"),
        "--write", f"spec:{spec}", "--latency-budget-ms", "1000", "--search", "brute", "--instances", "2",
        "--delays-us", "500", "--max-batch-sizes", "8", "--no-preferred", "--no-queue-policy",
        "--max-concurrency", "8", "--window-s", "0.2", "--max-windows", "2", "--stability-windows", "2",
        "--stability-pct", "50", "--accept-unstable", "--finalists", "2", "--final-rounds", "2", "--no-plots",
    ]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(args)
    return Tuned(code, printed.getvalue(), spec, repo, root / "report")


@pytest.mark.slow
@pytest.mark.parametrize(("overlay", "component"), [("t4", "engine-build"), ("dev", "model-build")])
def test_tune_write_spec_then_the_cluster_build_serves_the_tuned_config(
    rendered: Callable[[str], list[Obj]],
    tuned: Tuned,
    tmp_path: Path,
    overlay: str,
    component: str,
) -> None:
    spec, repo = tuned.spec, tuned.repo
    assert tuned.code == 0, tuned.out
    verdict = json.loads((tuned.report / "tune.json").read_text())["verdict"]
    assert verdict["write"], verdict  # two batching instances against one without a batcher
    out = tuned.out  # the headline is the finals median, the written files named
    assert "req/s (finals median of 2 rounds, " in out.splitlines()[1]
    assert f"written to {repo / 'slow_fp32' / 'config.pbtxt'}" in out and f"+++ {spec} (tuned)" in out
    text = spec.read_text()
    assert "  max_queue_delay_us: 500   # before the tune\n" in text and text.startswith("# The build spec")
    data = yaml.safe_load(text)
    assert data["instances"] == {"count": 2, "kind": "KIND_CPU"} and data["batching"]["max_batch_size"] == 8
    local = from_pbtxt((repo / "slow_fp32" / "config.pbtxt").read_text())
    assert local.instance_groups[0].count == 2  # config.pbtxt and the spec say the same

    packed = deploy.package_spec(spec, tmp_path / "out")
    script, env = _job(rendered(overlay), component)
    inputs = tmp_path / "job" / "workspace" / deploy.INPUTS_DIR
    inputs.mkdir(parents=True)
    shutil.copytree(packed, inputs / packed.name)  # what `kubectl cp` leaves on the workspace volume
    result = _run_job(script, env, tmp_path / "job")
    assert result.returncode == 0, result.stderr[-2000:]
    built = from_pbtxt((tmp_path / "job" / "models" / "slow_fp32_ort" / "config.pbtxt").read_text())
    assert built.max_batch_size == 8 and built.dynamic_batching is not None
    assert built.dynamic_batching.max_queue_delay_microseconds == 500
    assert [(g.kind, g.count) for g in built.instance_groups] == [("KIND_CPU", 2)]
