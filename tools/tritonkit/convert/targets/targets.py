"""Each precision's graph made into what its target serves (:func:`make_targets`): files, config and
``build.json`` facts per model, with the served artifact's comparison for the gate.

Targets: ``portable`` (the ONNX runner or the text-embedding runner on the embedded server's CPU, or,
where the ``serving`` plan says GPU, a torch program or the ONNX CUDA runner: :mod:`.gpu_target`,
planned first so the CPU files of a GPU version are never made), ``onnxruntime`` (Triton's ONNX
Runtime backend, :mod:`.onnxruntime_target`) and ``tensorrt`` (an engine built by
:mod:`.tensorrt_loaders`, its config from the engine's own I/O, :mod:`.engine_io`). A text model
adds a tokenizer model and one ensemble per version where its backend cannot tokenize
(:mod:`tritonkit.convert.graph.text_models`). The max batch size is settled here, once the graph is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonkit.backends.runners import runner_path
from tritonkit.backends.runners.shape_buckets import PARAMETER as SHAPE_PARAMETER
from tritonkit.backends.runners.shape_buckets import Buckets
from tritonkit.config import ModelConfig
from tritonkit.convert.graph.source import Source
from tritonkit.convert.graph.text_models import ensemble_config, text_ensemble, tokenizer_config
from tritonkit.convert.inputs.datasets import Datasets
from tritonkit.convert.precisions import accuracy
from tritonkit.convert.precisions.gates import Comparison
from tritonkit.convert.spec.buildspec import apply_queue_policy
from tritonkit.convert.targets import tensorrt, tensorrt_loaders
from tritonkit.convert.targets.buckets import apply_buckets, resolve_buckets
from tritonkit.convert.targets.buckets import manifest as buckets_manifest
from tritonkit.convert.targets.conversion import Converted
from tritonkit.convert.targets.engine_io import PLAN_FILE, engine_config
from tritonkit.convert.targets.gpu_target import cpu_plan, gpu_version, plan_version
from tritonkit.convert.targets.onnxruntime_target import onnxruntime_config
from tritonkit.convert.targets.plan import BuildPlan, Log, MaxBatch, max_batch, quiet
from tritonkit.convert.targets.portable_target import ONNX_FILE, RUNNER_FILE, portable_config
from tritonkit.repository.onnx_io import read_io

__all__ = ["Files", "Made", "Targets", "Tokenizer", "make_targets"]

#: Files of a version by name: a path to copy or the bytes to write.
Files = dict[str, Path | bytes]


@dataclass(frozen=True)
class Made:
    """One precision's model as its target serves it, staged outside the repository."""

    name: str
    converted: Converted
    config: ModelConfig
    files: Files
    #: The target's ``build.json`` facts (runner, accelerator, engine, execution plan).
    extra: dict[str, Any]
    #: What the gate judges of the served artifact (an engine, a program; the graph's are ``converted``'s).
    checks: tuple[Comparison, ...]
    #: ``<name>_text``: TEXT in, routed through the tokenizer model to this one (text ensembles).
    ensemble: ModelConfig | None = None


@dataclass(frozen=True)
class Tokenizer:
    """The tokenizer model of a text ensemble (the first step of every ``<name>_text``)."""

    config: ModelConfig
    files: Files
    extra: dict[str, Any]


@dataclass(frozen=True)
class Targets:
    max_batch: MaxBatch
    versions: tuple[Made, ...]
    tokenizer: Tokenizer | None

    @property
    def checks(self) -> tuple[tuple[Comparison, ...], ...]:
        """Per version, what the gate judges of the served artifact (:class:`~tritonkit.convert.precisions.gates.Served`)."""
        return tuple(made.checks for made in self.versions)


def _portable(
    plan: BuildPlan, source: Source, item: Converted, name: str, mbs: int
) -> tuple[ModelConfig, Files, dict[str, Any]]:
    config, runner = portable_config(plan.spec, source, name, mbs)
    files: Files = {ONNX_FILE: item.artifact, RUNNER_FILE: runner_path(runner)}
    files.update(source.companions)
    if source.tokenizer is not None and runner == "text_embedding":
        files["tokenizer.json"] = source.tokenizer
    return config, files, {"runner": runner}


