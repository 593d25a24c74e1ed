"""The TensorRT build as one composed Polygraphy loader graph:
``SaveEngine(EngineFromNetwork(NetworkFromOnnxPath(...), CreateConfig(profiles, flags, caches,
calibrator), save_timing_cache=...), path)``.

Polygraphy's loaders are lazy: constructing them imports nothing from TensorRT, so
:func:`engine_loader_graph` runs (and its every argument is inspected by tests) anywhere; only
calling the graph builds. :func:`build_engine` is that call, where ``import tensorrt`` works. The
legacy INT8 calibrator's batches are reshaped here too (:func:`calibration_feeds`), because
TensorRT calibrates only at the calibration profile's OPT shape.

A strongly typed int8 build (TensorRT 11, or ``tensorrt.strongly_typed: on``) parses the
FP16-base Q/DQ ONNX instead of the Q/DQ one: :func:`typed_int8_network` makes it, with its comparison
against FP32 on ONNX Runtime for the gate (:mod:`tritonkit.convert.precisions.gates`, the int8 thresholds of
the spec), and only when the build will be strongly typed, so a TensorRT 10 build is what it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tritonkit.convert import isolate
from tritonkit.convert.graph.text_models import TEXT_OUTPUT
from tritonkit.convert.inputs.data import Feeds
from tritonkit.convert.inputs.datasets import Datasets
from tritonkit.convert.precisions import accuracy, precision
from tritonkit.convert.precisions.gates import Comparison
from tritonkit.convert.spec.buildspec import BuildSpec
from tritonkit.convert.spec.gpu_profiles import GpuProfile
from tritonkit.convert.targets.engine_io import EngineDescription, describe_engine
from tritonkit.convert.targets.tensorrt import (
    BuilderFlags,
    EnginePlan,
    builder_flags,
    calibration_shapes,
    check_shapes,
    check_tensorrt_version,
    installed_tensorrt_major,
    require_tensorrt,
    timing_cache_path,
)
from tritonkit.errors import BuildError, CalibrationError

__all__ = [
    "BuiltEngine",
    "EngineBuild",
    "TypedInt8",
    "build_engine",
    "calibration_cache_for",
    "calibration_feeds",
    "create_config",
    "engine_loader_graph",
    "network_onnx",
    "polygraphy_profiles",
    "typed_int8_network",
]


def polygraphy_profiles(plan: EnginePlan, io: Any) -> list[Any]:
    """One Polygraphy ``Profile`` per plan profile, with full (batch + dims) min/opt/max shapes."""
    from polygraphy.backend.trt import Profile  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)

    check_shapes(plan, io)
    fixed = {t.name: tuple(t.shape[1:]) for t in io.inputs}
    profiles = []
    for profile in plan.profiles:
        tp = Profile()
        for name, dims in fixed.items():
            tp.add(
                name,
                min=profile.full(name, "min", dims),
                opt=profile.full(name, "opt", dims),
                max=profile.full(name, "max", dims),
            )
        profiles.append(tp)
    return profiles


def create_config(
    plan: EnginePlan,
    flags: BuilderFlags,
    profiles: list[Any],
    workspace_key: Any,
    calibrator: Any = None,
    timing_cache: Path | None = None,
) -> Any:
    """Polygraphy ``CreateConfig`` (``workspace_key``: ``trt.MemoryPoolType.WORKSPACE`` in a build).

    With a calibrator, Polygraphy makes the *last* profile the calibration profile.
    """
    from polygraphy.backend.trt import CreateConfig  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)

    kwargs: dict[str, Any] = {
        "profiles": profiles,
        "memory_pool_limits": {workspace_key: plan.workspace_bytes},
        "builder_optimization_level": plan.optimization_level,
        "load_timing_cache": str(timing_cache)
        if timing_cache is not None and timing_cache.is_file()
        else None,
    }
    if not flags.strongly_typed:  # TensorRT 11 has no precision flags; strongly typed networks carry types
        kwargs.update(
            fp16=flags.fp16, int8=flags.int8, bf16=flags.bf16, tf32=flags.tf32, calibrator=calibrator
        )
    return CreateConfig(**kwargs)


def engine_loader_graph(
    network_onnx: Path,
    plan_file: Path,
    plan: EnginePlan,
    flags: BuilderFlags,
    io: Any,
    *,
    workspace_key: Any,
    timing_cache: Path,
    calibrator: Any = None,
) -> Any:
    """``SaveEngine(EngineFromNetwork(NetworkFromOnnxPath, CreateConfig), plan_file)``, not yet called."""
    from polygraphy.backend.trt import EngineFromNetwork, NetworkFromOnnxPath, SaveEngine  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)

    network = NetworkFromOnnxPath(str(network_onnx), strongly_typed=flags.strongly_typed or None)
    config = create_config(
        plan, flags, polygraphy_profiles(plan, io), workspace_key, calibrator, timing_cache
    )
    engine = EngineFromNetwork(network, config=config, save_timing_cache=str(timing_cache))
    return SaveEngine(engine, path=str(plan_file))


def network_onnx(
    flags: BuilderFlags, fp32_onnx: Path, precision_onnx: Path, typed_int8: TypedInt8 | None
) -> Path:
    """The ONNX the network is parsed from, as ``flags.network_source`` names it.

    A Q/DQ network (int8, int8_fp16) is refused with BuildError when it still has a DequantizeLinear
    of an INT32 tensor (ONNX Runtime's quantized bias): TensorRT's parser refuses it, and a graph
    changed here would not be the one the accuracy gate passed.
    """
    if flags.network_source == "fp32":
        return fp32_onnx
    chosen = precision_onnx
    if flags.network_source == "int8_fp16":
        if typed_int8 is None:
            raise BuildError(
                "a strongly typed int8 engine is built from the FP16-base Q/DQ model; none was made "
                "(typed_int8_network)"
            )
        chosen = typed_int8.path
    if flags.network_source.startswith("int8"):
        int32 = precision.int32_dequantize_nodes(onnx.load(str(chosen), load_external_data=False))
        if int32:
            raise BuildError(
                f"{chosen.name}: DequantizeLinear of an INT32 tensor ({', '.join(int32[:3])}"
                f"{', ...' if len(int32) > 3 else ''}; {len(int32)} in all); expected biases as float "
                "initializers (int8 Q/DQ made for the tensorrt target), since TensorRT dequantizes "
                "only INT8, FP8 and INT4"
            )
    return chosen


def _fit(array: Any, shape: tuple[int, ...]) -> Any:
    """Crop or zero-pad every non-batch axis of ``array`` to ``shape`` (the batch axis untouched)."""
    out = np.zeros((array.shape[0], *shape), dtype=array.dtype)
    region = tuple(slice(0, min(a, b)) for a, b in zip(array.shape[1:], shape, strict=True))
    out[(slice(None), *region)] = array[(slice(None), *region)]
    return out


def calibration_feeds(
    batches: Sequence[Feeds], shapes: Mapping[str, tuple[int, ...]], *, int64_as_int32: bool = False
) -> list[Feeds]:
    """The calibration samples regrouped into batches of exactly ``shapes`` (the calibration
    profile's OPT shapes): sequence axes zero-padded or cropped (a zero attention mask marks the
    padding), samples grouped by the OPT batch; leftover samples short of a full batch are dropped.
    ``int64_as_int32``: TensorRT < 10 parses INT64 inputs as INT32, and Polygraphy's calibrator
    checks the feeds' dtypes against the network's."""
    if not batches:
        raise CalibrationError("legacy INT8 calibration needs calibration data; got none")
    names = list(shapes)
    missing = [n for n in names if n not in batches[0]]
    if missing:
        raise CalibrationError(f"calibration data lacks inputs {missing}; expected {names}")
    for name in names:
        ranks = {np.asarray(b[name]).ndim for b in batches}
        if ranks != {len(shapes[name])}:
            raise CalibrationError(
                f"calibration input `{name}` has rank {sorted(ranks)}; the model expects {len(shapes[name])}"
            )
    fitted = {
        n: np.concatenate([_fit(np.asarray(b[n]), tuple(shapes[n][1:])) for b in batches]) for n in names
    }
    if int64_as_int32:
        fitted = {n: a.astype(np.int32) if a.dtype == np.int64 else a for n, a in fitted.items()}
    samples = next(iter(fitted.values())).shape[0]
    batch = shapes[names[0]][0]
    if samples < batch:
        raise CalibrationError(
            f"legacy INT8 calibration runs at the calibration profile's OPT batch {batch}; got {samples} samples"
        )
    return [{n: fitted[n][i : i + batch] for n in names} for i in range(0, samples - batch + 1, batch)]


def calibration_cache_for(plan_file: Path) -> Path:
    """The legacy calibrator's cache: one per model and build, beside its plan in the build folder.
    (A cache shared across models, beside the shared timing cache, hands one model another's scales.)"""
    return plan_file.with_suffix(".int8-calibration.cache")


@dataclass(frozen=True)
class TypedInt8:
    """The FP16-base Q/DQ ONNX of a strongly typed int8 build, how it was made, and the comparison
    the gate judges it by."""

    path: Path
    details: dict[str, Any]
    check: Comparison


def typed_int8_network(
    spec: BuildSpec,
    fp32_onnx: Path,
    qdq_onnx: Path,
    plan: EnginePlan,
    sets: Datasets,
    workdir: Path,
    *,
    trt_major: int | None = None,
) -> TypedInt8 | None:
    """For an int8 engine that will be strongly typed: the FP16-base twin of ``qdq_onnx`` in
    ``workdir``, compared with ``fp32_onnx`` on ONNX Runtime CPU; None for every other build.

    Whether the build is strongly typed depends on the TensorRT that builds (``tensorrt.strongly_typed:
    auto``): ``trt_major``, else the installed one; with none installed the twin is made, so that
    everything before ``import tensorrt`` runs (and fails) here as on a TensorRT 11 node.
    """
    if plan.legacy_calibrator or plan.strongly_typed == "off":
        return None
    if plan.strongly_typed == "auto":
        major = trt_major if trt_major is not None else installed_tensorrt_major()
        if major is not None and major < 11:
            return None
    if not sets.evaluation:
        raise BuildError("the FP16-base Q/DQ model needs evaluation data for its accuracy gate; got none")
    target = workdir / "int8-fp16-base.onnx"
    details = precision.qdq_to_fp16(qdq_onnx, target, spec.fp16)
    stats, cand, ref = accuracy.compare_models(
        fp32_onnx,
        target,
        sets.evaluation,
        output=spec.accuracy.output,
        atol=spec.accuracy.atol,
        rtol=spec.accuracy.rtol,
    )
    check = Comparison(
        "fp16_base",
        f"{spec.model_name('int8')} (Q/DQ on FP16 for strongly typed TensorRT)",
        "int8",
        cand,
        ref,
        TEXT_OUTPUT if spec.preprocessing.kind == "text" else stats["output"],
        stats=stats,
    )
    return TypedInt8(target, details, check)


@dataclass
class BuiltEngine:
    """What a build made: the engine's own I/O (the config is written from it) and build.json facts."""

    description: EngineDescription
    record: dict[str, Any]


@dataclass(frozen=True)
class EngineBuild:
    """One engine build's inputs: the FP32 graph, the precision's ONNX or, for a strongly typed
    int8 build, ``typed_int8`` (:func:`tritonkit.convert.targets.tensorrt.builder_flags` says which), where
    the engine goes, its plan and the calibration batches; they travel to the build's worker."""

    fp32_onnx: Path
    precision_onnx: Path
    plan_file: Path
    plan: EnginePlan
    precision: str
    gpu: GpuProfile
    io: Any
    calibration: list[Feeds] | None = None
    typed_int8: TypedInt8 | None = None


def build_engine(job: EngineBuild) -> BuiltEngine:
    """Build and save the engine at ``job.plan_file``; describe it. The builder runs in the
    build's worker (:mod:`tritonkit.convert.isolate`)."""
    return isolate.run(f"{job.precision} TensorRT engine build", _build_engine, job)


def _build_engine(
    job: EngineBuild,
) -> BuiltEngine:  # pragma: no cover - runs only where TensorRT imports (tests marked `tensorrt`)
    trt = require_tensorrt()
    version = str(trt.__version__)
    check_tensorrt_version(job.gpu, version)
    flags = builder_flags(job.plan, job.precision, int(version.split(".", maxsplit=1)[0]), job.gpu)
    cache = timing_cache_path(job.plan.timing_cache, job.plan.gpu, version)
    cache.parent.mkdir(parents=True, exist_ok=True)
    calibrator = None
    calibration_cache = None
    if flags.legacy_calibrator:
        from polygraphy.backend.trt import Calibrator  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)

        calibration_cache = calibration_cache_for(job.plan_file)
        feeds = calibration_feeds(
            job.calibration or [],
            calibration_shapes(job.plan, job.io),
            int64_as_int32=int(version.split(".", maxsplit=1)[0]) < 10,
        )
        calibrator = Calibrator(feeds, cache=str(calibration_cache))
    network = network_onnx(flags, job.fp32_onnx, job.precision_onnx, job.typed_int8)
    graph = engine_loader_graph(
        network,
        job.plan_file,
        job.plan,
        flags,
        job.io,
        workspace_key=trt.MemoryPoolType.WORKSPACE,
        timing_cache=cache,
        calibrator=calibrator,
    )
    description = describe_engine(graph())
    record = {
        "tensorrt": version,
        "strongly_typed": flags.strongly_typed,
        "flags": {k: getattr(flags, k) for k in ("fp16", "int8", "bf16", "tf32", "legacy_calibrator")},
        "network_source": flags.network_source,
        "network_onnx": network.name,
        "unquantized_layers": flags.unquantized,
        **(
            {"fp16_base_qdq": dict(job.typed_int8.details)}  # its gate's record is added by the gate step
            if job.typed_int8 is not None and network == job.typed_int8.path
            else {}
        ),
        "profiles": [
            {
                "batch": list(p.batch),
                "shapes": {n: [list(r.min), list(r.opt), list(r.max)] for n, r in p.shapes.items()},
            }
            for p in job.plan.profiles
        ],
        "workspace_bytes": job.plan.workspace_bytes,
        "optimization_level": job.plan.optimization_level,
        "timing_cache": str(cache),
        "calibration_cache": str(calibration_cache) if calibration_cache else None,
        "compute_capability": job.plan.compute_capability,
        "io": description.as_json(),
    }
    return BuiltEngine(description, record)
