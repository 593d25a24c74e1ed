"""Answer validation: names, dtypes, shapes, finite values of decoded answers (pure NumPy).

Bytes that do not hold an output's shape never get here: the client's codec refuses them while
decoding (tests/client/test_codec.py).
"""

from __future__ import annotations

import numpy as np

from tritonkit.config.dtypes import triton_to_numpy
from tritonkit.measure.validation import OutputCheck, check_outputs

CHECKS = [OutputCheck("Y", "FP32", (2, -1))]


def test_right_answer_passes() -> None:
    assert check_outputs(CHECKS, {"Y": np.ones((2, 3), np.float32)}) is None
    assert check_outputs(CHECKS, {"Y": np.zeros((2, 5), np.float32)}) is None
    assert check_outputs([OutputCheck("S", "BYTES", (1,))], {"S": np.array([b"x"], object)}) is None


def test_wrong_answers_name_expected_and_given() -> None:
    cases = {
        "wrong outputs": {"Z": np.ones((2, 3), np.float32)},
        "datatype FP16, expected FP32": {"Y": np.zeros((2, 3), np.float16)},
        "datatype BYTES, expected FP32": {"Y": np.array([[b"a"], [b"b"]], object)},
        "shape [3, 3], expected [2, -1]": {"Y": np.ones((3, 3), np.float32)},
        "1 non-finite values": {"Y": np.array([[1, 2, np.nan], [1, 1, 1]], np.float32)},
    }
    for expected, got in cases.items():
        problem = check_outputs(CHECKS, got)
        assert problem is not None and expected in problem, (expected, problem)


def test_overflowing_sum_of_finite_values_is_not_a_failure() -> None:
    big = np.full((2, 3), 6e4, dtype=np.float16)  # the float16 sum overflows, every value is finite
    assert check_outputs([OutputCheck("Y", "FP16", (2, 3))], {"Y": big}) is None
    large = np.full((100, 100), 6e4, dtype=np.float16)  # above 4096 values: the one-reduction path
    assert check_outputs([OutputCheck("Y", "FP16", (100, 100))], {"Y": large}) is None


def test_bf16_answers_are_finiteness_checked() -> None:
    # BF16 comes from the one dtype table too (ml_dtypes.bfloat16), so a BF16 answer gets the NaN/inf
    # checks every other float type gets instead of passing unchecked.
    bf16 = triton_to_numpy("BF16")
    check = [OutputCheck("Y", "BF16", (2, 3))]
    assert check_outputs(check, {"Y": np.ones((2, 3), dtype=bf16)}) is None
    bad = np.array([[1, 2, np.inf], [np.nan, 1, 1]], dtype=np.float32).astype(bf16)
    problem = check_outputs(check, {"Y": bad})
    assert problem is not None and "2 non-finite values" in problem
