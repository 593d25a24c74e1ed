"""Searching a grid of configs for the highest throughput under a latency budget: brute force and quick.

Pure: the caller's ``evaluate(point)`` measures one config (a point: axis name -> value) and says what
it sustained within the budget (:class:`Outcome`). Points are evaluated at most once (cached), so the
number of distinct evaluations is the cost both searches are compared by; with ``same`` (a key per point)
points that make one config are one evaluation (e.g. the ``fine`` and ``pow2`` bucket ladders of a max
batch of 16 are both 1, 2, 4, 8, 16).

``brute``: every point of the grid. ``quick``: coordinate ascent from a start point (the model's own
config, snapped onto the grid): walk one axis at a time from the current point while each step is
better, pass after pass until a pass moves nothing; then joint steps of declared axis couples (larger
batches only pay with a longer batching delay), when still stuck of every pair of axes, and last every
value of every axis from the point reached. A *late* axis (one whose values cost more to load than to
measure, e.g. a plan compiled at load) stays at its start value through all of that; then each of its
other values is measured once, at the best point measured so far. Feasible points (p99 within the budget, at least the minimum
throughput) beat infeasible ones; among infeasible, a lower p99 is better, so the ascent walks into the
feasible region.

``finals``: after either search, the configs measured within a share of the best are measured again in
alternating rounds (with the model's own config beside them when given, never crowned) and the winner is
the one with the highest median of those fresh figures. A
search's best is the maximum of many noisy measurements: on a flat top the config that measured
highest once is often not the one that serves most (the winner's curse).
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

__all__ = ["Axis", "Final", "Outcome", "SearchResult", "brute", "finalists", "finals", "quick"]

Point = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Axis:
    """One tunable: its name and candidate values in a meaningful order (small to large)."""

    name: str
    values: tuple[Any, ...]
    #: quick search: held at the start value while the other axes are walked, then each other value
    #: tried once at the best point measured (a value that makes every load slow is not paid for on
    #: every trial)
    late: bool = False


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
    def __init__(
        self, evaluate: Callable[[Point], Outcome], same: Callable[[Point], Hashable] | None = None
    ) -> None:
        self.evaluate = evaluate
        self.same: Callable[[Point], Hashable] = same or _key
        self.seen: dict[Hashable, Outcome] = {}
        self.trials: list[tuple[Point, Outcome]] = []
        self.keys: dict[tuple[tuple[str, str], ...], Hashable] = {}  # ``same`` once per distinct point

    def __call__(self, point: Point) -> Outcome:
        raw = _key(point)
        if raw not in self.keys:
            self.keys[raw] = self.same(point)  # tune's renders the point's config text: once is enough
        key = self.keys[raw]
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


def brute(
    axes: Sequence[Axis],
    evaluate: Callable[[Point], Outcome],
    *,
    same: Callable[[Point], Hashable] | None = None,
) -> SearchResult:
    """Evaluate every point (once per ``same`` key)."""
    cache = _Cache(evaluate, same)
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


def _diagonals(axes: Sequence[Axis], point: Point, pairs: Sequence[tuple[str, str]]) -> list[Point]:
    """One step of both axes of each pair, in all four directions (those that stay on the grid)."""
    out = []
    by_name = {axis.name: axis for axis in axes}
    for a, b in pairs:
        if a not in by_name or b not in by_name:
            continue
        va, vb = by_name[a].values, by_name[b].values
        ia, ib = va.index(point[a]), vb.index(point[b])
        for da, db in ((1, 1), (-1, -1), (1, -1), (-1, 1)):
            ja, jb = ia + da, ib + db
            if 0 <= ja < len(va) and 0 <= jb < len(vb):
                out.append({**point, a: va[ja], b: vb[jb]})
    return out


def quick(
    axes: Sequence[Axis],
    evaluate: Callable[[Point], Outcome],
    start: Mapping[str, Any] | None = None,
    *,
    couples: Sequence[tuple[str, str]] = (("max_batch_size", "delay_us"),),
    max_steps: int = 12,
    min_gain: float = 0.0,
    same: Callable[[Point], Hashable] | None = None,
) -> SearchResult:
    """Coordinate ascent from ``start`` (snapped onto the grid).

    A pass walks each axis in turn from the current point: one step up, and on while each step is
    better; if the first step up is not better, the same downwards (the axes are ordered, and along one
    axis throughput rises to one peak and falls); the walk's end becomes the current point. Passes repeat
    until one moves nothing. Then one step of both axes of each coupled pair (a larger batch only pays
    with a longer delay); when that finds nothing better, one step of every pair of axes (interactions
    nobody declared); when that finds nothing either, every value of every axis (a walk stops at the
    first step that is no better, and a measured surface has dips that are only noise). A better point
    found there starts the passes again. ``min_gain``: between two feasible points, the newer must beat
    the current by this share to count as better (noise is no reason to keep walking). ``same``: one
    key for points that make one config (the first measured stands for the rest)."""
    cache = _Cache(evaluate, same)

    def better(a: Point, b: Point) -> bool:
        oa, ob = cache(a), cache(b)
        if oa.feasible and ob.feasible:
            return oa.throughput > ob.throughput * (1.0 + min_gain)
        return _score(oa) > _score(ob)

    def walk(point: Point, axis: Axis) -> Point:
        index = axis.values.index(point[axis.name])
        for step in (1, -1):
            end, j = point, index + step
            while 0 <= j < len(axis.values):
                candidate = {**point, axis.name: axis.values[j]}
                if not better(candidate, end):
                    break
                end, j = candidate, j + step
            if end is not point:
                return end
        return point

    walked = [a for a in axes if not a.late]

    def lines(point: Point) -> list[Point]:
        return [{**point, a.name: v} for a in walked for v in a.values if v != point[a.name]]

    current = snap(axes, start)
    cache(current)
    every_pair = [(a.name, b.name) for i, a in enumerate(walked) for b in walked[i + 1 :]]
    for _ in range(max_steps):
        moved = False
        for axis in walked:
            end = walk(current, axis)
            if end is not current:
                current, moved = end, True
        if moved:
            continue
        # Stuck: the declared couples, every pair, then every value of every axis (a walk stops at the
        # first step that is no better, and a measured surface has dips that are only noise).
        for candidates in (
            _diagonals(walked, current, couples),
            _diagonals(walked, current, every_pair),
            lines(current),
        ):
            best = max(candidates, key=lambda p: _score(cache(p)), default=current)
            if best is not current and better(best, current):
                current, moved = best, True
                break
        if not moved:
            break
    for axis in (a for a in axes if a.late):  # each of its other values once, at the best point measured
        at = cache.result().best or current  # (the ascent's point may trail it by less than min_gain)
        for value in axis.values:
            if value != at[axis.name]:
                cache({**at, axis.name: value})
    return cache.result()


@dataclasses.dataclass
class Final:
    """One finalist: what the search measured (``searched``) and its fresh figures, one per round
    (throughput at a level within the budget; 0.0 when no level fitted that round)."""

    point: Point
    searched: Outcome
    figures: list[float] = dataclasses.field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.figures) if self.figures else self.searched.throughput


def finalists(result: SearchResult, *, top: int = 4, within: float = 0.10) -> list[tuple[Point, Outcome]]:
    """Up to ``top`` feasible points whose throughput lies within ``within`` of the best, best first."""
    feasible = sorted(
        (po for po in result.trials if po[1].feasible), key=lambda po: (-po[1].throughput, po[1].p99_ms)
    )
    if not feasible:
        return []
    floor = feasible[0][1].throughput * (1.0 - within)
    return [po for po in feasible if po[1].throughput >= floor][:top]


def finals(
    result: SearchResult,
    remeasure: Callable[[Point, int], Outcome],
    *,
    top: int = 4,
    within: float = 0.10,
    rounds: int = 3,
    reference: Final | None = None,
) -> tuple[Point | None, list[Final]]:
    """(the winner, the finalists with their figures): the :func:`finalists` of ``result`` measured again
    ``rounds`` times, in alternating order round after round (a drift of the machine falls on all of
    them alike), by ``remeasure(point, round)``; the winner has the highest median of its fresh figures
    (ties: the search's order). ``reference`` (the model's own config) is measured in the same rounds,
    first in even rounds and last in odd ones, its figures appended to it; it is never crowned, and it
    makes one finalist worth measuring again (to set against it). With no finalist to compare, or no
    rounds, nothing is measured again and the search's best stands."""
    chosen = [Final(dict(p), o) for p, o in finalists(result, top=top, within=within)]
    if top < 1 or rounds < 1 or not chosen or (len(chosen) < 2 and reference is None):
        return result.best, chosen
    for r in range(rounds):
        order: list[Final] = ([reference] if reference is not None else []) + chosen
        for final in order if r % 2 == 0 else order[::-1]:
            outcome = remeasure(dict(final.point), r)
            final.figures.append(outcome.throughput if outcome.feasible else 0.0)
    best = max(chosen, key=lambda f: f.median)  # max keeps the first of equals: the search's order
    return best.point, chosen
