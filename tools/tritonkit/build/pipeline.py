"""One build from a :class:`~tritonkit.build.spec.BuildSpec`: source → sanitized FP32 ONNX →
each precision's artifact → accuracy gate → target artifact and config → versions in the repository.

Every check that can fail without building runs first (GPU profile, precisions, TensorRT settings
and availability, data); every precision is built and gated before the first version is written,
so a failing gate or bad data leaves the repository untouched.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonkit.config import DynamicBatching, EnsembleStep, InstanceGroup, ModelConfig, TensorConfig
from tritonkit.build import accuracy, data, gpu, precision
from tritonkit.build.sanitize import sanitize_onnx
from tritonkit.build.spec import BuildSpec
from tritonkit.errors import CalibrationError, GpuProfileError, ModelImportError, RepositoryError, SpecError
from tritonkit.repository.store import Manifest, ModelRepository

__all__ = ["BuildResult", "Source", "build_from_spec"]

TEXT_INPUT = "TEXT"
TEXT_OUTPUT = "EMBEDDING"


@dataclass
class Source:
    """The sanitized FP32 graph and what the rest of the build needs to know about it."""

    onnx: Path
    origin: Path  # hashed into build.json
    input_names: list[str]
    output_names: list[str]
    tokenizer: Path | None = None
    max_seq_length: int = 256
    image_shape: tuple[int, int, int] | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Built:
    precision: str
    artifact: Path
    details: dict[str, Any]
    accuracy: dict[str, Any] | None


@dataclass
class BuildResult:
    name: str
    precision: str
    path: Path
    accuracy: dict[str, Any] | None


Log = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


# --- source --------------------------------------------------------------------------------------
def prepare_source(spec: BuildSpec, workdir: Path) -> Source:
    raw = workdir / "exported.onnx"
    clean = workdir / "fp32.onnx"
    tokenizer: Path | None = None
    image_shape: tuple[int, int, int] | None = None
    max_seq = spec.preprocessing.max_seq_length
    if spec.source.flagship == "minilm":
        from tritonkit.build.flagship import minilm

        minilm.export_minilm(raw)
        origin = minilm.model_dir() / "model.safetensors"
        tokenizer = minilm.tokenizer_file()
        max_seq = min(max_seq, minilm.max_seq_length())
    elif spec.source.flagship == "resnet50":
        from tritonkit.build.flagship import resnet

        size = spec.preprocessing.image_size
        resnet.export_resnet50(raw, image_size=size)
        origin = raw
        image_shape = (3, size, size)
    elif spec.source.torch is not None:
        from tritonkit.build.export import load_torch_source

        load_torch_source(spec.source.torch).export(raw)
        origin = raw
    else:
        assert spec.source.onnx is not None
        origin = spec.resolve(spec.source.onnx)
        raw = origin
    details = sanitize_onnx(raw, clean)
    if origin == raw and spec.source.onnx is None:
        origin = clean  # an export made here: hash the graph that was built from
    from tritonkit.repository.onnx_io import read_io

    graph = read_io(clean)
    if spec.preprocessing.kind == "text" and tokenizer is None:
        raise SpecError("spec key `preprocessing.kind`: `text` needs a flagship text model (minilm)")
    if image_shape is None and spec.preprocessing.kind == "none":
        first = graph.inputs[0]
        if len(first.shape) == 4 and all(d > 0 for d in first.shape[1:]):
            image_shape = (first.shape[1], first.shape[2], first.shape[3])
    return Source(
        onnx=clean,
        origin=origin,
        input_names=[t.name for t in graph.inputs],
        output_names=[t.name for t in graph.outputs],
        tokenizer=tokenizer,
        max_seq_length=max_seq,
        image_shape=image_shape,
        details={"opset": details["opset"], "sanitize": details, "synthetic_weights": spec.source.synthetic},
    )


# --- data ----------------------------------------------------------------------------------------
@dataclass
class Datasets:
    calibration: list[data.Feeds]
    evaluation: list[data.Feeds]
    labels: list[str] | None
    details: dict[str, Any]


def _text_sets(spec: BuildSpec) -> tuple[list[str], list[str], dict[str, Any]]:
    cal_spec, ev_spec = spec.calibration, spec.evaluation
    if cal_spec.data == "pydoc" and ev_spec.data == "pydoc":
        cal, ev = data.corpus_split(data.english_sentences(), cal_spec.samples, ev_spec.samples)
        return cal, ev, {"corpus": "pydoc_data.topics", "disjoint": True}
    ev_all = (
        data.english_sentences()
        if ev_spec.data == "pydoc"
        else data.load_text_lines(spec.resolve(ev_spec.data))
    )
    ev = ev_all[-ev_spec.samples :] if ev_spec.data == "pydoc" else ev_all[: ev_spec.samples]
    held_out = set(ev)
    cal_all = (
        data.english_sentences()
        if cal_spec.data == "pydoc"
        else data.load_text_lines(spec.resolve(cal_spec.data))
    )
    cal = [s for s in cal_all if s not in held_out][: cal_spec.samples]
    return cal, ev, {"calibration": cal_spec.data, "evaluation": ev_spec.data, "disjoint": True}


def _array_set(spec: BuildSpec, section: str, source: Source, seed: int) -> dict[str, Any]:
    ds = getattr(spec, section)
    if ds.data == "synthetic":
        if source.image_shape is None or len(source.input_names) != 1:
            raise SpecError(f"spec key `{section}.data`: `synthetic` needs a single image input (N, C, H, W)")
        return {source.input_names[0]: data.synthetic_images(ds.samples, source.image_shape, seed)}
    if ds.data == "pydoc":
        raise SpecError(f"spec key `{section}.data`: `pydoc` text needs `preprocessing.kind: text`")
    path = spec.resolve(ds.data)
    if path.suffix != ".npz":
        raise CalibrationError(f"{section} data {str(path)!r}: expected an .npz file of input arrays")
    arrays = data.load_npz(path, source.input_names)
    return {k: v[: ds.samples] for k, v in arrays.items()}


def _check_array_shapes(arrays: dict[str, Any], source: Source, section: str) -> None:
    from tritonkit.repository.onnx_io import read_io

    graph = {t.name: t for t in read_io(source.onnx).inputs}
    for name, value in arrays.items():
        dims = graph[name].shape
        if value.ndim != len(dims) or any(
            d > 0 and d != s for d, s in zip(dims[1:], value.shape[1:], strict=False)
        ):
            raise CalibrationError(
                f"{section} array `{name}` has shape {list(value.shape)}; the model expects {list(dims)} (-1: any)"
            )


def prepare_data(spec: BuildSpec, source: Source, needs_calibration: bool) -> Datasets:
    if spec.preprocessing.kind == "text":
        assert source.tokenizer is not None
        cal, ev, details = _text_sets(spec)
        encoder = data.TextEncoder(source.tokenizer, source.max_seq_length)
        if needs_calibration and len(cal) < spec.calibration.min_samples:
            raise CalibrationError(
                f"too few calibration samples: expected at least {spec.calibration.min_samples}, got {len(cal)}"
            )
        pad = None if spec.int8.method == "minmax" else encoder.longest(cal)
        calibration = (
            list(encoder.batches(cal, spec.calibration.batch_size, pad_to=pad)) if needs_calibration else []
        )
        evaluation = list(encoder.batches(ev, spec.evaluation.batch_size))
        details.update(calibration_samples=len(cal), evaluation_samples=len(ev), padded_to=pad)
        return Datasets(calibration, evaluation, ev, details)
    cal_arrays = _array_set(spec, "calibration", source, seed=1) if needs_calibration else {}
    ev_arrays = _array_set(spec, "evaluation", source, seed=2)
    for section, arrays in (("calibration", cal_arrays), ("evaluation", ev_arrays)):
        if arrays:
            _check_array_shapes(arrays, source, section)
    count = next(iter(cal_arrays.values())).shape[0] if cal_arrays else 0
    if needs_calibration and count < spec.calibration.min_samples:
        raise CalibrationError(
            f"too few calibration samples: expected at least {spec.calibration.min_samples}, got {count}"
        )
    return Datasets(
        data.batch_arrays(cal_arrays, spec.calibration.batch_size) if cal_arrays else [],
        data.batch_arrays(ev_arrays, spec.evaluation.batch_size),
        None,
        {
            "calibration": spec.calibration.data,
            "evaluation": spec.evaluation.data,
            "calibration_samples": count,
            "evaluation_samples": next(iter(ev_arrays.values())).shape[0],
        },
    )


# --- precisions ----------------------------------------------------------------------------------
def build_precision(spec: BuildSpec, source: Source, prec: str, sets: Datasets, workdir: Path) -> Built:
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
            source.onnx, target, sets.calibration, spec.int8.options(spec.calibration.min_samples)
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


# --- configs -------------------------------------------------------------------------------------
def _max_batch(
    spec: BuildSpec, profile: gpu.GpuProfile, source: Source | None, record: dict[str, Any] | None = None
) -> int:
    mbs = spec.batching.max_batch_size
    if mbs == "auto":
        from tritonkit.build.memory import estimate_memory

        assert source is not None
        per_sample, weights = estimate_memory(source.onnx, max_seq_length=source.max_seq_length)
        fixed = weights + profile.workspace_gib * gpu.GIB
        planned = gpu.plan_max_batch(profile, per_sample, fixed, spec.batching.memory_fraction)
        if record is not None:
            record.update(
                gpu=profile.name,
                measured_per_sample_bytes=int(per_sample),
                fixed_bytes=int(fixed),
                memory_fraction=spec.batching.memory_fraction,
                cap=profile.max_batch_cap,
                max_batch_size=planned,
            )
        return planned
    assert isinstance(mbs, int)
    if mbs > profile.max_batch_cap:
        raise GpuProfileError(
            f"`batching.max_batch_size` {mbs} is above the {profile.name} cap of {profile.max_batch_cap}"
        )
    return mbs


def _batching(spec: BuildSpec, mbs: int) -> DynamicBatching | None:
    if mbs <= 0:
        return None
    return DynamicBatching(
        max_queue_delay_microseconds=spec.batching.max_queue_delay_us,
        preferred_batch_size=list(spec.batching.preferred_batch_sizes),
    )


def text_ensemble(spec: BuildSpec) -> bool:
    """Whether text reaches the model through a tokenizer step of an ensemble."""
    return spec.preprocessing.kind == "text" and (
        spec.target != "portable" or spec.preprocessing.tokenize == "ensemble"
    )


def tokenizer_name(spec: BuildSpec) -> str:
    return f"{spec.name}_tokenizer"


def _embedding_dim(source: Source) -> int:
    from tritonkit.repository.onnx_io import read_io

    return int(read_io(source.onnx).outputs[0].shape[-1])


def tokenizer_config(spec: BuildSpec, source: Source, mbs: int) -> ModelConfig:
    """The ensemble's first step: the text runner in ``tokenize`` mode (python backend, CPU)."""
    return ModelConfig(
        name=tokenizer_name(spec),
        backend="python",
        max_batch_size=mbs,
        inputs=[TensorConfig(TEXT_INPUT, "BYTES", [1])],
        outputs=[TensorConfig("input_ids", "INT64", [-1]), TensorConfig("attention_mask", "INT64", [-1])],
        dynamic_batching=_batching(spec, mbs),
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=spec.instances.count)],
        parameters={
            "mode": "tokenize",
            "max_seq_length": str(source.max_seq_length),
            "pad_to_multiple_of": "16",
        },
    )


