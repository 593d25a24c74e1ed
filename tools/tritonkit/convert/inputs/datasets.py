"""The calibration and held-out evaluation sets of one build (:class:`Datasets`), made from the
spec's ``calibration`` and ``evaluation`` sections: bundled text, seeded synthetic images, or the
seeded random samples shaped like the inputs (:mod:`tritonkit.convert.inputs.seeded_data`: what the default
``auto`` means for each model), or the user's ``.txt``/``.npz`` files (loaders in :mod:`tritonkit.convert.inputs.data`), batched to what the model
takes. Evaluation samples never appear in the calibration set (text: dropped from it; arrays: refused
by :mod:`tritonkit.convert.inputs.preflight` before the build starts). A file the preflight read is not
read again: it hands its arrays on (:class:`ReadArrays`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.graph.source import Source
from tritonkit.convert.inputs import data, seeded_data
from tritonkit.convert.spec import options
from tritonkit.convert.spec.buildspec import BuildSpec
from tritonkit.errors import CalibrationError, SpecError

__all__ = ["Datasets", "ReadArrays", "fixed_batch", "prepare_data"]


@dataclass
class Datasets:
    calibration: list[data.Feeds] = field(default_factory=list)
    evaluation: list[data.Feeds] = field(default_factory=list)
    labels: list[str] | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadArrays:
    """A data file as the preflight read it, handed on so that the datasets step does not read it
    again: its arrays as the file holds them and, where the preflight knew the model's inputs, the
    arrays fitted to those inputs with the fit's notes."""

    path: Path
    arrays: dict[str, NDArray[Any]]
    inputs: tuple[TensorSpec, ...] | None = None
    fitted: dict[str, NDArray[Any]] | None = None
    notes: tuple[str, ...] = ()

    def fit(self, inputs: Sequence[TensorSpec], section: str) -> tuple[dict[str, NDArray[Any]], list[str]]:
        """The arrays fitted to ``inputs`` (:func:`tritonkit.convert.inputs.data.fit_arrays`): the
        preflight's fit where it fitted them to the same inputs, else fitted now from the arrays read."""
        if self.fitted is not None and self.inputs == tuple(inputs):
            return dict(self.fitted), list(self.notes)
        return data.fit_arrays(self.arrays, inputs, self.path, section)


def _text_sets(spec: BuildSpec) -> tuple[list[str], list[str], dict[str, Any]]:
    cal_spec, ev_spec = (
        replace(s, data=seeded_data.resolve(s.data, True, None)) for s in (spec.calibration, spec.evaluation)
    )
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


def fixed_batch(inputs: Sequence[TensorSpec]) -> int | None:
    """N when the model's first axis is fixed at N on every input (feeds must hold exactly N), else None."""
    sizes = {t.shape[0] if t.shape else -1 for t in inputs}
    return sizes.pop() if len(sizes) == 1 and min(sizes) > 0 else None


def _array_set(
    spec: BuildSpec, section: str, source: Source, seed: int, read: Mapping[str, ReadArrays]
) -> tuple[dict[str, Any], list[str]]:
    ds = getattr(spec, section)
    kind = seeded_data.resolve(ds.data, False, source.graph.inputs, section)
    if kind == options.RANDOM:
        examples = source.torch.example_inputs if source.torch is not None else None
        return seeded_data.random_samples(ds.samples, source.graph.inputs, examples, seed, section), []
    if kind == "synthetic":
        if source.image_shape is None or len(source.input_names) != 1:
            raise SpecError(f"spec key `{section}.data`: `synthetic` needs a single image input (N, C, H, W)")
        return {source.input_names[0]: data.synthetic_images(ds.samples, source.image_shape, seed)}, []
    if kind == "pydoc":
        raise SpecError(f"spec key `{section}.data`: `pydoc` text needs `preprocessing.kind: text`")
    path = spec.resolve(ds.data)
    handed = read.get(section)
    if handed is not None and handed.path == path:
        arrays, notes = handed.fit(source.graph.inputs, section)
    else:
        arrays, notes = data.fit_arrays(data.read_arrays(path, section), source.graph.inputs, path, section)
    return {k: v[: ds.samples] for k, v in arrays.items()}, notes


def _batch(arrays: dict[str, Any], size: int, fixed: int | None) -> tuple[list[data.Feeds], int]:
    """Feeds of ``size`` samples, or of exactly ``fixed`` (a model whose first axis is fixed):
    (feeds, samples left out to fill whole batches)."""
    if not arrays:
        return [], 0
    if fixed is None:
        return data.batch_arrays(arrays, size), 0
    count = next(iter(arrays.values())).shape[0]
    whole = count - count % fixed
    return data.batch_arrays({k: v[:whole] for k, v in arrays.items()}, fixed), count - whole


def prepare_data(
    spec: BuildSpec, source: Source, needs_calibration: bool, read: Mapping[str, ReadArrays] | None = None
) -> Datasets:
    """Load, split, check and batch the sets; CalibrationError when there are too few samples.

    A model whose first axis is fixed at N (``light_resnet50``: 1) gets feeds of exactly N samples,
    whatever ``evaluation.batch_size``/``calibration.batch_size`` say (recorded in ``details``).
    ``read``: the files the preflight read, by section (``Checked.arrays``), used instead of reading
    them again.
    """
    read = read or {}
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
    cal_arrays, cal_notes = (
        _array_set(spec, "calibration", source, 1, read) if needs_calibration else ({}, [])
    )
    ev_arrays, ev_notes = _array_set(spec, "evaluation", source, 2, read)
    fixed = fixed_batch(source.graph.inputs)
    calibration, cal_dropped = _batch(cal_arrays, spec.calibration.batch_size, fixed)
    evaluation, ev_dropped = _batch(ev_arrays, spec.evaluation.batch_size, fixed)
    count = sum(next(iter(f.values())).shape[0] for f in calibration)
    if needs_calibration and count < spec.calibration.min_samples:
        raise CalibrationError(
            f"too few calibration samples: expected at least {spec.calibration.min_samples}, got {count}"
        )
    if not evaluation:
        raise CalibrationError(
            f"no evaluation batch: the model takes exactly {fixed} samples per batch; got "
            f"{ev_dropped} evaluation samples"
        )
    inputs = source.graph.inputs
    record: dict[str, Any] = {
        "calibration": seeded_data.resolve(spec.calibration.data, False, inputs, "calibration")
        if needs_calibration
        else spec.calibration.data,
        "evaluation": seeded_data.resolve(spec.evaluation.data, False, inputs),
        "calibration_samples": count,
        "evaluation_samples": sum(next(iter(f.values())).shape[0] for f in evaluation),
    }
    if fixed is not None:
        record["fixed_batch"] = {"batch_size": fixed, "samples_left_out": cal_dropped + ev_dropped}
    if cal_notes or ev_notes:
        record["notes"] = cal_notes + ev_notes
    return Datasets(calibration, evaluation, None, record)
