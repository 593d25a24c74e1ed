"""The one way from a model file to versions in a repository: :func:`build_from_spec` runs a
:class:`~tritonkit.convert.spec.BuildSpec` through source → FP32 ONNX (:mod:`.source`) → held-out
data (:mod:`.datasets`) → each precision's artifact and accuracy gate → target files and config
(:mod:`.artifacts`) → one version per model, written by the repository.

Every check that can fail without building runs first (GPU profile, precisions, TensorRT settings,
data, evaluation and calibration shapes against the TensorRT profiles); every precision is built
and gated, and every model's config checked against the repository, before the first version is
written, so a failure leaves the repository untouched (and a repository that did not exist is not
created). Only the TensorRT builder itself needs ``import tensorrt``.

``tritonkit build --onnx FILE`` and :func:`tritonkit.convert.portable.import_onnx` are the *as-is
preset* of this pipeline (``spec.as_is``): one portable FP32 version of the file, served as given,
with no GPU profile to plan for.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonkit.config import ModelConfig
from tritonkit.convert import gpu, isolate, preflight, tensorrt
from tritonkit.convert.artifacts import Built, Files, build_precision, check_tensorrt_data, target_artifacts
from tritonkit.convert.datasets import Datasets, prepare_data
from tritonkit.convert.flagship import FLAGSHIP_SPECS, flagship_spec
from tritonkit.convert.gpu_serving import choose_device, visible_gpus
from tritonkit.convert.memory import estimate_memory
from tritonkit.convert.portable_target import RUNNER_FILE
from tritonkit.convert.serving_build import cpu_plan, plan_version, planned, stage_gpu_version
from tritonkit.convert.source import Source, prepare_source
from tritonkit.convert.spec import DEFAULT_MAX_BATCH_SIZE, BuildSpec, apply_queue_policy
from tritonkit.convert.text_models import ensemble_config, text_ensemble, tokenizer_config, tokenizer_name
from tritonkit.errors import GpuProfileError, ModelImportError, RepositoryError
from tritonkit.repository.store import Manifest, ModelRepository
from tritonkit.serve.runners import runner_path

__all__ = ["IMPORTER", "BuildResult", "Log", "build_all", "build_from_spec"]

#: ``build.json``'s ``extra.importer`` of an as-is import (the value older versions were written with).
IMPORTER = "tritonkit.convert.portable.import_onnx"

Log = Callable[[str], None]


@dataclass
class BuildResult:
    name: str
    precision: str
    path: Path
    accuracy: dict[str, Any] | None


def _quiet(_: str) -> None:
    return None


def _max_batch(
    spec: BuildSpec,
    profile: gpu.GpuProfile | None,
    source: Source | None,
    record: dict[str, Any] | None = None,
) -> int:
    """The max batch size: given, planned from measured memory (``auto``), or the graph's (None)."""
    mbs = spec.batching.max_batch_size
    if mbs == "auto":
        assert source is not None and profile is not None
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
    if mbs is None:
        if source is None:
            return 0  # decided once the graph is read
        mbs = DEFAULT_MAX_BATCH_SIZE if source.graph.batch_dynamic else 0
    assert isinstance(mbs, int)
    if profile is not None and mbs > profile.max_batch_cap:
        raise GpuProfileError(
            f"`batching.max_batch_size` {mbs} is above the {profile.name} cap of {profile.max_batch_cap}"
        )
    return mbs


def _io_signature(config: ModelConfig) -> tuple[Any, ...]:
    tensors = [(t.name, t.data_type, tuple(t.dims)) for t in (*config.inputs, *config.outputs)]
    return (config.backend, config.platform, config.max_batch_size, tuple(tensors))


def _refuse_conflicts(
    repository: ModelRepository | None,
    models: list[tuple[str, ModelConfig]],
    version: int | None,
    force: bool,
) -> None:
    """Refuse before the first write what ``write_version`` would refuse at the second or third:
    a build writes several models, and all of them or none should land."""
    if force or repository is None:
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
                "use another name or --force"
            )


def _existing(repo: ModelRepository | str | Path) -> ModelRepository | None:
    """The repository if it exists already; a build that fails must not create it."""
    if isinstance(repo, ModelRepository):
        return repo
    return ModelRepository(repo) if Path(repo).exists() else None


