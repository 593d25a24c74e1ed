"""The accuracy gate: a converted model against its FP32 reference on held-out inputs.

Two views of the same run: Polygraphy's comparator (``Comparator.run`` over two ``OnnxrtRunner``s,
``SimpleCompareFunc`` element-wise statistics per output) and a task metric over the gated output
(cosine similarity per sample for embeddings, top-1 agreement for classifiers). The task metric
decides; the element-wise statistics go into ``build.json`` next to it. A failing gate raises
:class:`AccuracyError` naming the worst samples, before anything is written. A gate whose FP32
reference answers every sample alike (one class, constant embeddings) passes only trivially: its
result carries a ``warning`` (printed by ``tritonkit build``, kept in ``build.json``). Both models'
sessions run in the build's worker (:mod:`tritonkit.convert.isolate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tritonkit.convert import isolate
from tritonkit.convert.inputs.data import Feeds
from tritonkit.errors import AccuracyError, SpecError

__all__ = [
    "METRICS",
    "Thresholds",
    "compare_engine",
    "compare_models",
    "cosine_rows",
    "degenerate",
    "describe",
    "gate",
    "top1_agreement",
]

METRICS = ("cosine", "top1")


@dataclass(frozen=True)
class Thresholds:
    """Pass marks for one precision: ``mean`` (average over samples) and ``min`` (worst sample).

    For ``top1`` only ``mean``, the agreement rate, is used: each sample agrees or not.
    """

    metric: str = "cosine"
    mean: float = 0.99
    min: float = 0.0

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise SpecError(f"accuracy `metric` must be one of {', '.join(METRICS)}; got {self.metric!r}")


def cosine_rows(candidate: NDArray[Any], reference: NDArray[Any]) -> NDArray[Any]:
    """Cosine similarity per sample (row) after flattening all non-batch axes.

    Two all-zero rows agree (1.0: torchvision's ViT zero-initialises its head, so a random-weight
    ViT answers zeros in every precision); one zero row against a non-zero one scores 0. A row with
    NaN or inf scores NaN (:func:`gate` names it)."""
    a = candidate.reshape(candidate.shape[0], -1).astype(np.float64)
    b = reference.reshape(reference.shape[0], -1).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        norm_a, norm_b = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
        scores = np.sum(a * b, axis=1) / np.maximum(norm_a * norm_b, 1e-30)
    finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    scores = np.where(finite, scores, np.nan)
    return np.asarray(np.where(finite & (norm_a == 0) & (norm_b == 0), 1.0, scores))


def _non_finite(
    model_name: str, precision: str, output: str, candidate: NDArray[Any], reference: NDArray[Any]
) -> None:
    """AccuracyError when either side answers NaN or inf: no score means anything then."""
    for side, values in (("the fp32 reference", reference), (f"`{model_name}` ({precision})", candidate)):
        rows = values.reshape(values.shape[0], -1)
        bad = ~np.isfinite(rows).all(axis=1)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            kinds = "/".join(k for k, f in (("NaN", np.isnan), ("inf", np.isinf)) if f(rows[bad]).any())
            hint = (
                " (float16 overflow? `fp16.op_block_list` keeps op types in float32)"
                if side != "the fp32 reference" and precision != "fp32"
                else ""
            )
            raise AccuracyError(
                f"accuracy gate failed for `{model_name}` ({precision}): {side} answers {kinds} in "
                f"`{output}` on {int(bad.sum())} of {rows.shape[0]} held-out samples (first: `{output}`[{first}])"
                f"{hint}; expected finite outputs; nothing was written"
            )


def top1_agreement(candidate: NDArray[Any], reference: NDArray[Any]) -> NDArray[Any]:
    """1.0 where both pick the same class (argmax of the last axis), else 0.0, per sample."""
    return np.asarray(
        candidate.reshape(candidate.shape[0], -1).argmax(1)
        == reference.reshape(reference.shape[0], -1).argmax(1)
    ).astype(np.float64)


def compare_models(
    reference: str | Path,
    candidate: str | Path,
    feeds: Sequence[Feeds],
    *,
    output: str | None = None,
    atol: float = 1e-2,
    rtol: float = 1e-2,
) -> tuple[dict[str, Any], NDArray[Any], NDArray[Any]]:
    """Run both models with Polygraphy on ``feeds``; return (comparator stats, candidate, reference).

    The two arrays are the gated output (``output`` or the first one) concatenated over all batches.
    The sessions run in the build's worker (:mod:`tritonkit.convert.isolate`), as the step
    ``<candidate file stem> accuracy gate`` (``fp16 accuracy gate``).
    """
    return isolate.run(
        f"{Path(candidate).stem} accuracy gate",
        _compare_models,
        Path(reference),
        Path(candidate),
        list(feeds),
        output,
        atol,
        rtol,
    )


def _compare_models(
    reference: Path,
    candidate: Path,
    feeds: list[Feeds],
    output: str | None,
    atol: float,
    rtol: float,
) -> tuple[dict[str, Any], NDArray[Any], NDArray[Any]]:
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)
    from polygraphy.comparator import Comparator, SimpleCompareFunc  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)
    from polygraphy.logger import G_LOGGER  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)

    runners = [
        OnnxrtRunner(SessionFromOnnx(str(reference), providers=["cpu"]), name="fp32"),
        OnnxrtRunner(SessionFromOnnx(str(candidate), providers=["cpu"]), name="candidate"),
    ]
    # The gate reports in its own words; Polygraphy's per-iteration log lines would only repeat it.
    with G_LOGGER.verbosity(G_LOGGER.CRITICAL):
        results = Comparator.run(runners, data_loader=list(feeds))
        verdict = Comparator.compare_accuracy(results, compare_func=SimpleCompareFunc(atol=atol, rtol=rtol))
    ref_iters = dict(results)["fp32"]
    cand_iters = dict(results)["candidate"]
    name = output or next(iter(ref_iters[0].keys()))
    if name not in ref_iters[0]:
        raise SpecError(
            f"accuracy `output` {name!r} is not an output of the model; got {sorted(ref_iters[0])}"
        )
    stats: dict[str, Any] = {}
    # Polygraphy <= 0.49 returns one AccuracyResult; newer releases a list, one per compare function.
    groups = [verdict] if hasattr(verdict, "values") else list(verdict)
    for per_iteration in (its for group in groups for its in group.values()):
        for iteration in per_iteration:
            for out_name, res in iteration.items():
                entry = stats.setdefault(
                    out_name, {"max_absdiff": 0.0, "mean_absdiff": 0.0, "passed": True, "iterations": 0}
                )
                entry["max_absdiff"] = max(entry["max_absdiff"], float(np.max(res.max_absdiff)))
                entry["mean_absdiff"] += float(np.mean(res.mean_absdiff))
                entry["passed"] = entry["passed"] and bool(res)
                entry["iterations"] += 1
    for entry in stats.values():
        entry["mean_absdiff"] /= max(entry.pop("iterations"), 1)
        entry.update(atol=atol, rtol=rtol)
    cand = np.concatenate([np.asarray(it[name]) for it in cand_iters])
    ref = np.concatenate([np.asarray(it[name]) for it in ref_iters])
    return {"output": name, "polygraphy": stats}, cand, ref


def compare_engine(
    reference: str | Path,
    plan_file: str | Path,
    feeds: Sequence[Feeds],
    profiles: Sequence[int],
    *,
    output: str | None = None,
    input_dtypes: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], NDArray[Any], NDArray[Any]]:  # pragma: no cover - needs TensorRT
    """Run a TensorRT engine and the FP32 ONNX reference on ``feeds``, batch ``i`` on optimization
    profile ``profiles[i]`` (:func:`tritonkit.convert.targets.tensorrt.evaluation_profiles`): a ``TrtRunner``
    left on profile 0 fails every batch outside profile 0's range. ``input_dtypes`` (numpy dtypes by
    input name) are the engine's own, which may differ from the ONNX's (INT32 for INT64 on 8.6).
    Runs in the build's worker, as the step ``<plan stem> engine accuracy gate``."""
    return isolate.run(
        f"{Path(plan_file).stem} engine accuracy gate",
        _compare_engine,
        Path(reference),
        Path(plan_file),
        list(feeds),
        list(profiles),
        output,
        dict(input_dtypes or {}),
    )


