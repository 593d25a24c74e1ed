"""Two ``tritonkit build`` runs of one model name at once (issue 23, defect 10): each gets its own
version, or one is refused in one line; a version in place is never moved aside without ``--force``.

Every round starts two real ``python -m tritonkit build --onnx`` processes together on a model whose
weights take a while to copy, so their writes overlap; the reduced form runs 2 rounds per case, the
full form 5.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tritonkit.repository import ModelRepository, sha256_file

from .conftest import Record, Scale

pytestmark = pytest.mark.faults

TOOLS = str(Path(__file__).resolve().parents[2] / "tools")


def _model(path: Path, width: int, seed: int) -> Path:
    weight = np.random.default_rng(seed).standard_normal((width, width)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, width])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, width])],
        [numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _both(repo: Path, builds: list[list[str]]) -> list[tuple[int, str, str]]:
    """Run the builds at once; (exit code, stdout, stderr) of each."""
    env = {**os.environ, "PYTHONPATH": TOOLS}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tritonkit", "build", "--repo", str(repo), "--name", "shared", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in builds
    ]
    return [(p.wait(timeout=300), *p.communicate()) for p in procs]


def _owner(repository: ModelRepository, version: int, hashes: list[str]) -> int:
    """Which build's file version ``version`` holds (-1: neither, or a mix)."""
    recorded = repository.read_manifest("shared", version).source_sha256
    stored = sha256_file(repository.version_dir("shared", version) / "model.onnx")
    return hashes.index(recorded) if recorded == stored and recorded in hashes else -1


CASES = {
    # case: (second build's extra flags, both builds' flags, what must happen)
    "same model, no --version": ([], [], "both built, versions 1 and 2"),
    "same model, both --version 1": ([], ["--version", "1"], "one built, one refused"),
    "max batch 8 vs 16": (["--max-batch-size", "16"], ["--max-batch-size", "8"], "one built, one refused"),
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", list(CASES))
def test_two_builds_of_one_name_never_share_a_version(
    case: str, tmp_path: Path, fault_scale: Scale, record: Record
) -> None:
    second, common, _ = CASES[case]
    width = 2048 if fault_scale.form == "reduced" else 4096
    rounds = 2 if fault_scale.form == "reduced" else 5
    sources = [_model(tmp_path / f"m{i}.onnx", width, i) for i in range(2)]
    hashes = [sha256_file(s) for s in sources]
    failures: list[str] = []
    for number in range(rounds):
        repo = tmp_path / f"repo{number}"
        builds = [["--onnx", str(sources[0]), *common], ["--onnx", str(sources[1]), *common, *second]]
        outcomes = _both(repo, builds)
        codes = sorted(code for code, _, _ in outcomes)
        repository = ModelRepository(repo)
        versions = repository.versions("shared")
        # Each version holds exactly one build's model, whole: its manifest and its model.onnx hash
        # to that build's file.
        owners = sorted(_owner(repository, v, hashes) for v in versions)
        refused = [err.strip() for code, _, err in outcomes if code != 0]
        built = [out for code, out, _ in outcomes if code == 0]
        printed = sorted(
            line.split("version ")[1].split(":")[0] for out in built for line in out.splitlines()
        )
        if case == "same model, no --version":
            ok = codes == [0, 0] and versions == [1, 2] and owners == [0, 1] and printed == ["1", "2"]
        else:
            one_line = len(refused) == 1 and "\n" not in refused[0] and "Traceback" not in refused[0]
            expected = "version 1 already exists" if "--version" in common else "max_batch_size: existing"
            ok = (
                codes == [0, 1]
                and versions == [1]
                and len(owners) == 1
                and one_line
                and expected in refused[0]
            )
        if not ok:
            failures.append(
                f"round {number}: exits {codes}, versions {versions}, printed {printed}, refused {refused}"
            )
    record(
        "writers",
        f"two `tritonkit build` of one name at once: {case} ({width}x{width} FP32, {rounds} rounds)",
        not failures,
        expected=CASES[case][2],
        rounds=rounds,
        failed_rounds=len(failures),
        first_failure=failures[0][:160] if failures else "",
    )
    assert not failures, failures
