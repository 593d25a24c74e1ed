"""INT8 engines on TensorRT 11 (strongly typed): built from the FP16-base Q/DQ model, so the layers
that are not quantized run in FP16, not FP32. The builder flags, the composed Polygraphy loader graph
and the gated FP16-base model are checked here without TensorRT; the engine itself under `tensorrt`.
The TensorRT version guard for Turing: what was checked, and the guard it would become."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto

from tritonkit.convert.graph.source import prepare_source
from tritonkit.convert.inputs.datasets import prepare_data
from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.precisions import accuracy, precision
from tritonkit.convert.precisions.gates import gate_all
from tritonkit.convert.spec.buildspec import parse_spec
from tritonkit.convert.spec.gpu_profiles import PROFILES
from tritonkit.convert.spec.options import Fp16Options
from tritonkit.convert.targets import tensorrt
from tritonkit.convert.targets.conversion import convert_precision
from tritonkit.convert.targets.plan import plan_build
from tritonkit.convert.targets.tensorrt import TENSORRT_DROPPED, builder_flags, plan_for_spec
from tritonkit.convert.targets.tensorrt_loaders import (
    TypedInt8,
    engine_loader_graph,
    network_onnx,
    typed_int8_network,
)
from tritonkit.errors import AccuracyError, BuildError, TensorRTUnavailableError
from tritonkit.repository.onnx_io import read_io

T4 = PROFILES["T4"]
SpecDict = Callable[..., dict[str, object]]


def _spec(tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: SpecDict, **extra: Any) -> Any:
    # Evaluation batches of 8: the engine's single profile tops out at the max batch size 8.
    evaluation = {"data": str(tiny_data[1]), "samples": 32, "batch_size": 8}
    data = tiny_spec(
        tiny_onnx, *tiny_data, target="tensorrt", precisions=["int8"], evaluation=evaluation, **extra
    )
    return parse_spec(data)


@pytest.fixture(scope="module")
def int8_build(
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: SpecDict,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Any, Any, Any, Any, Path]:
    """(spec, source, datasets, the gated FP32-base int8 artifact, workdir) as the pipeline makes them."""
    spec = _spec(tiny_onnx, tiny_data, tiny_spec)
    workdir = tmp_path_factory.mktemp("typed")
    source = prepare_source(spec, workdir)
    sets = prepare_data(spec, source, True)
    return spec, source, sets, convert_precision(plan_build(spec), source, "int8", sets, workdir), workdir


# --- builder flags -------------------------------------------------------------------------------
def test_strongly_typed_int8_runs_unquantized_layers_in_fp16(
    tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: SpecDict
) -> None:
    plan = plan_for_spec(_spec(tiny_onnx, tiny_data, tiny_spec), T4)
    eleven = builder_flags(plan, "int8", 11, T4)
    assert eleven.strongly_typed and not (eleven.fp16 or eleven.int8 or eleven.legacy_calibrator)
    assert (eleven.network_source, eleven.unquantized) == ("int8_fp16", "fp16")
    # `strongly_typed: on` on TensorRT 10 is the same network.
    on = plan_for_spec(_spec(tiny_onnx, tiny_data, tiny_spec, tensorrt={"strongly_typed": "on"}), T4)
    assert builder_flags(on, "int8", 10, T4).network_source == "int8_fp16"
    # TensorRT 10 weakly typed is unchanged: the FP32-base Q/DQ graph with the INT8 + FP16 flags.
    ten = builder_flags(plan, "int8", 10, T4)
    assert (ten.strongly_typed, ten.fp16, ten.int8, ten.network_source, ten.unquantized) == (
        False,
        True,
        True,
        "int8",
        "fp16",
    )


# --- the FP16-base Q/DQ model, gated --------------------------------------------------------------
def test_typed_int8_network_is_the_gated_fp16_base_graph(int8_build: tuple[Any, Any, Any, Any, Path]) -> None:
    spec, source, sets, item, workdir = int8_build
    plan = plan_for_spec(spec, T4)
    typed = typed_int8_network(spec, source.onnx, item.artifact, plan, sets, workdir, trt_major=11)
    assert typed is not None and typed.path.is_file() and typed.path != item.artifact
    model = onnx.load(str(typed.path))
    onnx.checker.check_model(model, full_check=True)
    inits = {i.name: i.data_type for i in model.graph.initializer}
    scales = {
        inits[n.input[1]] for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
    }
    assert scales == {TensorProto.FLOAT16}
    assert typed.details["base"] == "fp16" and typed.details["fp32_nodes"] == {}
    # The gate judges exactly this graph, against FP32, with the spec's int8 marks.
    assert typed.check.role == "fp16_base" and typed.check.precision == "int8"
    (gated,) = gate_all(spec.accuracy, [[typed.check]], sets.labels)
    gate = gated.records["fp16_base"]
    assert gate["passed"] and gate["thresholds"] == {"mean": 0.98, "min": 0.9}
    assert gate["samples"] == 32 and gate["runtime"] == "onnxruntime-cpu"
    _, cand, ref = accuracy.compare_models(source.onnx, typed.path, sets.evaluation)
    assert round(float(accuracy.cosine_rows(cand, ref).mean()), 6) == gate["mean"]
    # The FP16 conversion's I/O rule is the spec's: FP32 I/O kept, so the engine's I/O matches.
    assert read_io(typed.path).inputs[0].datatype == "FP32"


def test_typed_int8_network_only_for_strongly_typed_builds(
    int8_build: tuple[Any, Any, Any, Any, Path],
) -> None:
    spec, source, sets, item, workdir = int8_build
    plan = plan_for_spec(spec, T4)
    # TensorRT 10 weakly typed: nothing made, nothing gated; the TensorRT 10 build is what it was.
    assert typed_int8_network(spec, source.onnx, item.artifact, plan, sets, workdir, trt_major=10) is None
    legacy = plan_for_spec(parse_spec({**_raw(spec), "int8": {"legacy_calibrator": True}}), T4)
    assert typed_int8_network(spec, source.onnx, item.artifact, legacy, sets, workdir, trt_major=10) is None
    on = plan_for_spec(parse_spec({**_raw(spec), "tensorrt": {"strongly_typed": "on"}}), T4)
    assert typed_int8_network(spec, source.onnx, item.artifact, on, sets, workdir, trt_major=10) is not None


def test_typed_int8_network_below_the_int8_marks_fails_the_gate(
    int8_build: tuple[Any, Any, Any, Any, Path], tmp_path: Path
) -> None:
    spec, source, sets, item, _ = int8_build
    strict = parse_spec(
        {**_raw(spec), "accuracy": {"metric": "cosine", "int8": {"mean": 0.9999999, "min": 0.9}}}
    )
    typed = typed_int8_network(
        strict, source.onnx, item.artifact, plan_for_spec(strict, T4), sets, tmp_path, trt_major=11
    )
    assert typed is not None
    with pytest.raises(AccuracyError, match=r"tiny_int8_trt \(Q/DQ on FP16 for strongly typed TensorRT\)"):
        gate_all(strict.accuracy, [[typed.check]], sets.labels)


def _raw(spec: Any) -> dict[str, Any]:
    """The spec's dict again (the tiny spec's keys), for variants."""
    return {
        "name": spec.name,
        "source": {"onnx": str(spec.source.onnx)},
        "target": "tensorrt",
        "precisions": ["int8"],
        "int8": {"op_types": ["MatMul", "Gemm"]},
        "calibration": {"data": spec.calibration.data, "samples": 64, "min_samples": 16},
        "evaluation": {"data": spec.evaluation.data, "samples": 32, "batch_size": 8},
        "accuracy": {"metric": "cosine", "int8": {"mean": 0.98, "min": 0.9}},
        "batching": {"max_batch_size": 8},
    }


# --- the composed loader graph for TensorRT 11 ------------------------------------------------------
def test_tensorrt_11_int8_loader_graph(int8_build: tuple[Any, Any, Any, Any, Path], tmp_path: Path) -> None:
    """SaveEngine(EngineFromNetwork(NetworkFromOnnxPath(FP16-base Q/DQ, strongly typed), CreateConfig
    without precision flags or calibrator)): every argument, inspected without TensorRT."""
    spec, source, _, item, _ = int8_build
    plan = plan_for_spec(spec, T4)
    flags = builder_flags(plan, "int8", 11, T4)
    typed = TypedInt8(tmp_path / "int8-fp16-base.onnx", {}, item.checks[0])
    typed.path.write_bytes(item.artifact.read_bytes())  # network_onnx reads the graph it hands over
    network = network_onnx(flags, source.onnx, item.artifact, typed)
    assert network == typed.path
    graph = engine_loader_graph(
        network,
        tmp_path / "m.plan",
        plan,
        flags,
        read_io(item.artifact),
        workspace_key="WORKSPACE",
        timing_cache=tmp_path / "timing.cache",
    )
    parsed = graph._engine._network
    assert type(parsed).__name__ == "NetworkFromOnnxPath" and parsed.path == str(typed.path)
    assert parsed.strongly_typed
    config = graph._engine._config
    assert not (config.fp16 or config.int8 or config.bf16 or config.tf32) and config.calibrator is None
    assert "tensorrt" not in sys.modules
    # TensorRT 10 (weakly typed) still parses the FP32-base Q/DQ graph with INT8 + FP16 flags.
    ten = builder_flags(plan, "int8", 10, T4)
    assert network_onnx(ten, source.onnx, item.artifact, typed) == item.artifact
    with pytest.raises(BuildError, match="built from the FP16-base Q/DQ model; none was made"):
        network_onnx(flags, source.onnx, item.artifact, None)


def test_the_fp16_base_graph_is_made_and_gated_before_the_builder(
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: SpecDict,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where TensorRT is absent the build runs up to the builder as on a TensorRT 11 node: the
    FP16-base Q/DQ model is made (the real conversion, observed) and gated, then the builder stops."""
    if tensorrt.installed_tensorrt_major() is not None:
        pytest.skip("TensorRT imports here; the unavailable path cannot be shown")
    made: list[Path] = []
    real = precision.qdq_to_fp16

    def observed(source: Path, dest: Path, options: Fp16Options | None = None) -> dict[str, Any]:
        made.append(Path(dest))
        return real(source, dest, options)

    monkeypatch.setattr(precision, "qdq_to_fp16", observed)
    repo = tmp_path / "repo"
    with pytest.raises(TensorRTUnavailableError, match="pip install tensorrt"):
        build_from_spec(_spec(tiny_onnx, tiny_data, tiny_spec), repo)
    assert [p.name for p in made] == ["int8-fp16-base.onnx"]
    assert not repo.exists()


