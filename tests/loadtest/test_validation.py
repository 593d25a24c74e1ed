"""Answer validation: names, dtypes, shapes, byte counts, finite values (pure NumPy)."""

from __future__ import annotations

import numpy as np

from tritonkit.config.dtypes import triton_to_numpy
from tritonkit.loadtest.validation import OutputCheck, check_outputs

CHECKS = [OutputCheck("Y", "FP32", (2, -1))]


def _raw(array: np.ndarray) -> bytes:
    return array.astype(np.float32).tobytes()


def test_right_answer_passes() -> None:
    assert check_outputs(CHECKS, {"Y": ("FP32", (2, 3), _raw(np.ones((2, 3))))}) is None
    assert check_outputs(CHECKS, {"Y": ("FP32", (2, 5), np.zeros((2, 5), np.float32))}) is None


def test_wrong_answers_name_expected_and_given() -> None:
    cases = {
        "wrong outputs": {"Z": ("FP32", (2, 3), _raw(np.ones((2, 3))))},
        "datatype FP16, expected FP32": {"Y": ("FP16", (2, 3), b"\0" * 12)},
        "shape [3, 3], expected [2, -1]": {"Y": ("FP32", (3, 3), _raw(np.ones((3, 3))))},
        "carries 8 bytes, expected 24": {"Y": ("FP32", (2, 3), b"\0" * 8)},
        "1 non-finite values": {"Y": ("FP32", (2, 3), _raw(np.array([[1, 2, np.nan], [1, 1, 1]])))},
    }
    for expected, got in cases.items():
        problem = check_outputs(CHECKS, got)
        assert problem is not None and expected in problem, (expected, problem)


def test_overflowing_sum_of_finite_values_is_not_a_failure() -> None:
    big = np.full((2, 3), 6e4, dtype=np.float16)  # the float16 sum overflows, every value is finite
    assert check_outputs([OutputCheck("Y", "FP16", (2, 3))], {"Y": ("FP16", (2, 3), big.tobytes())}) is None


def test_bf16_answers_are_size_and_finiteness_checked() -> None:
    # BF16 comes from the one dtype table too (ml_dtypes.bfloat16, 2 bytes), so a BF16 answer gets the
    # byte-count and NaN/inf checks every other float type gets instead of passing unchecked.
    bf16 = triton_to_numpy("BF16")
    check = [OutputCheck("Y", "BF16", (2, 3))]
    good = np.ones((2, 3), dtype=bf16).tobytes()
    assert len(good) == 12
    assert check_outputs(check, {"Y": ("BF16", (2, 3), good)}) is None
    short = check_outputs(check, {"Y": ("BF16", (2, 3), good[:8])})
    assert short is not None and "carries 8 bytes, expected 12 for shape [2, 3] BF16" in short
    bad = np.array([[1, 2, np.inf], [np.nan, 1, 1]], dtype=np.float32).astype(bf16).tobytes()
    problem = check_outputs(check, {"Y": ("BF16", (2, 3), bad)})
    assert problem is not None and "2 non-finite values" in problem
    as_array = np.array([[1, np.nan, 1], [1, 1, 1]], dtype=np.float32).astype(bf16)
    problem = check_outputs(check, {"Y": ("BF16", (2, 3), as_array)})
    assert problem is not None and "1 non-finite values" in problem
