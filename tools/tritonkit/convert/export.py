"""torch → ONNX export: dynamic batch (and sequence) axes, opset >= 17, errors wrapped in one line."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonkit.errors import ModelImportError

__all__ = ["MIN_OPSET", "TorchSource", "export_torch", "load_torch_source"]

#: LayerNormalization is a single op from opset 17, which TensorRT and ORT fuse best.
MIN_OPSET = 17


def export_torch(
    module: Any,
    example_inputs: Sequence[Any],
    path: str | Path,
    *,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_axes: Mapping[str, Mapping[int, str]],
    opset: int = MIN_OPSET,
) -> Path:
    """Export ``module`` (in eval mode) to ``path``; every axis in ``dynamic_axes`` stays symbolic.

    The TorchScript-based exporter is used because it keeps the named dynamic axes the Triton
    config and TensorRT profiles are derived from; the module is traced with ``example_inputs``.
    """
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if opset < MIN_OPSET:
        raise ModelImportError(f"ONNX opset must be >= {MIN_OPSET}; got {opset}")
    out = Path(path)
    module.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes
            torch.onnx.export(
                module,
                tuple(example_inputs),
                str(out),
                input_names=list(input_names),
                output_names=list(output_names),
                dynamic_axes={k: dict(v) for k, v in dynamic_axes.items()},
                opset_version=opset,
                do_constant_folding=True,
                dynamo=False,
            )
    except Exception as exc:  # torch raises many types; the user needs one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelImportError(f"torch.onnx.export failed for {type(module).__name__}: {first}") from None
    return out


@dataclass
class TorchSource:
    """What a spec's ``source.torch: "package.module:function"`` function returns."""

    module: Any
    example_inputs: Sequence[Any]
    input_names: Sequence[str]
    output_names: Sequence[str]
    #: Named dynamic axes per tensor; the batch axis (0) of every input and output is added when missing.
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)

    def export(self, path: str | Path, opset: int = MIN_OPSET) -> Path:
        axes = {
            name: dict(self.dynamic_axes.get(name, {})) for name in (*self.input_names, *self.output_names)
        }
        for value in axes.values():
            value.setdefault(0, "batch")
        return export_torch(
            self.module,
            self.example_inputs,
            path,
            input_names=self.input_names,
            output_names=self.output_names,
            dynamic_axes=axes,
            opset=opset,
        )


def load_torch_source(reference: str) -> TorchSource:
    """Call ``"package.module:function"`` and check it returned a :class:`TorchSource`."""
    module_name, _, func_name = reference.partition(":")
    if not module_name or not func_name:
        raise ModelImportError(f"torch source {reference!r}: expected 'package.module:function'")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        raise ModelImportError(
            f"torch source {reference!r} cannot be loaded ({type(exc).__name__}: {exc})"
        ) from None
    source = func()
    if not isinstance(source, TorchSource):
        raise ModelImportError(
            f"torch source {reference!r} returned {type(source).__name__}; expected TorchSource"
        )
    return source
