"""The one way from a build spec to versions in a repository: :func:`build_from_spec` chains the
build's steps, each taking and returning named values, each called once:

1. :func:`~tritonkit.convert.targets.plan.plan_build`: :class:`~tritonkit.convert.targets.plan.BuildPlan` from the spec
   (GPU profile, precisions, TensorRT engine plan, visible GPUs);
2. :meth:`tritonkit.repository.ModelRepository.reserve`: the repository refuses versions that exist
   (``--version`` without ``--force``) before any build work, and hands back the build's
   :class:`~tritonkit.repository.Reservation`;
3. :func:`~tritonkit.convert.inputs.preflight.check_build`: shapes, batch axis, data files;
4. :func:`~tritonkit.convert.graph.source.prepare_source`: the FP32 ONNX :class:`~tritonkit.convert.graph.source.Source`;
5. :func:`~tritonkit.convert.inputs.datasets.prepare_data`: held-out and calibration :class:`~tritonkit.convert.inputs.datasets.Datasets`;
6. :func:`~tritonkit.convert.targets.conversion.convert_precisions`: each precision's graph (``Converted``);
7. :func:`~tritonkit.convert.precisions.gates.gate_build`: the graphs judged against FP32, then
   :func:`~tritonkit.convert.targets.targets.make_targets` (each model as its target serves it, ``Targets``),
   then the served engines and programs judged: the accuracy gate, passed once;
8. :func:`~tritonkit.convert.versions.version_writes`: manifests, one ``VersionWrite`` per model;
9. the reservation's ``commit``: all checked again, then written, under the repository's lock.

Every check that can fail without building runs in steps 1 to 3; steps 4 to 7 run
their native code (export, clean-up, precisions, gates, engines) in one worker process per build
(:mod:`~tritonkit.convert.isolate`), so a crash there is one line. The graphs are judged before any target is
made (a TensorRT build runs, and fails, here up to the builder, which needs ``import tensorrt``);
every artifact is made and judged, and every model checked against the repository, before the
first version is written, so a failure leaves the repository untouched (and a repository that did
not exist is not created).

``tritonkit build --onnx FILE`` and :func:`tritonkit.convert.onnx_import.import_onnx` are the *as-is
preset* of this pipeline (``spec.as_is``): one portable FP32 version of the file, served as given,
with no GPU profile to plan for. :func:`tritonkit.convert.targets.torch_program.write_torch_version` (a torch
module as a GPU version, for benchmarks) goes through the same gate and writer.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonkit.convert import isolate
from tritonkit.convert.graph.flagship import FLAGSHIP_SPECS, flagship_spec
from tritonkit.convert.graph.source import prepare_source
from tritonkit.convert.inputs.datasets import Datasets, prepare_data
from tritonkit.convert.inputs.preflight import check_build
from tritonkit.convert.precisions.gates import gate_build
from tritonkit.convert.spec.buildspec import BuildSpec
from tritonkit.convert.targets.conversion import convert_precisions
from tritonkit.convert.targets.plan import Log, plan_build, quiet
from tritonkit.convert.targets.targets import make_targets
from tritonkit.convert.targets.tensorrt_buckets import bucketed_plan, check_spec
from tritonkit.convert.versions import version_writes
from tritonkit.repository import ModelRepository

__all__ = ["BuildResult", "Log", "build_all", "build_from_spec"]


@dataclass(frozen=True)
class BuildResult:
    name: str
    precision: str
    path: Path
    accuracy: dict[str, Any] | None


def build_from_spec(
    spec: BuildSpec,
    repo: ModelRepository | str | Path,
    *,
    version: int | None = None,
    force: bool = False,
    log: Log = quiet,
    gpus: Sequence[int] | None = None,
) -> list[BuildResult]:
    """Build every precision of ``spec`` for its target and write one version per model.

    ``gpus``: the GPU indices visible here (None: ``nvidia-smi -L``), which the ``serving`` section's
    plan of each portable version reads (:mod:`tritonkit.convert.targets.gpu_target`); other builds never ask.
    """
    plan = plan_build(spec, gpus=gpus, log=log)
    proposed = "new" if spec.as_is else "spec"
    reservation = ModelRepository.reserve(repo, plan.names, version, force=force, proposed=proposed)
    checked = check_build(spec)  # shapes, batch axis, data files: one line each, before any build work
    for warning in checked.warnings:
        log(f"warning: {warning}")
    if spec.target == "tensorrt":  # profiles and longest lengths, before anything is exported
        check_spec(spec, checked.torch)
    # Native steps (export, clean-up, precisions, gates, engines) run in one child worker per build.
    with isolate.session(spec.name), tempfile.TemporaryDirectory(prefix="tritonkit-build-") as tmp:
        workdir = Path(tmp)
        log(
            f"reading {spec.source.onnx} as given"
            if spec.as_is
            else f"exporting and sanitizing the {spec.name} source"
        )
        source = prepare_source(spec, workdir, checked.torch)
        if plan.engine is not None:  # the engine's profiles follow the model's shape buckets
            plan = dataclasses.replace(plan, engine=bucketed_plan(plan.engine, spec, source))
        converts = set(spec.precisions) - {"fp32"}
        sets = (
            prepare_data(spec, source, "int8" in spec.precisions, read=checked.arrays)
            if converts
            else Datasets()
        )
        checked.arrays.clear()  # what the sets use, they hold
        converted = convert_precisions(plan, source, sets, workdir, log)
        targets, records = gate_build(
            spec.accuracy,
            [c.checks for c in converted],
            sets.labels,
            lambda: make_targets(plan, source, sets, converted, workdir, log),
            log,
        )
        versions = version_writes(plan, source, sets, targets, records)
        paths = reservation.commit([v.write for v in versions])
    for path in paths:
        log(f"wrote {path}")
    return [
        BuildResult(v.write.name, v.precision, p, v.accuracy) for v, p in zip(versions, paths, strict=True)
    ]


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
