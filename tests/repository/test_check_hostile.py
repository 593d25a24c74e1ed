"""``tritonkit check`` catches repositories that cannot load (issue 11, defect 7), one line each.

Text-embedding models (the runner's layout: ``model.py`` + ``model.onnx`` + ``tokenizer.json``)
with a missing, truncated or mis-shaped graph or no tokenizer; a ``model.py`` that does not
compile; symlink loops and symlinks out of the repository; empty version directories; an empty
repository. Also: a write removes staging directories left by a killed writer, never a live one's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tritonkit import config
from tritonkit.backends.runners import runner_path
from tritonkit.cli import main
from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig
from tritonkit.convert.spec.buildspec import load_spec
from tritonkit.errors import RepositoryError
from tritonkit.repository import STAGING_PREFIX, Manifest, ModelRepository
from tritonkit.repository.check import check_repository


def _encoder(path: Path, width: int = 384) -> None:
    """A tiny graph with the text encoder's I/O: ids and mask in, a [batch, width] embedding out."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", width])
    weight = helper.make_tensor("w", TensorProto.FLOAT, [1, width], [0.0] * width)
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["f"], ["s"], keepdims=1),
        helper.make_node("MatMul", ["s", "w"], ["sentence_embedding"]),
    ]
    graph = helper.make_graph(nodes, "enc", [ids, mask], [out], initializer=[weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def text_model(root: Path, name: str, dims: int = 384) -> Path:
    version = root / name / "1"
    version.mkdir(parents=True)
    shutil.copy(runner_path("text_embedding"), version / "model.py")
    _encoder(version / "model.onnx")
    (version / "tokenizer.json").write_text("{}")
    cfg = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("TEXT", "BYTES", [1])],
        outputs=[TensorConfig("EMBEDDING", "FP32", [dims])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    config.save(cfg, root / name / "config.pbtxt")
    return version


def test_good_text_model_passes(tmp_path: Path) -> None:
    text_model(tmp_path, "text")
    assert check_repository(tmp_path) == []


def test_text_model_artifact_problems(tmp_path: Path) -> None:
    (text_model(tmp_path, "nograph") / "model.onnx").unlink()
    (text_model(tmp_path, "notok") / "tokenizer.json").unlink()
    truncated = text_model(tmp_path, "truncated") / "model.onnx"
    truncated.write_bytes(truncated.read_bytes()[:40])
    text_model(tmp_path, "wide", dims=512)
    problems = check_repository(tmp_path)
    assert len(problems) == 4, problems
    by_model = {p.split(":", 1)[0]: p for p in problems}
    assert "`model.onnx` (text-embedding graph) is missing" in by_model["nograph"]
    assert "`tokenizer.json` (text-embedding tokenizer) is missing" in by_model["notok"]
    assert by_model["truncated"].startswith("truncated: version 1: ")
    assert "model.onnx" in by_model["truncated"]
    assert (
        by_model["wide"]
        == "wide: version 1: output `EMBEDDING`: config dims [512], graph `model.onnx` has [384]"
    )
    assert all("\n" not in p for p in problems)


def test_model_py_that_does_not_compile(tmp_path: Path) -> None:
    version = text_model(tmp_path, "syntax")
    marker = tmp_path / "ran"
    (version / "model.py").write_text(f"open({str(marker)!r}, 'w')\ndef initialize(self:\n")
    problems = check_repository(tmp_path)
    assert len(problems) == 1
    assert problems[0].startswith("syntax: version 1: `model.py` line 2 does not compile (")
    assert not marker.exists()  # compiled, never run


def test_symlink_loop_and_escape(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    loop = text_model(root, "loop")
    os.symlink(loop / "a", loop / "b")
    os.symlink(loop / "b", loop / "a")
    escape = text_model(root, "escape")
    outside = tmp_path / "secret.onnx"
    outside.write_bytes((escape / "model.onnx").read_bytes())
    (escape / "model.onnx").unlink()
    os.symlink(outside, escape / "model.onnx")
    os.symlink(tmp_path, root / "outside_dir")
    problems = check_repository(root)
    assert "loop: `1/a` is a symlink loop" in problems
    assert "loop: `1/b` is a symlink loop" in problems
    assert (
        f"escape: `1/model.onnx` is a symlink that escapes the repository (to {str(outside)!r})" in problems
    )
    assert f"outside_dir: symlink that escapes the repository (to {str(tmp_path)!r})" in problems


def test_empty_version_directory(tmp_path: Path) -> None:
    version = text_model(tmp_path, "empty")
    shutil.rmtree(version)
    version.mkdir()
    assert check_repository(tmp_path) == ["empty: version 1: artifact `model.py` is missing"]


def test_empty_repository_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--repo", str(tmp_path)]) == 1
    assert capsys.readouterr().out == f"no models in {tmp_path}\n"


def _write(repo: ModelRepository, name: str) -> Path:
    cfg = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=0,
        inputs=[TensorConfig("X", "FP32", [1])],
        outputs=[TensorConfig("Y", "FP32", [1])],
    )
    source = repo.root.parent / "source.py"
    source.write_text("pass\n")
    return repo.write_version(name, cfg, {"model.py": source}, Manifest.create(source))


def test_write_removes_dead_writers_staging_but_keeps_live_ones(tmp_path: Path) -> None:
    repo = ModelRepository(tmp_path / "repo", create=True)
    tmp_path = repo.root
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    dead_dir = tmp_path / f"{STAGING_PREFIX}{int(dead.stdout)}-abc"
    (dead_dir / "m" / "1").mkdir(parents=True)
    legacy_dir = tmp_path / f"{STAGING_PREFIX}xyz"
    legacy_dir.mkdir()
    live_dir = tmp_path / f"{STAGING_PREFIX}{os.getpid()}-live"
    live_dir.mkdir()
    _write(repo, "m")
    assert not dead_dir.exists() and not legacy_dir.exists()
    assert live_dir.exists()


@pytest.mark.parametrize("name", ["../x", "/tmp/x", "a/../../x", "..", ".hidden", "a\\b"])
def test_model_names_cannot_leave_the_repository(tmp_path: Path, name: str) -> None:
    repo = ModelRepository(tmp_path / "repo", create=True)
    with pytest.raises(RepositoryError, match="invalid model name") as info:
        _write(repo, name)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "x").exists()
    assert list(repo.root.iterdir()) == []


@pytest.mark.parametrize("key", ["../x.py", "/tmp/x.py", "a/../../x.py", "a\\..\\x.py"])
def test_file_names_cannot_leave_the_version(tmp_path: Path, key: str) -> None:
    repo = ModelRepository(tmp_path / "repo", create=True)
    cfg = ModelConfig(
        name="m",
        backend="python",
        max_batch_size=0,
        inputs=[TensorConfig("X", "FP32", [1])],
        outputs=[TensorConfig("Y", "FP32", [1])],
    )
    source = tmp_path / "s.py"
    source.write_text("pass\n")
    with pytest.raises(RepositoryError, match="invalid file name"):
        repo.write_version("m", cfg, {"model.py": source, key: source}, Manifest.create(source))
    assert list(repo.root.iterdir()) == []


def test_symlinked_model_directory_out_of_the_repository_is_refused(tmp_path: Path) -> None:
    repo = ModelRepository(tmp_path / "repo", create=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, repo.root / "m")
    with pytest.raises(RepositoryError, match="not a model directory"):
        _write(repo, "m")
    assert list(outside.iterdir()) == []


def test_symlinked_spec_paths_do_not_write_outside(tmp_path: Path) -> None:
    """A spec reached through a symlink cannot name a model (the directory written) outside the repository."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "spec.yaml").write_text("name: ../escape\nsource: {onnx: m.onnx}\n")
    link = tmp_path / "link.yaml"
    os.symlink(real / "spec.yaml", link)
    with pytest.raises(RepositoryError, match=r"invalid model name '\.\./escape'"):
        load_spec(link)
