"""Reading an ONNX graph's interface: its inputs and outputs as :class:`TensorSpec` (full ONNX shape, -1 dynamic).

This module owns the boundary between ``onnx`` and the rest of tritonkit: it loads a file (graph
only, external weights left on disk), wraps decode and checker failures into one-line
:class:`~tritonkit.errors.ModelImportError` messages, maps element types to Triton's short names,
and decides whether the graph has a dynamic leading (batch) axis. Anything that turns these specs
into a model configuration lives in :mod:`tritonkit.convert.onnx_import` and :mod:`tritonkit.repository.check`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError

from tritonkit.config.dtypes import TRITON_DTYPES, onnx_to_triton
from tritonkit.config.tensors import TensorSpec
from tritonkit.errors import ConfigError, ModelImportError

__all__ = [
    "SUPPORTED_DTYPES",
    "GraphIO",
    "external_data_files",
    "load_model",
    "read_io",
]

#: Data types the portable runner (ONNX Runtime + NumPy inside the python backend) can carry.
#: BF16 is left out on purpose: NumPy has no native bfloat16, so the python backend cannot hand it over.
SUPPORTED_DTYPES: tuple[str, ...] = tuple(d for d in TRITON_DTYPES if d != "BF16")


@dataclass(frozen=True)
class GraphIO:
    """The interface of one ONNX graph, in graph order."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    opset: int
    external_data: tuple[str, ...] = ()

    @property
    def batch_dynamic(self) -> bool:
        """True when every input and output has a dynamic leading axis, so Triton may batch them."""
        tensors = self.inputs + self.outputs
        return bool(tensors) and all(t.batch_dynamic for t in tensors)


def _display(path: Path) -> str:
    return f"`{path.name}`"


def load_model(path: str | os.PathLike[str], *, check: bool = True) -> onnx.ModelProto:
    """Load the graph of an ONNX file without its external weights; ModelImportError if unusable.

    With ``check``, ``onnx.checker`` runs on the file path (which copes with external data and
    files over 2 GiB) so a structurally broken graph is reported here, not at serving time.
    """
    source = Path(path)
    if not source.exists():
        raise ModelImportError(f"ONNX file not found: {str(source)!r}; expected an existing .onnx file")
    if not source.is_file():
        raise ModelImportError(f"ONNX path {str(source)!r} is not a file; expected an .onnx file")
    try:
        model = onnx.load(str(source), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelImportError(f"{_display(source)} is not a valid ONNX model ({detail})") from None
    if not model.HasField("graph") or not model.graph.output:
        # Random bytes sometimes decode as an empty protobuf message: say so instead of "no outputs".
        raise ModelImportError(f"{_display(source)} is not a valid ONNX model (it has no graph outputs)")
    if check:
        try:
            onnx.checker.check_model(str(source))
        except (onnx.checker.ValidationError, ValueError, RuntimeError, OSError) as exc:
            detail = " ".join(str(exc).split())[:300] or type(exc).__name__
            raise ModelImportError(f"{_display(source)} is not a valid ONNX model ({detail})") from None
    return model


def _tensor_spec(value: onnx.ValueInfoProto, where: str, source: Path) -> TensorSpec:
    type_proto = value.type
    if type_proto.WhichOneof("value") != "tensor_type":
        kind = type_proto.WhichOneof("value") or "no type"
        raise ModelImportError(f"{_display(source)}: {where} `{value.name}` is a {kind}; expected a tensor")
    tensor_type = type_proto.tensor_type
    elem = int(tensor_type.elem_type)
    try:
        elem_name = onnx.TensorProto.DataType.Name(elem)  # type: ignore[arg-type]
    except ValueError:
        elem_name = f"element type {elem}"
    supported = ", ".join(SUPPORTED_DTYPES)
    try:
        data_type = onnx_to_triton(elem)
    except ConfigError:
        raise ModelImportError(
            f"{_display(source)}: {where} `{value.name}` has dtype {elem_name}, which tritonkit cannot serve; "
            f"expected one of {supported}"
        ) from None
    if data_type not in SUPPORTED_DTYPES:
        raise ModelImportError(
            f"{_display(source)}: {where} `{value.name}` has dtype {elem_name}, which tritonkit cannot serve; "
            f"expected one of {supported}"
        )
    if not tensor_type.HasField("shape"):
        raise ModelImportError(
            f"{_display(source)}: {where} `{value.name}` has no shape (unknown rank); "
            "expected a tensor of known rank (run shape inference or re-export with shapes)"
        )
    # A dim with a symbolic name ("batch", "seq") or neither value nor name is dynamic: -1.
    dims = tuple(
        int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tensor_type.shape.dim
    )
    return TensorSpec(name=value.name, datatype=data_type, shape=dims)


def external_data_files(model: onnx.ModelProto) -> tuple[str, ...]:
    """Relative paths of the external-data files the graph's initializers point at (sorted, unique)."""
    locations: set[str] = set()
    graphs: list[Any] = [model.graph]
    while graphs:  # subgraphs (If, Loop, Scan) hold tensors too
        graph = graphs.pop()
        tensors: list[Any] = list(graph.initializer)
        for node in graph.node:  # Constant nodes may carry external tensors too
            for attr in node.attribute:
                tensors.extend([attr.t] if attr.HasField("t") else list(attr.tensors))
                graphs.extend([attr.g] if attr.HasField("g") else list(attr.graphs))
        for tensor in tensors:
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            for entry in tensor.external_data:
                if entry.key == "location":
                    locations.add(entry.value)
    return tuple(sorted(locations))


def read_io(path: str | os.PathLike[str], *, check: bool = True) -> GraphIO:
    """Inputs and outputs of the ONNX file at ``path``.

    Initializers listed in ``graph.input`` (old exporters did that for weights) are not inputs.
    """
    source = Path(path)
    model = load_model(source, check=check)
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    inputs = tuple(_tensor_spec(v, "input", source) for v in graph.input if v.name not in initializers)
    outputs = tuple(_tensor_spec(v, "output", source) for v in graph.output)
    if not inputs:
        raise ModelImportError(f"{_display(source)} has no graph inputs; expected at least one")
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return GraphIO(inputs=inputs, outputs=outputs, opset=int(opset), external_data=external_data_files(model))
