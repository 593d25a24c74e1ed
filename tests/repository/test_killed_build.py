"""A ``tritonkit build`` killed with SIGKILL mid-write (issue 11, defect 11) leaves a staging directory;
``check`` and the embedded server name it, and the next build removes it and serves.

The build is a real subprocess copying a 256 MB external-data file into the repository; it is killed
as soon as its staging directory appears (mid-copy), not at a hook.
"""

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

from tritonkit.errors import ServerError
from tritonkit.repository import STAGING_PREFIX
from tritonkit.repository.check import check_repository
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

BIG_FLOATS = 64 * 1024 * 1024  # 256 MB of weights


def _graph(path: Path, big: bool) -> None:
    """Y = X + 1, with (``big``) an extra 256 MB initializer kept in an external-data file."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 2])
    one = numpy_helper.from_array(np.ones(2, dtype=np.float32), "one")
    nodes = [helper.make_node("Add", ["X", "one"], ["Y"])]
    inits = [one]
    if big:
        inits.append(numpy_helper.from_array(np.zeros(BIG_FLOATS, dtype=np.float32), "pad"))
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    if big:
        onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=1024)
    else:
        onnx.save(model, path)


def _build(onnx_path: Path, repo: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "tools")}
    command = [sys.executable, "-m", "tritonkit", "build", "--onnx", str(onnx_path), "--name", "m"]
    return subprocess.Popen(
        [*command, "--repo", str(repo), "--instance-kind", "KIND_CPU", *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_build_killed_mid_write_is_cleaned_by_the_next_build(tmp_path: Path) -> None:
    big, small = tmp_path / "big" / "m.onnx", tmp_path / "small" / "m.onnx"
    big.parent.mkdir()
    small.parent.mkdir()
    _graph(big, big=True)
    _graph(small, big=False)
    repo = tmp_path / "repo"
    repo.mkdir()

    build = _build(big, repo)
    deadline = time.monotonic() + 120
    staged: list[Path] = []
    while not staged and build.poll() is None and time.monotonic() < deadline:
        staged = list(repo.glob(f"{STAGING_PREFIX}*"))
        time.sleep(0.001)
    assert staged, f"the build never staged (rc {build.returncode})"
    os.kill(build.pid, signal.SIGKILL)
    build.communicate()
    leftover = staged[0]
    assert leftover.exists() and not (repo / "m").exists()
    assert any(line.startswith(f"{leftover.name}: staging directory") for line in check_repository(repo))

    with pytest.raises(ServerError, match=f"holds {leftover.name}, left by an interrupted build"):
        EmbeddedServer(repo, ServerOptions(exit_timeout=1)).start()

    rebuilt = _build(small, repo)
    _out, err = rebuilt.communicate(timeout=240)
    assert rebuilt.returncode == 0, err.decode()
    assert not leftover.exists()
    assert check_repository(repo) == []
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            tensor = httpclient.InferInput("X", [1, 2], "FP32")
            tensor.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
            result = client.infer("m", [tensor]).as_numpy("Y")
        finally:
            client.close()
    assert result is not None and result.tolist() == [[2.0, 3.0]]
