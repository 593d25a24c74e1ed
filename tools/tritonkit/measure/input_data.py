"""Real requests from a perf_analyzer ``--input-data`` JSON file, for ``tritonkit profile``, ``tune``,
``compare`` and ``loadtest``.

Owns reading the format perf_analyzer documents (``docs/input_data.md``)::

    {"data": [{"INPUT0": [1, 2, 3, 4], "INPUT1": {"content": [..], "shape": [2, 2]}},
              {"INPUT0": {"b64": "..."}, "INPUT1": {"content": {"b64": "..."}, "shape": [4]}}]}

Each entry of ``data`` gives every input of the model for one batch-1 request: a flat row-major list
(numbers, booleans, or strings for ``BYTES``), ``{"b64": ...}`` (little-endian raw bytes; ``BYTES``
elements each a 4-byte length and the bytes), or ``{"content": ..., "shape": [...]}`` (the shape without
the batch axis). Without ``shape`` the model's dims are used, a single variable dim taken from the
element count. Entries are used in order, round robin; a request of batch N stacks N consecutive
entries (so their shapes must agree). Sequence streams (``data`` as a list of lists) and
``validation_data`` are not supported and say so. Every refusal is one line naming the file, the entry
and the input.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tritonkit.config.dtypes import triton_to_numpy
from tritonkit.config.tensors import TensorSpec
from tritonkit.errors import LoadTestError, read_json

__all__ = ["read_entries", "requests"]


def read_entries(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The ``data`` entries of a perf_analyzer input-data file (one line naming what is wrong)."""
    file = Path(path)
    document = read_json(
        file,
        LoadTestError,
        missing=f"--input-data {file}: no such file; expected a perf_analyzer JSON file",
        invalid=f"--input-data {file}: not valid JSON",
    )
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or not data:
        raise LoadTestError(
            f'--input-data {file}: expected {{"data": [ {{"INPUT": ...}}, ... ]}} with one entry or more'
        )
    if any(isinstance(entry, list) for entry in data):
        raise LoadTestError(
            f"--input-data {file}: sequence streams (lists of entries) are not supported; expected one list "
            "of entries"
        )
    if not all(isinstance(entry, dict) for entry in data):
        raise LoadTestError(f"--input-data {file}: every entry of `data` must be an object of inputs")
    return data


def _bytes_elements(raw: bytes, where: str) -> list[bytes]:
    """BYTES elements from their binary form: a little-endian u32 length, then the bytes, repeated."""
    out, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise LoadTestError(f"{where}: b64 BYTES content ends inside an element's 4-byte length")
        (size,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + size > len(raw):
            raise LoadTestError(f"{where}: b64 BYTES element of {size} bytes runs past the content")
        out.append(raw[offset : offset + size])
        offset += size
    return out


def _flat(content: Any, tensor: TensorSpec, where: str) -> NDArray[Any]:
    """The content as a flat array of the input's dtype (a list, or ``{"b64": ...}``)."""
    dtype = triton_to_numpy(tensor.datatype)
    if isinstance(content, Mapping) and "b64" in content:
        try:
            raw = base64.b64decode(str(content["b64"]), validate=True)
        except (binascii.Error, ValueError):
            raise LoadTestError(f"{where}: `b64` is not valid base64") from None
        if tensor.datatype == "BYTES":
            return np.array(_bytes_elements(raw, where), dtype=object)
        if len(raw) % dtype.itemsize:
            raise LoadTestError(
                f"{where}: {len(raw)} bytes of b64 content is not a whole number of {tensor.datatype} elements"
            )
        return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype)
    if not isinstance(content, list):
        raise LoadTestError(
            f'{where}: expected a flat list, {{"b64": ...}} or {{"content": ..., "shape": ...}}'
        )
    if tensor.datatype == "BYTES":
        return np.array([str(v).encode() if not isinstance(v, bytes) else v for v in content], dtype=object)
    try:
        return np.asarray(content, dtype=dtype).reshape(-1)
    except (TypeError, ValueError):
        raise LoadTestError(f"{where}: values are not all {tensor.datatype}") from None


