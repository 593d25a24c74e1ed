"""The accuracy gate of a build, in one place: every artifact a version serves or is made from is
judged here, against the FP32 reference, on the held-out set, with the spec's thresholds.

The steps that make artifacts do not judge them: they return a :class:`Comparison` (the
candidate's and the reference's outputs on the same samples, and which runtime produced the
candidate), and :func:`gate_all` judges them (:func:`tritonkit.convert.accuracy.gate` is called from
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

from tritonkit.convert import accuracy
from tritonkit.convert.buildspec import AccuracySpec

__all__ = ["ROLES", "Comparison", "Gated", "Served", "gate_all", "gate_build", "thresholds"]

#: The order comparisons are judged in.
ROLES: tuple[str, ...] = ("precision", "fp16_base", "engine", "program")
#: Thresholds of an FP32 artifact (an engine built from the FP32 graph): close to the reference.
_FP32_MARKS = (0.999, 0.99)


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
    """The spec's marks for ``precision`` (FP32: :data:`_FP32_MARKS`)."""
    marks = getattr(spec, precision, None) if precision != "fp32" else None
    mean, low = (marks.mean, marks.min) if marks is not None else _FP32_MARKS
    return accuracy.Thresholds(spec.metric, mean, low)


def gate_all(
    spec: AccuracySpec, versions: Sequence[Sequence[Comparison]], labels: Sequence[str] | None
) -> tuple[Gated, ...]:
    """Judge every comparison of every version (by role, in :data:`ROLES` order); AccuracyError at the
    first below its thresholds, naming the worst samples (``labels``: the held-out texts, if any)."""
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
    version's records of both)."""
    judged = gate_all(spec, graphs, labels)
    for gated in judged:
        record = gated.records.get("precision")
        if record is not None:
            log(
                f"  accuracy vs fp32: {record['metric']} mean {record['mean']:.6f} min {record['min']:.6f} "
                f"({record['samples']} samples)"
            )
    made = make()
    served = gate_all(spec, made.checks, labels)
    return made, tuple(
        Gated({**graph.records, **artifact.records}) for graph, artifact in zip(judged, served, strict=True)
    )
