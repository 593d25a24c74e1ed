"""TensorRT target planning: profiles, builder flags, memory pool, the Polygraphy loader graph (lazy:
constructed and inspected here without TensorRT). The build stops only at the builder itself, which
needs `import tensorrt` (marked `tensorrt`). Caches, engine I/O and data shapes: test_tensorrt_io.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.spec.buildspec import parse_spec
from tritonkit.convert.spec.gpu_profiles import PROFILES
from tritonkit.convert.targets.engine_io import PLAN_FILE
from tritonkit.convert.targets.tensorrt import builder_flags, check_shapes, plan_for_spec, require_tensorrt
from tritonkit.convert.targets.tensorrt_loaders import create_config, engine_loader_graph, polygraphy_profiles
from tritonkit.errors import GpuProfileError, SpecError, TensorRTUnavailableError
from tritonkit.repository.onnx_io import GraphIO
from tritonkit.repository.store import ModelRepository

T4 = PROFILES["T4"]
TEXT_PROFILES = [
    {"batch": [1, 8, 32], "shapes": {"ids": {"min": [1], "opt": [64], "max": [128]}}},
    {"batch": [1, 16, 32], "shapes": {"ids": {"min": [128], "opt": [256], "max": [512]}}},
]
IO = GraphIO(
    inputs=(TensorSpec("ids", "INT64", (-1, -1)),),
    outputs=(TensorSpec("emb", "FP32", (-1, 384)),),
    opset=17,
)


def _spec(**extra: Any) -> Any:
    data: dict[str, Any] = {
        "name": "m",
        "source": {"onnx": "m.onnx"},
        "target": "tensorrt",
        "precisions": ["fp16"],
    }
    data.update(extra)
    return parse_spec(data)


def test_default_plan_on_t4() -> None:
    plan = plan_for_spec(_spec(batching={"max_batch_size": 64}), T4)
    assert plan.max_batch == 64 and [p.batch for p in plan.profiles] == [(1, 32, 64)]
    assert plan.workspace_bytes == 4 * 2**30  # the T4 default
    assert plan.optimization_level == 3 and plan.compute_capability == "7.5"


def test_profiles_share_one_max_batch() -> None:
    spec = _spec(
        batching={"max_batch_size": 32, "preferred_batch_sizes": [8, 16]},
        tensorrt={"profiles": TEXT_PROFILES},
        instances={"count": 2, "kind": "KIND_GPU"},
    )
    plan = plan_for_spec(spec, T4)
    check_shapes(plan, IO)
    assert plan.max_batch == 32 and plan.preferred_batch_sizes == (8, 16)
    # The full shapes handed to Polygraphy's Profile().add(...)
    assert plan.profiles[1].full("ids", "max") == (32, 512)


@pytest.mark.parametrize(
    ("extra", "error", "message"),
    [
        (
            {"batching": {"max_batch_size": 64}, "tensorrt": {"profiles": TEXT_PROFILES}},
            SpecError,
            "max_batch_size` 64 is above the TensorRT profiles' max batch 32",
        ),
        (
            {
                "batching": {"max_batch_size": 32, "preferred_batch_sizes": [48]},
                "tensorrt": {"profiles": TEXT_PROFILES},
            },
            SpecError,
            "preferred_batch_sizes` 48 is outside every TensorRT profile's batch range",
        ),
        (
            {"tensorrt": {"profiles": [{"batch": [1, 8, 32]}, {"batch": [1, 8, 16]}]}},
            SpecError,
            "must share one max batch",
        ),
        ({"tensorrt": {"profiles": [{"batch": [4, 2, 8]}]}}, SpecError, "1 <= min <= opt <= max"),
        (
            {
                "tensorrt": {
                    "profiles": [
                        {"batch": [1, 2, 8], "shapes": {"ids": {"min": [9], "opt": [4], "max": [16]}}}
                    ]
                }
            },
            SpecError,
            "1 <= min <= opt <= max per dim",
        ),
        ({"precisions": ["bf16"]}, GpuProfileError, "precision bf16 is not supported on T4"),
        (
            {"tensorrt": {"profiles": [{"batch": [1, 64, 128]}]}, "batching": {"max_batch_size": 128}},
            GpuProfileError,
            "above the T4 cap of 64",
        ),
        ({"tensorrt": {"workspace_gib": 32}}, GpuProfileError, "workspace 32.0 GiB does not fit T4"),
        ({"instances": {"kind": "KIND_CPU"}}, SpecError, "a TensorRT engine runs on GPU instances only"),
    ],
)
def test_impossible_settings_refused_before_building(
    extra: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        plan_for_spec(_spec(**extra), T4)
    assert message in str(info.value)


def test_shapes_must_cover_dynamic_dims() -> None:
    plan = plan_for_spec(_spec(batching={"max_batch_size": 32}), T4)
    with pytest.raises(
        SpecError,
        match=re.escape("input `ids` has dynamic dims [-1]; give its lengths as `serving.shape_buckets`"),
    ):
        check_shapes(plan, IO)
    fixed = GraphIO(inputs=(TensorSpec("img", "FP32", (-1, 3, 64, 64)),), outputs=IO.outputs, opset=17)
    check_shapes(plan, fixed)  # all non-batch dims fixed: no ranges needed
    bad = plan_for_spec(
        _spec(
            batching={"max_batch_size": 8},
            tensorrt={
                "profiles": [
                    {
                        "batch": [1, 4, 8],
                        "shapes": {"img": {"min": [3, 32, 32], "opt": [3, 64, 64], "max": [3, 64, 64]}},
                    }
                ]
            },
        ),
        T4,
    )
    with pytest.raises(SpecError, match="does not fit the model's fixed dims \\[3, 64, 64\\]"):
        check_shapes(bad, fixed)


@pytest.mark.parametrize(
    ("precision", "major", "expected"),
    [
        ("fp16", 10, dict(strongly_typed=False, fp16=True, int8=False, network_source="fp32")),
        (
            "int8",
            10,
            dict(strongly_typed=False, fp16=True, int8=True, network_source="int8", unquantized="fp16"),
        ),
        ("fp32", 10, dict(strongly_typed=False, fp16=False, int8=False, tf32=False)),
        ("fp16", 11, dict(strongly_typed=True, fp16=False, int8=False, network_source="fp16")),
        # TensorRT 11: the FP16-base Q/DQ graph, so unquantized layers run in FP16 (docs/build-spec.md).
        ("int8", 11, dict(strongly_typed=True, int8=False, network_source="int8_fp16", unquantized="fp16")),
    ],
)
def test_builder_flags_by_tensorrt_version(precision: str, major: int, expected: dict[str, Any]) -> None:
    flags = builder_flags(plan_for_spec(_spec(precisions=[precision]), T4), precision, major, T4)
    for key, value in expected.items():
        assert getattr(flags, key) == value, key


def test_legacy_calibrator_only_on_tensorrt_10() -> None:
    plan = plan_for_spec(_spec(precisions=["int8"], int8={"legacy_calibrator": True}), T4)
    flags = builder_flags(plan, "int8", 10, T4)
    assert flags.legacy_calibrator and flags.int8 and flags.network_source == "fp32"
    with pytest.raises(SpecError, match="TensorRT 11 removed implicit INT8 calibration"):
        builder_flags(plan, "int8", 11, T4)
    off = plan_for_spec(_spec(tensorrt={"strongly_typed": "off"}), T4)
    with pytest.raises(SpecError, match="impossible on TensorRT >= 11"):
        builder_flags(off, "fp16", 11, T4)
    a100 = PROFILES["A100"]
    bf16 = plan_for_spec(_spec(precisions=["bf16"]), a100)
    assert builder_flags(bf16, "bf16", 10, a100).bf16
    with pytest.raises(SpecError, match="needs a BF16 ONNX model"):
        builder_flags(bf16, "bf16", 11, a100)
    assert builder_flags(plan_for_spec(_spec(precisions=["fp32"]), a100), "fp32", 10, a100).tf32


def test_polygraphy_loader_arguments() -> None:
    """The derived values go into Polygraphy's real `Profile` and `CreateConfig` (constructible without TensorRT)."""
    spec = _spec(
        batching={"max_batch_size": 32}, tensorrt={"profiles": TEXT_PROFILES, "optimization_level": 4}
    )
    plan = plan_for_spec(spec, T4)
    profiles = polygraphy_profiles(plan, IO)
    assert len(profiles) == 2
    assert (tuple(profiles[0]["ids"].min), tuple(profiles[0]["ids"].opt), tuple(profiles[0]["ids"].max)) == (
        (1, 1),
        (8, 64),
        (32, 128),
    )
    assert tuple(profiles[1]["ids"].max) == (32, 512)
    flags = builder_flags(plan, "fp16", 10, T4)
    config = create_config(plan, flags, profiles, "WORKSPACE")
    assert config.fp16 and not config.int8 and config.profiles == profiles
    assert config.memory_pool_limits == {"WORKSPACE": 4 * 2**30} and config.builder_optimization_level == 4
    strongly = create_config(plan, builder_flags(plan, "fp16", 11, T4), profiles, "WORKSPACE")
    assert not strongly.fp16