def _tokenizer_version(
    spec: BuildSpec, source: Source, mbs: int, gpu_profile: str | None
) -> tuple[ModelConfig, Files, Manifest]:
    assert source.tokenizer is not None
    manifest = Manifest.create(
        source.tokenizer,
        precision="fp32",
        target="portable",
        gpu_profile=gpu_profile,
        extra={"builder": "tritonkit.convert", "spec": spec.name, "role": "tokenizer"},
    )
    files: Files = {RUNNER_FILE: runner_path("text_embedding"), "tokenizer.json": source.tokenizer}
    config = tokenizer_config(spec, source, mbs)
    if planned(spec):  # the embedded server's tokenizer (not the Triton image's of other targets)
        manifest.extra.update(cpu_plan(config, "fp32", "tokenization runs on the CPU").manifest_extra())
    return config, files, manifest


def _manifest_extra(
    spec: BuildSpec,
    source: Source,
    item: Built,
    target_extra: dict[str, Any],
    sets: Datasets | None,
    detection: gpu.Detection | None,
    planning: dict[str, Any],
) -> dict[str, Any]:
    """``build.json``'s ``extra``: how the version was made (an as-is import: only opset and importer)."""
    if spec.as_is:
        return {"opset": source.graph.opset, "importer": IMPORTER}
    return {
        **target_extra,
        "builder": "tritonkit.convert",
        "spec": spec.name,
        "description": spec.description,
        "precision_details": item.details,
        "data": sets.details if sets is not None else {},
        "gpu_detection": detection.how if detection is not None else None,
        **({"max_batch_planning": planning} if planning else {}),
        **source.details,
    }