def ensemble_config(spec: BuildSpec, source: Source, model: str, mbs: int) -> ModelConfig:
    """``<model>_text``: TEXT → tokenizer → ``model`` → EMBEDDING."""
    return ModelConfig(
        name=f"{model}_text",
        platform="ensemble",
        max_batch_size=mbs,
        inputs=[TensorConfig(TEXT_INPUT, "BYTES", [1])],
        outputs=[TensorConfig(TEXT_OUTPUT, "FP32", [_embedding_dim(source)])],
        ensemble_steps=[
            EnsembleStep(
                model_name=tokenizer_name(spec),
                input_map={TEXT_INPUT: TEXT_INPUT},
                output_map={"input_ids": "_input_ids", "attention_mask": "_attention_mask"},
            ),
            EnsembleStep(
                model_name=model,
                input_map={"input_ids": "_input_ids", "attention_mask": "_attention_mask"},
                output_map={source.output_names[0]: TEXT_OUTPUT},
            ),
        ],
    )


def portable_config(spec: BuildSpec, source: Source, name: str, mbs: int) -> tuple[ModelConfig, str]:
    """(config, runner module name) for the embedded server's python backend."""
    if spec.preprocessing.kind == "text" and not text_ensemble(spec):
        from tritonkit.repository.onnx_io import read_io

        dim = _embedding_dim(source)
        config = ModelConfig(
            name=name,
            backend="python",
            max_batch_size=mbs,
            inputs=[TensorConfig(TEXT_INPUT, "BYTES", [1])],
            outputs=[TensorConfig(TEXT_OUTPUT, "FP32", [dim])],
            dynamic_batching=_batching(spec, mbs),
            instance_groups=[InstanceGroup(kind=spec.instances.kind, count=spec.instances.count)],
            parameters={"max_seq_length": str(source.max_seq_length), "intra_op_threads": "1"},
        )
        return config, "text_embedding"
    from tritonkit.build.portable import portable_config as import_config
    from tritonkit.repository.onnx_io import read_io

    config = import_config(
        name,
        read_io(source.onnx),
        max_batch_size=mbs,
        instance_count=spec.instances.count,
        instance_kind=spec.instances.kind,
        max_queue_delay_us=spec.batching.max_queue_delay_us,
    )
    if config.dynamic_batching is not None and spec.batching.preferred_batch_sizes:
        config.dynamic_batching.preferred_batch_size = list(spec.batching.preferred_batch_sizes)
    return config, "onnx_runner"


