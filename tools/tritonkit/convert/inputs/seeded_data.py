"""The built-in data sets of a build spec's ``calibration.data`` / ``evaluation.data`` and which one
``auto`` (the default) means for a model:

- ``pydoc``: CPython's bundled English text, for ``preprocessing.kind: text`` models;
- ``synthetic``: seeded image-like FP32 arrays, for a model with one (N, C, H, W) floating input;
- ``random``: seeded samples shaped like the model's inputs (:func:`random_samples`): floating inputs
  standard normal, integer and boolean inputs uniform within the values of the ``source.torch``
  example inputs (a token-id input stays inside the ids it was exported with), dynamic non-batch axes
  at the example's length. An ONNX model says neither, so an integer input or a dynamic non-batch axis
  there needs the user's ``.npz`` (one line says so).

``auto`` is text for text models, ``synthetic`` for one image input, ``random`` otherwise: a gate then
proves the conversion faithful on noise, not accurate on the user's data, and the build says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tritonkit.config.dtypes import triton_to_numpy
from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.spec.options import AUTO, RANDOM
from tritonkit.errors import SpecError

__all__ = ["RANDOM_NOTE", "random_samples", "resolve"]

#: the warning a build prints when a gate runs on random samples
RANDOM_NOTE = (
    "{section}.data: no data given; the gate runs on seeded random samples shaped like the model's inputs "
    "(it shows the conversion is faithful, not that the model is accurate on your data: give an .npz)"
)


def _is_image(inputs: Sequence[TensorSpec]) -> bool:
    return len(inputs) == 1 and len(inputs[0].shape) == 4 and inputs[0].datatype in ("FP32", "FP16")


def resolve(value: str, text: bool, inputs: Sequence[TensorSpec] | None, section: str = "evaluation") -> str:
    """``value`` with ``auto`` replaced by the set it means for the model (``inputs`` None: not known
    yet, ``auto`` kept). INT8 scales fitted to noise would be wrong for real traffic, so ``auto`` never
    means ``random`` for ``calibration``: SpecError in one line (``random`` said outright is taken)."""
    if value != AUTO:
        return value
    if text:
        return "pydoc"
    if inputs is None:
        return AUTO
    if _is_image(inputs):
        return "synthetic"
    if section == "calibration":
        raise SpecError(
            "spec key `calibration.data`: int8 calibration needs inputs like the model's real traffic; give "
            "an .npz file of input arrays named after the model's inputs (or `random` to calibrate on seeded noise)"
        )
    return RANDOM


def _example_arrays(examples: Sequence[Any] | None) -> list[NDArray[Any] | None]:
    out: list[NDArray[Any] | None] = []
    for tensor in examples or ():
        try:
            out.append(np.asarray(tensor.detach().cpu().numpy()))
        except (AttributeError, TypeError, RuntimeError):
            out.append(None)
    return out


def random_samples(
    count: int,
    inputs: Sequence[TensorSpec],
    examples: Sequence[Any] | None,
    seed: int,
    section: str,
) -> dict[str, NDArray[Any]]:
    """``count`` seeded samples per input (sample-major, as an ``.npz`` holds them); ``examples``: the
    ``source.torch`` example tensors in input order (None for an ONNX source). SpecError in one line for
    an input whose values or lengths the model does not say."""
    rng = np.random.default_rng(seed)
    known = _example_arrays(examples)
    out: dict[str, NDArray[Any]] = {}
    for index, spec in enumerate(inputs):
        example = known[index] if index < len(known) else None
        dims = list(spec.shape[1:])
        if any(d < 0 for d in dims):
            if example is None or example.ndim != len(spec.shape):
                raise SpecError(
                    f"spec key `{section}.data`: input `{spec.name}` has a dynamic axis {list(spec.shape)} and "
                    "no example length; give an .npz file of input arrays named after the model's inputs"
                )
            dims = [int(e) if d < 0 else d for d, e in zip(dims, example.shape[1:], strict=True)]
        dtype = np.dtype(triton_to_numpy(spec.datatype))
        shape = (count, *dims)
        if dtype.kind == "f":
            out[spec.name] = rng.standard_normal(shape).astype(dtype)
            continue
        if dtype.kind not in "iub" or example is None or example.size == 0:
            raise SpecError(
                f"spec key `{section}.data`: input `{spec.name}` is {spec.datatype} and the model does not say "
                "which values it takes; give an .npz file of input arrays named after the model's inputs"
            )
        low, high = int(example.min()), int(example.max())
        out[spec.name] = rng.integers(low, high + 1, size=shape, endpoint=False).astype(dtype)
    return out