def build_from_spec(
    spec: BuildSpec,
    repo: ModelRepository | str | Path,
    *,
    version: int | None = None,
    force: bool = False,
    log: Log = _quiet,
    gpus: Sequence[int] | None = None,
) -> list[BuildResult]:
    """Build every precision of ``spec`` for its target and write one version per model.

    ``gpus``: the GPU indices visible here (None: ``nvidia-smi -L``), which the ``serving`` section's
    plan of each portable version reads (:mod:`.serving_build`); other builds never ask.
    """
    visible = list(visible_gpus() if gpus is None else gpus) if planned(spec) else []
    if planned(spec):
        choose_device(spec.serving.device, visible)  # `device: gpu` with no GPU: refused before any work
    detection = None
    if not spec.as_is or spec.batching.max_batch_size == "auto":
        detection = gpu.detect_gpu(spec.requested_gpu, spec.gpu)
        log(f"GPU profile {detection.profile.name} ({detection.how})")
        for prec in spec.precisions:
            gpu.check_precision(detection.profile, prec)
    profile = detection.profile if detection is not None else None
    if isinstance(spec.batching.max_batch_size, int):
        _max_batch(spec, profile, None)  # an explicit batch above the GPU's cap is refused up front
    plan = None
    if spec.target == "tensorrt":
        assert profile is not None
        # Refuses impossible settings before any work. `import tensorrt` is needed only by the builder
        # itself: export, clean-up, precision gates and every shape check run anywhere.
        plan = tensorrt.plan_for_spec(spec, profile)
    checked = preflight.check_build(spec)  # shapes, batch axis, data files: one line, before any work
    for warning in checked.warnings:
        log(f"warning: {warning}")
    existing = _existing(repo)
    names = [spec.model_name(p) for p in spec.precisions]
    if existing is not None and version is not None and not force:
        for name in names:
            if version in existing.versions(name):
                raise ModelImportError(
                    f"model `{name}` version {version} already exists; use --force to replace it"
                )
    # Native steps (export, clean-up, precisions, gates, engines) run in one child worker per build.
    with isolate.session(spec.name), tempfile.TemporaryDirectory(prefix="tritonkit-build-") as tmp:
        workdir = Path(tmp)
        log(
            f"reading {spec.source.onnx} as given"
            if spec.as_is
            else f"exporting and sanitizing the {spec.name} source"
        )
        source = prepare_source(spec, workdir, checked.torch)
        if plan is not None:
            tensorrt.check_shapes(plan, source.graph)
        needs_calibration = "int8" in spec.precisions
        sets = prepare_data(spec, source, needs_calibration) if set(spec.precisions) - {"fp32"} else None
        if plan is not None:
            check_tensorrt_data(spec, source, plan, sets)  # shapes no profile covers: refused before building
        planning: dict[str, Any] = {}
        mbs = _max_batch(spec, profile, source, planning)
        if planning:
            log(
                f"max batch {mbs}: {planning['measured_per_sample_bytes'] / 2**20:.1f} MiB per sample measured, "
                f"{planning['gpu']} at memory fraction {planning['memory_fraction']}, cap {planning['cap']}"
            )
        built: list[Built] = []
        for prec in spec.precisions:
            log(f"building {spec.model_name(prec)} ({prec})")
            built.append(build_precision(spec, source, prec, sets or Datasets(), workdir))
            if built[-1].accuracy is not None:
                acc = built[-1].accuracy
                log(
                    f"  accuracy vs fp32: {acc['metric']} mean {acc['mean']:.6f} min {acc['min']:.6f} ({acc['samples']} samples)"
                )
        # Every target artifact (engines included, each gated) exists before the first write.
        staged: list[tuple[str, Built, ModelConfig, Files, Manifest]] = []
        gpu_profile = profile.name if profile is not None else None
        for as_built in built:
            item = as_built  # a GPU version carries its served artifact's gate instead
            name = spec.model_name(item.precision)
            files, config, extra = target_artifacts(
                spec, source, item, name, mbs, profile, plan, workdir, sets
            )
            if planned(spec):
                execution = plan_version(
                    spec, source, item.precision, mbs, gpus=visible, profile=profile, cpu_config=config
                )
                log(f"  {name} executes on {execution.device} ({execution.reason})")
                if execution.device == "gpu":
                    on_gpu = stage_gpu_version(
                        spec,
                        source,
                        name,
                        (item.precision, item.artifact, item.accuracy),
                        execution,
                        mbs,
                        workdir,
                        sets,
                    )
                    files, config, extra = on_gpu.files, on_gpu.config, on_gpu.extra
                    item = dataclasses.replace(item, accuracy=on_gpu.accuracy)
                extra.update(execution.manifest_extra())
            apply_queue_policy(config, spec.batching)
            extra = _manifest_extra(spec, source, item, extra, sets, detection, planning)
            manifest = Manifest.create(
                source.origin,
                precision=item.precision,
                target=spec.target,
                gpu_profile=gpu_profile,
                accuracy=item.accuracy,
                extra=extra,
            )
            staged.append((name, item, config, files, manifest))
            if text_ensemble(spec):
                # The ensemble only routes: where it executes is its members' business.
                routes = {k: v for k, v in manifest.extra.items() if k != "execution"}
                ensemble = dataclasses.replace(manifest, extra=routes)
                staged.append((f"{name}_text", item, ensemble_config(spec, source, name, mbs), {}, ensemble))
        if text_ensemble(spec):
            staged.insert(
                0, (tokenizer_name(spec), built[0], *_tokenizer_version(spec, source, mbs, gpu_profile))
            )
        _refuse_conflicts(existing, [(name, config) for name, _, config, _, _ in staged], version, force)
        repository = existing
        if repository is None:
            assert not isinstance(repo, ModelRepository)  # _existing returns a ModelRepository as it is
            repository = ModelRepository(repo, create=True)
        results = []
        for name, item, config, files, manifest in staged:
            path = repository.write_version(name, config, files, manifest, version=version, force=force)
            log(f"wrote {path}")
            results.append(BuildResult(name, item.precision, path, item.accuracy))
    return results


def build_all(
    repo: str | Path = "model_repository",
    *,
    reduced: bool = False,
    version: int | None = 1,
    force: bool = True,
    names: tuple[str, ...] = FLAGSHIP_SPECS,
    spec_dir: Path | None = None,
    log: Log = print,
) -> list[BuildResult]:
    """Build every flagship model (all precisions, portable target) into ``repo``.

    By default each model is (re)built as version 1, replacing an earlier build atomically, so
    ``make demo`` run twice serves the same thing. ``version=None`` adds a new version instead.
    """
    results: list[BuildResult] = []
    for name in names:
        spec = flagship_spec(name, reduced=reduced, spec_dir=spec_dir)
        results.extend(build_from_spec(spec, repo, version=version, force=force, log=log))
    return results
