"""INT8 for TensorRT <= 10 (the T4 fleet's TensorRT 10.5): the Q/DQ graph handed to the builder has
no DequantizeLinear of an INT32 tensor. ONNX Runtime quantizes Conv/Gemm biases to INT32 behind a
DequantizeLinear; TensorRT dequantizes only INT8, FP8 and INT4 and refuses that node when it parses
the network. The tensorrt target's int8 artifact keeps its biases float, is gated on ONNX Runtime
CPU, and is the very file the TensorRT 10 network is parsed from; the portable target keeps ONNX
Runtime's INT32 biases. Checked on a small Conv + Gemm model without TensorRT."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from tritonkit.convert.graph.export import export_model
from tritonkit.convert.graph.source import prepare_source
from tritonkit.convert.inputs.datasets import prepare_data
from tritonkit.convert.precisions import accuracy
from tritonkit.convert.precisions.gates import gate_all
from tritonkit.convert.precisions.precision import int32_dequantize_nodes
from tritonkit.convert.spec.buildspec import parse_spec
from tritonkit.convert.spec.gpu_profiles import PROFILES
from tritonkit.convert.targets.conversion import convert_precision
from tritonkit.convert.targets.plan import plan_build
from tritonkit.convert.targets.tensorrt import builder_flags, plan_for_spec
from tritonkit.convert.targets.tensorrt_loaders import TypedInt8, network_onnx, typed_int8_network
from tritonkit.errors import BuildError

T4 = PROFILES["T4"]
SpecDict = Callable[..., dict[str, object]]


@pytest.fixture(scope="module")
def conv_gemm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(Conv + ReLU + Gemm model with biases, calibration.npz, evaluation.npz)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, 10),
    ).eval()
    folder = tmp_path_factory.mktemp("convgemm")
    path = folder / "convgemm.onnx"
    export_model(
        model,
        (torch.zeros(2, 3, 8, 8),),
        path,
        input_names=("x",),
        output_names=("y",),
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        exporter="torchscript",  # a test graph: the dynamo exporter's start-up would only slow it
    )
    rng = np.random.default_rng(3)
    cal, ev = folder / "cal.npz", folder / "eval.npz"
    np.savez(cal, x=rng.standard_normal((64, 3, 8, 8)).astype(np.float32))
    np.savez(ev, x=rng.standard_normal((32, 3, 8, 8)).astype(np.float32))
    return path, cal, ev


def _build(conv_gemm: tuple[Path, Path, Path], tiny_spec: SpecDict, workdir: Path, **extra: Any) -> Any:
    onnx_path, cal, ev = conv_gemm
    spec = parse_spec(
        tiny_spec(
            onnx_path,
            cal,
            ev,
            precisions=["int8"],
            int8={"op_types": ["Conv", "Gemm"]},
            evaluation={"data": str(ev), "samples": 32, "batch_size": 8},
            **extra,
        )
    )
    source = prepare_source(spec, workdir)
    sets = prepare_data(spec, source, True)
    return spec, source, sets, convert_precision(plan_build(spec), source, "int8", sets, workdir)


@pytest.fixture(scope="module")
def tensorrt_int8(
    conv_gemm: tuple[Path, Path, Path], tiny_spec: SpecDict, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    return _build(conv_gemm, tiny_spec, tmp_path_factory.mktemp("trt"), target="tensorrt")


def _dequantize_inputs(model: Any) -> dict[str, int]:
    inits = {i.name: i.data_type for i in model.graph.initializer}
    return {n.name: inits.get(n.input[0], -1) for n in model.graph.node if n.op_type == "DequantizeLinear"}


def test_tensorrt_10_int8_network_has_no_int32_dequantize_and_is_the_gated_graph(tensorrt_int8: Any) -> None:
    spec, source, sets, item = tensorrt_int8
    flags = builder_flags(plan_for_spec(spec, T4), "int8", 10, T4)
    assert (flags.strongly_typed, flags.int8, flags.fp16, flags.network_source) == (False, True, True, "int8")
    # The file the TensorRT 10 network is parsed from is the int8 artifact itself.
    network = network_onnx(flags, source.onnx, item.artifact, None)
    assert network == item.artifact
    model = onnx.load(str(network))
    onnx.checker.check_model(model, full_check=True)
    inputs = _dequantize_inputs(model)
    assert inputs and TensorProto.INT32 not in inputs.values()
    assert set(inputs.values()) <= {TensorProto.INT8, -1}  # INT8 weights, or a quantized activation
    assert int32_dequantize_nodes(model) == []
    # The biases stay float initializers feeding the Conv/Gemm nodes directly.
    inits = {i.name: i for i in model.graph.initializer}
    biased = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm") and len(n.input) > 2]
    assert len(biased) == 3
    assert all(inits[n.input[2]].data_type == TensorProto.FLOAT for n in biased)
    # The gate judges this graph on ONNX Runtime CPU, against FP32, with the spec's int8 marks.
    (gated,) = gate_all(spec.accuracy, [item.checks], sets.labels)
    gate = gated.records["precision"]
    assert gate["passed"] and gate["runtime"] == "onnxruntime-cpu" and gate["samples"] == 32
    assert gate["thresholds"] == {"mean": 0.98, "min": 0.9}
    _, cand, ref = accuracy.compare_models(source.onnx, network, sets.evaluation)
    assert round(float(accuracy.cosine_rows(cand, ref).mean()), 6) == gate["mean"]
    # build.json's precision_details record it.
    assert item.details["quantize_bias"] is False and item.details["int32_dequantize_nodes"] == 0


def test_portable_int8_keeps_onnx_runtime_int32_biases(
    conv_gemm: tuple[Path, Path, Path], tiny_spec: SpecDict, tmp_path: Path
) -> None:
    """ONNX Runtime serves the INT32-bias form (its QLinearConv/QGemm fusions take it): unchanged."""
    spec, _, sets, item = _build(conv_gemm, tiny_spec, tmp_path, target="portable")
    model = onnx.load(str(item.artifact))
    assert len(int32_dequantize_nodes(model)) == 3
    assert item.details["quantize_bias"] is True and item.details["int32_dequantize_nodes"] == 3
    (gated,) = gate_all(spec.accuracy, [item.checks], sets.labels)
    assert gated.records["precision"]["passed"]
    # Such a graph is never handed to TensorRT: the builder's network source refuses it, one line.
    flags = builder_flags(plan_for_spec(parse_spec(_tensorrt_spec(item.artifact)), T4), "int8", 10, T4)
    with pytest.raises(
        BuildError, match=r"^int8\.onnx: DequantizeLinear of an INT32 tensor \(.*; 3 in all\)"
    ):
        network_onnx(flags, item.artifact, item.artifact, None)


def _tensorrt_spec(onnx_path: Path) -> dict[str, object]:
    return {
        "name": "m",
        "source": {"onnx": str(onnx_path)},
        "target": "tensorrt",
        "precisions": ["int8"],
        "batching": {"max_batch_size": 8},
    }


def test_strongly_typed_int8_network_has_no_int32_dequantize(tensorrt_int8: Any, tmp_path: Path) -> None:
    spec, source, sets, item = tensorrt_int8
    plan = plan_for_spec(spec, T4)
    typed = typed_int8_network(spec, source.onnx, item.artifact, plan, sets, tmp_path, trt_major=11)
    assert isinstance(typed, TypedInt8)
    (gated,) = gate_all(spec.accuracy, [[typed.check]], sets.labels)
    assert gated.records["fp16_base"]["passed"]
    assert typed.details["folded_int32_bias"] == 0  # nothing left to fold: the biases are float
    network = network_onnx(builder_flags(plan, "int8", 11, T4), source.onnx, item.artifact, typed)
    model = onnx.load(str(network))
    onnx.checker.check_model(model, full_check=True)
    assert network == typed.path and int32_dequantize_nodes(model) == []
