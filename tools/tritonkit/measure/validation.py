"""Response validation shared by every load-test user: output names, dtypes, shapes, finite values.

:class:`OutputCheck` is also what a payload expects back (:mod:`.payloads`).

A load test that counts wrong answers as successes measures nothing, so each response is checked
against what the model's metadata promises before it is reported. The checks work on decoded
answers (``{name: array}``): the ``lean`` HTTP and the ``wire`` gRPC users decode theirs with the
client's codec (:mod:`tritonkit.client.codec`, which also refuses bytes that do not hold the declared
shape), the ``tritonclient`` HTTP user with tritonclient's ``as_numpy``. Pure NumPy, no gevent, no gRPC.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tritonkit.config.dtypes import FLOAT_DTYPES, NUMPY_DTYPES

__all__ = ["OutputCheck", "check_outputs", "dtype_of"]


def dtype_of(triton_dtype: str) -> np.dtype[Any] | None:
    """NumPy dtype of a Triton data type (``None`` for BYTES, whose elements are length-prefixed)."""
    return NUMPY_DTYPES.get(triton_dtype)


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    """What one output must look like: ``-1`` in ``shape`` accepts any size on that axis."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_json(self) -> list[object]:
        return [self.name, self.datatype, list(self.shape)]

    @classmethod
    def from_json(cls, item: Sequence[object]) -> OutputCheck:
        name, datatype, shape = item
        assert isinstance(shape, list)
        return cls(str(name), str(datatype), tuple(int(d) for d in shape))


def _shape_ok(expected: Sequence[int], got: Sequence[int]) -> bool:
    return len(expected) == len(got) and all(e in (-1, g) for e, g in zip(expected, got, strict=True))


#: NumPy dtype -> Triton datatype of a decoded output (BYTES arrive as object arrays)
_DATATYPES: dict[np.dtype[Any], str] = {dtype: name for name, dtype in NUMPY_DTYPES.items()}
_DATATYPES[np.dtype(object)] = "BYTES"


def check_outputs(expected: Sequence[OutputCheck], got: Mapping[str, NDArray[Any]]) -> str | None:
    """``None`` when ``got`` (the decoded answer: output name → array) is a right answer, else why not.

    The reason reads "expected ..., got ..." so it can be the text of a Locust failure.
    """
    if len(got) != len(expected) or any(check.name not in got for check in expected):
        return f"wrong outputs: expected {sorted(c.name for c in expected)}, got {sorted(got)}"
    for check in expected:
        array = got[check.name]
        datatype = _DATATYPES.get(array.dtype)
        if datatype != check.datatype:
            return f"output `{check.name}` has datatype {datatype or array.dtype}, expected {check.datatype}"
        shape = array.shape
        if shape != check.shape and not _shape_ok(check.shape, shape):  # equal: one compare in C
            return f"output `{check.name}` has shape {list(shape)}, expected {list(check.shape)}"
        if datatype not in FLOAT_DTYPES:
            continue
        if array.size <= 4096:  # small answers: the exact test is cheapest
            finite = bool(np.isfinite(array).all())
        else:
            # One reduction answers "all finite?" for almost every large answer; the exact (costlier)
            # test runs only when the sum is not finite, which may also be an overflow of finite values.
            with np.errstate(all="ignore"):
                finite = math.isfinite(float(array.sum(dtype=np.float64))) or bool(np.isfinite(array).all())
        if not finite:
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            return f"output `{check.name}` has {bad} non-finite values, expected all finite"
    return None
