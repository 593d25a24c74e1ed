"""Quick search against brute force on a deterministic response surface (unit): within 5 % with at most a third
of the measurements, from many starts and budgets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tritonkit.config import ModelConfig
from tritonkit.errors import TritonKitError
from tritonkit.tune.search import Axis, Outcome, brute, grid, quick, snap
from tritonkit.tune.space import axes_for
from tritonkit.tune.synthetic import AXES, surface


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
