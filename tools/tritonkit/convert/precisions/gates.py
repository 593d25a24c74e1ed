"""The accuracy gate of a build, in one place: every artifact a version serves or is made from is
judged here, against the FP32 reference, on the held-out set, with the spec's thresholds.

The steps that make artifacts do not judge them: they return a :class:`Comparison` (the
candidate's and the reference's outputs on the same samples, and which runtime produced the
candidate), and :func:`gate_all` judges them (:func:`tritonkit.convert.precisions.accuracy.gate` is called from
here only). A build passes its gate once, :func:`gate_build`: the ONNX graphs are judged first, then
the targets are made (the callable it is given) and what they serve is judged, before anything is
written; a graph below its marks is refused before any target is made (so a TensorRT build is judged
here up to the builder, which CI machines cannot run). Roles say what was compared:

- ``precision``: a precision's ONNX graph (FP16, Q/DQ INT8) on ONNX Runtime's CPU provider;
- ``fp16_base``: the FP16-base twin of a Q/DQ INT8 graph that a strongly typed TensorRT build parses;
- ``engine``: a built TensorRT engine (FP32 engines too: TensorRT may fuse and pick kernels);
- ``program``: a ``torch.export`` program served on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from numpy.typing import NDArray

from tritonkit.convert.precisions import accuracy
from tritonkit.convert.spec.buildspec import AccuracySpec
from tritonkit.errors import SpecError

__all__ = [
    "DEFAULT_MARKS",
    "ROLES",
    "Comparison",
    "Gated",
    "Served",
    "gate_all",
    "gate_build",
    "log_line",
    "thresholds",
]

#: The order comparisons are judged in.
ROLES: tuple[str, ...] = ("precision", "fp16_base", "engine", "program")
#: What each role's artifact is, in the log's words.
_ROLE_WORDS = {
    "precision": "ONNX graph",
    "fp16_base": "FP16-base Q/DQ graph",
    "engine": "TensorRT engine",
    "program": "torch program",
}
#: The marks a spec that gives none gets, by metric and precision: (mean, min). Cosine: close to the
#: reference on average and on the worst sample. Top-1: an agreement rate a classifier can meet, since
#: a sample on the decision boundary may flip at FP16 (0.99: one flip in 128 passes, ten do not); there
#: is no per-sample minimum (each sample agrees or not). FP32: an engine built from the FP32 graph.
DEFAULT_MARKS: dict[str, dict[str, tuple[float, float | None]]] = {
    "cosine": {"fp32": (0.999, 0.99), "fp16": (0.999, 0.99), "bf16": (0.999, 0.99), "int8": (0.99, 0.97)},
    "top1": {"fp32": (0.99, None), "fp16": (0.99, None), "bf16": (0.99, None), "int8": (0.98, None)},
}


@dataclass(frozen=True)
class Comparison:
    """One candidate's outputs and the FP32 reference's, on the same held-out samples."""

    role: str
    model: str  # named in a failure
    precision: str  # whose thresholds apply
    candidate: NDArray[Any]
    reference: NDArray[Any]
    output: str
    runtime: str = "onnxruntime-cpu"
    #: Comparator facts merged into the record (Polygraphy's atol/rtol result, the output compared).
    stats: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Gated:
    """The records of one version's comparisons, by role (what build.json keeps)."""

    records: Mapping[str, dict[str, Any]]


def thresholds(spec: AccuracySpec, precision: str) -> accuracy.Thresholds:
    """The spec's marks for ``precision``, each one it does not give the metric's default
    (:data:`DEFAULT_MARKS`; FP32 always the default). SpecError (one line) for a mark outside 0..1 or
    a ``min`` for top-1."""
    default_mean, default_min = DEFAULT_MARKS[spec.metric].get(precision, DEFAULT_MARKS[spec.metric]["fp16"])
    marks = getattr(spec, precision, None) if precision != "fp32" else None
    given_mean = marks.mean if marks is not None else None
    given_min = marks.min if marks is not None else None
    if spec.metric == "top1" and given_min is not None:
        raise SpecError(
            f"spec key `accuracy.{precision}.min`: top-1 has no per-sample minimum (each sample agrees or not); "
            f"expected only `mean`, the agreement rate (default {default_mean}), got min {given_min}"
        )
    for key, value in (("mean", given_mean), ("min", given_min)):
        if value is not None and not 0.0 <= value <= 1.0:
            raise SpecError(
                f"spec key `accuracy.{precision}.{key}`: expected a share within 0..1, got {value}"
            )
    mean = given_mean if given_mean is not None else default_mean
    low = given_min if given_min is not None else default_min
    return accuracy.Thresholds(spec.metric, mean, 0.0 if low is None else low)


def log_line(record: Mapping[str, Any], role: str, model: str) -> str:
    """The build's line for one judged comparison, naming the precision, the artifact and the model:
    ``  accuracy vs fp32, fp16 ONNX graph `m_fp16`: top-1 agreement 0.992188, 1 of 128 flipped (pass
    mark 0.99): passed``."""
    what = _ROLE_WORDS.get(role, role)
    verdict = "passed" if record.get("passed") else "failed"
    return f"  accuracy vs fp32, {record.get('precision', '?')} {what} `{model}`: {accuracy.describe(record)}: {verdict}"


def gate_all(
    spec: AccuracySpec,
    versions: Sequence[Sequence[Comparison]],
    labels: Sequence[str] | None,
    log: Callable[[str], None] | None = None,
) -> tuple[Gated, ...]:
    """Judge every comparison of every version (by role, in :data:`ROLES` order); AccuracyError at the
    first below its thresholds, naming the worst samples (``labels``: the held-out texts, if any).
    ``log`` gets one :func:`log_line` per comparison that passed."""
    records: list[dict[str, dict[str, Any]]] = [{} for _ in versions]
    for role in ROLES:
        for index, comparisons in enumerate(versions):
            for item in (c for c in comparisons if c.role == role):
                result = accuracy.gate(
                    item.model,
                    item.precision,
                    item.candidate,
                    item.reference,
                    thresholds(spec, item.precision),
                    output=item.output,
                    labels=labels,
                    runtime=item.runtime,
                )
                result.update(item.stats)
                records[index][role] = result
                if log is not None:
                    log(log_line(result, role, item.model))
    return tuple(Gated(r) for r in records)


class Served(Protocol):
    """What a build's targets serve, as the gate reads it: per version, the served artifact's comparisons."""

    @property
    def checks(self) -> Sequence[Sequence[Comparison]]: ...


S = TypeVar("S", bound=Served)


def gate_build(
    spec: AccuracySpec,
    graphs: Sequence[Sequence[Comparison]],
    labels: Sequence[str] | None,
    make: Callable[[], S],
    log: Callable[[str], None],
) -> tuple[S, tuple[Gated, ...]]:
    """A build's gate: each version's graph comparisons judged (and logged), then ``make()`` (the
    targets, made only once every graph passed) and what it serves judged; (what ``make`` made, each
    version's records of both). Every comparison judged is logged with its precision (:func:`log_line`)."""
    judged = gate_all(spec, graphs, labels, log)
    made = make()
    served = gate_all(spec, made.checks, labels, log)
    return made, tuple(
        Gated({**graph.records, **artifact.records}) for graph, artifact in zip(judged, served, strict=True)
    )
