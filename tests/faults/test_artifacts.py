"""Corrupt or missing artifacts: ``tritonkit check --target triton-image`` (every backend) must catch each one, naming the model, while a
good repository passes. Each case is recorded as caught or not, with check's first line."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from tests.support.python_models import ADD_ONE

from tritonkit.backends.runners import runner_path
from tritonkit.cli import main
from tritonkit.config import save
from tritonkit.config.model_config import InstanceGroup, ModelConfig, TensorConfig

from .conftest import Record

pytestmark = pytest.mark.faults


def _graph(path: Path, width: int = 384) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, width])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, width])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def make_repo(root: Path) -> Path:
    """A repository ``check`` passes: a text model (runner, model.onnx, tokenizer.json), an
    onnxruntime model and a python model."""
    text = root / "text_model" / "1"
    text.mkdir(parents=True)
    shutil.copy(runner_path("text_embedding"), text / "model.py")
    _graph(text / "model.onnx")
    (text / "tokenizer.json").write_text("{}")
    save(
        ModelConfig(
            name="text_model",
            backend="python",
            max_batch_size=8,
            inputs=[TensorConfig("TEXT", "BYTES", [1])],
            outputs=[TensorConfig("EMBEDDING", "FP32", [384])],
            parameters={"onnx_file": "model.onnx", "tokenizer_file": "tokenizer.json"},
            instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        ),
        root / "text_model" / "config.pbtxt",
    )
    graph = root / "onnx_model" / "1"
    graph.mkdir(parents=True)
    _graph(graph / "model.onnx")
    save(
        ModelConfig(
            name="onnx_model",
            backend="onnxruntime",
            max_batch_size=8,
            inputs=[TensorConfig("X", "FP32", [384])],
            outputs=[TensorConfig("Y", "FP32", [384])],
            instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        ),
        root / "onnx_model" / "config.pbtxt",
    )
    python = root / "py_model" / "1"
    python.mkdir(parents=True)
    (python / "model.py").write_text(ADD_ONE)
    save(
        ModelConfig(
            name="py_model",
            backend="python",
            max_batch_size=8,
            inputs=[TensorConfig("X", "FP32", [4])],
            outputs=[TensorConfig("Y", "FP32", [4])],
            instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        ),
        root / "py_model" / "config.pbtxt",
    )
    return root


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _loop(path: Path) -> None:
    path.unlink()
    os.symlink(path.with_name("other.onnx"), path)
    os.symlink(path, path.with_name("other.onnx"))


def _wrong_dims(root: Path) -> None:
    config = root / "onnx_model" / "config.pbtxt"
    head, _, tail = config.read_text().rpartition("384")  # the output's dims
    config.write_text(head + "512" + tail)


def _empty_version(root: Path) -> None:
    version = root / "onnx_model" / "1"
    shutil.rmtree(version)
    version.mkdir()


CASES: dict[str, tuple[str, Callable[[Path], None]]] = {
    "text model: truncated model.onnx": ("text_model", lambda r: _truncate(r / "text_model/1/model.onnx")),
    "text model: missing model.onnx": ("text_model", lambda r: (r / "text_model/1/model.onnx").unlink()),
    "text model: missing tokenizer.json": (
        "text_model",
        lambda r: (r / "text_model/1/tokenizer.json").unlink(),
    ),
    "onnxruntime: truncated model.onnx": ("onnx_model", lambda r: _truncate(r / "onnx_model/1/model.onnx")),
    "onnxruntime: symlink loop": ("onnx_model", lambda r: _loop(r / "onnx_model/1/model.onnx")),
    "onnxruntime: output dims 512 vs the graph's 384": ("onnx_model", _wrong_dims),
    "onnxruntime: empty version dir": ("onnx_model", _empty_version),
    "python: model.py syntax error": (
        "py_model",
        lambda r: (r / "py_model/1/model.py").write_text("def execute(:\n"),
    ),
    "python: missing model.py": ("py_model", lambda r: (r / "py_model/1/model.py").unlink()),
}


def test_good_repository_passes_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "--repo", str(make_repo(tmp_path / "repo")), "--target", "triton-image"])
    out = capsys.readouterr().out
    assert code == 0, out


@pytest.mark.parametrize("case", list(CASES))
def test_check_catches(tmp_path: Path, capsys: pytest.CaptureFixture[str], record: Record, case: str) -> None:
    model, damage = CASES[case]
    repo = make_repo(tmp_path / "repo")
    damage(repo)
    try:
        code = main(["check", "--repo", str(repo), "--target", "triton-image"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # a crash in check is itself a finding
        code, _ = -1, capsys.readouterr()
        record("artifacts", case, False, exit=code, first_line=f"{type(exc).__name__}: {exc}"[:100])
        raise
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    named = [line for line in lines if model in line]
    caught = code not in (0, -1) and bool(named)
    record("artifacts", case, caught, exit=code, first_line=(named or lines or [""])[0][:110])
    assert caught, f"check exit {code}: {lines[:3]}"
