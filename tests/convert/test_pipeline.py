"""Builds from a spec on a small ONNX model: every precision gated and written, every bad input
refused in one line with nothing written."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tritonkit.config import validate
from tritonkit.convert.graph.export import TorchSource
from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.precisions.precision import UnsupportedOpError
from tritonkit.convert.spec.buildspec import apply_overrides, parse_spec
from tritonkit.convert.targets.onnxruntime_target import onnxruntime_config
from tritonkit.errors import (
    AccuracyError,
    CalibrationError,
    GpuProfileError,
    ModelImportError,
    RepositoryError,
    SpecError,
)
from tritonkit.repository.store import ModelRepository


def _nothing_written(repo: Path) -> bool:
    return not repo.exists() or not [p for p in repo.iterdir()]


def test_builds_all_precisions_with_accuracy(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    repo = tmp_path / "repo"
    results = build_from_spec(parse_spec(tiny_spec(tiny_onnx, *tiny_data)), repo)
    assert [r.name for r in results] == ["tiny_fp32", "tiny_fp16", "tiny_int8"]
    repository = ModelRepository(repo)
    int8 = repository.read_manifest("tiny_int8", 1)
    assert int8.accuracy is not None and int8.accuracy["passed"] and int8.accuracy["samples"] == 32
    assert int8.extra["precision_details"]["method"] == "minmax"
    assert int8.extra["data"]["calibration_samples"] == 64
    assert repository.read_manifest("tiny_fp32", 1).accuracy is None  # the reference is not gated
    config = repository.read_config("tiny_int8")
    assert config.backend == "python" and config.max_batch_size == 8

    graph = onnx.load(str(repository.version_dir("tiny_int8", 1) / "model.onnx"))
    assert any(n.op_type == "QuantizeLinear" for n in graph.graph.node)


def test_onnxruntime_target_config(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    spec = parse_spec(tiny_spec(tiny_onnx, *tiny_data, target="onnxruntime", precisions=["fp16"]))
    (result,) = build_from_spec(spec, tmp_path / "repo")
    config = ModelRepository(tmp_path / "repo").read_config(result.name)
    assert result.name == "tiny_fp16_ort" and config.platform == "onnxruntime_onnx"
    assert config.optimization is not None and config.optimization.execution_accelerators is not None
    accel = config.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert (accel.name, accel.parameters["precision_mode"]) == ("tensorrt", "FP16")
    assert config.instance_groups[0].kind == "KIND_GPU"
    assert "onnxruntime_onnx" in (tmp_path / "repo" / result.name / "config.pbtxt").read_text()


def _refused(
    tmp_path: Path, data: dict[str, Any], error: type[Exception], message: str, gpu: str | None = None
) -> None:
    repo = tmp_path / "repo"
    spec = apply_overrides(parse_spec(data), {"gpu": gpu}, {})
    with pytest.raises(error) as info:
        build_from_spec(spec, repo)
    assert message in str(info.value), str(info.value)
    assert "\n" not in str(info.value)
    assert _nothing_written(repo)


def test_missing_calibration_data(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    data = tiny_spec(tiny_onnx, tmp_path / "nope.npz", tiny_data[1])
    _refused(tmp_path, data, CalibrationError, "calibration data not found")


def test_corrupt_calibration_data(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 definitely not a zip archive")
    _refused(tmp_path, tiny_spec(tiny_onnx, bad, tiny_data[1]), CalibrationError, "is corrupt")


def test_calibration_arrays_with_wrong_shape(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, x=np.zeros((64, 12), dtype=np.float32))
    _refused(
        tmp_path,
        tiny_spec(tiny_onnx, wrong, tiny_data[1]),
        CalibrationError,
        "calibration array `x` has shape [64, 12]; the model expects [-1, 16]",
    )


def test_too_few_calibration_samples(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    few = tmp_path / "few.npz"
    np.savez(few, x=np.zeros((4, 16), dtype=np.float32))
    _refused(
        tmp_path,
        tiny_spec(tiny_onnx, few, tiny_data[1]),
        CalibrationError,
        "too few calibration samples: expected at least 16, got 4",
    )


def test_accuracy_gate_failure_names_worst_outputs(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    data = tiny_spec(tiny_onnx, *tiny_data, accuracy={"int8": {"mean": 1.0, "min": 1.0}})
    _refused(tmp_path, data, AccuracyError, "accuracy gate failed for `tiny_int8` (int8): mean cosine")
    with pytest.raises(AccuracyError, match=r"worst outputs: `y`\[\d+\] cos 0\.\d+; .*nothing was written"):
        build_from_spec(parse_spec(data), tmp_path / "repo2")


def test_op_without_int8_kernel(
    tmp_path: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:

    # Relu(x) + x: no MatMul/Gemm/Conv anywhere, so INT8 has nothing it could run faster.
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Add", ["r", "x"], ["y"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
    )
    path = tmp_path / "noint8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    _refused(
        tmp_path,
        tiny_spec(path, *tiny_data),
        UnsupportedOpError,
        "int8: no node with an INT8 kernel is left to quantize",
    )


def test_unknown_quantizer_op_type(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    data = tiny_spec(tiny_onnx, *tiny_data, int8={"op_types": ["Erf"]})
    _refused(tmp_path, data, UnsupportedOpError, "int8 `op_types` ['Erf'] have no Q/DQ quantizer")


def test_bf16_on_t4_refused(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    data = tiny_spec(tiny_onnx, *tiny_data, precisions=["bf16"])
    _refused(tmp_path, data, GpuProfileError, "precision bf16 is not supported on T4", gpu="T4")


def test_batch_above_gpu_cap(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    data = tiny_spec(tiny_onnx, *tiny_data, batching={"max_batch_size": 256})
    _refused(
        tmp_path, data, GpuProfileError, "`batching.max_batch_size` 256 is above the T4 cap of 64", gpu="T4"
    )


def test_missing_and_corrupt_source(
    tmp_path: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    _refused(
        tmp_path, tiny_spec(tmp_path / "none.onnx", *tiny_data), ModelImportError, "ONNX source not found"
    )
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01junk")
    _refused(tmp_path, tiny_spec(junk, *tiny_data), ModelImportError, "is not a valid ONNX model")


def test_text_preprocessing_needs_text_model(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    data = tiny_spec(tiny_onnx, *tiny_data, preprocessing={"kind": "text"})
    _refused(tmp_path, data, SpecError, "`text` needs a flagship text model")


def test_auto_max_batch_is_planned(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    data = tiny_spec(
        tiny_onnx, *tiny_data, precisions=["fp32"], batching={"max_batch_size": "auto"}, gpu="T4"
    )
    build_from_spec(apply_overrides(parse_spec(data), {"gpu": "T4"}, {}), tmp_path / "repo")
    # A tiny MLP needs far less than 12.8 GiB per sample: the T4 cap decides.
    assert ModelRepository(tmp_path / "repo").read_config("tiny_fp32").max_batch_size == 64
    planning = ModelRepository(tmp_path / "repo").read_manifest("tiny_fp32", 1).extra["max_batch_planning"]
    assert planning["gpu"] == "T4" and planning["cap"] == 64 and planning["measured_per_sample_bytes"] > 0


def tiny_torch_source() -> object:
    """A `source.torch` entry point (referenced by the test below as `<this module>:tiny_torch_source`)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh())
    return TorchSource(model, (torch.zeros(1, 16),), ["x"], ["y"])


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_torch_source_and_histogram_calibration(
    tmp_path: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: Callable[..., dict[str, Any]],
    method: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    module = types.ModuleType("tritonkit_test_torch_source")
    module.tiny_torch_source = tiny_torch_source  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    data = tiny_spec(
        tmp_path / "unused.onnx",
        *tiny_data,
        precisions=["int8"],
        int8={"method": method, "op_types": ["Gemm", "MatMul"]},
    )
    data["source"] = {"torch": f"{module.__name__}:tiny_torch_source"}
    (result,) = build_from_spec(parse_spec(data), tmp_path / "repo")
    manifest = ModelRepository(tmp_path / "repo").read_manifest(result.name, 1)
    assert manifest.extra["precision_details"]["method"] == method
    assert manifest.accuracy is not None and manifest.accuracy["passed"]
    # build.json says what the method produced: the activation scales, and how far they clip MinMax.
    produced = manifest.extra["precision_details"]["calibration"]
    assert produced["activation_scales"] > 0 and len(produced["digest"]) == 16
    assert produced["histogram_bins"] == 2048 and produced["tensors"] == produced["activation_scales"]


def test_bad_torch_source(
    tmp_path: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    data = tiny_spec(tmp_path / "x.onnx", *tiny_data)
    data["source"] = {"torch": "no_such_module_here:make"}
    _refused(tmp_path, data, ModelImportError, "torch source 'no_such_module_here:make' cannot be loaded")


@pytest.mark.parametrize(("accelerator", "expected"), [("cuda", ("cuda", {})), ("none", None)])
def test_onnxruntime_accelerators(tiny_onnx: Path, accelerator: str, expected: object) -> None:

    spec = parse_spec(
        {
            "name": "t",
            "source": {"onnx": str(tiny_onnx)},
            "target": "onnxruntime",
            "onnxruntime": {"accelerator": accelerator},
        }
    )
    config = onnxruntime_config(spec, tiny_onnx, "t_fp32_ort", 8, "fp32")
    validate(config)
    if expected is None:
        assert config.optimization is None
    else:
        assert config.optimization is not None and config.optimization.execution_accelerators is not None
        accel = config.optimization.execution_accelerators.gpu_execution_accelerator[0]
        assert (accel.name, accel.parameters) == expected
    assert config.max_batch_size == 8 and [t.dims for t in config.inputs] == [[16]]


def test_conflicting_existing_model_refused_before_any_write(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:

    repo = tmp_path / "repo"
    build_from_spec(
        parse_spec(tiny_spec(tiny_onnx, *tiny_data, precisions=["fp16"], batching={"max_batch_size": 4})),
        repo,
    )
    # fp32 would be new, fp16 exists with another max batch: neither may be written.
    data = tiny_spec(tiny_onnx, *tiny_data, precisions=["fp32", "fp16"], batching={"max_batch_size": 8})
    with pytest.raises(RepositoryError, match="model `tiny_fp16` already exists with a different signature"):
        build_from_spec(parse_spec(data), repo)
    assert sorted(p.name for p in repo.iterdir()) == ["tiny_fp16"]
    assert ModelRepository(repo).versions("tiny_fp16") == [1]
