"""``tritonkit tune --write model:NAME`` killed during its write-back (issue 23, defect 11): the only
thing left is a staging folder the repository's writers recognise, the next ``tritonkit serve``
removes it and serves, the next write-back lands whole, and the new model folder has the
repository's modes (not ``mkdtemp``'s 0700).

The write-back is tune's own function (:func:`tritonkit.tune.apply.write_as_model`, what ``--write
model:NAME`` runs once the search is done) in a real process, killed with SIGKILL while it copies a
large version; ``tritonkit serve`` is the real command in a real process.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tests.support.python_models import ADD_ONE

from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig, load
from tritonkit.repository import STAGING_PREFIX, Manifest, ModelRepository
from tritonkit.repository.check import check_repository
from tritonkit.tune.apply import write_as_model

from .conftest import Record, Scale

pytestmark = pytest.mark.faults

TOOLS = str(Path(__file__).resolve().parents[2] / "tools")
_WRITE_BACK = """
import sys
from tritonkit.config import load
from tritonkit.tune.apply import write_as_model
cfg = load(sys.argv[1] + "/config.pbtxt")
cfg.max_batch_size = 4
write_as_model(sys.argv[1], "add_tuned", cfg)
"""


def _repository(root: Path, padding_mib: int) -> ModelRepository:
    """Model ``add`` (python backend, Y = X + 1) whose version also carries ``padding_mib`` MiB."""
    repo = ModelRepository(root, create=True)
    padding = root.parent / "padding.bin"
    with padding.open("wb") as out:
        for _ in range(padding_mib // 4):
            out.write(os.urandom(4 << 20))
    runner = root.parent / "model.py"
    runner.write_text(ADD_ONE)
    config = ModelConfig(
        "add",
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("X", "FP32", [2])],
        outputs=[TensorConfig("Y", "FP32", [2])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    repo.write_version("add", config, {"model.py": runner, "padding.bin": padding}, Manifest.create(runner))
    padding.unlink()
    return repo


def _serve(repo: Path) -> tuple[bool, list[str]]:
    """Start ``tritonkit serve`` on ``repo``; (one infer on ``add`` answered X + 1, its output lines)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "serve", "--repo", str(repo), "--exit-timeout", "2"],
        env={**os.environ, "PYTHONPATH": TOOLS},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any("ready" in line for line in lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        ready = [line for line in lines if "tritonkit serve: ready" in line]
        if not ready:
            return False, lines
        client = httpclient.InferenceServerClient(
            ready[0].split("http=", 1)[1].split()[0].removeprefix("http://")
        )
        try:
            tensor = httpclient.InferInput("X", [1, 2], "FP32")
            tensor.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
            result = client.infer("add", [tensor]).as_numpy("Y")
        finally:
            client.close()
        return result is not None and result.tolist() == [[2.0, 3.0]], lines
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


@pytest.mark.timeout(600)
def test_tune_write_back_killed_mid_copy(tmp_path: Path, fault_scale: Scale, record: Record) -> None:
    padding = 128 if fault_scale.form == "reduced" else 512
    repo = _repository(tmp_path / "repo", padding)
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITE_BACK, str(repo.root / "add")], env={**os.environ, "PYTHONPATH": TOOLS}
    )
    staged: list[Path] = []
    deadline = time.monotonic() + 120
    while not staged and writer.poll() is None and time.monotonic() < deadline:
        staged = list(repo.root.glob(f"{STAGING_PREFIX}*"))
        time.sleep(0.001)
    killed_mid_copy = writer.poll() is None and bool(staged)
    if writer.poll() is None:
        os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    hidden = sorted(p.name for p in repo.root.iterdir() if p.is_dir() and p.name.startswith("."))
    only_staging = all(name.startswith(STAGING_PREFIX) for name in hidden)
    half_model = (repo.root / "add_tuned").exists()
    reported = any(
        "staging directory left by an interrupted write" in line for line in check_repository(repo)
    )

    served, lines = _serve(repo.root)
    removed = any("left in the repository by a killed writer" in line for line in lines)
    left_after_serve = sorted(p.name for p in repo.root.iterdir() if p.is_dir() and p.name.startswith("."))

    target, _ = write_as_model(repo.root / "add", "add_tuned", load(repo.root / "add" / "config.pbtxt"))
    mode = stat.S_IMODE(target.stat().st_mode)
    same_mode = mode == stat.S_IMODE((repo.root / "add").stat().st_mode)
    landed = sorted(p.name for p in target.iterdir()) == ["1", "config.origin.json", "config.pbtxt"]
    passed = (
        killed_mid_copy and only_staging and not half_model and reported and served and removed
        and not left_after_serve and same_mode and landed and check_repository(repo) == []
    )  # fmt: skip
    record(
        "writers",
        f"kill -9 during tune's write-back --write model:NAME ({padding} MiB version)",
        passed,
        killed_mid_copy=killed_mid_copy,
        hidden_left=",".join(hidden) or "none",
        only_recognisable_staging=only_staging,
        half_model=half_model,
        check_reports_it=reported,
        serve_served=served,
        serve_removed_it=removed,
        left_after_serve=",".join(left_after_serve) or "none",
        new_model_mode=oct(mode),
        next_write_back_whole=landed,
    )
    assert killed_mid_copy, "the write-back finished before it could be killed; give it more to copy"
    assert only_staging and not half_model, hidden
    assert served and removed and not left_after_serve, lines
    assert same_mode and landed
