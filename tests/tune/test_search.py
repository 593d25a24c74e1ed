"""Quick search against brute force on a deterministic response surface (unit): within 5 % with at most a third
of the measurements, from many starts and budgets."""

from __future__ import annotations

import json
import random
from functools import partial
from pathlib import Path

import pytest

from tritonkit.config import ModelConfig
from tritonkit.errors import TritonKitError
from tritonkit.tune.finals import crowned
from tritonkit.tune.search import Axis, Final, Outcome, SearchResult, brute, finals, grid, quick, snap
from tritonkit.tune.space import axes_for, describe
from tritonkit.tune.synthetic import AXES, noisy_surface, surface


@pytest.mark.parametrize("budget", [5.0, 8.0, 10.0, 15.0, 20.0, 30.0, 50.0])
def test_quick_is_within_five_percent_of_brute_with_a_third_of_the_measurements(budget: float) -> None:
    full = brute(AXES, lambda p: surface(p, budget))
    assert full.evaluations == len(grid(AXES)) == 576
    assert full.best_outcome is not None
    starts = random.Random(int(budget)).sample(grid(AXES), 12)
    for start in starts:
        fast = quick(AXES, lambda p: surface(p, budget), start)
        assert fast.best_outcome is not None, start
        assert fast.best_outcome.throughput >= 0.95 * full.best_outcome.throughput, (start, fast.best)
        assert fast.evaluations <= full.evaluations / 3, (start, fast.evaluations)


def test_each_point_is_measured_once() -> None:
    calls: list[str] = []

    def evaluate(point: dict[str, object]) -> Outcome:
        calls.append(repr(sorted(point.items())))
        return surface(point, 20.0)

    quick(
        AXES,
        evaluate,
        {"max_batch_size": 1, "delay_us": 0, "preferred": "none", "instances": 1, "queue": "unbounded"},
    )
    assert len(calls) == len(set(calls))


def test_infeasible_everywhere_gives_no_winner_and_min_throughput_counts() -> None:
    assert brute(AXES, lambda p: surface(p, 0.5)).best is None
    assert quick(AXES, lambda p: surface(p, 20.0, min_throughput=1e9)).best is None


def test_snap_moves_a_start_onto_the_grid() -> None:
    axes = [
        Axis("max_batch_size", (1, 2, 4, 8)),
        Axis("delay_us", ("off", 0, 500)),
        Axis("preferred", ("none", "max")),
    ]
    assert snap(axes, {"max_batch_size": 6, "delay_us": 2000, "preferred": "max"}) == {
        "max_batch_size": 4,
        "delay_us": "off",
        "preferred": "max",
    }


def test_tensorrt_batch_axis_stays_within_the_engine_profiles(tmp_path: Path) -> None:
    cfg = ModelConfig("plan", platform="tensorrt_plan", max_batch_size=64)
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "build.json").write_text(
        json.dumps({"extra": {"engine": {"profiles": [{"batch": [4, 16, 32]}]}}})
    )
    axes = {a.name: a.values for a in axes_for(cfg, model_dir=tmp_path, gpu=True)}
    assert axes["max_batch_size"] == (4, 8, 16, 32) and axes["kind"] == ("KIND_GPU",)
    with pytest.raises(TritonKitError, match=r"outside the model's range 4\.\.32"):
        axes_for(cfg, model_dir=tmp_path, max_batch_sizes=[64])
    onnx = ModelConfig("m", backend="onnxruntime", max_batch_size=8)
    assert {a.name: a.values for a in axes_for(onnx)}["max_batch_size"] == (1, 2, 4, 8)
    assert [a.name for a in axes_for(ModelConfig("n", backend="python", max_batch_size=0))] == [
        "instances",
        "kind",
    ]


def test_quick_looks_past_a_dip_before_giving_up() -> None:
    # a measured axis with a dip: the walk from 1 stops at 2 (no better), the last step sees 3
    values = {1: 10.0, 2: 9.0, 3: 20.0, 4: 5.0}
    axes = [Axis("instances", (1, 2, 3, 4)), Axis("kind", ("KIND_CPU",))]
    result = quick(axes, lambda p: Outcome(values[p["instances"]], 1.0, True), {"instances": 1})
    assert result.best == {"instances": 3, "kind": "KIND_CPU"} and result.evaluations == 4


def test_quick_walks_an_axis_only_while_it_improves() -> None:
    # a single peak at 4 of 1..64: the walk goes up from 1 and stops one past the peak; the final line
    # search then measures the rest of the axis once
    order: list[int] = []

    def evaluate(point: dict[str, object]) -> Outcome:
        size = int(point["max_batch_size"])  # type: ignore[call-overload]
        order.append(size)
        return Outcome(100.0 - (size - 4) ** 2 if size <= 8 else 1.0, 1.0, True)

    axes = [Axis("max_batch_size", (1, 2, 4, 8, 16, 32, 64))]
    assert quick(axes, evaluate, {"max_batch_size": 1}).best == {"max_batch_size": 4}
    assert order[:4] == [1, 2, 4, 8]


