"""A measurement's traffic on a model's shape-bucketed axes: its lengths, the edges a tune tries from
them, and what the edges cost in tokens.

A model whose config carries the parameter ``shape_buckets`` (:mod:`tritonkit.backends.runners.shape_buckets`)
pads each request up to the smallest edge that covers it on every dynamic axis. Owns:

- :func:`traffic_of`: each request's length per axis, from a perf_analyzer ``--input-data`` file (its
  entries as :mod:`tritonkit.measure.input_data` reads them, against the config's inputs) or, without
  one, the generator's own length for every variable dim (:data:`~tritonkit.measure.payloads.VARIABLE_DIM`);
  a request above the last edge is one line naming the entry.
- :func:`edge_candidates`: the ``edges.<axis>`` values ``tritonkit tune --input-data`` searches: the
  current edges, the default powers of two, and edges at the traffic's length quantiles for 2 to 6
  buckets (:func:`~tritonkit.backends.runners.shape_buckets.edges_from_lengths`), every set ending at the
  current last edge, the longest length the model takes (a GPU torch program's dynamic axis is fixed at
  build to it). Values are text (``"40,72,128"``: the trial log's keys stay JSON-stable), ordered by
  bucket count; :func:`with_edges` writes a point's edges into a config's parameter.
- :func:`token_figures`: real tokens per request (the product of its lengths over the bucketed axes,
  times its rows), the tokens sent once each request is padded to its edges, their padded share, and
  tokens/s at a throughput. The server's runner may pad a group of requests further up into a longer
  bucket where one run costs less than two (``plan_groups``), so the share is a lower bound there.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from tritonkit.backends.runners.shape_buckets import (
    PARAMETER,
    BucketError,
    Buckets,
    default_edges,
    edge_for,
    edges_from_lengths,
)
from tritonkit.config import ModelConfig
from tritonkit.config.dtypes import normalize_dtype
from tritonkit.config.tensors import TensorSpec
from tritonkit.errors import TritonKitError
from tritonkit.measure.input_data import requests
from tritonkit.measure.payloads import VARIABLE_DIM, generated_lengths

__all__ = [
    "EDGES",
    "Traffic",
    "bucket_counts",
    "buckets_in",
    "edge_candidates",
    "edges_text",
    "generated_line",
    "point_edges",
    "token_figures",
    "token_line",
    "traffic_of",
    "with_edges",
]

#: a tune point's key for the edges of one axis: ``edges.seq``
EDGES = "edges."
#: bucket counts the candidate edge sets are drawn for (besides the current and the default edges)
bucket_counts: tuple[int, ...] = (2, 3, 4, 5, 6)


@dataclasses.dataclass(frozen=True)
class Traffic:
    """Each request's length per bucketed axis (``lengths``), its rows, and where the lengths came from."""

    lengths: tuple[Mapping[str, int], ...]
    rows: int
    source: str

    def of(self, axis: str) -> list[int]:
        return [entry[axis] for entry in self.lengths if axis in entry]


def buckets_in(cfg: ModelConfig) -> Buckets | None:
    """The shape buckets a config carries (None: no parameter, or a model that does not batch); a
    malformed value is one line naming the model."""
    text = str(cfg.parameters.get(PARAMETER, ""))
    if not text.strip() or cfg.max_batch_size <= 0:
        return None
    try:
        return Buckets.parse(text)
    except BucketError as exc:
        raise TritonKitError(f"model `{cfg.name}`'s config: {exc}") from None


def traffic_of(
    cfg: ModelConfig, input_data: str | os.PathLike[str] | None, batch_size: int = 1
) -> Traffic | None:
    """The traffic's lengths on ``cfg``'s bucketed axes (None: the config has no shape buckets)."""
    buckets = buckets_in(cfg)
    if buckets is None:
        return None
    if input_data is None:
        generated = {axis: VARIABLE_DIM for names in buckets.inputs.values() for axis in names.values()}
        return Traffic((generated,), batch_size, f"generated (every variable dim {VARIABLE_DIM} long)")
    specs = tuple((t.name, normalize_dtype(t.data_type), tuple(t.dims)) for t in cfg.inputs)
    lengths = []
    for i, shapes in enumerate(_shapes(str(input_data), specs)):
        try:
            lengths.append(buckets.lengths(shapes))
        except BucketError as exc:
            raise TritonKitError(f"--input-data {input_data}: entry {i}: {exc}") from None
    return Traffic(tuple(lengths), batch_size, f"--input-data {input_data}")


@functools.lru_cache(maxsize=8)
def _shapes(
    path: str, specs: tuple[tuple[str, str, tuple[int, ...]], ...]
) -> tuple[dict[str, tuple[int, ...]], ...]:
    """Each entry's shape per input (batch axis included), read once per file and inputs, as the
    generator reads them (a file it refuses is refused here with the same line)."""
    inputs = [TensorSpec(name, dtype, (-1, *dims)) for name, dtype, dims in specs]
    found = requests(path, inputs, max_batch_size=1, batch_size=1)
    return tuple({name: tuple(array.shape) for name, array in entry.items()} for entry in found)


