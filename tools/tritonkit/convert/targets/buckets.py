"""Shape buckets of a build: a model's dynamic non-batch axes, the edges each is padded to, where.

Owns turning the spec's ``serving.shape_buckets`` / ``serving.pad_values`` and the source's dynamic
axes (``TorchSource.dynamic_axes`` names, or the ONNX graph's ``dim_param`` names) into the one
description the runners, the client and the TensorRT target read
(:class:`~tritonkit.backends.runners.shape_buckets.Buckets`), and writing it into a version's config:
the parameter ``shape_buckets``, ``allow_ragged_batch`` on the inputs that carry an axis where the
server pads (python-backend runners and tritonkit's native backend: Triton 2.51's dynamic batcher then
hands requests of different lengths to one execute), the python runners' helper file beside ``model.py``.

Defaults follow from the model: an axis the spec does not name gets powers of two from 16 up to the
longest length the model takes (``max_position_embeddings`` of a transformers-style ``config`` on the
module, else ``preprocessing.max_seq_length``); a model with a dynamic output axis that names no input axis
gets none by default (its answers could not be cut back: it serves exact shapes, as before). ``tritonkit tune --input-data`` chooses edges from a
traffic file's length histogram.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonkit.backends.native import BACKEND as NATIVE_BACKEND
from tritonkit.backends.runners import runner_path
from tritonkit.backends.runners.shape_buckets import PARAMETER, Buckets, default_edges
from tritonkit.config import ModelConfig
from tritonkit.errors import SpecError

if TYPE_CHECKING:
    from tritonkit.convert.graph.source import Source
    from tritonkit.convert.spec.buildspec import BuildSpec

#: the runners' helper, copied beside ``model.py`` in every version whose server pads
HELPER = "shape_buckets"
#: rows one execute of a shape-bucketed torch version gathers, in its graphs' max batch (see _gather).
#: Measured on an H200 (BERT-base, short-text mix, docs/benchmarks-buckets.md): executes of 64 mixed
#: requests ran the GPU at 0.41 of the bucketed engine; sorting 4x as many fills the buckets' graphs.
GATHER = 4


def dynamic_axes(source: Source) -> dict[str, dict[int, str]]:
    """tensor -> {axis index: axis name} for every dynamic axis past the batch axis, inputs and outputs."""
    names = {t.name for t in (*source.graph.inputs, *source.graph.outputs)}
    if source.torch is not None:
        found = {
            tensor: {int(a): str(n) for a, n in axes.items() if int(a) != 0}
            for tensor, axes in source.torch.axes().items()
            if tensor in names
        }
        return {t: a for t, a in found.items() if a}
    return _onnx_axes(source.onnx, names)


def _onnx_axes(path: Path, names: set[str]) -> dict[str, dict[int, str]]:
    import onnx  # noqa: PLC0415 (heavy; only a build reads it)

    model = onnx.load(str(path), load_external_data=False)
    out: dict[str, dict[int, str]] = {}
    for value in (*model.graph.input, *model.graph.output):
        if value.name not in names:
            continue
        axes: dict[int, str] = {}
        for index, dim in enumerate(value.type.tensor_type.shape.dim):
            if index > 0 and not dim.HasField("dim_value"):
                axes[index] = dim.dim_param or f"{value.name}_{index}"
        if axes:
            out[value.name] = axes
    return out


def longest_length(source: Source, spec: BuildSpec) -> int:
    """The longest length the model takes on a dynamic axis when the spec names none: the module's
    ``config.max_position_embeddings`` (transformers), else ``preprocessing.max_seq_length``."""
    module = getattr(source.torch, "module", None)
    config = getattr(module, "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        return positions
    return int(spec.preprocessing.max_seq_length)


def resolve_buckets(spec: BuildSpec, source: Source) -> Buckets | None:
    """The model's buckets, or None when it has no dynamic axis past the batch; a SpecError when the
    spec names an axis the model lacks or pads an input it does not have."""
    axes = dynamic_axes(source)
    inputs = {t.name for t in source.graph.inputs}
    carried = {t: a for t, a in axes.items() if t in inputs}
    wanted = spec.serving.shape_buckets
    known = sorted({name for a in carried.values() for name in a.values()})
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        have = f"its dynamic input axes are {', '.join(known)}" if known else "it has no dynamic input axis"
        raise SpecError(f"serving.shape_buckets names axis {', '.join(unknown)}; {have}")
    bad_pad = sorted(set(spec.serving.pad_values) - inputs)
    if bad_pad:
        raise SpecError(
            f"serving.pad_values names {', '.join(bad_pad)}; the model's inputs are {', '.join(sorted(inputs))}"
        )
    if not carried:
        return None
    unlinked = [
        f"`{t}` axis {i}" for t, a in axes.items() if t not in inputs for i, n in a.items() if n not in known
    ]
    if unlinked:
        # An output axis that names no input axis cannot be cut back to a request's length: padding
        # would change its answers. Without edges in the spec the model serves exact shapes, as before.
        if not wanted:
            return None
        raise SpecError(
            f"serving.shape_buckets: output {', '.join(unlinked)} is dynamic and names no input axis "
            f"(input axes: {', '.join(known)}); name the axes alike (dynamic_axes, or the ONNX graph's dim_param) "
            "so each answer can be cut back to its request's length"
        )
    edges = {axis: tuple(wanted.get(axis) or default_edges(longest_length(source, spec))) for axis in known}
    outputs = {t: {i: n for i, n in a.items() if n in edges} for t, a in axes.items() if t not in inputs}
    return Buckets(
        axes=edges,
        inputs=carried,
        outputs={t: a for t, a in outputs.items() if a},
        pad={k: float(v) for k, v in spec.serving.pad_values.items()},
    )


def apply_buckets(config: ModelConfig, buckets: Buckets | None) -> dict[str, Path]:
    """Write ``buckets`` into ``config`` (in place); return the files the version needs beside it.

    A python-backend runner and the native backend (``tritonkit_torch``, which reads the parameter
    itself) pad on the server: the inputs carrying an axis take ragged batches, and the python runners'
    helper travels with ``model.py``. Any other backend (TensorRT, ONNX Runtime's) takes no ragged input,
    so the config names ``pad_at: client`` and clients pad each request to its edge."""
    if buckets is None or config.max_batch_size <= 0:
        return {}
    server = config.backend in ("python", NATIVE_BACKEND)
    chosen = Buckets(
        buckets.axes, buckets.inputs, buckets.outputs, buckets.pad, "server" if server else "client"
    )
    config.parameters[PARAMETER] = chosen.to_json()
    if not server:
        return {}
    for tensor in config.inputs:
        if tensor.name in chosen.inputs:
            tensor.allow_ragged_batch = True
    if config.parameters.get("engine") == "torch" and config.parameters.get("device") == "cuda":
        _gather(config)
    return {f"{HELPER}.py": runner_path(HELPER)} if config.backend == "python" else {}


def _gather(config: ModelConfig) -> None:
    """Let one execute of the torch runner (or the native backend: both read ``graph_max_batch``)
    gather :data:`GATHER` times its graphs' batch: Triton's
    batcher hands the requests in arrival order, lengths mixed, and the runner sorts one execute's
    requests into buckets; the more rows an execute holds, the fuller each bucket's graph runs. The
    graphs keep the spec's max batch (``graph_max_batch``; larger groups run in chunks of it)."""
    graph = config.max_batch_size
    config.parameters["graph_max_batch"] = str(graph)
    config.max_batch_size = graph * GATHER
    batching = config.dynamic_batching
    if batching is not None and batching.preferred_batch_size:
        extra = {graph * 2**k for k in range(1, GATHER.bit_length())}
        batching.preferred_batch_size = sorted(set(batching.preferred_batch_size) | extra)


def manifest(buckets: Buckets | None) -> dict[str, Any]:
    """What ``build.json`` records under ``shape_buckets`` (empty without buckets)."""
    if buckets is None:
        return {}
    return {
        "shape_buckets": {
            "axes": {k: list(v) for k, v in buckets.axes.items()},
            "inputs": {t: {str(i): n for i, n in a.items()} for t, a in buckets.inputs.items()},
            "outputs": {t: {str(i): n for i, n in a.items()} for t, a in buckets.outputs.items()},
            "pad": dict(buckets.pad),
            "pad_at": buckets.pad_at,
        }
    }