def _shape(dims: Sequence[int], given: Any, count: int, where: str) -> tuple[int, ...]:
    """The request's shape (without the batch axis): ``given``, or the model's dims with one variable dim
    taken from ``count`` elements."""
    if given is not None:
        if not isinstance(given, list) or not all(isinstance(d, int) and d >= 0 for d in given):
            raise LoadTestError(f"{where}: `shape` {given!r}: expected a list of whole numbers")
        shape = tuple(given)
        if len(shape) != len(dims) or any(d >= 0 and d != s for d, s in zip(dims, shape, strict=True)):
            raise LoadTestError(f"{where}: `shape` {list(shape)} does not fit the model's dims {list(dims)}")
    elif all(d >= 0 for d in dims):
        shape = tuple(dims)
    elif sum(d < 0 for d in dims) == 1:
        fixed = math.prod(d for d in dims if d >= 0)
        if fixed == 0 or count % fixed:
            raise LoadTestError(f"{where}: {count} elements do not fill the model's dims {list(dims)}")
        shape = tuple(count // fixed if d < 0 else d for d in dims)
    else:
        raise LoadTestError(
            f"{where}: the model's dims {list(dims)} have several variable dims; expected a `shape` field"
        )
    if math.prod(shape) != count:
        raise LoadTestError(f"{where}: {count} elements, expected {math.prod(shape)} for shape {list(shape)}")
    return shape


def _entry(
    entry: Mapping[str, Any], inputs: Sequence[TensorSpec], batching: bool, where: str
) -> dict[str, Any]:
    missing = [t.name for t in inputs if t.name not in entry]
    unknown = sorted(set(entry) - {t.name for t in inputs})
    if missing or unknown:
        raise LoadTestError(
            f"{where}: inputs {sorted(entry)}; expected {[t.name for t in inputs]}"
            + (f" (missing {missing})" if missing else "")
            + (f" (unknown {unknown})" if unknown else "")
        )
    out = {}
    for tensor in inputs:
        value, here = entry[tensor.name], f"{where}, input `{tensor.name}`"
        given = None
        if isinstance(value, Mapping) and "content" in value:
            value, given = value["content"], value.get("shape")
        flat = _flat(value, tensor, here)
        dims = tensor.shape[1:] if batching else tensor.shape
        out[tensor.name] = flat.reshape(_shape(dims, given, int(flat.size), here))
    return out


def requests(
    path: str | os.PathLike[str],
    inputs: Sequence[TensorSpec],
    max_batch_size: int,
    batch_size: int = 1,
) -> list[dict[str, NDArray[Any]]]:
    """One request per entry of the file (round robin), each of ``batch_size`` rows stacked from consecutive
    entries when the model batches; inputs as the model's metadata names them."""
    entries = read_entries(path)
    batching = max_batch_size > 0
    if not batching and batch_size != 1:
        raise LoadTestError(
            f"--input-data {path}: the model does not batch; expected batch size 1, got {batch_size}"
        )
    rows = [_entry(e, inputs, batching, f"--input-data {path}: entry {i}") for i, e in enumerate(entries)]
    out = []
    for first in range(len(rows)):
        if not batching:
            out.append(rows[first])
            continue
        group = [rows[(first + i) % len(rows)] for i in range(batch_size)]
        stacked = {}
        for tensor in inputs:
            shapes = {g[tensor.name].shape for g in group}
            if len(shapes) > 1:
                raise LoadTestError(
                    f"--input-data {path}: entries {first}..{first + batch_size - 1} give input `{tensor.name}` "
                    f"shapes {sorted(shapes)}; a batch of {batch_size} needs equal shapes"
                )
            stacked[tensor.name] = np.stack([g[tensor.name] for g in group])
        out.append(stacked)
    return out