def test_the_build_is_one_lazy_loader_graph(tmp_path: Path) -> None:
    """SaveEngine(EngineFromNetwork(NetworkFromOnnxPath, CreateConfig), path): every argument the
    builder will get, inspected without TensorRT (constructing Polygraphy loaders imports nothing)."""

    spec = _spec(batching={"max_batch_size": 32}, tensorrt={"profiles": TEXT_PROFILES})
    plan = plan_for_spec(spec, T4)
    cache = tmp_path / "T4-trt10.5.0" / "timing.cache"
    cache.parent.mkdir()
    cache.write_bytes(b"cache")
    graph = engine_loader_graph(
        tmp_path / "fp32.onnx",
        tmp_path / "m.plan",
        plan,
        builder_flags(plan, "fp16", 10, T4),
        IO,
        workspace_key="WORKSPACE",
        timing_cache=cache,
        calibrator="CALIBRATOR",
    )
    assert type(graph).__name__ == "SaveEngine" and graph.path == str(tmp_path / "m.plan")
    engine = graph._engine
    assert type(engine).__name__ == "EngineFromNetwork" and engine.timing_cache_path == str(cache)
    network = engine._network
    assert type(network).__name__ == "NetworkFromOnnxPath" and network.path == str(tmp_path / "fp32.onnx")
    assert not network.strongly_typed
    config = engine._config
    assert config.fp16 and not config.int8 and config.calibrator == "CALIBRATOR"
    assert config.timing_cache_path == str(cache)  # the cache is read back (load_timing_cache)
    assert [tuple(p["ids"].opt) for p in config.profiles] == [(8, 64), (16, 256)]
    assert "tensorrt" not in sys.modules
    strongly = engine_loader_graph(
        tmp_path / "fp16.onnx",
        tmp_path / "m.plan",
        plan,
        builder_flags(plan, "fp16", 11, T4),
        IO,
        workspace_key="WORKSPACE",
        timing_cache=tmp_path / "absent.cache",
    )
    assert strongly._engine._network.strongly_typed and not strongly._engine._config.fp16
    assert strongly._engine._config.timing_cache_path is None  # nothing to read back yet


