"""The calibration and held-out evaluation sets of one build (:class:`Datasets`), made from the
spec's ``calibration`` and ``evaluation`` sections: bundled text, seeded synthetic images, or the
user's ``.txt``/``.npz`` files (loaders in :mod:`tritonkit.convert.data`). Evaluation samples never
appear in the calibration set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonkit.convert import data
from tritonkit.convert.buildspec import BuildSpec
from tritonkit.convert.source import Source
from tritonkit.errors import CalibrationError, SpecError

__all__ = ["Datasets", "prepare_data"]


@dataclass
class Datasets:
    calibration: list[data.Feeds] = field(default_factory=list)
    evaluation: list[data.Feeds] = field(default_factory=list)
    labels: list[str] | None = None
    details: dict[str, Any] = field(default_factory=dict)


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
    graph = {t.name: t for t in source.graph.inputs}
    for name, value in arrays.items():
        dims = graph[name].shape
        if value.ndim != len(dims) or any(
            d > 0 and d != s for d, s in zip(dims[1:], value.shape[1:], strict=False)
        ):
            raise CalibrationError(
                f"{section} array `{name}` has shape {list(value.shape)}; the model expects {list(dims)} (-1: any)"
            )


def prepare_data(spec: BuildSpec, source: Source, needs_calibration: bool) -> Datasets:
    """Load, split, check and batch the sets; CalibrationError when there are too few samples."""
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
