"""The FP16-base Q/DQ model a strongly typed (TensorRT 11) int8 engine is built from: a valid ONNX
graph whose Q/DQ scales and unquantized layers are float16, which runs on ONNX Runtime CPU and keeps
the spec's int8 accuracy against FP32. Everything here is what TensorRT's parser is handed, checked
without TensorRT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from tritonkit.convert.graph.export import export_model
from tritonkit.convert.precisions import accuracy
from tritonkit.convert.precisions.precision import QDQ_FP16_OPSET, qdq_to_fp16, quantize_int8
from tritonkit.convert.spec.options import Fp16Options, Int8Options
from tritonkit.errors import BuildError

INT8 = accuracy.Thresholds("cosine", 0.99, 0.97)  # the spec's default int8 marks


@pytest.fixture(scope="module")
def encoder_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One transformer encoder block (attention, LayerNorm, GELU, a mean pool, a Gemm head) at
    opset 17: ReduceMean changes form at opset 18, so the opset upgrade is exercised."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.proj = torch.nn.Linear(64, 192), torch.nn.Linear(64, 64)
            self.n1, self.n2 = torch.nn.LayerNorm(64), torch.nn.LayerNorm(64)
            self.up, self.down = torch.nn.Linear(64, 128), torch.nn.Linear(128, 64)
            self.head = torch.nn.Linear(64, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            h = self.n1(x + self.proj(torch.softmax(q @ k.transpose(1, 2) / 8.0, dim=-1) @ v))
            h = self.n2(h + self.down(torch.nn.functional.gelu(self.up(h))))
            return self.head(h.mean(1))  # type: ignore[no-any-return]

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("encoder") / "encoder.onnx"
    export_model(
        Block().eval(),
        (torch.zeros(2, 8, 64),),
        path,
        input_names=("x",),
        output_names=("y",),
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        exporter="torchscript",  # a test graph: the dynamo exporter's start-up would only slow it
    )
    return path


def _feeds(seed: int, batches: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((8, 8, 64)).astype(np.float32)} for _ in range(batches)]


@pytest.fixture(scope="module")
def qdq_pair(
    encoder_onnx: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, dict[str, object]]:
    """(FP32-base Q/DQ model, its FP16-base twin, the twin's details)."""
    folder = tmp_path_factory.mktemp("qdq")
    qdq, fp16 = folder / "int8.onnx", folder / "int8-fp16.onnx"
    quantize_int8(encoder_onnx, qdq, _feeds(1, 4), Int8Options(op_types=["MatMul", "Gemm"], min_samples=16))
    return qdq, fp16, qdq_to_fp16(qdq, fp16)


def test_fp16_base_qdq_graph_is_valid_with_float16_scales(
    qdq_pair: tuple[Path, Path, dict[str, object]],
) -> None:
    qdq, fp16, details = qdq_pair
    model = onnx.load(str(fp16))
    onnx.checker.check_model(model, full_check=True)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= QDQ_FP16_OPSET
    inits = {i.name: i for i in model.graph.initializer}
    qdq_nodes = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq_nodes
    # Every scale float16 (TensorRT's strongly typed DequantizeLinear outputs its scale's type), every
    # zero point INT8 and zero (symmetric, the only Q/DQ TensorRT takes), no INT32 bias DequantizeLinear.
    for node in qdq_nodes:
        assert inits[node.input[1]].data_type == TensorProto.FLOAT16, node.name
        zero = inits[node.input[2]]
        assert zero.data_type == TensorProto.INT8 and not onnx.numpy_helper.to_array(zero).any()
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:
            assert inits[node.input[0]].data_type == TensorProto.INT8
    original = onnx.load(str(qdq))
    assert details["quantize_linear_nodes"] == sum(
        1 for n in original.graph.node if n.op_type == "QuantizeLinear"
    )
    assert details["folded_int32_bias"] == 1  # the Gemm head's bias
    assert details["fp32_nodes"] == {}  # every unquantized layer is float16
    # The quantized layers take the dequantized tensors directly: no Cast between DQ and MatMul/Gemm.
    producers = {o: n for n in model.graph.node for o in n.output}
    quantized = [
        n
        for n in model.graph.node
        if n.op_type in ("MatMul", "Gemm") and producers.get(n.input[0]) is not None
    ]
    fed_by_dq = [n for n in quantized if producers[n.input[0]].op_type == "DequantizeLinear"]
    assert len(fed_by_dq) >= 5
    # FP32 I/O kept (keep_io_types), as the FP16 conversion of the spec does by default.
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [TensorProto.FLOAT]
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [TensorProto.FLOAT]


def test_fp16_base_qdq_runs_on_onnxruntime_cpu_within_the_int8_gate(
    encoder_onnx: Path, qdq_pair: tuple[Path, Path, dict[str, object]]
) -> None:
    _, fp16, _ = qdq_pair
    stats, cand, ref = accuracy.compare_models(encoder_onnx, fp16, _feeds(2, 4))
    result = accuracy.gate("encoder_int8", "int8", cand, ref, INT8, output=stats["output"])
    assert result["passed"] and result["samples"] == 32 and result["mean"] >= 0.99
    assert cand.dtype == np.float32


def test_io_types_follow_the_spec(
    encoder_onnx: Path, qdq_pair: tuple[Path, Path, dict[str, object]], tmp_path: Path
) -> None:
    qdq, _, _ = qdq_pair
    details = qdq_to_fp16(qdq, tmp_path / "io16.onnx", Fp16Options(keep_io_types=False))
    model = onnx.load(str(tmp_path / "io16.onnx"))
    assert details["keep_io_types"] is False
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [TensorProto.FLOAT16]


def test_blocked_ops_stay_fp32_and_are_reported(
    qdq_pair: tuple[Path, Path, dict[str, object]], tmp_path: Path
) -> None:
    qdq, _, _ = qdq_pair
    details = qdq_to_fp16(qdq, tmp_path / "b.onnx", Fp16Options(op_block_list=["Softmax", "QuantizeLinear"]))
    assert details["fp32_nodes"] == {"Softmax": 1}
    # A Q/DQ op is never blocked, even when asked: its scale would stay FP32 and so would its output.
    model = onnx.load(str(tmp_path / "b.onnx"))
    inits = {i.name: i.data_type for i in model.graph.initializer}
    assert {inits[n.input[1]] for n in model.graph.node if n.op_type == "QuantizeLinear"} == {
        TensorProto.FLOAT16
    }


def test_a_model_without_qdq_is_refused(encoder_onnx: Path, tmp_path: Path) -> None:
    with pytest.raises(
        BuildError, match="has no QuantizeLinear/DequantizeLinear node; expected a Q/DQ model"
    ):
        qdq_to_fp16(encoder_onnx, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()
