"""torch → ONNX export: the ``torch.export``-based (dynamo) exporter first, the TorchScript exporter as
its fallback or by choice (``source.exporter: auto | dynamo | torchscript``), dynamic batch (and named)
axes kept, errors in one line.

The dynamo exporter (``torch.onnx.export(..., dynamo=True)``; PyTorch's default since 2.9) traces with
``torch.export`` and translates through onnxscript's torchlib at opset 18; it exports what the
TorchScript exporter cannot, such as ``nn.MultiheadAttention``'s eval fast path
(``aten::_native_multi_head_attention``: ViT, DeiT, most ``nn.TransformerEncoder`` models). Named
dynamic axes become ``torch.export.Dim.DYNAMIC`` and keep their names in the graph. A dynamic axis of
size 1 in the example inputs is widened to 2 first (``torch.export`` would specialise it), and a graph
whose batch axis came out fixed counts as a failed export. The TorchScript exporter (opset 17) traces
with the example inputs, as before.

Both exporters print (progress lines, warnings, whole graphs on failure): a build runs them in its
worker (:mod:`tritonkit.convert.isolate`), whose log keeps that output; the user sees one line naming
each exporter's first error and the log.
"""

from __future__ import annotations

import importlib
import re
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonkit.convert import isolate
from tritonkit.convert.graph import torch_io
from tritonkit.errors import ModelImportError

__all__ = [
    "DYNAMO_OPSET",
    "EXPORTERS",
    "MIN_OPSET",
    "ExportError",
    "TorchSource",
    "export_model",
    "export_source",
    "load_torch_source",
]

#: LayerNormalization is a single op from opset 17, which TensorRT and ORT fuse best.
MIN_OPSET = 17
#: The opset the dynamo exporter's torchlib is written for (asking lower makes it convert down).
DYNAMO_OPSET = 18
EXPORTERS = ("auto", "dynamo", "torchscript")
#: Weights above this go to an external-data file beside the graph (protobuf's limit is 2 GiB).
_EXTERNAL_BYTES = 1_800_000_000