def _compare_engine(
    reference: Path,
    plan_file: Path,
    feeds: list[Feeds],
    profiles: list[int],
    output: str | None,
    input_dtypes: dict[str, Any],
) -> tuple[dict[str, Any], NDArray[Any], NDArray[Any]]:  # pragma: no cover - needs TensorRT
    from polygraphy.backend.common import BytesFromPath  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)
    from polygraphy.logger import G_LOGGER  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)

    if len(profiles) != len(feeds):
        raise ValueError(f"one profile per batch expected: {len(feeds)} batches, {len(profiles)} profiles")
    engine = EngineFromBytes(BytesFromPath(str(plan_file)))()
    trt_out: list[dict[str, Any]] = [{} for _ in feeds]
    ref_out: list[dict[str, Any]] = []
    with G_LOGGER.verbosity(G_LOGGER.CRITICAL):
        with OnnxrtRunner(SessionFromOnnx(str(reference), providers=["cpu"])) as ort:
            ref_out = [dict(ort.infer(dict(feed))) for feed in feeds]
        for index in sorted(set(profiles)):
            with TrtRunner(engine, optimization_profile=index) as runner:
                for i, feed in enumerate(feeds):
                    if profiles[i] == index:
                        cast = {
                            k: np.asarray(v, dtype=(input_dtypes or {}).get(k, np.asarray(v).dtype))
                            for k, v in feed.items()
                        }
                        trt_out[i] = {k: np.array(v) for k, v in runner.infer(cast).items()}
    name = output or next(iter(ref_out[0].keys()))
    cand = np.concatenate([np.asarray(it[name], dtype=np.float32) for it in trt_out])
    ref = np.concatenate([np.asarray(it[name]) for it in ref_out])
    return {"output": name, "profiles": sorted(set(profiles))}, cand, ref


