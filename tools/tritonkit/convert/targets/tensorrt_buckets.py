"""The TensorRT target's optimization profiles from a model's shape buckets, and the checks that
decide them before anything is built (by the build and by ``tritonkit k8s package``).

One profile per shape bucket (:func:`bucket_profiles`): for a dynamic non-batch axis with edges
``e1 < e2 < ... < en``, profile *k* takes lengths ``e(k-1) + 1 .. ek`` with OPT ``ek`` (the first
from 1); several bucketed axes give one profile per combination of their buckets. Every profile's
batch range is the default one (1, max batch / 2, max batch), so Triton can send any batch to any
length. TensorRT's backend takes no ragged input: the config carries the buckets with ``pad_at:
client`` (:func:`tritonkit.convert.targets.buckets.apply_buckets`), clients pad each request up to its edge,
and Triton batches the requests of one bucket together, each batch on the profile of its edge.

Where the spec gives ``tensorrt.profiles`` they are the engine's; then every edge must lie inside
some profile's range, or a client padding to it would be refused by the engine.

The longest length is compiled into the engine, so it must come from somewhere the user meant it
(:func:`check_lengths`): ``serving.shape_buckets`` for the axis, ``tensorrt.profiles``, the model's own
``config.max_position_embeddings``, or a text model's ``preprocessing.max_seq_length`` (the
tokenizer's truncation). A dynamic axis with none of these is refused in one line, naming the spec
keys that fix it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tritonkit.backends.runners.shape_buckets import Buckets
from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.spec.buildspec import DEFAULT_MAX_BATCH_SIZE, BuildSpec
from tritonkit.convert.targets.tensorrt import EnginePlan, EngineProfile, ShapeRange, resolve_profiles
from tritonkit.errors import SpecError

if TYPE_CHECKING:
    from tritonkit.convert.graph.export import TorchSource
    from tritonkit.convert.graph.source import Source

__all__ = [
    "bucket_profiles",
    "bucketed_plan",
    "check_lengths",
    "check_spec",
    "model_positions",
    "plan_with_buckets",
]

#: More profiles than this make a build slow and an engine large; a spec asking for more is refused.
MAX_PROFILES = 32


def model_positions(module: Any) -> int | None:
    """``module.config.max_position_embeddings`` (transformers-style), the model's own longest length."""
    config = getattr(module, "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    return (
        positions
        if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0
        else None
    )


def check_lengths(
    spec: BuildSpec, carried: Mapping[str, Mapping[int, str]], positions: int | None = None
) -> None:
    """Refuse (one line) a dynamic input axis whose longest length nothing states (module docstring).

    ``carried``: input -> {axis index (batch = 0): axis name} of the model's dynamic non-batch axes;
    ``positions``: the model's ``max_position_embeddings`` where known."""
    if positions is not None and len(spec.serving.shape_buckets) == 1:
        ((axis, edges),) = spec.serving.shape_buckets.items()
        if edges and edges[-1] > positions:
            raise SpecError(
                f"`serving.shape_buckets.{axis}` ends at {edges[-1]}, above the model's "
                f"max_position_embeddings {positions}: expected a last edge of at most {positions}"
            )
    if spec.tensorrt.profiles or positions is not None or spec.preprocessing.kind == "text":
        return  # the spec's own shape ranges (check_shapes holds each input to them), or the model's
    for name, axes in carried.items():
        for index, axis in sorted(axes.items()):
            if axis not in spec.serving.shape_buckets:
                raise SpecError(
                    f"input `{name}` has a dynamic axis {index} (`{axis}`) and nothing gives the longest "
                    f"length the TensorRT engine takes: give `serving.shape_buckets.{axis}` (edges, the "
                    f"last the longest length; one engine profile per bucket) or "
                    f"`tensorrt.profiles[0].shapes.{name}` min/opt/max"
                )


def _ranges(edges: Sequence[int]) -> list[tuple[int, int]]:
    """(min, max) per bucket: previous edge + 1 .. edge, the first from 1."""
    return [(1 if k == 0 else edges[k - 1] + 1, edge) for k, edge in enumerate(edges)]


def _check_count(buckets: Buckets) -> None:
    count = 1
    for edges in buckets.axes.values():
        count *= len(edges)
    if count > MAX_PROFILES:
        sizes = " x ".join(f"{a} {len(e)}" for a, e in buckets.axes.items())
        raise SpecError(
            f"`serving.shape_buckets` makes {count} TensorRT profiles ({sizes} buckets); expected at "
            f"most {MAX_PROFILES}: give fewer edges"
        )


def bucket_profiles(
    buckets: Buckets, inputs: Sequence[TensorSpec], batch: tuple[int, int, int]
) -> tuple[EngineProfile, ...]:
    """One :class:`EngineProfile` per bucket (per combination of buckets over several axes)."""
    order = list(buckets.axes)
    per_axis = [_ranges(buckets.axes[a]) for a in order]
    _check_count(buckets)
    profiles = []
    for combo in itertools.product(*per_axis):
        shapes: dict[str, ShapeRange] = {}
        for tensor in inputs:
            axes = buckets.inputs.get(tensor.name)
            if not axes:
                continue
            rest = list(tensor.shape[1:])
            low, high = list(rest), list(rest)
            for index, axis in axes.items():
                if not 1 <= index <= len(rest):
                    raise SpecError(
                        f"`shape_buckets` puts axis `{axis}` at index {index} of input `{tensor.name}`, "
                        f"which has shape {list(tensor.shape)}"
                    )
                lo, hi = combo[order.index(axis)]
                low[index - 1], high[index - 1] = lo, hi
            left = [i + 1 for i, d in enumerate(low) if d < 0]
            if left:
                raise SpecError(
                    f"input `{tensor.name}` has dynamic axis {left[0]} that no shape bucket names "
                    f"(shape {list(tensor.shape)}); give `tensorrt.profiles` for it"
                )
            shapes[tensor.name] = ShapeRange(tuple(low), tuple(high), tuple(high))
        profiles.append(EngineProfile(batch, shapes))
    return tuple(profiles)


