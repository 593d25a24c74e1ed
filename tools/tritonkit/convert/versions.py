"""What a build hands the repository's writer: one :class:`~tritonkit.repository.VersionWrite` per model,
with the ``build.json`` manifest that says how it was made (:func:`version_writes`).

The manifest records the source's hash, the precision and target, the GPU profile, the gate's
records where the gate step put them (``accuracy``: the served artifact's; ``extra.onnx_accuracy``:
the ONNX graph's when a program is served instead; ``extra.engine.accuracy``: the engine's), and the
spec, data, conversion details and execution plan. An as-is import records only its opset and
importer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tritonkit.convert.graph.source import Source
from tritonkit.convert.graph.text_models import tokenizer_name
from tritonkit.convert.inputs.datasets import Datasets
from tritonkit.convert.precisions.gates import Gated
from tritonkit.convert.targets.plan import BuildPlan
from tritonkit.convert.targets.targets import Made, Targets
from tritonkit.repository import Manifest, VersionWrite

__all__ = ["IMPORTER", "Version", "version_writes"]

#: ``build.json``'s ``extra.importer`` of an as-is import (the value older versions were written with).
IMPORTER = "tritonkit.convert.portable.import_onnx"


@dataclass(frozen=True)
class Version:
    """One model version to write, and what the build reports of it."""

    write: VersionWrite
    precision: str
    accuracy: dict[str, Any] | None


def _judged(made: Made, gated: Gated) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the version's accuracy record, its target extras with the other records placed)."""
    records = gated.records
    extra = dict(made.extra)
    engine = dict(extra.get("engine", {}))
    if "engine" in records:
        engine["accuracy"] = records["engine"]
    if "fp16_base" in records and "fp16_base_qdq" in engine:
        engine["fp16_base_qdq"] = {**engine["fp16_base_qdq"], "accuracy": records["fp16_base"]}
    if engine:
        extra["engine"] = engine
    if "program" not in records:
        return records.get("precision"), extra
    if "precision" in records:
        extra["onnx_accuracy"] = records["precision"]
    return records["program"], extra


def _extra(
    plan: BuildPlan,
    source: Source,
    sets: Datasets,
    made: Made,
    target: dict[str, Any],
    planning: dict[str, Any],
) -> dict[str, Any]:
    """``build.json``'s ``extra``: how the version was made."""
    spec = plan.spec
    if spec.as_is:
        return {"opset": source.graph.opset, "importer": IMPORTER}
    return {
        **target,
        "builder": "tritonkit.convert",
        "spec": spec.name,
        "description": spec.description,
        "precision_details": made.converted.details,
        "data": sets.details,
        "gpu_detection": plan.detection.how if plan.detection is not None else None,
        **({"max_batch_planning": planning} if planning else {}),
        **source.details,
    }


def version_writes(
    plan: BuildPlan, source: Source, sets: Datasets, targets: Targets, gated: tuple[Gated, ...]
) -> tuple[Version, ...]:
    """Every model of the build with its manifest: the tokenizer first (ensembles name it), then each
    precision's model and its ensemble. ``gated``: each version's records, its graph's and its
    served artifact's."""
    spec = plan.spec
    profile = plan.profile.name if plan.profile is not None else None
    out: list[Version] = []
    for made, judged in zip(targets.versions, gated, strict=True):
        accuracy, target = _judged(made, judged)
        manifest = Manifest.create(
            source.origin,
            precision=made.converted.precision,
            target=spec.target,
            gpu_profile=profile,
            accuracy=accuracy,
            extra=_extra(plan, source, sets, made, target, targets.max_batch.planning),
        )
        out.append(
            Version(
                VersionWrite(made.name, made.config, made.files, manifest), made.converted.precision, accuracy
            )
        )
        if made.ensemble is not None:
            # The ensemble only routes: where it executes is its members' business.
            routes = {k: v for k, v in manifest.extra.items() if k != "execution"}
            write = VersionWrite(
                made.ensemble.name, made.ensemble, {}, dataclasses.replace(manifest, extra=routes)
            )
            out.append(Version(write, made.converted.precision, accuracy))
    tokenizer = targets.tokenizer
    if tokenizer is not None:
        assert source.tokenizer is not None
        manifest = Manifest.create(
            source.tokenizer,
            precision="fp32",
            target="portable",
            gpu_profile=profile,
            extra={"builder": "tritonkit.convert", "spec": spec.name, "role": "tokenizer", **tokenizer.extra},
        )
        write = VersionWrite(tokenizer_name(spec), tokenizer.config, tokenizer.files, manifest)
        out.insert(0, Version(write, out[0].precision, out[0].accuracy))
    return tuple(out)