class ExportError(isolate.StepError, ModelImportError):
    """Every exporter tried failed; the detail is in the worker's log."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(exc: BaseException) -> str:
    """The first line of the innermost cause: torch wraps the real reason ("No ONNX function found
    for ...") in errors about which export step failed."""
    root: BaseException = exc
    seen = {id(root)}
    while (nxt := root.__cause__ or root.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        root = nxt
    text = _ANSI.sub("", str(root)).strip()
    line = text.splitlines()[0].strip() if text else type(root).__name__
    return line[:240]


def _widened(example_inputs: Sequence[Any], axes: Sequence[Mapping[int, str]]) -> list[Any]:
    """Example inputs with every dynamic axis of size 1 repeated to size 2."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    out = []
    for tensor, dims in zip(example_inputs, axes, strict=False):
        wide = tensor
        for axis in dims:
            if isinstance(wide, torch.Tensor) and wide.dim() > axis and wide.shape[axis] == 1:
                wide = torch.cat([wide, wide], dim=axis)
        out.append(wide)
    return out


@dataclass(frozen=True)
class _Export:
    """What both exporters are given: the module in eval mode, its example inputs, the ONNX file to
    write, the tensor names and each tensor's dynamic axes."""

    module: Any
    example_inputs: Sequence[Any]
    out: Path
    input_names: Sequence[str]
    output_names: Sequence[str]
    dynamic_axes: Mapping[str, Mapping[int, str]]


def _dynamo(job: _Export, opset: int) -> None:
    import onnx  # noqa: PLC0415 (read back to check the batch axis)
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    axes = [dict(job.dynamic_axes.get(name, {})) for name in job.input_names]
    args = _widened(job.example_inputs, axes)
    program = torch.onnx.export(
        job.module,
        tuple(args),
        None,
        input_names=list(job.input_names),
        output_names=list(job.output_names),
        dynamic_shapes=torch_io.dynamic_shapes(job.module, axes),
        opset_version=opset,
        dynamo=True,
    )
    assert program is not None  # dynamo=True always returns the ONNXProgram
    weights = sum(p.numel() * p.element_size() for p in job.module.parameters())
    program.save(str(job.out), external_data=weights > _EXTERNAL_BYTES)
    graph = onnx.load(str(job.out), load_external_data=False).graph
    fixed = [
        f"`{value.name}` axis {axis}"
        for value in (*graph.input, *graph.output)
        for axis in job.dynamic_axes.get(value.name, {})
        if axis < len(value.type.tensor_type.shape.dim)
        and value.type.tensor_type.shape.dim[axis].HasField("dim_value")
    ]
    if fixed:
        raise ModelImportError(
            f"torch.export made {', '.join(fixed)} static (the module's code fixes its size)"
        )


def _torchscript(job: _Export, opset: int) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch.onnx.export(
        job.module,
        tuple(job.example_inputs),
        str(job.out),
        input_names=list(job.input_names),
        output_names=list(job.output_names),
        dynamic_axes={k: dict(v) for k, v in job.dynamic_axes.items()},
        opset_version=opset,
        do_constant_folding=True,
        dynamo=False,
    )


def export_model(
    module: Any,
    example_inputs: Sequence[Any],
    path: str | Path,
    *,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_axes: Mapping[str, Mapping[int, str]],
    exporter: str = "auto",
    opset: int | None = None,
) -> dict[str, Any]:
    """Export ``module`` (in eval mode, in this process) to ``path``; return how (for ``build.json``).

    ``exporter``: ``dynamo``, ``torchscript`` or ``auto`` (dynamo, then torchscript if it fails).
    ``opset``: default 18 for dynamo, 17 for torchscript. ExportError when every exporter failed.
    """
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if exporter not in EXPORTERS:
        raise ModelImportError(f"exporter must be one of {', '.join(EXPORTERS)}; got {exporter!r}")
    if opset is not None and opset < MIN_OPSET:
        raise ModelImportError(f"ONNX opset must be >= {MIN_OPSET}; got {opset}")
    module.eval()
    label = type(module).__name__
    # Inputs by keyword where forward takes them so, outputs one tensor per name (torch_io).
    module = torch_io.adapt(module, example_inputs, input_names, output_names)
    job = _Export(module, example_inputs, Path(path), input_names, output_names, dynamic_axes)
    chosen = ("dynamo", "torchscript") if exporter == "auto" else (exporter,)
    failures: list[str] = []
    for name in chosen:
        version = opset or (DYNAMO_OPSET if name == "dynamo" else MIN_OPSET)
        run = _dynamo if name == "dynamo" else _torchscript
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tracer and deprecation warnings: the log has the rest
                run(job, version)
        except Exception as exc:  # torch raises many types; the user needs one line
            print(f"tritonkit: the {name} exporter failed for {label}:", flush=True)
            traceback.print_exc()
            failures.append(f"{name}: {_first_line(exc)}")
            continue
        details: dict[str, Any] = {"exporter": name, "opset": version}
        if failures:
            details["fallback_from"] = failures
        return details
    raise ExportError(f"export of {label} failed ({'; '.join(failures)})")


@dataclass
class TorchSource:
    """What a spec's ``source.torch: "package.module:function"`` function returns."""

    module: Any
    example_inputs: Sequence[Any]
    input_names: Sequence[str]
    output_names: Sequence[str]
    #: Named dynamic axes per tensor; the batch axis (0) of every input and output is added when missing.
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)

    def axes(self) -> dict[str, dict[int, str]]:
        """Every input's and output's dynamic axes, the batch axis (0) included."""
        axes = {
            name: dict(self.dynamic_axes.get(name, {})) for name in (*self.input_names, *self.output_names)
        }
        for value in axes.values():
            value.setdefault(0, "batch")
        return axes

    def export(self, path: str | Path, opset: int | None = None, exporter: str = "auto") -> dict[str, Any]:
        """Export in this process (a build exports in its worker: :func:`export_source`)."""
        return export_model(
            self.module,
            self.example_inputs,
            path,
            input_names=self.input_names,
            output_names=self.output_names,
            dynamic_axes=self.axes(),
            exporter=exporter,
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


def _export_loaded(source: TorchSource, path: Path, exporter: str) -> dict[str, Any]:
    return source.export(path, exporter=exporter)


def _export_reference(reference: str, path: Path, exporter: str) -> dict[str, Any]:
    return load_torch_source(reference).export(path, exporter=exporter)


def export_source(source: TorchSource, reference: str, path: Path, exporter: str = "auto") -> dict[str, Any]:
    """Export a loaded ``source.torch`` in the build's worker: the module itself is sent (its classes
    must import there: the spec's folder is on the path), else ``reference`` is called there again."""
    try:
        return isolate.run("export", _export_loaded, source, path, exporter)
    except isolate.UnpicklableError:
        return isolate.run("export", _export_reference, reference, path, exporter)
