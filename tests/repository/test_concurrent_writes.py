"""Two writers of one model at once (issue 23 defect 10), writers killed mid-write (defect 11), and the
refusal of a different signature naming the field, both values and who changed it (issue 24 item 4).

The writers are real processes started together at a barrier; a killed writer is a real process
killed with SIGKILL while its staging folder exists, not a hook.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig, load
from tritonkit.errors import RepositoryError
from tritonkit.repository import Manifest, ModelRepository, sha256_file
from tritonkit.repository.check import check_repository
from tritonkit.repository.signature import CONFIG_ORIGIN_FILE
from tritonkit.repository.staging import LOCK_FILE, STAGING_PREFIX, locked
from tritonkit.tune.apply import write_as_model, write_config

CTX = multiprocessing.get_context("fork")


def _config(name: str = "shared", max_batch_size: int = 4) -> ModelConfig:
    return ModelConfig(
        name=name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=[TensorConfig("x", "FP32", [3])],
        outputs=[TensorConfig("y", "FP32", [3])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )


def _writer(root: str, source: str, mbs: int, version: int | None, barrier: Any, results: Any) -> None:
    """One writer process: wait at the barrier with the others, then write ``shared``."""
    repo = ModelRepository(root)
    files = {"model.py": b"# runner\n", "weights.bin": Path(source)}
    barrier.wait()
    try:
        path = repo.write_version(
            "shared", _config(max_batch_size=mbs), files, Manifest.create(source), version=version
        )
        results.put((source, "ok", path.name))
    except RepositoryError as exc:
        results.put((source, "refused", str(exc)))


def _race(tmp_path: Path, mbs: tuple[int, int], version: int | None) -> list[tuple[str, str, str]]:
    """Two writers of model ``shared`` started at one barrier; their (source, outcome, detail)."""
    root = tmp_path / "repo"
    ModelRepository(root, create=True)
    sources = []
    for index in range(2):
        path = tmp_path / f"source{index}.bin"
        path.write_bytes(os.urandom(4 << 20))  # a copy long enough for the writers to overlap
        sources.append(str(path))
    barrier, results = CTX.Barrier(2), CTX.Queue()
    procs = [
        CTX.Process(target=_writer, args=(str(root), s, m, version, barrier, results))
        for s, m in zip(sources, mbs, strict=True)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return sorted(outcomes)


@pytest.mark.parametrize("round_", range(3))
def test_two_writers_of_one_model_each_get_their_own_version(tmp_path: Path, round_: int) -> None:
    outcomes = _race(tmp_path, (4, 4), None)
    assert [o[1] for o in outcomes] == ["ok", "ok"], outcomes
    assert sorted(o[2] for o in outcomes) == ["1", "2"]
    repo = ModelRepository(tmp_path / "repo")
    for source, _, version in outcomes:  # each version holds its own writer's files
        assert repo.read_manifest("shared", int(version)).source_sha256 == sha256_file(source)
        assert (repo.version_dir("shared", int(version)) / "weights.bin").read_bytes() == Path(
            source
        ).read_bytes()
    assert sorted(p.name for p in repo.root.iterdir()) == ["shared"]  # no lock file, no staging left


def test_two_writers_of_one_version_one_is_refused_and_nothing_is_moved_aside(tmp_path: Path) -> None:
    outcomes = _race(tmp_path, (4, 4), 1)
    assert sorted(o[1] for o in outcomes) == ["ok", "refused"], outcomes
    (winner,) = [o for o in outcomes if o[1] == "ok"]
    (loser,) = [o for o in outcomes if o[1] == "refused"]
    assert loser[2] == "model `shared` version 1 already exists; use a new version or --force to replace it"
    repo = ModelRepository(tmp_path / "repo")
    assert repo.versions("shared") == [1]
    assert repo.read_manifest("shared", 1).source_sha256 == sha256_file(winner[0])


def test_two_writers_with_different_signatures_one_is_refused_naming_the_field(tmp_path: Path) -> None:
    outcomes = _race(tmp_path, (4, 8), None)
    assert sorted(o[1] for o in outcomes) == ["ok", "refused"], outcomes
    (loser,) = [o for o in outcomes if o[1] == "refused"]
    assert loser[2].startswith(
        "model `shared` already exists with a different signature: max_batch_size: existing "
    )
    assert "\n" not in loser[2] and ModelRepository(tmp_path / "repo").versions("shared") == [1]


def _hold_lock(root: str, ready: Any, release: Any) -> None:
    with locked(Path(root)):
        ready.set()
        release.wait(60)


def test_a_writer_waits_while_another_holds_the_lock(tmp_path: Path) -> None:
    repo = ModelRepository(tmp_path / "repo", create=True)
    source = tmp_path / "s.bin"
    source.write_bytes(b"w")
    ready, release = CTX.Event(), CTX.Event()
    holder = CTX.Process(target=_hold_lock, args=(str(repo.root), ready, release))
    holder.start()
    assert ready.wait(30)
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITE, str(repo.root), str(source)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "tools")},
    )
    time.sleep(1.0)  # the writer has started and, holding no lock, must not have written
    assert writer.poll() is None and repo.versions("shared") == []
    release.set()
    assert writer.wait(60) == 0 and repo.versions("shared") == [1]
    holder.join(30)
    assert not (repo.root / LOCK_FILE).exists()


_WRITE = """
import sys
from pathlib import Path
from tritonkit.config import ModelConfig, TensorConfig
from tritonkit.repository import Manifest, ModelRepository
cfg = ModelConfig("shared", backend="python", inputs=[TensorConfig("x", "FP32", [3])], outputs=[TensorConfig("y", "FP32", [3])])
ModelRepository(sys.argv[1]).write_version("shared", cfg, {"model.py": b"#"}, Manifest.create(sys.argv[2]))
"""

_CLONE = """
import sys
from tritonkit.config import load
from tritonkit.tune.apply import write_as_model
model = sys.argv[1]
write_as_model(model, "shared_tuned", load(model + "/config.pbtxt"))
"""


def _model_with_big_version(tmp_path: Path) -> ModelRepository:
    repo = ModelRepository(tmp_path / "repo", create=True)
    weights = tmp_path / "weights.bin"
    with weights.open("wb") as out:
        for _ in range(64):
            out.write(os.urandom(4 << 20))  # 256 MiB: the clone is still copying when it is killed
    repo.write_version(
        "shared", _config(), {"model.py": b"#", "weights.bin": weights}, Manifest.create(weights)
    )
    weights.unlink()
    return repo


@pytest.mark.timeout(300)
def test_tune_write_back_killed_mid_copy_leaves_only_a_staging_folder_the_next_writer_removes(
    tmp_path: Path,
) -> None:
    repo = _model_with_big_version(tmp_path)
    clone = subprocess.Popen(
        [sys.executable, "-c", _CLONE, str(repo.root / "shared")],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "tools")},
    )
    staged: list[Path] = []
    deadline = time.monotonic() + 120
    while not staged and clone.poll() is None and time.monotonic() < deadline:
        staged = list(repo.root.glob(f"{STAGING_PREFIX}*"))
        time.sleep(0.001)
    assert staged, f"the write-back never staged (rc {clone.returncode})"
    os.kill(clone.pid, signal.SIGKILL)
    clone.wait()
    # Only the recognisable staging folder is left (and the lock file, which Triton ignores: a file):
    # no hidden `.shared_tuned.xxxx` folder, no half model.
    hidden = sorted(p.name for p in repo.root.iterdir() if p.name.startswith(".") and p.is_dir())
    assert hidden == [staged[0].name] and not (repo.root / "shared_tuned").exists()
    assert any(line.startswith(f"{staged[0].name}: staging directory") for line in check_repository(repo))
    # The next write-back removes it and lands whole, with the repository's modes, not mkdtemp's 0700.
    target, diff = write_as_model(repo.root / "shared", "shared_tuned", _config(max_batch_size=8))
    assert not staged[0].exists() and check_repository(repo) == []
    assert sorted(p.name for p in repo.root.iterdir()) == ["shared", "shared_tuned"]
    assert "max_batch_size: 8" in diff and load(target / "config.pbtxt").max_batch_size == 8
    expected = 0o777 & ~_umask()
    assert (
        stat.S_IMODE(target.stat().st_mode) == expected == stat.S_IMODE((repo.root / "shared").stat().st_mode)
    )


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_remove_stale_staging_removes_a_killed_writers_folder_but_not_a_live_ones(tmp_path: Path) -> None:
    repo = ModelRepository(tmp_path / "repo", create=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    killed = repo.root / f"{STAGING_PREFIX}{int(dead.stdout)}-x"
    (killed / "m" / "1").mkdir(parents=True)
    live = repo.root / f"{STAGING_PREFIX}{os.getpid()}-y"
    live.mkdir()
    assert repo.remove_stale_staging() == [killed]
    assert live.exists() and not killed.exists()


def test_config_write_back_leftovers_are_removed_by_the_next_write_back(tmp_path: Path) -> None:
    repo = _small_repo(tmp_path)
    leftover = repo.root / "shared" / ".config.pbtxt.abc123.tmp"
    leftover.write_text("half")
    write_config(repo.root / "shared", _config(max_batch_size=8))
    assert not leftover.exists()
    assert sorted(p.name for p in (repo.root / "shared").iterdir()) == [
        "1",
        CONFIG_ORIGIN_FILE,
        "config.pbtxt",
    ]


def _small_repo(tmp_path: Path) -> ModelRepository:
    repo = ModelRepository(tmp_path / "repo", create=True)
    source = tmp_path / "s.bin"
    source.write_bytes(b"w")
    repo.write_version("shared", _config(), {"model.py": b"#"}, Manifest.create(source))
    return repo


# --- a rebuild refused for a different signature (issue 24 item 4) ---------------------------------
def test_a_signature_refusal_names_the_field_its_two_values_and_that_tune_changed_it(tmp_path: Path) -> None:
    repo = _small_repo(tmp_path)
    source = tmp_path / "s.bin"
    write_config(repo.root / "shared", _config(max_batch_size=32))  # tune's write-back
    with pytest.raises(RepositoryError) as refused:
        repo.write_versions([_write(_config(max_batch_size=4), source)], proposed="spec")
    message = str(refused.value)
    assert message.startswith(
        "model `shared` already exists with a different signature: max_batch_size: existing 32, spec 4"
    )
    assert "(changed from 4 by tritonkit tune on " in message and message.endswith(
        "use another --name or --force"
    )
    assert repo.versions("shared") == [1]


def test_a_signature_refusal_without_tune_names_only_the_fields(tmp_path: Path) -> None:
    repo = _small_repo(tmp_path)
    other = ModelConfig(
        "shared",
        backend="python",
        max_batch_size=4,
        inputs=[TensorConfig("x", "FP32", [5])],
        outputs=[TensorConfig("y", "FP32", [3])],
    )
    with pytest.raises(RepositoryError) as refused:
        repo.write_versions([_write(other, tmp_path / "s.bin")])
    assert str(refused.value) == (
        "model `shared` already exists with a different signature: inputs: existing x:FP32[3], new x:FP32[5]; "
        "use another --name or --force"
    )


def test_a_build_after_tune_records_no_stale_origin(tmp_path: Path) -> None:
    repo = _small_repo(tmp_path)
    write_config(repo.root / "shared", _config(max_batch_size=32))
    assert (repo.root / "shared" / CONFIG_ORIGIN_FILE).is_file()
    repo.write_versions([_write(_config(max_batch_size=32), tmp_path / "s.bin")])
    assert not (repo.root / "shared" / CONFIG_ORIGIN_FILE).exists()  # the build wrote the config again


def _write(config: ModelConfig, source: Path) -> Any:
    from tritonkit.repository import VersionWrite  # noqa: PLC0415

    return VersionWrite(config.name, config, {"model.py": b"#"}, Manifest.create(source))
