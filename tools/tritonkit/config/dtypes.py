"""Triton tensor data types: the short names this package uses, and their proto, NumPy and ONNX twins.

Dataclasses carry the short form Triton's HTTP/gRPC APIs use ("FP32", "BYTES"); only the protobuf
schema spells them "TYPE_FP32" (and "TYPE_STRING" for "BYTES"). NumPy mappings come from
``tritonclient.utils`` so client and config agree on them; ONNX element types are read from
``onnx.TensorProto`` lazily, so importing this module does not pay for ``onnx``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from tritonkit.errors import ConfigError, TritonKitError

__all__ = [
    "FLOAT_DTYPES",
    "NUMPY_DTYPES",
    "TRITON_DTYPES",
    "from_proto_dtype",
    "is_dtype",
    "lookup_dtype",
    "normalize_dtype",
    "numpy_to_triton",
    "onnx_to_triton",
    "to_proto_dtype",
    "triton_to_numpy",
    "triton_to_onnx",
]

#: Every data type Triton serves, in model_config.proto's order, short form.
TRITON_DTYPES: tuple[str, ...] = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
)

#: Triton name -> NumPy dtype of every fixed-size type (BYTES, whose elements are length-prefixed, is not
#: here); BF16 is ``ml_dtypes.bfloat16``, as ``tritonclient`` decodes it. The one table the client's codec
#: and the load tests' answer checks read.
NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(triton_to_np_dtype(name)) for name in TRITON_DTYPES if name != "BYTES"
}
#: Floating-point types, whose values are checked for NaN/inf (``bfloat16``'s NumPy kind is "V", not "f").
FLOAT_DTYPES: tuple[str, ...] = ("FP16", "FP32", "FP64", "BF16")

# The proto calls the variable-length byte type TYPE_STRING; every other name is "TYPE_" + short.
_PROTO_NAMES: dict[str, str] = {d: ("TYPE_STRING" if d == "BYTES" else f"TYPE_{d}") for d in TRITON_DTYPES}
_FROM_PROTO: dict[str, str] = {v: k for k, v in _PROTO_NAMES.items()}

# onnx.TensorProto.DataType member name for each Triton type (looked up by name, not number).
_ONNX_NAMES: dict[str, str] = {
    "BOOL": "BOOL",
    "UINT8": "UINT8",
    "UINT16": "UINT16",
    "UINT32": "UINT32",
    "UINT64": "UINT64",
    "INT8": "INT8",
    "INT16": "INT16",
    "INT32": "INT32",
    "INT64": "INT64",
    "FP16": "FLOAT16",
    "FP32": "FLOAT",
    "FP64": "DOUBLE",
    "BYTES": "STRING",
    "BF16": "BFLOAT16",
}


def _allowed() -> str:
    return ", ".join(TRITON_DTYPES)


def is_dtype(name: str) -> bool:
    """True when ``name`` is a data type in short ("FP32") or proto ("TYPE_FP32") form."""
    return name in _PROTO_NAMES or name in _FROM_PROTO


def normalize_dtype(name: str) -> str:
    """Return the short form of ``name`` ("FP32" or "TYPE_FP32" -> "FP32"); ConfigError if unknown."""
    if name in _PROTO_NAMES:
        return name
    if name in _FROM_PROTO:
        return _FROM_PROTO[name]
    raise ConfigError(f"unknown data type {name!r}; expected one of {_allowed()}")


def to_proto_dtype(name: str) -> str:
    """Short form -> model_config.proto enum name ("BYTES" -> "TYPE_STRING")."""
    return _PROTO_NAMES[normalize_dtype(name)]


def from_proto_dtype(proto_name: str) -> str:
    """model_config.proto enum name -> short form ("TYPE_STRING" -> "BYTES")."""
    return lookup_dtype(_FROM_PROTO, proto_name, ConfigError, f"unknown data type {proto_name!r}")


def lookup_dtype(table: Mapping[str, str], key: str, error: type[TritonKitError], unknown: str) -> str:
    """``table[key]``: a name in one type system to the name in another; ``error`` with the message
    ``unknown`` and the names the table knows when it has no ``key``."""
    try:
        return table[key]
    except KeyError:
        raise error(f"{unknown}; expected one of {', '.join(table)}") from None


def triton_to_numpy(name: str) -> np.dtype[Any]:
    """Short (or proto) name -> NumPy dtype; BYTES is ``object`` and BF16 is ``ml_dtypes.bfloat16``."""
    short = normalize_dtype(name)
    return NUMPY_DTYPES.get(short) or np.dtype(object)


def numpy_to_triton(dtype: Any) -> str:
    """NumPy dtype (or anything ``np.dtype`` accepts) -> short Triton name; str/bytes map to BYTES."""
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise ConfigError(f"not a NumPy dtype: {dtype!r}; expected e.g. numpy.float32") from None
    if np_dtype.kind in ("U", "S", "O"):  # Triton carries every string-like array as BYTES
        return "BYTES"
    name = np_to_triton_dtype(np_dtype)
    if name is None:
        raise ConfigError(
            f"NumPy dtype {np_dtype} has no Triton data type; expected one that maps to {_allowed()}"
        )
    return str(name)


@functools.cache
def _onnx_tables() -> tuple[dict[str, int], dict[int, str]]:
    from onnx import TensorProto  # noqa: PLC0415  # onnx is heavy; the client and load tests never need it

    to_onnx = {short: int(getattr(TensorProto, onnx_name)) for short, onnx_name in _ONNX_NAMES.items()}
    return to_onnx, {v: k for k, v in to_onnx.items()}


def triton_to_onnx(name: str) -> int:
    """Short (or proto) name -> ``onnx.TensorProto`` element type number."""
    return _onnx_tables()[0][normalize_dtype(name)]


def onnx_to_triton(elem_type: int) -> str:
    """``onnx.TensorProto`` element type number -> short Triton name; ConfigError for types Triton lacks."""
    table = _onnx_tables()[1]
    if elem_type not in table:
        from onnx import TensorProto  # noqa: PLC0415  # as in _onnx_tables

        try:
            onnx_name = TensorProto.DataType.Name(elem_type)  # type: ignore[arg-type]
        except ValueError:
            onnx_name = "not an ONNX type"
        raise ConfigError(
            f"ONNX element type {elem_type} ({onnx_name}) has no Triton data type; "
            f"expected one of {', '.join(_ONNX_NAMES.values())}"
        )
    return table[elem_type]
