"""TensorRT target: the derivation of profiles, builder flags, memory pool and the Triton config is
tested here (pure functions); building a real engine needs `import tensorrt` (marked `tensorrt`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tritonkit.build.gpu import PROFILES
from tritonkit.build.spec import parse_spec
from tritonkit.build.tensorrt import (
    PLAN_FILE,
    builder_flags,
    check_shapes,
    create_config,
    plan_for_spec,
    polygraphy_profiles,
    require_tensorrt,
    tensorrt_config,
)
from tritonkit.config import to_pbtxt, validate
from tritonkit.config.tensors import TensorSpec
from tritonkit.errors import GpuProfileError, SpecError, TensorRTUnavailableError
from tritonkit.repository.onnx_io import GraphIO

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


def test_profiles_share_one_max_batch_and_map_to_instance_groups() -> None:
    spec = _spec(
        batching={"max_batch_size": 32, "preferred_batch_sizes": [8, 16]},
        tensorrt={"profiles": TEXT_PROFILES},
        instances={"count": 2, "kind": "KIND_GPU"},
    )
    plan = plan_for_spec(spec, T4)
    check_shapes(plan, IO)
    config = tensorrt_config("m_fp16_trt", plan, IO, spec)
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 32
    assert [(g.kind, g.count, g.profile) for g in config.instance_groups] == [
        ("KIND_GPU", 2, ["0"]),
        ("KIND_GPU", 2, ["1"]),
    ]
    assert config.cc_model_filenames == {"7.5": PLAN_FILE}
    assert config.dynamic_batching is not None and config.dynamic_batching.preferred_batch_size == [8, 16]
    assert [t.dims for t in config.inputs] == [[-1]] and [t.dims for t in config.outputs] == [[384]]
    validate(config)
    assert 'platform: "tensorrt_plan"' in to_pbtxt(config)
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
        match=re.escape("input `ids` has dynamic dims [-1]; give `tensorrt.profiles[0].shapes.ids`"),
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
        ("int8", 10, dict(strongly_typed=False, fp16=True, int8=True, network_source="int8")),
        ("fp32", 10, dict(strongly_typed=False, fp16=False, int8=False, tf32=False)),
        ("fp16", 11, dict(strongly_typed=True, fp16=False, int8=False, network_source="fp16")),
        ("int8", 11, dict(strongly_typed=True, int8=False, network_source="int8")),
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


def test_unavailable_tensorrt_fails_at_once_with_a_hint(tmp_path: Path, tiny_onnx: Path) -> None:
    try:
        require_tensorrt()
    except TensorRTUnavailableError:
        pass
    else:
        pytest.skip("TensorRT imports here; the unavailable path cannot be shown")
    from tritonkit.build.pipeline import build_from_spec

    spec = parse_spec(
        {
            "name": "tiny",
            "source": {"onnx": str(tiny_onnx)},
            "target": "tensorrt",
            "precisions": ["fp32"],
            "batching": {"max_batch_size": 8},
        }
    )
    repo = tmp_path / "repo"
    with pytest.raises(TensorRTUnavailableError, match="pip install tensorrt"):
        build_from_spec(spec, repo)
    assert not repo.exists() or not any(repo.iterdir())


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_real_engine_build_and_config(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path]
) -> None:  # pragma: no cover
    from tritonkit.build.pipeline import build_from_spec
    from tritonkit.repository.store import ModelRepository

    spec = parse_spec(
        {
            "name": "tiny",
            "source": {"onnx": str(tiny_onnx)},
            "target": "tensorrt",
            "precisions": ["fp32", "fp16"],
            "batching": {"max_batch_size": 8},
            "evaluation": {"data": str(tiny_data[1])},
            "tensorrt": {"timing_cache": str(tmp_path / "timing.cache")},
        }
    )
    results = build_from_spec(spec, tmp_path / "repo")
    for result in results:
        assert (result.path / PLAN_FILE).stat().st_size > 0
    config = ModelRepository(tmp_path / "repo").read_config("tiny_fp16_trt")
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 8
    assert (tmp_path / "timing.cache").is_file()
