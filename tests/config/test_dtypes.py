"""The data-type table: short/proto names, NumPy and ONNX mappings, and errors naming the allowed set."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from tritonclient.grpc import model_config_pb2

from tritonkit.config import dtypes
from tritonkit.errors import ConfigError


def test_table_covers_every_proto_data_type() -> None:
    proto_names = {v.name for v in model_config_pb2.DataType.DESCRIPTOR.values} - {"TYPE_INVALID"}
    assert {dtypes.to_proto_dtype(d) for d in dtypes.TRITON_DTYPES} == proto_names


@pytest.mark.parametrize("name", dtypes.TRITON_DTYPES)
def test_short_and_proto_names_round_trip(name: str) -> None:
    proto = dtypes.to_proto_dtype(name)
    assert dtypes.from_proto_dtype(proto) == name
    assert dtypes.normalize_dtype(proto) == name == dtypes.normalize_dtype(name)


def test_bytes_is_type_string_in_the_proto() -> None:
    assert dtypes.to_proto_dtype("BYTES") == "TYPE_STRING"


@pytest.mark.parametrize(
    ("name", "np_type"),
    [
        ("BOOL", np.bool_),
        ("UINT8", np.uint8),
        ("INT64", np.int64),
        ("FP16", np.float16),
        ("FP32", np.float32),
        ("FP64", np.float64),
        ("BYTES", np.object_),
    ],
)
def test_numpy_mapping(name: str, np_type: type) -> None:
    assert dtypes.triton_to_numpy(name) == np.dtype(np_type)


@pytest.mark.parametrize("name", dtypes.TRITON_DTYPES)
def test_numpy_round_trip(name: str) -> None:
    assert dtypes.numpy_to_triton(dtypes.triton_to_numpy(name)) == name


def test_bf16_is_the_ml_dtypes_bfloat16_tritonclient_uses() -> None:
    assert dtypes.triton_to_numpy("BF16").name == "bfloat16"


def test_string_arrays_are_bytes() -> None:
    assert dtypes.numpy_to_triton(np.array(["a"]).dtype) == "BYTES"
    assert dtypes.numpy_to_triton(np.array([b"a"]).dtype) == "BYTES"


def test_numpy_type_without_triton_type_is_config_error() -> None:
    with pytest.raises(ConfigError, match=r"NumPy dtype complex64 has no Triton data type; expected one"):
        dtypes.numpy_to_triton(np.complex64)


@pytest.mark.parametrize("name", dtypes.TRITON_DTYPES)
def test_onnx_round_trip(name: str) -> None:
    elem = dtypes.triton_to_onnx(name)
    assert dtypes.onnx_to_triton(elem) == name


def test_onnx_mapping_agrees_with_onnx_numpy_table() -> None:
    # onnx's own element-type -> NumPy table must agree with ours wherever both are defined.
    for name in dtypes.TRITON_DTYPES:
        if name in ("BYTES", "BF16"):
            continue
        onnx_np = helper.tensor_dtype_to_np_dtype(dtypes.triton_to_onnx(name))
        assert onnx_np == dtypes.triton_to_numpy(name), name


def test_onnx_type_without_triton_type_is_config_error() -> None:
    with pytest.raises(ConfigError, match=r"ONNX element type 14 \(COMPLEX64\) has no Triton data type"):
        dtypes.onnx_to_triton(onnx.TensorProto.COMPLEX64)


def test_unknown_name_lists_the_allowed_set() -> None:
    with pytest.raises(ConfigError) as info:
        dtypes.normalize_dtype("float32")
    assert str(info.value) == (
        "unknown data type 'float32'; expected one of BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, "
        "INT32, INT64, FP16, FP32, FP64, BYTES, BF16"
    )