def _check_edges_inside(
    profiles: Sequence[EngineProfile], buckets: Buckets, inputs: Sequence[TensorSpec]
) -> None:
    """Every edge of every bucketed input lies in some given profile's range (clients pad to it)."""
    for tensor in inputs:
        for index, axis in buckets.inputs.get(tensor.name, {}).items():
            for edge in buckets.axes[axis]:
                if not any(
                    tensor.name in p.shapes
                    and p.shapes[tensor.name].min[index - 1] <= edge <= p.shapes[tensor.name].max[index - 1]
                    for p in profiles
                ):
                    spans = ", ".join(
                        f"{p.shapes[tensor.name].min[index - 1]}..{p.shapes[tensor.name].max[index - 1]}"
                        for p in profiles
                        if tensor.name in p.shapes
                    )
                    raise SpecError(
                        f"shape bucket {edge} of axis `{axis}` (input `{tensor.name}` axis {index}) is outside "
                        f"every `tensorrt.profiles` range ({spans or 'none given'}); give "
                        f"`serving.shape_buckets.{axis}` edges inside them, or leave `tensorrt.profiles` out "
                        "(one profile per bucket)"
                    )


def plan_with_buckets(
    plan: EnginePlan, spec: BuildSpec, buckets: Buckets | None, inputs: Sequence[TensorSpec]
) -> EnginePlan:
    """``plan`` for a model with ``buckets``: one profile per bucket where the spec gives no
    ``tensorrt.profiles``, the given ones (checked to hold every edge) otherwise; the buckets kept."""
    if buckets is None:
        return plan
    if spec.tensorrt.profiles:
        _check_edges_inside(plan.profiles, buckets, inputs)
        return dataclasses.replace(plan, buckets=buckets)
    batch = plan.profiles[0].batch
    profiles = bucket_profiles(buckets, inputs, batch)
    return dataclasses.replace(plan, profiles=profiles, buckets=buckets)


def bucketed_plan(plan: EnginePlan, spec: BuildSpec, source: Source) -> EnginePlan:
    """The engine plan once the source is known: its buckets resolved
    (:func:`tritonkit.convert.targets.buckets.resolve_buckets`), the longest lengths checked, the profiles
    planned from them."""
    from tritonkit.convert.targets.buckets import resolve_buckets  # noqa: PLC0415 (reads the ONNX graph; builds only)

    buckets = resolve_buckets(spec, source)
    if buckets is None:
        return plan
    positions = model_positions(getattr(source.torch, "module", None))
    check_lengths(spec, buckets.inputs, positions)
    return plan_with_buckets(plan, spec, buckets, source.graph.inputs)


def _known_axes(
    spec: BuildSpec, torch: TorchSource | None
) -> tuple[dict[str, dict[int, str]], list[TensorSpec]]:
    """The dynamic non-batch input axes known before export (an ONNX file's graph, read; a loaded
    ``source.torch``'s ``dynamic_axes``), and the inputs where known (empty for a torch source)."""
    if spec.source.onnx is not None:
        from tritonkit.repository.onnx_io import load_model, read_io  # noqa: PLC0415 (reads the graph)

        path = spec.resolve(spec.source.onnx)
        graph = load_model(path, check=False).graph
        carried: dict[str, dict[int, str]] = {}
        for value in graph.input:
            dims = value.type.tensor_type.shape.dim
            axes = {
                i: d.dim_param or f"{value.name}_{i}"
                for i, d in enumerate(dims)
                if i > 0 and not d.HasField("dim_value")
            }
            if axes:
                carried[value.name] = axes
        inputs = list(read_io(path, check=False).inputs)
        return {n: a for n, a in carried.items() if n in {t.name for t in inputs}}, inputs
    if torch is not None:
        names = set(torch.input_names)
        found = {t: {i: n for i, n in a.items() if i != 0} for t, a in torch.axes().items() if t in names}
        return {t: a for t, a in found.items() if a}, []
    return {}, []


def check_spec(spec: BuildSpec, torch: TorchSource | None = None, max_batch: int = 0) -> None:
    """The TensorRT target's checks that need no build (``tritonkit k8s package`` runs them): the
    given profiles, each dynamic axis's longest length (:func:`check_lengths`), the buckets' profile
    count and their edges inside given profiles; ``torch``: a loaded ``source.torch``."""
    given = spec.batching.max_batch_size
    batch = max_batch or (given if isinstance(given, int) and given > 0 else DEFAULT_MAX_BATCH_SIZE)
    profiles = resolve_profiles(spec, batch)
    carried, inputs = _known_axes(spec, torch)
    check_lengths(spec, carried, model_positions(getattr(torch, "module", None)))
    named = {a: tuple(e) for a, e in spec.serving.shape_buckets.items() if e}
    axes = {t: {i: n for i, n in a.items() if n in named} for t, a in carried.items()}
    axes = {t: a for t, a in axes.items() if a}
    if not axes:
        return
    buckets = Buckets(
        axes={a: named[a] for a in sorted({n for m in axes.values() for n in m.values()})}, inputs=axes
    )
    if spec.tensorrt.profiles:
        if inputs:
            _check_edges_inside(profiles, buckets, inputs)
    else:
        _check_count(buckets)