# --- the build -----------------------------------------------------------------------------------
def build_from_spec(
    spec: BuildSpec,
    repo: ModelRepository | str | Path,
    *,
    version: int | None = None,
    force: bool = False,
    log: Log = _quiet,
) -> list[BuildResult]:
    """Build every precision of ``spec`` for its target and write one version per model."""
    detection = gpu.detect_gpu(spec.requested_gpu, spec.gpu)
    profile = detection.profile
    log(f"GPU profile {profile.name} ({detection.how})")
    for prec in spec.precisions:
        gpu.check_precision(profile, prec)
    if spec.batching.max_batch_size != "auto":
        _max_batch(spec, profile, None)  # an explicit batch above the GPU's cap is refused up front
    plan = None
    if spec.target == "tensorrt":
        from tritonkit.build import tensorrt

        plan = tensorrt.plan_for_spec(spec, profile)  # refuses impossible settings before any work
        tensorrt.require_tensorrt()
    repository = repo if isinstance(repo, ModelRepository) else ModelRepository(repo, create=True)
    names = [spec.model_name(p) for p in spec.precisions]
    if version is not None and not force:
        for name in names:
            if version in repository.versions(name):
                raise ModelImportError(
                    f"model `{name}` version {version} already exists; use --force to replace it"
                )
    with tempfile.TemporaryDirectory(prefix="tritonkit-build-") as tmp:
        workdir = Path(tmp)
        log(f"exporting and sanitizing the {spec.name} source")
        source = prepare_source(spec, workdir)
        if plan is not None:
            from tritonkit.build import tensorrt

            tensorrt.check_shapes(plan, source_io(source.onnx))
        needs_calibration = "int8" in spec.precisions
        sets = prepare_data(spec, source, needs_calibration) if set(spec.precisions) - {"fp32"} else None
        planning: dict[str, Any] = {}
        mbs = _max_batch(spec, profile, source, planning)
        if planning:
            log(
                f"max batch {mbs}: {planning['measured_per_sample_bytes'] / 2**20:.1f} MiB per sample measured, "
                f"{profile.name} at memory fraction {planning['memory_fraction']}, cap {planning['cap']}"
            )
        built: list[Built] = []
        for prec in spec.precisions:
            log(f"building {spec.model_name(prec)} ({prec})")
            built.append(build_precision(spec, source, prec, sets or Datasets([], [], None, {}), workdir))
            if built[-1].accuracy is not None:
                acc = built[-1].accuracy
                log(
                    f"  accuracy vs fp32: {acc['metric']} mean {acc['mean']:.6f} min {acc['min']:.6f} ({acc['samples']} samples)"
                )
        # Every target artifact (engines included, each gated) exists before the first write.
        staged = []
        for item in built:
            name = spec.model_name(item.precision)
            files, config, extra = _target_artifacts(
                spec, source, item, name, mbs, profile, plan, workdir, sets
            )
            extra.update(
                {
                    "builder": "tritonkit.build",
                    "spec": spec.name,
                    "description": spec.description,
                    "precision_details": item.details,
                    "data": sets.details if sets is not None else {},
                    "gpu_detection": detection.how,
                    **({"max_batch_planning": planning} if planning else {}),
                    **source.details,
                }
            )
            manifest = Manifest.create(
                source.origin,
                precision=item.precision,
                target=spec.target,
                gpu_profile=profile.name,
                accuracy=item.accuracy,
                extra=extra,
            )
            staged.append((name, item, config, files, manifest))
            if text_ensemble(spec):
                staged.append((f"{name}_text", item, ensemble_config(spec, source, name, mbs), {}, manifest))
        if text_ensemble(spec):
            from tritonkit.serve.runners import runner_path

            assert source.tokenizer is not None
            tok_manifest = Manifest.create(
                source.tokenizer,
                precision="fp32",
                target="portable",
                gpu_profile=profile.name,
                extra={"builder": "tritonkit.build", "spec": spec.name, "role": "tokenizer"},
            )
            tok_files: dict[str, Path | bytes] = {
                "model.py": runner_path("text_embedding"),
                "tokenizer.json": source.tokenizer,
            }
            staged.insert(
                0,
                (
                    tokenizer_name(spec),
                    built[0],
                    tokenizer_config(spec, source, mbs),
                    tok_files,
                    tok_manifest,
                ),
            )
        _refuse_conflicts(repository, [(name, config) for name, _, config, _, _ in staged], version, force)
        results = []
        for name, item, config, files, manifest in staged:
            path = repository.write_version(name, config, files, manifest, version=version, force=force)
            log(f"wrote {path}")
            results.append(BuildResult(name, item.precision, path, item.accuracy))
    return results