def _engine(
    plan: BuildPlan, source: Source, sets: Datasets, item: Converted, name: str, workdir: Path
) -> tuple[ModelConfig, Files, dict[str, Any], tuple[Comparison, ...]]:
    """Build the TensorRT engine of ``item`` (``import tensorrt`` from here on) and compare it."""
    engine_plan, profile, spec = plan.engine, plan.profile, plan.spec
    assert engine_plan is not None and profile is not None  # planned for every TensorRT build
    plan_file = workdir / f"{item.precision}.plan"
    io = read_io(item.artifact)
    tensorrt.check_shapes(engine_plan, io)
    built = tensorrt_loaders.build_engine(
        tensorrt_loaders.EngineBuild(
            source.onnx, item.artifact, plan_file, engine_plan, item.precision, profile, io,
            sets.calibration, item.typed_int8,
        )
    )  # fmt: skip
    checks: tuple[Comparison, ...] = ()
    if sets.evaluation:  # pragma: no cover - needs TensorRT
        # The engine is judged too: TensorRT may fuse and pick kernels differently from ORT.
        stats, cand, ref = accuracy.compare_engine(
            source.onnx,
            plan_file,
            sets.evaluation,
            tensorrt.evaluation_profiles(engine_plan, io, sets.evaluation),
            output=spec.accuracy.output,
            input_dtypes=built.description.input_dtypes(),
        )
        checks = (Comparison("engine", name, item.precision, cand, ref, stats["output"], "tensorrt"),)
    config = engine_config(
        name,
        built.description,
        compute_capability=engine_plan.compute_capability,
        instance_count=spec.instances.count,
        max_queue_delay_us=spec.batching.max_queue_delay_us,
        preferred_batch_sizes=engine_plan.preferred_batch_sizes,
    )
    return config, {PLAN_FILE: plan_file}, {"engine": built.record}, checks


def _made(
    plan: BuildPlan, source: Source, sets: Datasets, item: Converted, mbs: int, workdir: Path, log: Log
) -> Made:
    spec = plan.spec
    name = spec.model_name(item.precision)
    served: tuple[Comparison, ...] = ()
    if spec.target == "onnxruntime":
        config = onnxruntime_config(spec, item.artifact, name, mbs, item.precision)
        files: Files = {ONNX_FILE: item.artifact}
        extra: dict[str, Any] = {"accelerator": spec.onnxruntime.accelerator}
    elif spec.target == "tensorrt":
        config, files, extra, served = _engine(plan, source, sets, item, name, workdir)
    elif plan.plans_execution:
        execution = plan_version(spec, source, item.precision, mbs, gpus=plan.gpus, profile=plan.profile)
        log(f"  {name} executes on {execution.device} ({execution.reason})")
        if execution.device == "gpu":
            on_gpu = gpu_version(spec, source, name, item, execution, mbs, workdir, sets)
            config, files, extra, served = on_gpu.config, on_gpu.files, dict(on_gpu.extra), on_gpu.checks
            execution = on_gpu.plan or execution
        else:
            config, files, extra = _portable(plan, source, item, name, mbs)
        extra.update(execution.manifest_extra())
    else:
        config, files, extra = _portable(plan, source, item, name, mbs)
    apply_queue_policy(config, spec.batching)
    if spec.preprocessing.kind != "text" or text_ensemble(spec):  # the text runner tokenizes itself
        shapes = resolve_buckets(spec, source)
        files = {**files, **apply_buckets(config, shapes)}
        extra.update(buckets_manifest(_as_written(config, shapes)))
    ensemble = ensemble_config(spec, source, name, mbs) if text_ensemble(spec) else None
    return Made(name, item, config, files, extra, served, ensemble)


def _as_written(config: ModelConfig, shapes: Buckets | None) -> Buckets | None:
    """The buckets as ``apply_buckets`` wrote them into ``config`` (where they are padded)."""
    written = config.parameters.get(SHAPE_PARAMETER)
    return Buckets.parse(written) if written else shapes


def _tokenizer(plan: BuildPlan, source: Source, mbs: int) -> Tokenizer | None:
    if not text_ensemble(plan.spec):
        return None
    assert source.tokenizer is not None
    config = tokenizer_config(plan.spec, source, mbs)
    files: Files = {RUNNER_FILE: runner_path("text_embedding"), "tokenizer.json": source.tokenizer}
    extra: dict[str, Any] = {}
    if plan.plans_execution:  # the embedded server's tokenizer (not the Triton image's of other targets)
        extra = cpu_plan(config.instance_groups, "fp32", "tokenization runs on the CPU").manifest_extra()
    return Tokenizer(config, files, extra)


def make_targets(
    plan: BuildPlan,
    source: Source,
    sets: Datasets,
    converted: tuple[Converted, ...],
    workdir: Path,
    log: Log = quiet,
) -> Targets:
    """Every converted graph as its target serves it (engines built here), plus the text models."""
    mbs = max_batch(plan, source)
    if mbs.planning:
        planning = mbs.planning
        log(
            f"max batch {mbs.size}: {planning['measured_per_sample_bytes'] / 2**20:.1f} MiB per sample measured, "
            f"{planning['gpu']} at memory fraction {planning['memory_fraction']}, cap {planning['cap']}"
        )
    versions = tuple(_made(plan, source, sets, item, mbs.size, workdir, log) for item in converted)
    return Targets(mbs, versions, _tokenizer(plan, source, mbs.size))
