"""Shape buckets: how a model with a dynamic non-batch axis (a text model's sequence length) is served.

Copied by the build beside a runner's ``model.py`` as ``shape_buckets.py``; it imports nothing from
tritonkit (and neither NumPy nor torch: arrays come in and go out through the callables the caller
passes), so the python-backend runners, the client and the build read one description of the buckets.

A model's config carries them as the parameter ``shape_buckets``, a JSON object::

    {"axes":    {"seq": [32, 64, 128, 256]},              # edges per axis name, ascending
     "inputs":  {"input_ids": {"1": "seq"}, ...},           # input -> {axis index: axis name}
     "outputs": {"hidden": {"1": "seq"}},                   # outputs that carry an axis, cut back
     "pad":     {"input_ids": 0, "attention_mask": 0},      # pad value per input (0 if absent)
     "pad_at":  "server"}                                   # or "client" (engines without ragged input)

Axis indices count the request tensor's own axes, the batch axis (0) included where the model
batches, as ``dynamic_axes`` does. A request's length on an axis is read from the inputs that carry
it (they must agree); it is padded up to the smallest edge that covers it, and a length above the
last edge is refused (:class:`TooLongError`): the last edge is the longest length the model takes.
Requests of one execute are grouped by their padded shape, and a group is padded up into the next
longer one where that costs less than running it on its own (:func:`plan_groups`). Outputs that
carry an axis are cut back to each request's own length.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PARAMETER = "shape_buckets"


class BucketError(ValueError):
    """A request the buckets cannot take (its message is the one line the caller answers with)."""


class TooLongError(BucketError):
    """A request longer than the last edge of an axis."""


@dataclass(frozen=True)
class Buckets:
    """The parsed parameter (see the module docstring)."""

    axes: Mapping[str, tuple[int, ...]]
    inputs: Mapping[str, Mapping[int, str]]
    outputs: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    pad: Mapping[str, float] = field(default_factory=dict)
    pad_at: str = "server"

    # --- the parameter ---------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Buckets | None:
        """The buckets of a config parameter's value; None for an empty value. A malformed value is a
        :class:`BucketError` naming what was expected."""
        if not text.strip():
            return None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise BucketError(
                f"parameter `{PARAMETER}` must be a JSON object; got {text[:80]!r} ({exc})"
            ) from None
        return cls.from_mapping(data)

    @classmethod
    def from_mapping(cls, data: Any) -> Buckets:
        """From the decoded JSON object; every wrong part a :class:`BucketError`."""
        if not isinstance(data, Mapping):
            raise BucketError(f"parameter `{PARAMETER}` must be a JSON object; got {type(data).__name__}")
        axes_in = data.get("axes")
        if not isinstance(axes_in, Mapping) or not axes_in:
            raise BucketError(f"`{PARAMETER}.axes` must map axis names to edge lists; got {axes_in!r}")
        axes: dict[str, tuple[int, ...]] = {}
        for name, edges in axes_in.items():
            if (
                not isinstance(edges, list)
                or not edges
                or not all(isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in edges)
                or sorted(set(edges)) != list(edges)
            ):
                raise BucketError(
                    f"`{PARAMETER}.axes.{name}` must be ascending distinct integers >= 1; got {edges!r}"
                )
            axes[str(name)] = tuple(edges)
        inputs = _axis_map(data.get("inputs"), "inputs", axes)
        if not inputs:
            raise BucketError(f"`{PARAMETER}.inputs` must name at least one input axis")
        outputs = _axis_map(data.get("outputs", {}), "outputs", axes)
        pad_in = data.get("pad", {})
        if not isinstance(pad_in, Mapping) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in pad_in.values()
        ):
            raise BucketError(f"`{PARAMETER}.pad` must map input names to numbers; got {pad_in!r}")
        pad_at = data.get("pad_at", "server")
        if pad_at not in ("server", "client"):
            raise BucketError(f"`{PARAMETER}.pad_at` must be server or client; got {pad_at!r}")
        return cls(axes, inputs, outputs, {str(k): v for k, v in pad_in.items()}, str(pad_at))

    def to_json(self) -> str:
        """The parameter's value (what :meth:`parse` reads back as these buckets)."""
        return json.dumps(
            {
                "axes": {k: list(v) for k, v in self.axes.items()},
                "inputs": {n: {str(a): v for a, v in m.items()} for n, m in self.inputs.items()},
                "outputs": {n: {str(a): v for a, v in m.items()} for n, m in self.outputs.items()},
                "pad": dict(self.pad),
                "pad_at": self.pad_at,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    # --- one request -----------------------------------------------------------------------------
    def longest(self, axis: str) -> int:
        return self.axes[axis][-1]

    def lengths(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
        """Each axis's length in one request (input name -> shape); a :class:`BucketError` when inputs
        sharing an axis disagree, :class:`TooLongError` above the last edge."""
        found: dict[str, tuple[int, str]] = {}
        for name, axes in self.inputs.items():
            shape = shapes.get(name)
            if shape is None:
                continue
            for index, axis in axes.items():
                if index >= len(shape):
                    raise BucketError(
                        f"input `{name}` has shape {list(shape)}; expected an axis {index} ({axis})"
                    )
                length = int(shape[index])
                seen = found.get(axis)
                if seen is not None and seen[0] != length:
                    raise BucketError(
                        f"inputs `{seen[1]}` and `{name}` disagree on axis {axis}: {seen[0]} and {length}"
                    )
                found[axis] = (length, name)
        for axis, (length, name) in found.items():
            if length > self.longest(axis):
                raise TooLongError(
                    f"input `{name}` is {length} long on axis {axis}; the model takes at most "
                    f"{self.longest(axis)} (its last shape bucket)"
                )
            if length < 1:
                raise BucketError(f"input `{name}` is {length} long on axis {axis}; expected at least 1")
        return {axis: length for axis, (length, _) in found.items()}

    def edges_for(self, lengths: Mapping[str, int]) -> tuple[int, ...]:
        """The padded length per axis (in :attr:`axes` order; an axis no input carried keeps 0)."""
        return tuple(edge_for(lengths[a], e) if a in lengths else 0 for a, e in self.axes.items())

    def padded_shape(self, name: str, shape: Sequence[int], edges: Sequence[int]) -> tuple[int, ...]:
        """``shape`` of input ``name`` with each bucketed axis at its edge in ``edges``."""
        out = list(shape)
        order = list(self.axes)
        for index, axis in self.inputs.get(name, {}).items():
            out[index] = edges[order.index(axis)]
        return tuple(out)

    def cut(self, name: str, lengths: Mapping[str, int]) -> tuple[tuple[int, int], ...]:
        """(axis index, length) pairs output ``name`` is cut back to for a request of ``lengths``."""
        return tuple(
            (index, lengths[axis]) for index, axis in self.outputs.get(name, {}).items() if axis in lengths
        )

    def pad_value(self, name: str) -> float:
        return float(self.pad.get(name, 0))


def _axis_map(value: Any, where: str, axes: Mapping[str, Sequence[int]]) -> dict[str, dict[int, str]]:
    if not isinstance(value, Mapping):
        raise BucketError(f"`{PARAMETER}.{where}` must map tensor names to {{axis: name}}; got {value!r}")
    out: dict[str, dict[int, str]] = {}
    for tensor, mapping in value.items():
        if not isinstance(mapping, Mapping):
            raise BucketError(
                f"`{PARAMETER}.{where}.{tensor}` must map axis indices to names; got {mapping!r}"
            )
        entry: dict[int, str] = {}
        for index, axis in mapping.items():
            try:
                position = int(index)
            except (TypeError, ValueError):
                position = -1
            if position < 1:
                raise BucketError(
                    f"`{PARAMETER}.{where}.{tensor}` axis index must be an integer >= 1 (0 is the batch); "
                    f"got {index!r}"
                )
            if axis not in axes:
                raise BucketError(
                    f"`{PARAMETER}.{where}.{tensor}` names axis {axis!r}; expected one of {', '.join(axes)}"
                )
            entry[position] = str(axis)
        out[str(tensor)] = entry
    return out


def edge_for(length: int, edges: Sequence[int]) -> int:
    """The smallest edge >= ``length`` (``length`` must not pass the last edge)."""
    for edge in edges:
        if length <= edge:
            return edge
    raise TooLongError(f"length {length} is above the last edge {edges[-1]}")


def default_edges(longest: int, shortest: int = 16) -> tuple[int, ...]:
    """Powers of two from ``shortest`` up to ``longest``, which is always the last edge."""
    edges: list[int] = []
    edge = max(1, shortest)
    while edge < longest:
        edges.append(edge)
        edge *= 2
    edges.append(longest)
    return tuple(edges)


def edges_from_lengths(lengths: Sequence[int], longest: int, count: int = 4) -> tuple[int, ...]:
    """``count`` edges chosen from a length histogram: each bucket holds about the same share of the
    traffic (edges at the length quantiles, rounded up to a multiple of 8, the tensor cores' step),
    ``longest`` the last. Few distinct lengths give fewer edges."""
    if not lengths:
        return default_edges(longest)
    ordered = sorted(min(max(1, int(n)), longest) for n in lengths)
    edges = set()
    for k in range(1, count):
        quantile = ordered[min(len(ordered) - 1, (k * len(ordered)) // count)]
        edges.add(min(longest, -(-quantile // 8) * 8))
    edges.add(longest)
    return tuple(sorted(edges))


def padded_share(lengths: Sequence[int], edges: Sequence[int]) -> float:
    """The share of padding in the tokens sent when each length is padded to its edge."""
    real = sum(lengths)
    sent = sum(edge_for(n, edges) for n in lengths)
    return 0.0 if sent == 0 else 1.0 - real / sent


#: Cost of running ``rows`` rows padded to ``edges`` (one number per axis), in any unit.
Cost = Callable[[int, tuple[int, ...]], float]


def token_cost(launch: float) -> Cost:
    """A cost proxy with no measurement: the tokens a batch computes (rows times the product of its
    edges) plus ``launch`` tokens per run (what a launch costs beside its work)."""

    def cost(rows: int, edges: tuple[int, ...]) -> float:
        size = 1
        for e in edges:
            size *= max(1, e)
        return rows * size + launch

    return cost


def plan_groups(
    members: Sequence[tuple[int, tuple[int, ...]]], cost: Cost
) -> list[tuple[tuple[int, ...], list[int]]]:
    """Group requests for one execute: ``members`` are (rows, padded edges) per request; returns
    (edges to pad to, member positions) per run. Requests of equal edges run together; a group is
    then padded up into a longer one (every edge >= its own) while that lowers the total cost."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for position, (_, edges) in enumerate(members):
        groups.setdefault(edges, []).append(position)
    rows = {edges: sum(members[p][0] for p in positions) for edges, positions in groups.items()}
    merged = True
    while merged and len(groups) > 1:
        merged = False
        best: tuple[float, tuple[int, ...], tuple[int, ...]] | None = None
        for small in groups:
            for large in groups:
                if small == large or not all(a <= b for a, b in zip(small, large, strict=True)):
                    continue
                saving = (
                    cost(rows[small], small)
                    + cost(rows[large], large)
                    - cost(rows[small] + rows[large], large)
                )
                if saving > 0 and (best is None or saving > best[0]):
                    best = (saving, small, large)
        if best is not None:
            _, small, large = best
            groups[large].extend(groups.pop(small))
            rows[large] += rows.pop(small)
            merged = True
    return [(edges, sorted(positions)) for edges, positions in sorted(groups.items())]
