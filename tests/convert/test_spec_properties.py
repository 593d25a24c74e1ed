"""Property: ``parse_spec`` on any YAML-shaped value (nested mappings, lists, scalars) gives a
BuildSpec or one ``TritonKitError`` line; never another exception."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tritonkit.convert.spec.buildspec import parse_spec
from tritonkit.errors import TritonKitError

# Real key names make the generator reach the nested dataclasses, not stop at "unknown key".
KEYS = st.sampled_from(
    [
        "name",
        "source",
        "onnx",
        "flagship",
        "torch",
        "precisions",
        "target",
        "batching",
        "queue",
        "max_size",
        "timeout_us",
        "priority_levels",
        "default_priority_level",
        "max_batch_size",
        "memory_fraction",
        "int8",
        "method",
        "calibration",
        "evaluation",
        "samples",
        "batch_size",
        "instances",
        "count",
        "kind",
        "preprocessing",
        "max_seq_length",
        "gpu",
        "tensorrt",
        "accuracy",
    ]
) | st.text(max_size=8)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(
        ["fp32", "fp16", "int8", "bf16", "portable", "tensorrt", "auto", "m", "m.onnx", "minmax"]
    )
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=20,
)


def _near_valid(extra: dict[str, Any]) -> dict[str, Any]:
    return {"name": "m", "source": {"onnx": "m.onnx"}, **extra}


def _one_line_or_spec(data: Any) -> None:
    try:
        parse_spec(data)
    except TritonKitError as error:
        message = str(error)
        assert message and "\n" not in message, repr(message)


@settings(max_examples=150, deadline=None)
@given(VALUES)
def test_any_value_is_a_spec_or_one_line_error(data: Any) -> None:
    _one_line_or_spec(data)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=4))
def test_valid_base_with_arbitrary_keys_is_a_spec_or_one_line_error(extra: dict[str, Any]) -> None:
    _one_line_or_spec(_near_valid(extra))