def test_finals_crown_the_best_median_not_the_luckiest_measurement() -> None:
    # the search measured a at 100 (lucky), b at 97, c at 80 (more than 10 % below: no finalist);
    # measured again, a serves about 90 and b about 96
    searched = SearchResult(
        {"x": "a"},
        Outcome(100.0, 5.0, True),
        [({"x": p}, Outcome(t, 5.0, True)) for p, t in (("c", 80.0), ("a", 100.0), ("b", 97.0))],
    )
    again = {"a": [90.0, 91.0, 89.0], "b": [96.0, 97.0, 50.0]}
    calls: list[tuple[str, int]] = []

    def remeasure(point: dict[str, object], round_: int) -> Outcome:
        calls.append((str(point["x"]), round_))
        return Outcome(again[str(point["x"])][round_], 5.0, True)

    best, chosen = finals(searched, remeasure, rounds=3)
    assert best == {"x": "b"}  # median 96 against 90; one bad round of b does not decide
    assert [f.point["x"] for f in chosen] == ["a", "b"]
    assert [f.figures for f in chosen] == [again["a"], again["b"]]
    # alternating order round after round: a drift of the machine falls on both alike
    assert calls == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]


def test_a_finals_round_without_a_level_in_the_budget_counts_zero() -> None:
    searched = SearchResult(
        {"x": "a"}, Outcome(100.0, 5.0, True), [({"x": p}, Outcome(100.0, 5.0, True)) for p in ("a", "b")]
    )

    def remeasure(point: dict[str, object], round_: int) -> Outcome:
        return Outcome(120.0, 5.0, point["x"] == "b" or round_ == 0)  # a breaks the budget twice

    best, chosen = finals(searched, remeasure, rounds=3)
    assert best == {"x": "b"} and chosen[0].figures == [120.0, 0.0, 0.0]


def test_finals_measure_nothing_with_one_finalist_or_no_rounds() -> None:
    def never(point: dict[str, object], round_: int) -> Outcome:
        raise AssertionError("measured again")

    one = SearchResult({"x": "a"}, Outcome(100.0, 5.0, True), [({"x": "a"}, Outcome(100.0, 5.0, True))])
    best, chosen = finals(one, never)
    assert best == {"x": "a"} and [f.figures for f in chosen] == [[]]
    two = SearchResult(
        {"x": "a"}, Outcome(100.0, 5.0, True), [({"x": p}, Outcome(100.0, 5.0, True)) for p in ("a", "b")]
    )
    best, chosen = finals(two, never, rounds=0)
    assert best == {"x": "a"} and all(not f.figures for f in chosen)
    none = SearchResult(None, None, [({"x": "a"}, Outcome(1.0, 500.0, False))])
    assert finals(none, never) == (None, [])


def test_on_a_noisy_surface_brute_forces_crowned_winner_serves_more_than_its_luckiest() -> None:
    # every measurement off by up to +-5 %: the point measured highest once is often not the best one
    plain, crowned = [], []
    for budget in (8.0, 15.0, 30.0):
        true_best = brute(AXES, partial(surface, budget_ms=budget)).best_outcome
        assert true_best is not None
        for seed in range(10):
            noisy = noisy_surface(budget, seed, 0.05)
            result = brute(AXES, noisy)
            best, _ = finals(result, noisy)
            assert result.best is not None and best is not None
            plain.append(surface(result.best, budget).throughput / true_best.throughput)
            crowned.append(surface(best, budget).throughput / true_best.throughput)
    assert sum(crowned) > sum(plain) and min(crowned) >= min(plain)


def test_the_model_s_own_config_is_measured_in_the_same_rounds_and_nevercrowned() -> None:
    # one finalist is enough when the reference (the model's own config) stands beside it
    one = SearchResult({"x": "a"}, Outcome(100.0, 5.0, True), [({"x": "a"}, Outcome(100.0, 5.0, True))])
    own = Final({"x": "own"}, Outcome(150.0, 5.0, True))
    calls: list[tuple[str, int]] = []

    def remeasure(point: dict[str, object], round_: int) -> Outcome:
        calls.append((str(point["x"]), round_))
        return Outcome(200.0 if point["x"] == "own" else 90.0 + round_, 5.0, True)

    best, chosen = finals(one, remeasure, rounds=3, reference=own)
    assert best == {"x": "a"}  # the reference is never the winner, however much it serves
    assert own.figures == [200.0, 200.0, 200.0] and chosen[0].figures == [90.0, 91.0, 92.0]
    assert calls == [("own", 0), ("a", 0), ("a", 1), ("own", 1), ("own", 2), ("a", 2)]
    assert finals(one, remeasure, rounds=0, reference=own)[1][0].figures == []  # no rounds: nothing measured


