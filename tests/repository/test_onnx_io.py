"""Reading ONNX graph interfaces: dtypes, dynamic dims, batch axis, initializers, malformed files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tritonkit.errors import ModelImportError
from tritonkit.repository.onnx_io import external_data_files, read_io


def test_zoo_interfaces(onnx_file: Callable[[str], Path]) -> None:
    two = read_io(onnx_file("two_in"))
    assert [(t.name, t.datatype, t.shape) for t in two.inputs] == [
        ("x", "FP32", (-1, 4)),
        ("y", "FP32", (-1, 4)),
    ]
    assert [t.name for t in two.outputs] == ["sum", "prod"]
    assert two.batch_dynamic and two.opset == 17

    seq = read_io(onnx_file("seq_sum"))
    assert seq.inputs[0].shape == (-1, -1)  # symbolic batch and an unnamed dim are both dynamic
    assert (seq.outputs[0].datatype, seq.outputs[0].shape) == ("FP32", (-1,))
    assert seq.outputs[1].datatype == "INT32"

    fixed = read_io(onnx_file("fixed"))
    assert fixed.inputs[0].shape == (2, 3) and not fixed.batch_dynamic

    half = read_io(onnx_file("half_bool"))
    assert [t.datatype for t in half.inputs] == ["FP16", "BOOL"]
    assert read_io(onnx_file("strings")).inputs[0].datatype == "BYTES"


def test_initializers_listed_as_inputs_are_not_inputs(onnx_file: Callable[[str], Path]) -> None:
    gemm = read_io(onnx_file("gemm_names"))
    assert [t.name for t in gemm.inputs] == ["input.1"]
    assert [t.name for t in gemm.outputs] == ["onnx::Gemm_0"]


def test_one_fixed_output_makes_the_graph_unbatchable(
    build_model: Callable[..., onnx.ModelProto], tmp_path: Path
) -> None:
    model = build_model(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)],
        [("x", TensorProto.FLOAT, ["b", 3])],
        [("s", TensorProto.FLOAT, [])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    io = read_io(path)
    assert io.inputs[0].batch_dynamic and not io.outputs[0].batch_dynamic
    assert not io.batch_dynamic


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"this is not protobuf at all \xff\xfe", "`bad.onnx` is not a valid ONNX model ("),
        (b"", "`bad.onnx` is not a valid ONNX model ("),
    ],
)
def test_malformed_file_is_one_clear_line(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelImportError) as err:
        read_io(path)
    assert str(err.value).startswith(expected)
    assert "\n" not in str(err.value)


def test_checker_failure_is_reported(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "undefined"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "broken.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelImportError, match=r"`broken.onnx` is not a valid ONNX model \(.*undefined"):
        read_io(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelImportError, match="ONNX file not found"):
        read_io(tmp_path / "absent.onnx")
    with pytest.raises(ModelImportError, match="is not a file"):
        read_io(tmp_path)


def test_unsupported_dtype_names_tensor_dtype_and_supported_list(
    build_model: Callable[..., onnx.ModelProto], tmp_path: Path
) -> None:
    model = build_model(
        [helper.make_node("Identity", ["z"], ["out"])],
        [("z", TensorProto.COMPLEX64, ["b", 2])],
        [("out", TensorProto.COMPLEX64, ["b", 2])],
    )
    path = tmp_path / "complex.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelImportError) as err:
        read_io(path)
    message = str(err.value)
    assert "input `z` has dtype COMPLEX64" in message
    assert "expected one of BOOL, UINT8" in message and "FP16, FP32" in message and "BYTES" in message


def test_bfloat16_is_refused_for_the_portable_runner(
    build_model: Callable[..., onnx.ModelProto], tmp_path: Path
) -> None:
    model = build_model(
        [helper.make_node("Identity", ["z"], ["out"])],
        [("z", TensorProto.BFLOAT16, ["b", 2])],
        [("out", TensorProto.BFLOAT16, ["b", 2])],
    )
    path = tmp_path / "bf16.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelImportError, match="input `z` has dtype BFLOAT16"):
        read_io(path)


def test_unknown_rank_is_refused(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    path = tmp_path / "norank.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelImportError, match=r"`norank.onnx` is not a valid ONNX model \(.*shape"):
        read_io(path)  # onnx.checker already refuses it
    with pytest.raises(ModelImportError, match="input `x` has no shape"):
        read_io(path, check=False)


def test_external_data_locations_are_found(
    build_model: Callable[..., onnx.ModelProto], tmp_path: Path
) -> None:
    weight = numpy_helper.from_array(np.ones((64, 64), dtype=np.float32), "w")
    model = build_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [("x", TensorProto.FLOAT, ["b", 64])],
        [("y", TensorProto.FLOAT, ["b", 64])],
        [weight],
    )
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="ext.weights", size_threshold=0)
    io = read_io(path)
    assert io.external_data == ("ext.weights",)
    assert external_data_files(onnx.load(str(path), load_external_data=False)) == ("ext.weights",)
