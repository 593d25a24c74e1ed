"""TensorRT target, everything around the builder that runs here: where the timing cache lives, the
TensorRT version guard, which profile serves each evaluation batch (and the refusal of batches no
profile covers), legacy-calibrator batches at the OPT shape, and the Triton config written from an
engine description (hand-made here; read from a real ICudaEngine on a TensorRT machine)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonkit.commands.build import add_arguments
from tritonkit.config import to_pbtxt, validate
from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.precisions.accuracy import Thresholds, gate
from tritonkit.convert.spec.buildspec import apply_overrides, load_spec, parse_spec
from tritonkit.convert.spec.gpu_profiles import PROFILES
from tritonkit.convert.targets.engine_io import EngineDescription, EngineTensor, engine_config, triton_dtype
from tritonkit.convert.targets.tensorrt import (
    calibration_shapes,
    check_tensorrt_version,
    evaluation_profiles,
    plan_for_spec,
    timing_cache_path,
)
from tritonkit.convert.targets.tensorrt_loaders import calibration_cache_for, calibration_feeds
from tritonkit.errors import CalibrationError, GpuProfileError, SpecError
from tritonkit.repository.onnx_io import GraphIO

T4 = PROFILES["T4"]
IO = GraphIO(
    inputs=(TensorSpec("ids", "INT64", (-1, -1)), TensorSpec("mask", "INT64", (-1, -1))),
    outputs=(TensorSpec("emb", "FP32", (-1, 384)),),
    opset=17,
)
TWO_PROFILES = [
    {
        "batch": [1, 8, 16],
        "shapes": {n: {"min": [1], "opt": [64], "max": [128]} for n in ("ids", "mask")},
    },
    {
        "batch": [1, 16, 16],
        "shapes": {n: {"min": [129], "opt": [256], "max": [512]} for n in ("ids", "mask")},
    },
]


def _plan(**extra: Any) -> Any:
    data: dict[str, Any] = {"name": "m", "source": {"onnx": "m.onnx"}, "target": "tensorrt"}
    data.update(extra)
    return plan_for_spec(parse_spec(data), T4)


def _feed(batch: int, seq: int) -> dict[str, Any]:
    ids = np.ones((batch, seq), dtype=np.int64)
    return {"ids": ids, "mask": ids.copy()}


# --- timing cache ---------------------------------------------------------------------------------
def test_timing_cache_defaults_to_a_per_user_cache_keyed_by_gpu_and_tensorrt(tmp_path: Path) -> None:
    spec_file = tmp_path / "specs" / "m.yaml"
    spec_file.parent.mkdir()
    spec_file.write_text("name: m\nsource: {onnx: m.onnx}\ntarget: tensorrt\n")
    plan = plan_for_spec(load_spec(spec_file), T4)
    assert plan.timing_cache is None  # nothing beside the spec (read-only in a builder image)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert timing_cache_path(plan.timing_cache, "T4", "10.5.0", env) == (
        tmp_path / "xdg" / "tritonkit" / "tensorrt" / "T4-trt10.5.0" / "timing.cache"
    )
    assert timing_cache_path(None, "T4", "8.6.1", env) != timing_cache_path(None, "L4", "8.6.1", env)
    assert timing_cache_path(None, "T4", "8.6.1", {}).parts[-5:-1] == (
        ".cache",
        "tritonkit",
        "tensorrt",
        "T4-trt8.6.1",
    )


def test_timing_cache_precedence_flag_env_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_file = tmp_path / "specs" / "m.yaml"
    spec_file.parent.mkdir()
    spec_file.write_text(
        "name: m\nsource: {onnx: m.onnx}\ntarget: tensorrt\ntensorrt: {timing_cache: 'caches/{gpu}-{tensorrt}.cache'}\n"
    )
    monkeypatch.chdir(tmp_path)
    spec = load_spec(spec_file)
    from_spec = plan_for_spec(spec, T4).timing_cache
    assert (
        timing_cache_path(from_spec, "T4", "10.5.0", {}) == tmp_path / "specs" / "caches" / "T4-10.5.0.cache"
    )
    pvc = "/pvc/tensorrt/T4-trt10.5.0/timing.cache"
    by_env = apply_overrides(spec, {}, {"TRITONKIT_TIMING_CACHE": pvc})
    assert timing_cache_path(plan_for_spec(by_env, T4).timing_cache, "T4", "10.5.0", {}) == Path(pvc)
    by_flag = apply_overrides(spec, {"timing_cache": "mine.cache"}, {"TRITONKIT_TIMING_CACHE": pvc})
    # A flag is a path typed on the command line: it resolves against the working directory.
    assert plan_for_spec(by_flag, T4).timing_cache == str(tmp_path / "mine.cache")
    # No spec value and no override: the variable still counts when the build reads the environment.
    assert timing_cache_path(None, "T4", "10.5.0", {"TRITONKIT_TIMING_CACHE": pvc}) == Path(pvc)


def test_the_cli_takes_a_timing_cache_flag() -> None:

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["s.yaml", "--timing-cache", "t.cache"]).timing_cache == "t.cache"


# --- TensorRT version guard ---------------------------------------------------------------------
@pytest.mark.parametrize("version", ["8.6.1.6", "10.5.0", "11.0.0", "11.5.0"])
def test_t4_builds_with_tensorrt_that_supports_turing(version: str) -> None:
    check_tensorrt_version(T4, version)


def test_tensorrt_version_guard_is_one_line() -> None:
    with pytest.raises(GpuProfileError, match=r"^TensorRT 8\.4\.3 is too old: expected >= 8\.5"):
        check_tensorrt_version(T4, "8.4.3")
    # The guard a support-matrix change would add: a TensorRT that dropped compute capability 7.5.
    with pytest.raises(GpuProfileError) as info:
        check_tensorrt_version(T4, "12.1.0", dropped={"7.5": (12, 0)})
    assert str(info.value) == (
        "TensorRT 12.1.0 does not support T4 (compute capability 7.5): dropped in TensorRT 12.0; "
        "build with an older TensorRT"
    )
    check_tensorrt_version(T4, "11.9.0", dropped={"7.5": (12, 0)})


# --- evaluation batches against the profiles ----------------------------------------------------
def test_each_evaluation_batch_gets_a_profile_that_covers_it() -> None:
    plan = _plan(batching={"max_batch_size": 16}, tensorrt={"profiles": TWO_PROFILES})
    feeds = [_feed(16, 37), _feed(16, 300), _feed(3, 128), _feed(1, 512)]
    assert evaluation_profiles(plan, IO, feeds) == [0, 1, 0, 1]


def test_evaluation_batch_outside_every_profile_is_refused_in_one_line() -> None:
    plan = _plan(batching={"max_batch_size": 8})  # the default profile: batch 1..8
    fixed = GraphIO(inputs=(TensorSpec("x", "FP32", (-1, 16)),), outputs=IO.outputs, opset=17)
    with pytest.raises(SpecError) as info:
        evaluation_profiles(plan, fixed, [{"x": np.zeros((16, 16), np.float32)}])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("evaluation batch 0 has shapes x [16, 16], which no TensorRT profile covers")
    assert "profile 0: x [1, 16]..[8, 16]" in message and "lower `evaluation.batch_size`" in message


def test_the_pipeline_refuses_uncovered_evaluation_shapes_before_building(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path]
) -> None:

    spec = parse_spec(
        {
            "name": "tiny",
            "source": {"onnx": str(tiny_onnx)},
            "target": "tensorrt",
            "precisions": ["fp16"],
            "batching": {"max_batch_size": 8},
            "evaluation": {"data": str(tiny_data[1]), "batch_size": 16},
        }
    )
    lines: list[str] = []
    with pytest.raises(SpecError, match="evaluation batch 0 has shapes x \\[16, 16\\]"):
        build_from_spec(spec, tmp_path / "repo", log=lines.append)
    assert not any(line.startswith("building") for line in lines)  # refused before any precision
    assert not (tmp_path / "repo").exists()


def test_engine_gate_records_what_ran() -> None:
    rows = np.eye(4, dtype=np.float32)
    result = gate("m_fp16_trt", "fp16", rows, rows, Thresholds(), runtime="tensorrt")
    assert result["runtime"] == "tensorrt" and result["passed"]


# --- legacy INT8 calibrator ------------------------------------------------------------------------
def test_calibration_batches_are_shaped_to_the_calibration_profile_opt() -> None:
    one = {
        "batch": [1, 16, 32],
        "shapes": {n: {"min": [1], "opt": [128], "max": [256]} for n in ("ids", "mask")},
    }
    plan = _plan(batching={"max_batch_size": 32}, tensorrt={"profiles": [one]})
    shapes = calibration_shapes(plan, IO)
    assert shapes == {"ids": (16, 128), "mask": (16, 128)}
    batches = [_feed(16, 37), _feed(16, 37), _feed(5, 300)]  # 37 samples; one 300 long
    feeds = calibration_feeds(batches, shapes)
    assert len(feeds) == 2  # 37 samples → two full batches of 16, 5 left over
    assert all(f[n].shape == (16, 128) for f in feeds for n in ("ids", "mask"))
    assert feeds[0]["mask"][0, :37].all() and not feeds[0]["mask"][0, 37:].any()  # zero-padded
    assert feeds[0]["ids"].dtype == np.int64
    # TensorRT 8.6 parses INT64 inputs as INT32; the calibrator's feeds must match the network's.
    assert calibration_feeds(batches, shapes, int64_as_int32=True)[0]["ids"].dtype == np.int32
    with pytest.raises(CalibrationError, match="OPT batch 16; got 5 samples"):
        calibration_feeds([_feed(5, 37)], shapes)


def test_last_profile_is_the_calibration_profile() -> None:
    plan = _plan(batching={"max_batch_size": 16}, tensorrt={"profiles": TWO_PROFILES})
    assert calibration_shapes(plan, IO) == {"ids": (16, 256), "mask": (16, 256)}


def test_legacy_calibration_cache_is_per_model(tmp_path: Path) -> None:

    a, b = (
        calibration_cache_for(tmp_path / "a" / "int8.plan"),
        calibration_cache_for(tmp_path / "b" / "int8.plan"),
    )
    assert a != b and a.parent == tmp_path / "a"
    assert "timing" not in a.name


# --- the config from the engine's own I/O ---------------------------------------------------------
def _engine(ids_dtype: str, out_dtype: str, profiles: int = 1) -> EngineDescription:
    ranges = [((1, 1), (8, 64), (16, 128)), ((1, 129), (16, 256), (16, 512))][:profiles]
    return EngineDescription(
        (
            EngineTensor("ids", "input", ids_dtype, (-1, -1), tuple(ranges)),
            EngineTensor("emb", "output", out_dtype, (-1, 384)),
        ),
        profiles,
    )


def test_config_follows_an_fp16_engine_that_kept_fp32_io() -> None:
    """fp16 with keep_io_types false: the FP16 ONNX says FP16 I/O, but TensorRT <= 10 builds the FP32
    graph with the FP16 flag, so the engine, and therefore the config, keeps FP32."""
    config = engine_config("m_fp16_trt", _engine("INT32", "FP32"), compute_capability="7.5")
    assert [(t.name, t.data_type, t.dims) for t in config.inputs] == [("ids", "INT32", [-1])]
    assert [(t.name, t.data_type, t.dims) for t in config.outputs] == [("emb", "FP32", [384])]
    assert config.max_batch_size == 16 and config.cc_model_filenames == {"7.5": "model.plan"}
    validate(config)


def test_int64_inputs_that_tensorrt_86_made_int32_are_written_int32() -> None:
    """The ONNX input is INT64 (IO above); TensorRT 8.6 casts it to INT32, and Triton refuses a config
    that says INT64 for an INT32 engine input."""
    assert IO.inputs[0].datatype == "INT64"
    desc = EngineDescription(
        (
            EngineTensor("ids", "input", triton_dtype("INT32"), (-1, -1), (((1, 1), (8, 64), (16, 128)),)),
            EngineTensor("emb", "output", triton_dtype("HALF"), (-1, 384)),
        )
    )
    config = engine_config("m", desc, compute_capability="7.5")
    assert config.inputs[0].data_type == "INT32" and config.outputs[0].data_type == "FP16"
    assert desc.input_dtypes() == {"ids": "int32"}  # what the engine gate feeds the engine


def test_every_instance_group_serves_every_profile() -> None:
    config = engine_config(
        "m", _engine("INT32", "FP32", profiles=2), compute_capability="7.5", instance_count=2
    )
    assert [(g.kind, g.count, g.profile) for g in config.instance_groups] == [("KIND_GPU", 2, [])]
    assert 'profile: "' not in to_pbtxt(config)


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        (
            [((1, 1), (8, 64), (16, 128)), ((1, 1), (8, 64), (32, 128))],
            "profiles differ in max batch [16, 32]",
        ),
        ([((4, 1), (8, 64), (16, 128))], "no optimization profile covers batch 1"),
    ],
)
def test_engines_triton_cannot_batch_are_refused(ranges: list[Any], message: str) -> None:
    desc = EngineDescription(
        (
            EngineTensor("ids", "input", "INT32", (-1, -1), tuple(ranges)),
            EngineTensor("emb", "output", "FP32", (-1, 384)),
        ),
        len(ranges),
    )
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        engine_config("m", desc, compute_capability="7.5")


def test_unknown_engine_dtype_is_one_line() -> None:
    with pytest.raises(SpecError, match="engine tensor data type FP8 has no Triton equivalent"):
        triton_dtype("FP8")