def test_points_with_one_key_are_evaluated_once() -> None:
    axes = [Axis("a", (1, 2, 3)), Axis("b", ("x", "y"))]
    calls: list[dict[str, object]] = []

    def evaluate(point: dict[str, object]) -> Outcome:
        calls.append(point)
        return Outcome(float(str(point["a"])), 1.0, True)

    full = brute(axes, evaluate, same=lambda p: p["a"])  # b changes nothing
    assert len(calls) == 3 and full.best == {"a": 3, "b": "x"}
    calls.clear()
    fast = quick(axes, evaluate, {"a": 1, "b": "y"}, same=lambda p: p["a"])
    assert fast.best_outcome is not None and fast.best_outcome.throughput == 3.0
    assert len(calls) == len({c["a"] for c in calls}) == 3


def test_a_points_trial_key_is_made_once_however_often_the_search_asks() -> None:
    """``same`` (tune's renders a config) runs once per distinct point, not on every lookup."""
    axes = [Axis("a", (1, 2, 3)), Axis("b", ("x", "y"))]
    keyed: list[dict[str, object]] = []

    def same(point: dict[str, object]) -> object:
        keyed.append(dict(point))
        return point["a"]

    quick(axes, lambda p: Outcome(float(str(p["a"])), 1.0, True), {"a": 1, "b": "y"}, same=same)
    assert keyed and len(keyed) == len({tuple(sorted(p.items())) for p in keyed})


def test_a_winner_whose_finals_round_stepped_down_reports_the_level_every_round_held() -> None:
    """A finals round measures lower where the search's level broke the budget that time: the winner
    tune reports (and a profile reproduces) is at the lowest level a round used, with that round's
    latencies, and says the search's level; a winner whose rounds kept the level is unchanged."""
    point = {"instances": 2}
    key = describe(point)
    trial = {"key": key, "throughput": 7902.1, "concurrency": 192, "p50_ms": 23.9, "p99_ms": 29.9}
    final = Final(dict(point), Outcome(7902.1, 29.9, True), [7462.1, 8022.8])
    rows = [
        {"key": key, "round": 0, "concurrency": 144, "p50_ms": 18.0, "p99_ms": 24.0},
        {"key": key, "round": 1, "concurrency": 192, "p50_ms": 23.0, "p99_ms": 29.0},
        {"key": "other", "round": 0, "concurrency": 96, "p50_ms": 1.0, "p99_ms": 2.0},
    ]
    winner = crowned(trial, [final], rows)
    assert (winner["concurrency"], winner["search_concurrency"]) == (144, 192)
    assert (winner["p50_ms"], winner["p99_ms"]) == (18.0, 24.0)
    assert winner["confirmed_throughput"] == round((7462.1 + 8022.8) / 2, 3)
    held = crowned(trial, [final], [{**r, "concurrency": 192} for r in rows[:2]])
    assert held["concurrency"] == 192 and "search_concurrency" not in held and held["p99_ms"] == 29.9


@pytest.mark.parametrize(("gain", "kept"), [(1.2, "on"), (0.9, "off")])
def test_quick_tries_a_late_axis_once_at_the_point_the_others_reached(gain: float, kept: str) -> None:
    """A late axis (a plan compiled at every load) is held at its start while the others are walked,
    then its other value is measured once at the best point measured (not the ascent's point, which may
    trail it by less than the minimum gain); the better stands."""
    seen: list[dict[str, object]] = []

    def evaluate(point: dict[str, object]) -> Outcome:
        seen.append(point)
        # 3 beats 2 by less than min_gain: the ascent stays at 2, the best measured is 3
        peak = {1: 10.0, 2: 30.0, 3: 30.6, 4: 5.0}[int(point["instances"])]  # type: ignore[call-overload]
        return Outcome(peak * (gain if point["plan"] == "on" else 1.0), 1.0, True)

    axes = [Axis("instances", (1, 2, 3, 4)), Axis("plan", ("off", "on"), late=True)]
    result = quick(axes, evaluate, {"instances": 1, "plan": "off"}, min_gain=0.03)
    assert [p["plan"] for p in seen[:-1]] == ["off"] * (len(seen) - 1)  # walked with the start's plan
    assert seen[-1] == {"instances": 3, "plan": "on"}  # one trial of the other value, at the best point
    assert result.best == {"instances": 3, "plan": kept}
    # brute force has no order to keep: every value of a late axis is a point of the grid
    assert brute(axes, evaluate).evaluations == 8
