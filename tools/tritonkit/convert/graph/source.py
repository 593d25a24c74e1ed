"""The first stage of a build: the spec's source (a flagship model, a torch model or an ONNX file)
as one FP32 ONNX graph, plus what later stages need to know about it (:class:`Source`).

Exports go through :mod:`tritonkit.convert.graph.export` and the flagship modules; the graph is then cleaned
up by :func:`tritonkit.convert.graph.sanitize.sanitize_onnx`, except for the as-is import preset, which serves
the ONNX file exactly as given, external-data files included. A ``source.torch`` module is
imported with the spec's folder first on the import path.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonkit.convert import isolate
from tritonkit.convert.graph.export import TorchSource, export_source, load_torch_source
from tritonkit.convert.graph.flagship import minilm, resnet
from tritonkit.convert.graph.sanitize import sanitize_onnx
from tritonkit.convert.spec.buildspec import BuildSpec
from tritonkit.errors import ModelImportError, SpecError
from tritonkit.repository.onnx_io import GraphIO, read_io

__all__ = ["Source", "prepare_source", "spec_folder_importable"]


@dataclass
class Source:
    """The FP32 graph and what the rest of the build needs to know about it."""

    onnx: Path
    origin: Path  # hashed into build.json
    graph: GraphIO
    tokenizer: Path | None = None
    max_seq_length: int = 256
    image_shape: tuple[int, int, int] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    #: Files that travel with ``model.onnx`` (external weights of an as-is import), by name.
    companions: dict[str, Path] = field(default_factory=dict)
    #: The ``source.torch`` module the graph was exported from (the GPU torch engine exports it again).
    torch: TorchSource | None = None

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.graph.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.graph.outputs]


def _as_is(spec: BuildSpec) -> Source:
    assert spec.source.onnx is not None
    path = spec.resolve(spec.source.onnx)
    graph = read_io(path)
    companions = {}
    for location in graph.external_data:
        data_file = path.parent / location
        if not data_file.is_file():
            raise ModelImportError(
                f"`{path.name}` keeps weights in external file {location!r}, which is missing next to it"
            )
        companions[location] = data_file
    return Source(onnx=path, origin=path, graph=graph, details={"opset": graph.opset}, companions=companions)


@contextlib.contextmanager
def spec_folder_importable(spec: BuildSpec) -> Iterator[None]:
    """The spec's folder first on ``sys.path`` while ``source.torch`` is imported, so a module kept
    beside the spec is found without PYTHONPATH. (A spec is code: that module is imported and run.)"""
    folder = str(Path(spec.base_dir).resolve())
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


def _module_file(reference: str, loaded: Any) -> Path | None:
    """The file defining ``source.torch``'s function: what build.json names and hashes as the source."""
    func = getattr(sys.modules.get(reference.partition(":")[0]), reference.partition(":")[2], loaded)
    with contextlib.suppress(TypeError, OSError):
        found = inspect.getsourcefile(func)
        return Path(found).resolve() if found else None
    return None


def prepare_source(spec: BuildSpec, workdir: Path, torch_source: TorchSource | None = None) -> Source:
    """Export (if needed) and clean up the source of ``spec`` into ``workdir``.

    ``torch_source``: the ``source.torch`` entry point's result when the caller (the preflight) has
    loaded it already. Export and clean-up run in the build's worker (:mod:`tritonkit.convert.isolate`).
    """
    if spec.as_is:
        return _as_is(spec)
    raw = workdir / "exported.onnx"
    clean = workdir / "fp32.onnx"
    tokenizer: Path | None = None
    image_shape: tuple[int, int, int] | None = None
    max_seq = spec.preprocessing.max_seq_length
    exported: dict[str, Any] = {}
    origin: Path | None
    if spec.source.flagship == "minilm":
        isolate.run("export", minilm.export_minilm, raw)
        origin = minilm.model_dir() / "model.safetensors"
        tokenizer = minilm.tokenizer_file()
        max_seq = min(max_seq, minilm.max_seq_length())
    elif spec.source.flagship == "resnet50":
        size = spec.preprocessing.image_size
        isolate.run("export", resnet.export_resnet50, raw, image_size=size)
        origin = Path(inspect.getfile(resnet)).resolve()  # seeded weights: the code is the source
        image_shape = (3, size, size)
    elif spec.source.torch is not None:
        with spec_folder_importable(spec):
            if torch_source is None:
                torch_source = load_torch_source(spec.source.torch)
            # The module's classes must import in the worker too: the spec's folder is on its path.
            exported = export_source(torch_source, spec.source.torch, raw, spec.source.exporter)
        origin = _module_file(spec.source.torch, torch_source)
    else:
        assert spec.source.onnx is not None
        origin = spec.resolve(spec.source.onnx)
        raw = origin
    details = sanitize_onnx(raw, clean, dynamic_batch=spec.source.dynamic_batch)
    if origin is None:
        origin = clean  # no file to name: hash the graph built from (it is gone after the build)
    if exported:
        details["export"] = exported
    graph = read_io(clean)
    if spec.preprocessing.kind == "text" and tokenizer is None:
        raise SpecError("spec key `preprocessing.kind`: `text` needs a flagship text model (minilm)")
    if image_shape is None and spec.preprocessing.kind == "none":
        first = graph.inputs[0]
        if len(first.shape) == 4 and all(d > 0 for d in first.shape[1:]):
            image_shape = (first.shape[1], first.shape[2], first.shape[3])
    return Source(
        onnx=clean,
        origin=origin,
        graph=graph,
        tokenizer=tokenizer,
        max_seq_length=max_seq,
        image_shape=image_shape,
        details={
            "opset": details["opset"],
            "sanitize": details,
            "synthetic_weights": spec.source.synthetic,
            **({"torch_source": spec.source.torch} if spec.source.torch else {}),
        },
        torch=torch_source,
    )
