"""The one description of a tensor that tritonkit passes around: name, Triton data type, full shape.

An ONNX graph's interface (:mod:`tritonkit.repository.onnx_io`), the server's model metadata
(:mod:`tritonkit.client.spec`) and the load tests' payloads all speak in :class:`TensorSpec`, with
the KServe v2 metadata's field names (``datatype``, ``shape``) and its convention: ``shape`` is the
full shape, batch axis included, ``-1`` for a variable dimension.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonkit.config.dtypes import triton_to_numpy


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: ``shape`` includes the batch axis; ``-1`` marks a variable dimension."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def batch_dynamic(self) -> bool:
        """True when the leading axis exists and is variable (so Triton may batch along it)."""
        return len(self.shape) >= 1 and self.shape[0] == -1

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """NumPy dtype of the data type (``object`` for BYTES, ``ml_dtypes.bfloat16`` for BF16)."""
        return triton_to_numpy(self.datatype)

    def to_json(self) -> dict[str, Any]:
        """The KServe v2 metadata form: ``{"name", "datatype", "shape"}``."""
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TensorSpec:
        """From the KServe v2 metadata form (HTTP JSON, or the gRPC message as ``MessageToDict`` gives it)."""
        return cls(str(data["name"]), str(data["datatype"]), tuple(int(d) for d in data.get("shape", ())))
