"""Each precision's ONNX graph, made from the FP32 source (:func:`convert_precisions`): FP16 (float16
conversion), INT8 (explicit Q/DQ from calibration), or the FP32 graph itself; with the comparison the
gate judges it by (:mod:`tritonkit.convert.precisions.gates`).

For a TensorRT build this step also refuses data the engine cannot take (evaluation batches no
optimization profile covers, too few calibration samples for the legacy calibrator) before any
conversion, and makes the FP16-base twin of a Q/DQ INT8 graph that a strongly typed engine parses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonkit.convert.graph.source import Source
from tritonkit.convert.graph.text_models import TEXT_OUTPUT
from tritonkit.convert.inputs.datasets import Datasets
from tritonkit.convert.precisions import accuracy, precision
from tritonkit.convert.precisions.gates import Comparison
from tritonkit.convert.targets import tensorrt, tensorrt_loaders
from tritonkit.convert.targets.plan import BuildPlan, Log, quiet
from tritonkit.errors import SpecError

__all__ = ["Converted", "convert_precision", "convert_precisions"]


@dataclass(frozen=True)
class Converted:
    """One precision's ONNX graph, how it was made, and what the gate will judge."""

    precision: str
    artifact: Path
    details: dict[str, Any]
    checks: tuple[Comparison, ...] = ()
    #: A strongly typed TensorRT int8 build's FP16-base Q/DQ graph (its check is in ``checks``).
    typed_int8: tensorrt_loaders.TypedInt8 | None = field(default=None)


def _check_engine_data(plan: BuildPlan, source: Source, sets: Datasets) -> None:
    """Refuse, before anything is converted, data the engine cannot take."""
    engine = plan.engine
    if engine is None:
        return
    tensorrt.check_shapes(engine, source.graph)
    if not sets.evaluation and not sets.calibration:
        return
    tensorrt.evaluation_profiles(engine, source.graph, sets.evaluation)
    if "int8" in plan.spec.precisions and engine.legacy_calibrator:
        tensorrt_loaders.calibration_feeds(
            sets.calibration, tensorrt.calibration_shapes(engine, source.graph)
        )


def convert_precision(plan: BuildPlan, source: Source, prec: str, sets: Datasets, workdir: Path) -> Converted:
    """The ``prec`` graph of the FP32 source in ``workdir`` (FP32: the source itself)."""
    spec = plan.spec
    target = workdir / f"{prec}.onnx"
    if prec == "fp32":
        return Converted(prec, source.onnx, {})
    if prec == "fp16":
        details = precision.to_fp16(source.onnx, target, spec.fp16)
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
        return Converted(prec, source.onnx, {"via": "TensorRT BF16 builder flag"})
    else:
        raise SpecError(
            f"precision {prec} has no ONNX conversion here; expected fp32, fp16 or int8 (bf16: TensorRT target only)"
        )
    stats, cand, ref = accuracy.compare_models(
        source.onnx,
        target,
        sets.evaluation,
        output=spec.accuracy.output,
        atol=spec.accuracy.atol,
        rtol=spec.accuracy.rtol,
    )
    output = TEXT_OUTPUT if spec.preprocessing.kind == "text" else stats["output"]
    check = Comparison("precision", spec.model_name(prec), prec, cand, ref, output, stats=stats)
    typed = None
    if prec == "int8" and plan.engine is not None:
        typed = tensorrt_loaders.typed_int8_network(spec, source.onnx, target, plan.engine, sets, workdir)
    extra = (typed.check,) if typed is not None else ()
    return Converted(prec, target, details, (check, *extra), typed)


def convert_precisions(
    plan: BuildPlan, source: Source, sets: Datasets, workdir: Path, log: Log = quiet
) -> tuple[Converted, ...]:
    """Every precision of the spec, in its order (data the engine cannot take refused first)."""
    _check_engine_data(plan, source, sets)
    converted = []
    for prec, name in zip(plan.spec.precisions, plan.names, strict=True):
        log(f"building {name} ({prec})")
        converted.append(convert_precision(plan, source, prec, sets, workdir))
    return tuple(converted)