def degenerate(reference: NDArray[Any], metric: str) -> str | None:
    """Why a gate on these FP32 ``reference`` outputs would pass trivially (None: it would not):
    every sample gets the same answer (constant outputs), or, for top-1, the same class."""
    if reference.shape[0] < 2:
        return None
    rows = reference.reshape(reference.shape[0], -1).astype(np.float64)
    scale = max(float(np.abs(rows).max()), 1e-30)
    what = "constant weights, random BatchNorm statistics or noise as data?"
    if float(np.abs(rows).max()) == 0:
        what = "a zero-initialised output layer, as torchvision's ViT has?"
    if float(np.abs(rows - rows[0]).max()) <= 1e-5 * scale:
        return (
            f"the fp32 reference gives the same output for all {rows.shape[0]} evaluation samples, "
            f"so agreement with it proves nothing ({what})"
        )
    if metric == "top1":
        classes = np.unique(rows.argmax(1))
        if classes.size == 1:
            return (
                f"the fp32 reference picks class {int(classes[0])} for all {rows.shape[0]} evaluation "
                f"samples, so top-1 agreement proves nothing ({what})"
            )
    return None


def _flipped(
    candidate: NDArray[Any],
    reference: NDArray[Any],
    precision: str,
    output: str,
    labels: Sequence[str] | None,
    worst: int,
) -> str:
    """The samples whose top-1 class differs, most moved logits first, each with both classes."""
    cand = candidate.reshape(candidate.shape[0], -1)
    ref = reference.reshape(reference.shape[0], -1)
    picked, wanted = cand.argmax(1), ref.argmax(1)
    flipped = np.flatnonzero(picked != wanted)
    order = flipped[np.argsort(cosine_rows(candidate[flipped], reference[flipped]))][:worst]
    named = []
    for i in order:
        label = f" {labels[i][:40]!r}" if labels is not None and i < len(labels) else ""
        named.append(
            f"`{output}`[{int(i)}]{label} fp32 class {int(wanted[i])}, {precision} class {int(picked[i])}"
        )
    more = f" (and {flipped.size - len(named)} more)" if flipped.size > len(named) else ""
    return "; ".join(named) + more


