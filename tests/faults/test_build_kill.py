"""kill -9 during ``tritonkit build --onnx`` of a large model: no half-written version is left, the
next build succeeds and the repository serves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from tritonkit.cli import main
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

from .conftest import Record, Scale

pytestmark = pytest.mark.faults


def _big_model(path: Path, width: int) -> Path:
    weight = numpy_helper.from_array(np.full((width, width), 0.001, np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "big",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, width])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, width])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _staging(repo: Path) -> list[Path]:
    return [p for p in repo.rglob(".tritonkit-staging*")] if repo.exists() else []


def test_kill_9_during_build(
    tmp_path: Path, fault_scale: Scale, record: Record, capsys: pytest.CaptureFixture[str]
) -> None:
    width = 8192 if fault_scale.form == "full" else 4096
    source = _big_model(tmp_path / "big.onnx", width)
    repo = tmp_path / "repo"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "tools")}
    build = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonkit",
            "build",
            "--onnx",
            str(source),
            "--repo",
            str(repo),
            "--name",
            "big",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and build.poll() is None and not _staging(repo):
        time.sleep(0.01)
    staged_seen = bool(_staging(repo))
    time.sleep(0.05)
    killed_mid_write = build.poll() is None
    if killed_mid_write:
        os.kill(build.pid, signal.SIGKILL)
    build.wait()
    versions = (
        sorted(p.name for p in (repo / "big").iterdir() if p.is_dir()) if (repo / "big").exists() else []
    )
    half_written = [v for v in versions if not (repo / "big" / v / "model.py").exists()]
    leftovers_after_kill = len(_staging(repo))

    code = main(["build", "--onnx", str(source), "--repo", str(repo), "--name", "big"])
    capsys.readouterr()
    leftovers_after_next = len(_staging(repo))
    served = False
    error = ""
    if code == 0:
        try:
            with EmbeddedServer(repo, ServerOptions(exit_timeout=2)) as server:
                client = httpclient.InferenceServerClient(server.http_url)
                tensor = httpclient.InferInput("X", [1, width], "FP32")
                tensor.set_data_from_numpy(np.ones((1, width), np.float32))
                result = client.infer("big", [tensor]).as_numpy("Y")
                client.close()
                served = result is not None and result.shape == (1, width)
        except Exception as exc:  # recorded: a repository that does not serve is the finding
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:100]
    passed = code == 0 and served and leftovers_after_next == 0 and not half_written
    record(
        "build",
        f"kill -9 during build --onnx ({width}x{width} FP32, {width * width * 4 >> 20} MiB)",
        passed,
        killed_mid_write=killed_mid_write,
        staging_seen=staged_seen,
        staging_left_after_kill=leftovers_after_kill,
        versions_after_kill=",".join(versions) or "none",
        half_written_versions=len(half_written),
        next_build_exit=code,
        staging_left_after_next=leftovers_after_next,
        served=served,
        error=error,
    )
    assert code == 0, "the next build failed"
    assert not half_written, f"half-written versions: {half_written}"
    assert leftovers_after_next == 0, "staging directories left after the next build"
    assert served, error
