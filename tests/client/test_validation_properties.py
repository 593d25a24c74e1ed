"""Property: the client's request validation (``ModelSpec.prepare``, ``check_outputs``) on any input
mapping either accepts it or raises one ``TritonKitError`` line; never another exception. The spec is
built from a hand-made description, as a client builds it from the server's metadata and config."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tritonkit.client.spec import ModelSpec
from tritonkit.config import TensorSpec
from tritonkit.errors import TritonKitError

BATCHING = ModelSpec.describe(
    "m",
    "1",
    8,
    [
        TensorSpec("TEXT", "BYTES", (-1, 1)),
        TensorSpec("IDS", "INT64", (-1, 4)),
        TensorSpec("X", "FP32", (-1, -1)),
    ],
    [TensorSpec("EMBEDDING", "FP32", (-1, 3))],
)
PLAIN = ModelSpec.describe(
    "p",
    "2",
    0,
    [TensorSpec("IMG", "UINT8", (2, 3)), TensorSpec("S", "BYTES", (-1,))],
    [TensorSpec("Y", "FP16", (2,))],
)

NAMES = st.sampled_from(["TEXT", "IDS", "X", "IMG", "S", "bogus", ""]) | st.text(max_size=4)
DTYPES = st.sampled_from(
    ["int64", "int32", "float32", "float64", "uint8", "bool", "float16", "U4", "S3", "O"]
)
ELEMENTS = (
    st.none() | st.text(max_size=6) | st.binary(max_size=6) | st.integers() | st.floats() | st.booleans()
)


@st.composite
def arrays(draw: st.DrawFn) -> Any:
    dtype = np.dtype(draw(DTYPES))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=9))
    if dtype.kind == "O":
        return np.array(
            draw(st.lists(ELEMENTS, min_size=1, max_size=1)) * int(np.prod(shape)), dtype=object
        ).reshape(shape)
    return draw(hnp.arrays(dtype, shape))


VALUES = st.one_of(
    arrays(),
    ELEMENTS,
    st.recursive(st.lists(ELEMENTS, max_size=4), lambda inner: st.lists(inner, max_size=3), max_leaves=12),
    st.tuples(ELEMENTS, ELEMENTS),
    st.dictionaries(st.text(max_size=3), ELEMENTS, max_size=2),
)
INPUTS = st.dictionaries(NAMES, VALUES, max_size=4) | st.lists(ELEMENTS, max_size=2) | ELEMENTS


def _accepted_or_one_line(spec: ModelSpec, inputs: Any, safe_cast: bool) -> None:
    try:
        prepared, batch = spec.prepare(inputs, safe_cast=safe_cast)
    except TritonKitError as error:
        assert str(error) and "\n" not in str(error), repr(str(error))
        return
    assert {name for name, _, _ in prepared} == set(inputs)
    assert batch == (0 if spec.max_batch_size == 0 else prepared[0][2].shape[0])


@settings(max_examples=150, deadline=None)
@given(INPUTS, st.booleans())
def test_batching_model_accepts_or_one_line_error(inputs: Any, safe_cast: bool) -> None:
    _accepted_or_one_line(BATCHING, inputs, safe_cast)


@settings(max_examples=150, deadline=None)
@given(INPUTS, st.booleans())
def test_non_batching_model_accepts_or_one_line_error(inputs: Any, safe_cast: bool) -> None:
    _accepted_or_one_line(PLAIN, inputs, safe_cast)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=8) | st.sampled_from(["EMBEDDING", "Y"]), max_size=3))
def test_output_names_accepted_or_one_line_error(names: list[str]) -> None:
    for spec in (BATCHING, PLAIN):
        try:
            assert spec.check_outputs(names) == tuple(names)
        except TritonKitError as error:
            assert str(error) and "\n" not in str(error), repr(str(error))
