"""The middle stages of a build: each precision's ONNX artifact with its accuracy gate
(:func:`build_precision`), then the target's files and config for it (:func:`target_artifacts`:
portable runner, ONNX Runtime platform, or a gated TensorRT engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonkit.config import ModelConfig
from tritonkit.convert import accuracy, precision, tensorrt, tensorrt_loaders
from tritonkit.convert.datasets import Datasets
from tritonkit.convert.engine_io import PLAN_FILE, engine_config
from tritonkit.convert.gpu import GpuProfile
from tritonkit.convert.onnxruntime_target import onnxruntime_config
from tritonkit.convert.portable_target import ONNX_FILE, RUNNER_FILE, portable_config
from tritonkit.convert.source import Source
from tritonkit.convert.spec import BuildSpec
from tritonkit.convert.text_models import TEXT_OUTPUT
from tritonkit.errors import SpecError
from tritonkit.repository.onnx_io import read_io
from tritonkit.serve.runners import runner_path

__all__ = ["Built", "build_precision", "check_tensorrt_data", "target_artifacts"]

#: Files of a version by name: a path to copy or the bytes to write.
Files = dict[str, Path | bytes]


@dataclass
class Built:
    """One precision's ONNX artifact, how it was made, and its accuracy against FP32 (None: FP32)."""

    precision: str
    artifact: Path
    details: dict[str, Any]
    accuracy: dict[str, Any] | None


def build_precision(spec: BuildSpec, source: Source, prec: str, sets: Datasets, workdir: Path) -> Built:
    """Convert the FP32 source to ``prec`` and gate it on the held-out set (FP32 is the source itself)."""
    target = workdir / f"{prec}.onnx"
    if prec == "fp32":
        return Built(prec, source.onnx, {}, None)
    if prec == "fp16":
        details = precision.to_fp16(
            source.onnx,
            target,
            keep_io_types=spec.fp16.keep_io_types,
            op_block_list=spec.fp16.op_block_list,
            node_block_list=spec.fp16.node_block_list,
        )
    elif prec == "int8":
        details = precision.quantize_int8(
            source.onnx,
            target,
            sets.calibration,
            spec.int8.options(spec.calibration.min_samples),
            quantize_bias=spec.target != "tensorrt",  # TensorRT refuses INT32 bias DequantizeLinear
        )
    elif prec == "bf16" and spec.target == "tensorrt":
        # BF16 is a TensorRT builder flag on the FP32 graph; the engine itself is gated after the build.
        return Built(prec, source.onnx, {"via": "TensorRT BF16 builder flag"}, None)
    else:
        raise SpecError(
            f"precision {prec} has no ONNX conversion here; expected fp32, fp16 or int8 (bf16: TensorRT target only)"
        )
    thresholds = getattr(spec.accuracy, prec)
    stats, cand, ref = accuracy.compare_models(
        source.onnx,
        target,
        sets.evaluation,
        output=spec.accuracy.output,
        atol=spec.accuracy.atol,
        rtol=spec.accuracy.rtol,
    )
    result = accuracy.gate(
        spec.model_name(prec),
        prec,
        cand,
        ref,
        accuracy.Thresholds(spec.accuracy.metric, thresholds.mean, thresholds.min),
        output=TEXT_OUTPUT if spec.preprocessing.kind == "text" else stats["output"],
        labels=sets.labels,
    )
    result.update(stats)
    return Built(prec, target, details, result)


def target_artifacts(
    spec: BuildSpec,
    source: Source,
    item: Built,
    name: str,
    mbs: int,
    profile: GpuProfile | None,
    plan: tensorrt.EnginePlan | None,
    workdir: Path,
    sets: Datasets | None = None,
) -> tuple[Files, ModelConfig, dict[str, Any]]:
    """(files, config, build.json extras) of model ``name`` serving ``item`` on the spec's target."""
    if spec.target == "portable":
        config, runner = portable_config(spec, source, name, mbs)
        files: Files = {ONNX_FILE: item.artifact, RUNNER_FILE: runner_path(runner)}
        files.update(source.companions)
        if source.tokenizer is not None and runner == "text_embedding":
            files["tokenizer.json"] = source.tokenizer
        return files, config, {"runner": runner}
    if spec.target == "onnxruntime":
        config = onnxruntime_config(spec, item.artifact, name, mbs, item.precision)
        return {ONNX_FILE: item.artifact}, config, {"accelerator": spec.onnxruntime.accelerator}
    assert plan is not None and profile is not None  # build_from_spec plans every TensorRT build
    plan_file = workdir / f"{item.precision}.plan"
    io = read_io(item.artifact)
    tensorrt.check_shapes(plan, io)
    typed = None  # strongly typed int8 (TensorRT 11): the FP16-base Q/DQ model, gated before the build
    if item.precision == "int8" and sets is not None:
        typed = tensorrt_loaders.typed_int8_network(spec, source.onnx, item.artifact, plan, sets, workdir)
    built = tensorrt_loaders.build_engine(
        source.onnx,
        item.artifact,
        plan_file,
        plan,
        item.precision,
        profile,
        io,
        sets.calibration if sets is not None else None,
        typed,
    )
    engine = built.record
    if sets is not None and sets.evaluation:  # pragma: no cover - needs TensorRT
        # The engine itself is gated too: TensorRT may fuse and pick kernels differently from ORT.
        stats, cand, ref = accuracy.compare_engine(
            source.onnx,
            plan_file,
            sets.evaluation,
            tensorrt.evaluation_profiles(plan, io, sets.evaluation),
            output=spec.accuracy.output,
            input_dtypes=built.description.input_dtypes(),
        )
        threshold = getattr(spec.accuracy, item.precision, None) if item.precision != "fp32" else None
        marks = accuracy.Thresholds(
            spec.accuracy.metric,
            threshold.mean if threshold else 0.999,
            threshold.min if threshold else 0.99,
        )
        engine["accuracy"] = accuracy.gate(
            name,
            item.precision,
            cand,
            ref,
            marks,
            output=stats["output"],
            labels=sets.labels,
            runtime="tensorrt",
        )
    config = engine_config(
        name,
        built.description,
        compute_capability=plan.compute_capability,
        instance_count=spec.instances.count,
        max_queue_delay_us=spec.batching.max_queue_delay_us,
        preferred_batch_sizes=plan.preferred_batch_sizes,
    )
    return {PLAN_FILE: plan_file}, config, {"engine": engine}


def check_tensorrt_data(
    spec: BuildSpec, source: Source, plan: tensorrt.EnginePlan, sets: Datasets | None
) -> None:
    """Refuse, before anything is built, data the engine cannot take: evaluation batches that no
    optimization profile covers, and (legacy INT8 calibrator) too few samples for one batch at the
    calibration profile's OPT shape."""
    if sets is None:
        return
    tensorrt.evaluation_profiles(plan, source.graph, sets.evaluation)
    if "int8" in spec.precisions and plan.legacy_calibrator:
        tensorrt_loaders.calibration_feeds(sets.calibration, tensorrt.calibration_shapes(plan, source.graph))