def test_unavailable_tensorrt_stops_only_at_the_builder(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path]
) -> None:
    try:
        require_tensorrt()
    except TensorRTUnavailableError:
        pass
    else:
        pytest.skip("TensorRT imports here; the unavailable path cannot be shown")

    spec = parse_spec(
        {
            "name": "tiny",
            "source": {"onnx": str(tiny_onnx)},
            "target": "tensorrt",
            "precisions": ["fp16"],
            "batching": {"max_batch_size": 8},
            "evaluation": {"data": str(tiny_data[1]), "batch_size": 8},
        }
    )
    repo = tmp_path / "repo"
    lines: list[str] = []
    with pytest.raises(TensorRTUnavailableError, match="pip install tensorrt"):
        build_from_spec(spec, repo, log=lines.append)
    # Export, clean-up, data, shape checks and the fp16 conversion with its gate all ran first.
    assert any(line.startswith("  accuracy vs fp32, fp16 ONNX graph") for line in lines), lines
    assert not repo.exists()


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_real_engine_build_and_config(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path]
) -> None:  # pragma: no cover

    spec = parse_spec(
        {
            "name": "tiny",
            "source": {"onnx": str(tiny_onnx)},
            "target": "tensorrt",
            "precisions": ["fp32", "fp16"],
            "batching": {"max_batch_size": 8},
            "evaluation": {"data": str(tiny_data[1]), "batch_size": 8},
            "tensorrt": {"timing_cache": str(tmp_path / "{gpu}-{tensorrt}" / "timing.cache")},
        }
    )
    results = build_from_spec(spec, tmp_path / "repo")
    for result in results:
        assert (result.path / PLAN_FILE).stat().st_size > 0
    config = ModelRepository(tmp_path / "repo").read_config("tiny_fp16_trt")
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 8
    assert [t.data_type for t in config.inputs] == ["FP32"]  # the engine's own I/O
    assert [g.profile for g in config.instance_groups] == [[]]
    assert results[1].accuracy is not None
    assert len(list(tmp_path.glob("*/timing.cache"))) == 1
