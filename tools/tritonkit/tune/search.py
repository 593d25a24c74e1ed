"""Searching a grid of configs for the highest throughput under a latency budget: brute force and quick.

Pure: the caller's ``evaluate(point)`` measures one config (a point: axis name -> value) and says what
it sustained within the budget (:class:`Outcome`). Points are evaluated at most once (cached), so the
number of distinct evaluations is the cost both searches are compared by.

``brute``: every point of the grid. ``quick``: coordinate ascent from a start point (the model's own
config, snapped onto the grid): sweep one axis at a time with the others fixed, move to the best value,
repeat until a whole pass moves nothing, then the same from the best point's neighbours once more (a
second ascent from the axis-wise best values catches the usual two-axis interaction: larger batches
only pay with a longer batching delay). Feasible points (p99 within the budget, at least the minimum
throughput) beat infeasible ones; among infeasible, a lower p99 is better, so the ascent walks into the
feasible region.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Axis", "Outcome", "SearchResult", "brute", "quick"]

Point = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Axis:
    """One tunable: its name and candidate values in a meaningful order (small to large)."""

    name: str
    values: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one config sustained: ``throughput`` at its best level, ``p99_ms`` there, and whether that
    level met the constraints (``feasible``)."""

    throughput: float
    p99_ms: float
    feasible: bool


@dataclasses.dataclass
class SearchResult:
    """The best point (None when no point was feasible) and every evaluation, in order."""

    best: Point | None
    best_outcome: Outcome | None
    trials: list[tuple[Point, Outcome]]

    @property
    def evaluations(self) -> int:
        return len(self.trials)


def _key(point: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in point.items()))


def _score(outcome: Outcome) -> tuple[int, float]:
    return (1, outcome.throughput) if outcome.feasible else (0, -outcome.p99_ms)


class _Cache:
    def __init__(self, evaluate: Callable[[Point], Outcome]) -> None:
        self.evaluate = evaluate
        self.seen: dict[tuple[tuple[str, str], ...], Outcome] = {}
        self.trials: list[tuple[Point, Outcome]] = []

    def __call__(self, point: Point) -> Outcome:
        key = _key(point)
        if key not in self.seen:
            outcome = self.evaluate(dict(point))
            self.seen[key] = outcome
            self.trials.append((dict(point), outcome))
        return self.seen[key]

    def result(self) -> SearchResult:
        feasible = [(p, o) for p, o in self.trials if o.feasible]
        if not feasible:
            return SearchResult(None, None, self.trials)
        point, outcome = max(feasible, key=lambda po: (po[1].throughput, -po[1].p99_ms))  # ties: lower p99
        return SearchResult(point, outcome, self.trials)


def grid(axes: Sequence[Axis]) -> list[Point]:
    """Every point of the grid (axis order kept)."""
    return [
        dict(zip([a.name for a in axes], combo, strict=True))
        for combo in itertools.product(*(a.values for a in axes))
    ]


def brute(axes: Sequence[Axis], evaluate: Callable[[Point], Outcome]) -> SearchResult:
    """Evaluate every point."""
    cache = _Cache(evaluate)
    for point in grid(axes):
        cache(point)
    return cache.result()


def snap(axes: Sequence[Axis], point: Mapping[str, Any] | None) -> Point:
    """``point`` moved onto the grid: each value, or the axis's nearest (numbers) / first value."""
    out: Point = {}
    for axis in axes:
        value = (point or {}).get(axis.name, axis.values[len(axis.values) // 2])
        if value in axis.values:
            out[axis.name] = value
        elif isinstance(value, (int, float)) and all(isinstance(v, (int, float)) for v in axis.values):
            out[axis.name] = min(axis.values, key=lambda v: abs(v - value))
        else:
            out[axis.name] = axis.values[0]
    return out


def _neighbours(axes: Sequence[Axis], point: Point, couples: Sequence[tuple[str, str]]) -> list[Point]:
    """Every value of each axis with the others fixed, and one step of both axes of each coupled pair."""
    out = [{**point, axis.name: v} for axis in axes for v in axis.values if v != point[axis.name]]
    by_name = {axis.name: axis for axis in axes}
    for a, b in couples:
        if a not in by_name or b not in by_name:
            continue
        ia, ib = by_name[a].values.index(point[a]), by_name[b].values.index(point[b])
        for da, db in ((1, 1), (-1, -1), (1, -1), (-1, 1)):
            ja, jb = ia + da, ib + db
            if 0 <= ja < len(by_name[a].values) and 0 <= jb < len(by_name[b].values):
                out.append({**point, a: by_name[a].values[ja], b: by_name[b].values[jb]})
    return out


def quick(
    axes: Sequence[Axis],
    evaluate: Callable[[Point], Outcome],
    start: Mapping[str, Any] | None = None,
    *,
    couples: Sequence[tuple[str, str]] = (("max_batch_size", "delay_us"),),
    max_steps: int = 12,
    min_gain: float = 0.0,
) -> SearchResult:
    """Steepest ascent from ``start`` (snapped onto the grid): each step looks at every value of every
    axis with the others fixed (a line search per axis) and at one step of both axes of each coupled
    pair, and moves to the best of them; when none is better it tries one step of every pair of axes, and
    stops when that finds nothing better either. ``min_gain``: a live measurement must beat the current
    point by this share to count as better (noise is no reason to keep walking)."""
    cache = _Cache(evaluate)
    current = snap(axes, start)
    cache(current)
    every_pair = [(a.name, b.name) for i, a in enumerate(axes) for b in axes[i + 1 :]]
    for _ in range(max_steps):
        best = max(_neighbours(axes, current, couples), key=lambda p: _score(cache(p)), default=current)
        if _score(cache(best)) <= _score(cache(current)):
            # Stuck: before giving up, one step of every pair of axes (interactions nobody declared).
            best = max(
                _neighbours(axes, current, every_pair), key=lambda p: _score(cache(p)), default=current
            )
            if _score(cache(best)) <= _score(cache(current)):
                break
        current = best
    return cache.result()