def _io_signature(config: ModelConfig) -> tuple[Any, ...]:
    tensors = [(t.name, t.data_type, tuple(t.dims)) for t in (*config.inputs, *config.outputs)]
    return (config.backend, config.platform, config.max_batch_size, tuple(tensors))


def _refuse_conflicts(
    repository: ModelRepository, models: list[tuple[str, ModelConfig]], version: int | None, force: bool
) -> None:
    """Refuse before the first write what ``write_version`` would refuse at the second or third:
    a build writes several models, and all of them or none should land."""
    if force:
        return
    for name, config in models:
        existing = repository.versions(name)
        if not existing:
            continue
        if version is not None and version in existing:
            raise RepositoryError(
                f"model `{name}` version {version} already exists; use --force to replace it"
            )
        if _io_signature(repository.read_config(name)) != _io_signature(config):
            raise RepositoryError(
                f"model `{name}` already exists with a different signature (backend, batching or I/O); "
                "use another spec `name` or --force"
            )


def _target_artifacts(
    spec: BuildSpec,
    source: Source,
    item: Built,
    name: str,
    mbs: int,
    profile: gpu.GpuProfile,
    plan: Any,
    workdir: Path,
    sets: Datasets | None = None,
) -> tuple[dict[str, Path | bytes], ModelConfig, dict[str, Any]]:
    from tritonkit.serve.runners import runner_path

    if spec.target == "portable":
        config, runner = portable_config(spec, source, name, mbs)
        files: dict[str, Path | bytes] = {"model.onnx": item.artifact, "model.py": runner_path(runner)}
        if source.tokenizer is not None and runner == "text_embedding":
            files["tokenizer.json"] = source.tokenizer
        return files, config, {"runner": runner}
    if spec.target == "onnxruntime":
        from tritonkit.build.onnxruntime_target import onnxruntime_config

        config = onnxruntime_config(spec, item.artifact, name, mbs, item.precision)
        return {"model.onnx": item.artifact}, config, {"accelerator": spec.onnxruntime.accelerator}
    from tritonkit.build import tensorrt

    plan_file = workdir / f"{item.precision}.plan"
    io = source_io(item.artifact)
    tensorrt.check_shapes(plan, io)
    calibration = sets.calibration if sets is not None else None
    engine = tensorrt.build_engine(
        source.onnx, item.artifact, plan_file, plan, item.precision, profile, io, calibration
    )
    if sets is not None and sets.evaluation:  # pragma: no cover - needs TensorRT
        # The engine itself is gated too: TensorRT may fuse and pick kernels differently from ORT.
        stats, cand, ref = accuracy.compare_engine(
            source.onnx, plan_file, sets.evaluation, output=spec.accuracy.output
        )
        threshold = getattr(spec.accuracy, item.precision, None) if item.precision != "fp32" else None
        marks = accuracy.Thresholds(
            spec.accuracy.metric,
            threshold.mean if threshold else 0.999,
            threshold.min if threshold else 0.99,
        )
        engine["accuracy"] = accuracy.gate(
            name, item.precision, cand, ref, marks, output=stats["output"], labels=sets.labels
        )
    config = tensorrt.tensorrt_config(name, plan, io, spec)
    return {tensorrt.PLAN_FILE: plan_file}, config, {"engine": engine}


def source_io(path: Path) -> Any:
    from tritonkit.repository.onnx_io import read_io

    return read_io(path)


def with_overrides(spec: BuildSpec, **changes: Any) -> BuildSpec:
    """A copy of ``spec`` with nested dataclass fields replaced (``calibration={'samples': 64}``)."""
    updates = {}
    for key, value in changes.items():
        current = getattr(spec, key)
        updates[key] = dataclasses.replace(current, **value) if isinstance(value, dict) else value
    return dataclasses.replace(spec, **updates)
