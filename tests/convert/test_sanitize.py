"""The graph clean-up never fixes a dynamic axis: ONNX Runtime 1.30's symbolic shape inference,
which Polygraphy's constant folding uses, turned the full-size `nn.TransformerEncoder`'s
`input_ids [batch, sequence]` into `[512, 512]` (its 512 positions); the build then refused the data.
And the exporter keeps batch and sequence apart when the example has them equal."""

from __future__ import annotations

from pathlib import Path

import onnx
import torch
from onnx import TensorProto, helper
from tests.support import torch_zoo

from tritonkit.convert.graph.export import TorchSource
from tritonkit.convert.graph.sanitize import io_shape_changes, sanitize_onnx


def _dims(path: Path) -> dict[str, list[str | int]]:
    graph = onnx.load(str(path)).graph
    return {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*graph.input, *graph.output)
    }


def _identity(shape: list[str | int]) -> onnx.ModelProto:
    return helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.INT64, shape)],
            [helper.make_tensor_value_info("y", TensorProto.INT64, shape)],
        )
    )


def test_a_dynamic_axis_made_fixed_is_named() -> None:
    before = _identity(["batch", "sequence"])
    assert io_shape_changes(before, _identity(["batch", "sequence"])) == []
    assert io_shape_changes(before, _identity([512, 512])) == [
        "`x` ['batch', 'sequence'] -> [512, 512]",
        "`y` ['batch', 'sequence'] -> [512, 512]",
    ]
    assert io_shape_changes(_identity([8, 4]), _identity([8, 4])) == []  # fixed stays fixed: fine


def test_export_and_clean_up_keep_batch_and_sequence_dynamic_when_the_example_has_them_equal(
    tmp_path: Path,
) -> None:
    small = torch_zoo.source("transformer_encoder")
    square = TorchSource(
        small.module,
        (torch.randint(0, 1000, (16, 16)),),  # batch == sequence: torch.export must not unify them
        small.input_names,
        small.output_names,
        small.dynamic_axes,
    )
    assert square.export(tmp_path / "raw.onnx", exporter="dynamo")["exporter"] == "dynamo"
    details = sanitize_onnx(tmp_path / "raw.onnx", tmp_path / "clean.onnx", min_opset=17)
    for path in (tmp_path / "raw.onnx", tmp_path / "clean.onnx"):
        assert _dims(path) == {"input_ids": ["batch", "sequence"], "y": ["batch", 2]}
    assert "fold_skipped" not in details


def _io_model(input_dims: list[int | str], output_dims: list[int | str]) -> onnx.ModelProto:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, input_dims)],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, output_dims)],
    )
    return onnx.helper.make_model(graph)


def test_an_output_width_resolved_by_folding_is_not_a_specialisation() -> None:
    """MiniLM's embedding width is symbolic after export and 384 after folding: a fact, kept; an
    input axis or an output's batch axis made fixed is a specialisation, refused."""
    before = _io_model(["batch", "sequence"], ["batch", "width"])
    assert io_shape_changes(before, _io_model(["batch", "sequence"], ["batch", 384])) == []
    assert io_shape_changes(before, _io_model([512, 512], ["batch", 384])) == [
        "`x` ['batch', 'sequence'] -> [512, 512]"
    ]
    assert io_shape_changes(before, _io_model(["batch", "sequence"], [8, 384])) == [
        "`y` ['batch', 'width'] -> [8, 384]"
    ]