# --- the Turing guard -----------------------------------------------------------------------------
def test_no_tensorrt_drops_turing_and_the_check_is_documented() -> None:
    """No NVIDIA statement drops compute capability 7.5 in TensorRT 11 (docs/build-spec.md lists what
    was checked); the table stays empty until one does, and the guard is then one line."""
    assert TENSORRT_DROPPED == {}
    tensorrt.check_tensorrt_version(T4, "11.5.0")
    doc = (Path(__file__).parents[2] / "docs" / "build-spec.md").read_text()
    section = doc[doc.index("### TensorRT 11 and Turing") :]
    for url in (
        "https://docs.nvidia.com/deeplearning/tensorrt/11.0.0/getting-started/release-notes-11/11.0.0.html",
        "https://docs.nvidia.com/deeplearning/tensorrt/latest/reference/support-policies.html",
    ):
        assert url in section
    with pytest.raises(
        Exception, match=r"^TensorRT 12\.0\.1 does not support T4 \(compute capability 7\.5\)"
    ):
        tensorrt.check_tensorrt_version(T4, "12.0.1", dropped={"7.5": (12, 0)})


# --- a real engine ----------------------------------------------------------------------------------
@pytest.mark.tensorrt
@pytest.mark.gpu
def test_real_strongly_typed_int8_engine(
    tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: SpecDict, tmp_path: Path
) -> None:  # pragma: no cover - needs TensorRT and a GPU
    spec = _spec(tiny_onnx, tiny_data, tiny_spec, tensorrt={"strongly_typed": "on"})
    (result,) = build_from_spec(spec, tmp_path / "repo")
    engine = json.loads((result.path / "build.json").read_text())["extra"]["engine"]
    assert engine["strongly_typed"] and engine["network_source"] == "int8_fp16"
    assert engine["unquantized_layers"] == "fp16" and engine["fp16_base_qdq"]["accuracy"]["passed"]
    assert engine["accuracy"]["passed"] and engine["accuracy"]["runtime"] == "tensorrt"