def generated_line(cfg: ModelConfig) -> str | None:
    """What generated requests send for ``cfg``'s variable dims (None: it has none), and the edge that
    length is padded to where the config has shape buckets."""
    batching = cfg.max_batch_size > 0
    inputs = [
        TensorSpec(t.name, normalize_dtype(t.data_type), ((-1,) if batching else ()) + tuple(t.dims))
        for t in cfg.inputs
    ]
    line = generated_lengths(inputs, cfg.max_batch_size)
    buckets = buckets_in(cfg)
    if line is None or buckets is None:
        return line
    padded = ", ".join(
        f"{axis} to {edge_for(VARIABLE_DIM, edges)}"
        for axis, edges in buckets.axes.items()
        if edges[-1] >= VARIABLE_DIM
    )
    return line + (f" (padded on {padded} by the shape buckets)" if padded else "")


def edges_text(edges: Sequence[int]) -> str:
    return ",".join(str(int(e)) for e in edges)


def _parse(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in str(text).split(",") if p.strip())


def edge_candidates(buckets: Buckets, traffic: Traffic, traced: bool = False) -> dict[str, tuple[str, ...]]:
    """``edges.<axis>`` -> the edge sets to try (text, fewest buckets first), each ending at the axis's
    current last edge. ``traced``: the version serves only the edges its program was traced at (the
    native backend's ``model.ts`` has a method per current edge), so every edge is moved up to the
    nearest current one: each set is a subset of the current edges."""
    out: dict[str, tuple[str, ...]] = {}
    for axis, current in buckets.axes.items():
        longest = current[-1]
        lengths = traffic.of(axis)
        sets = {tuple(current), default_edges(longest)}
        sets |= {edges_from_lengths(lengths, longest, k) for k in bucket_counts if lengths}
        if traced:
            sets = {_onto(edges, current) for edges in sets}
        out[EDGES + axis] = tuple(edges_text(e) for e in sorted(sets, key=lambda e: (len(e), e)))
    return out


def _onto(edges: Sequence[int], traced: Sequence[int]) -> tuple[int, ...]:
    """``edges`` each moved up to the smallest ``traced`` edge at or above it, duplicates dropped."""
    return tuple(sorted({next(t for t in traced if t >= e) for e in edges}))


def point_edges(point: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The edges a tune point sets, per axis (empty: none)."""
    return {k.removeprefix(EDGES): _parse(v) for k, v in point.items() if k.startswith(EDGES)}


def with_edges(cfg: ModelConfig, edges: Mapping[str, Sequence[int]]) -> None:
    """Set ``edges`` in ``cfg``'s ``shape_buckets`` (in place); one line when an axis is unknown or a
    set does not end at the model's longest length (its last edge now)."""
    buckets = buckets_in(cfg)
    if buckets is None:
        raise TritonKitError(f"model `{cfg.name}` has no shape buckets; edges {dict(edges)} cannot apply")
    axes = dict(buckets.axes)
    for axis, wanted in edges.items():
        if axis not in axes:
            raise TritonKitError(f"edges for axis {axis!r}: model `{cfg.name}`'s axes are {', '.join(axes)}")
        new = tuple(int(e) for e in wanted)
        if not new or sorted(set(new)) != list(new) or new[0] < 1 or new[-1] != axes[axis][-1]:
            raise TritonKitError(
                f"edges {list(new)} for axis {axis}: expected ascending lengths ending at {axes[axis][-1]}, "
                "the longest the model takes (its last edge, fixed at build)"
            )
        axes[axis] = new
    changed = dataclasses.replace(buckets, axes=axes)
    cfg.parameters[PARAMETER] = changed.to_json()


def token_figures(traffic: Traffic, buckets: Buckets, throughput: float) -> dict[str, Any]:
    """Tokens per request (real, and sent after padding to ``buckets``' edges), the padded share of the
    tokens sent, and real and sent tokens/s at ``throughput`` requests/s."""
    real = sent = 0
    for entry in traffic.lengths:
        real += math.prod(entry.values())
        sent += math.prod(edge_for(n, buckets.axes[a]) for a, n in entry.items())
    count = max(1, len(traffic.lengths))
    per_request, sent_per_request = traffic.rows * real / count, traffic.rows * sent / count
    return {
        "tokens_per_request": round(per_request, 3),
        "sent_tokens_per_request": round(sent_per_request, 3),
        "token_padded_share": round(1.0 - real / sent, 4) if sent else 0.0,
        "tokens_per_s": round(throughput * per_request, 1),
        "sent_tokens_per_s": round(throughput * sent_per_request, 1),
    }


def token_line(figures: Mapping[str, Any]) -> str:
    """``4,210 tokens/s (6,020 sent after padding: 30.1 % of them padding)``."""
    return (
        f"{figures['tokens_per_s']:,.0f} tokens/s ({figures['sent_tokens_per_s']:,.0f} sent after padding: "
        f"{figures['token_padded_share']:.1%} of them padding)"
    )
