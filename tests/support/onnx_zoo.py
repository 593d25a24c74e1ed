"""Shared test support, loaded as a pytest plugin by tests/conftest.py: small ONNX graphs built with
``onnx.helper`` and a repository snapshot (every path plus a hash of every file) to prove a failed write
changed nothing; used by the repository, build and client tests."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

Dim = int | str | None
IO = Sequence[tuple[str, int, Sequence[Dim]]]

OPSET = 17


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: IO,
    outputs: IO,
    initializers: Sequence[onnx.TensorProto] = (),
    *,
    initializers_as_inputs: bool = False,
) -> onnx.ModelProto:
    """A checked ONNX model; ``None`` dims are unnamed dynamic dims, strings are symbolic ones."""
    graph_inputs = [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs]
    if initializers_as_inputs:  # what old exporters did with weights
        graph_inputs += [
            helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in initializers
        ]
    graph = helper.make_graph(
        list(nodes),
        "g",
        graph_inputs,
        [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in outputs],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by every onnxruntime the project allows
    onnx.checker.check_model(model)
    return model


def zoo() -> dict[str, onnx.ModelProto]:
    """Differently shaped models: the e2e test serves all of them from one server."""
    weights = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "fc.weight")
    bias = numpy_helper.from_array(np.array([0.5, -0.25, 0.125], dtype=np.float32), "fc.bias")
    table = numpy_helper.from_array(np.arange(10, dtype=np.float32).reshape(5, 2), "table")
    scale = numpy_helper.from_array(np.array(3.0, dtype=np.float32), "scale")
    return {
        # (a) two FP32 inputs, two outputs, symbolic batch
        "two_in": make_model(
            [helper.make_node("Add", ["x", "y"], ["sum"]), helper.make_node("Mul", ["x", "y"], ["prod"])],
            [("x", TensorProto.FLOAT, ["batch", 4]), ("y", TensorProto.FLOAT, ["batch", 4])],
            [("sum", TensorProto.FLOAT, ["batch", 4]), ("prod", TensorProto.FLOAT, ["batch", 4])],
        ),
        # (b) INT64 with an unnamed dynamic sequence dim; rank-1 output (dims [1] + reshape [])
        "seq_sum": make_model(
            [
                helper.make_node("Cast", ["ids"], ["ids_f"], to=TensorProto.FLOAT),
                helper.make_node("ReduceSum", ["ids_f", "axes"], ["total"], keepdims=0),
                helper.make_node("Cast", ["ids"], ["ids_i32"], to=TensorProto.INT32),
            ],
            [("ids", TensorProto.INT64, ["batch", None])],
            [("total", TensorProto.FLOAT, ["batch"]), ("ids_i32", TensorProto.INT32, ["batch", None])],
            [numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")],
        ),
        # (c) fixed first dim: max_batch_size 0, full dims
        "fixed": make_model(
            [
                helper.make_node("Mul", ["m", "scale"], ["scaled"]),
                helper.make_node("Relu", ["scaled"], ["r"]),
            ],
            [("m", TensorProto.FLOAT, [2, 3])],
            [("r", TensorProto.FLOAT, [2, 3])],
            [scale],
        ),
        # (d) FP16 and BOOL in and out
        "half_bool": make_model(
            [
                helper.make_node("Neg", ["h"], ["neg"]),
                helper.make_node("Where", ["flag", "h", "neg"], ["picked"]),
                helper.make_node("Not", ["flag"], ["flipped"]),
            ],
            [("h", TensorProto.FLOAT16, ["N", 3]), ("flag", TensorProto.BOOL, ["N", 3])],
            [("picked", TensorProto.FLOAT16, ["N", 3]), ("flipped", TensorProto.BOOL, ["N", 3])],
        ),
        # (e) exporter-style names and a Gemm whose weights are also listed as graph inputs
        "gemm_names": make_model(
            [helper.make_node("Gemm", ["input.1", "fc.weight", "fc.bias"], ["onnx::Gemm_0"])],
            [("input.1", TensorProto.FLOAT, ["batch_size", 4])],
            [("onnx::Gemm_0", TensorProto.FLOAT, ["batch_size", 3])],
            [weights, bias],
            initializers_as_inputs=True,
        ),
        # (f) BYTES through an ONNX string tensor
        "strings": make_model(
            [helper.make_node("Identity", ["text"], ["same"])],
            [("text", TensorProto.STRING, ["batch", 2])],
            [("same", TensorProto.STRING, ["batch", 2])],
        ),
        # (g) value-dependent failure (index out of range) to prove error responses, not crashes
        "gather": make_model(
            [helper.make_node("Gather", ["table", "idx"], ["rows"], axis=0)],
            [("idx", TensorProto.INT64, ["batch", 1])],
            [("rows", TensorProto.FLOAT, ["batch", 1, 2])],
            [table],
        ),
    }


def save_model(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` (and ``root`` itself) mapped to a file hash, "dir" or "link"."""
    if not root.exists():
        return {}
    tree: dict[str, str] = {".": "dir"}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            tree[rel] = "link"
        elif path.is_dir():
            tree[rel] = "dir"
        else:
            tree[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return tree


@pytest.fixture
def onnx_file(tmp_path: Path) -> Callable[[str], Path]:
    """Write one zoo model into tmp_path and return its path."""
    models = zoo()

    def write(name: str) -> Path:
        return save_model(models[name], tmp_path / f"{name}.onnx")

    return write


@pytest.fixture(scope="session")
def models() -> dict[str, onnx.ModelProto]:
    return zoo()


@pytest.fixture
def snap() -> Callable[[Path], dict[str, str]]:
    return snapshot


@pytest.fixture
def build_model() -> Callable[..., onnx.ModelProto]:
    return make_model


@contextlib.contextmanager
def unwritable_dir(path: Path) -> Iterator[None]:
    """Make ``path`` refuse new entries, even for root (immutable flag); skip where impossible."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield
        finally:
            path.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    if (
        chattr is None
        or subprocess.run([chattr, "+i", str(path)], check=False, capture_output=True).returncode
    ):
        pytest.skip("running as root and `chattr +i` is unavailable here: cannot make a directory unwritable")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


@pytest.fixture
def unwritable() -> Callable[[Path], contextlib.AbstractContextManager[None]]:
    return unwritable_dir