def describe(record: Mapping[str, Any]) -> str:
    """A gate record in one phrase: ``top-1 agreement 0.992188, 1 of 128 flipped (pass mark 0.99)`` or
    ``cosine mean 0.999990 min 0.999812 on 128 samples (pass marks 0.999 / 0.99)``."""
    marks = record.get("thresholds", {})
    if record.get("metric") == "top1":
        flipped = record.get("flipped", round((1 - float(record["mean"])) * int(record["samples"])))
        return (
            f"top-1 agreement {record['mean']:.6f}, {flipped} of {record['samples']} flipped "
            f"(pass mark {marks.get('mean')})"
        )
    return (
        f"cosine mean {record['mean']:.6f} min {record['min']:.6f} on {record['samples']} samples "
        f"(pass marks {marks.get('mean')} / {marks.get('min')})"
    )


def gate(
    model_name: str,
    precision: str,
    candidate: NDArray[Any],
    reference: NDArray[Any],
    thresholds: Thresholds,
    *,
    output: str = "output",
    labels: Sequence[str] | None = None,
    worst: int = 3,
    runtime: str = "onnxruntime-cpu",
) -> dict[str, Any]:
    """Score ``candidate`` against ``reference``; AccuracyError naming the worst samples if below.

    Cosine: the mean and the worst sample against ``mean`` and ``min``; the worst outputs named are the
    lowest-cosine rows. Top-1: the agreement rate against ``mean`` (each sample agrees or not, so no
    ``min``) and the count of flipped samples; the samples named are the ones that flipped, with the
    reference's class and the candidate's. ``runtime`` names what produced ``candidate``
    (``onnxruntime-cpu``, ``tensorrt``) for ``build.json``.
    """
    _non_finite(model_name, precision, output, candidate, reference)
    top1 = thresholds.metric == "top1"
    scores = top1_agreement(candidate, reference) if top1 else cosine_rows(candidate, reference)
    mean, samples = float(scores.mean()), int(scores.shape[0])
    result: dict[str, Any] = {"metric": thresholds.metric, "precision": precision, "samples": samples}
    result["mean"] = round(mean, 6)
    if top1:
        result["flipped"] = int(samples - int(scores.sum()))
        result["thresholds"] = {"mean": thresholds.mean}
        result["cosine_mean"] = round(float(cosine_rows(candidate, reference).mean()), 6)
    else:
        result["min"] = round(float(scores.min()), 6)
        result["thresholds"] = {"mean": thresholds.mean, "min": thresholds.min}
    result["runtime"] = runtime
    trivial = degenerate(reference, thresholds.metric)
    if trivial is not None:
        result["warning"] = f"`{model_name}` ({precision}) gate: {trivial}"
    failures = []
    if top1 and not mean >= thresholds.mean:
        failures.append(
            f"top-1 agreement {mean:.4f} < {thresholds.mean} ({result['flipped']} of {samples} held-out "
            "samples flipped)"
        )
    elif not top1:
        if not mean >= thresholds.mean:  # NaN never passes
            failures.append(f"mean cosine {mean:.4f} < {thresholds.mean}")
        if not result["min"] >= thresholds.min:
            failures.append(f"min cosine {float(scores.min()):.4f} < {thresholds.min}")
    result["passed"] = not failures
    if failures:
        if top1:
            named = f"; flipped samples: {_flipped(candidate, reference, precision, output, labels, worst)}"
        else:
            rows = []
            for i in np.argsort(scores)[:worst]:
                label = f" {labels[i][:40]!r}" if labels is not None and i < len(labels) else ""
                rows.append(f"`{output}`[{int(i)}]{label} cos {scores[i]:.4f}")
            named = f" on {samples} held-out samples; worst outputs: {'; '.join(rows)}"
        raise AccuracyError(
            f"accuracy gate failed for `{model_name}` ({precision}): {', '.join(failures)}{named}; "
            "nothing was written"
        )
    return result
