"""The numbers of a window (unit): µs percentiles, the stability rule, and the server split from statistics deltas."""

from __future__ import annotations

import pytest

from tritonkit.client import ModelStatistics
from tritonkit.measure.levels import GeneratorLimitedError, LevelResult, find_max
from tritonkit.measure.loadgen import Level
from tritonkit.measure.stats import (
    ServerSplit,
    StabilityRule,
    latency_percentiles,
    merge_splits,
    server_split,
)


def _stats(**values: int | dict[int, int]) -> ModelStatistics:
    fields = dict.fromkeys(
        (
            "inference_count", "execution_count", "success_count", "fail_count", "success_ns", "queue_ns",
            "compute_input_ns", "compute_infer_ns", "compute_output_ns", "last_inference_ms",
        ),
        0,
    )  # fmt: skip
    fields.update(values)  # type: ignore[arg-type]
    return ModelStatistics(name="m", version="1", batch_executions={}, **fields)  # type: ignore[arg-type]


def test_percentiles_keep_sub_millisecond_resolution() -> None:
    # 412.3 µs and 1234.567 µs requests: whole-millisecond statistics would say 0 ms and 1 ms
    latencies = [412_300] * 50 + [1_234_567] * 50
    p = latency_percentiles(latencies)
    assert p["p50_us"] == pytest.approx(823.4)
    assert p["p99_us"] == pytest.approx(1234.6)
    assert p["mean_us"] == pytest.approx(823.4)
    assert latency_percentiles([])["p99_us"] == 0.0


@pytest.mark.parametrize(
    ("throughputs", "p99s", "stable"),
    [
        ([100, 104, 97], [5.0, 5.2, 4.9], True),
        ([50, 100, 104, 97], [9.0, 5.0, 5.2, 4.9], True),  # only the last three count
        ([100, 125, 97], [5.0, 5.2, 4.9], False),  # throughput off by more than 10 %
        ([100, 104, 97], [5.0, 7.0, 4.9], False),  # p99 off by more than 10 %
        ([100, 104], [5.0, 5.2], False),  # too few windows
        ([0, 0, 0], [0.0, 0.0, 0.0], False),  # nothing measured is not stable
    ],
)
def test_stability_needs_three_windows_within_ten_percent(
    throughputs: list[float], p99s: list[float], stable: bool
) -> None:
    assert StabilityRule().stable(throughputs, p99s) is stable


def test_stability_rule_is_settable() -> None:
    assert StabilityRule(count=2, tolerance=0.3).stable([100, 125], [5.0, 6.0])
    assert not StabilityRule(count=4, tolerance=0.3).stable([100, 125, 110], [5.0, 6.0, 5.5])
    with pytest.raises(ValueError, match="expected >= 1"):
        StabilityRule(count=0)


def test_server_split_is_the_difference_of_two_snapshots_per_request() -> None:
    before = _stats(
        success_count=10, inference_count=10, execution_count=10, queue_ns=10_000, success_ns=90_000
    )
    before.batch_executions.update({1: 10})
    after = _stats(
        success_count=110, inference_count=110, execution_count=35, fail_count=2,
        queue_ns=10_000 + 100 * 300_000, compute_input_ns=100 * 20_000, compute_infer_ns=100 * 1_000_000,
        compute_output_ns=100 * 30_000, success_ns=90_000 + 100 * 1_400_000,
    )  # fmt: skip
    after.batch_executions.update({1: 15, 4: 25})
    split = server_split(before, after)
    assert split.requests == 100 and split.failures == 2
    assert (split.queue_us, split.compute_input_us, split.compute_infer_us, split.compute_output_us) == (
        300.0, 20.0, 1000.0, 30.0,
    )  # fmt: skip
    assert split.total_us == 1400.0 and split.parts_us == 1350.0
    assert split.batches == {1: 5, 4: 25}
    assert split.average_batch == pytest.approx(100 / 25)
    merged = merge_splits([split, server_split(None, _stats())])
    assert merged.requests == 100 and merged.queue_us == 300.0


def _level(
    value: float, throughput: float, p99_ms: float, stable: bool = True, limited: bool = False
) -> LevelResult:
    return LevelResult(
        level=Level("concurrency", value), stable=stable, windows=[], throughput=throughput,
        percentiles={"p50_us": p99_ms * 500, "p90_us": p99_ms * 900, "p95_us": p99_ms * 950, "p99_us": p99_ms * 1000},
        failures=0, successes=100, generator_limited=limited, generator_cpu=0.95 if limited else 0.1,
        late_share=0.0, server=ServerSplit(),
    )  # fmt: skip


def test_find_max_doubles_passes_unstable_levels_and_bisects() -> None:
    # p99 = 2 ms per unit of concurrency, throughput grows to c=8; c=2 is unstable (inconclusive)
    def measure(level: Level) -> LevelResult:
        c = level.value
        return _level(c, 100.0 * min(c, 8), 2.0 * c, stable=c != 2)

    best, levels = find_max(measure, 13.0, refine=1)
    assert [r.level.value for r in levels] == [1, 2, 4, 8, 6]  # 8 breaks 13 ms, then bisect 4..8
    assert best is not None and best.level.value == 6
    best, _ = find_max(measure, 13.0, refine=0, require_stable=False)
    assert best is not None and best.level.value == 4
    # saturation: throughput stops growing past 4 although p99 still fits (two flat doublings)
    best, levels = find_max(lambda lv: _level(lv.value, 100.0 * min(lv.value, 4), 1.0), 100.0, refine=0)
    assert best is not None and best.level.value == 4 and [r.level.value for r in levels] == [1, 2, 4, 8, 16]


def test_a_level_the_generator_limited_is_never_an_answer_nor_a_bound() -> None:
    # the generator's CPU is at its limit from c=8 on; p99 stays within the budget everywhere
    def measure(level: Level) -> LevelResult:
        return _level(level.value, 100.0 * level.value, 1.0, limited=level.value >= 8)

    seen: list[float] = []
    # a search that meets a limited level stops there, with one line naming it, the generator and the
    # flag: halving away from it (as it once did) made a planner buy for the generator's ceiling
    with pytest.raises(GeneratorLimitedError) as raised:
        find_max(measure, 13.0, start=1, limit=64, refine=1, require_stable=False,
                 on_result=lambda r: seen.append(r.level.value))  # fmt: skip
    assert seen == [1, 2, 4, 8]  # the limited level was reported before the stop
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("the generator, not the server, limited concurrency 8 (1 process at 95 % CPU)")
    assert "--workers" in message and "--url" in message
    # a finals round at the search's level is no exception, and neither is a level over the budget
    for start, p99 in ((8, 1.0), (8, 20.0)):
        with pytest.raises(GeneratorLimitedError):
            find_max(lambda lv, p=p99: _level(lv.value, 100.0, p, limited=True), 13.0, start=start,
                     limit=start, refine=0, require_stable=False)  # fmt: skip


def test_find_max_goes_on_past_one_flat_doubling() -> None:
    # a batcher packing every request in flight into one execution: flat from 2 to 4, then the second
    # instance joins and throughput doubles at 8 (measured on minilm_int8 with a 2 ms delay, max batch 64)
    curve = {1: 40.0, 2: 48.0, 4: 48.5, 8: 95.0, 16: 96.0, 32: 96.5}
    best, levels = find_max(lambda lv: _level(lv.value, curve[int(lv.value)], 1.0), 100.0, refine=0)
    assert best is not None and best.throughput == 96.5  # the highest of the flat levels
    assert [r.level.value for r in levels] == [1, 2, 4, 8, 16, 32]


def test_find_max_from_a_warm_start_goes_up_or_halves_down() -> None:
    def measure(level: Level) -> LevelResult:  # p99 = 2 ms per unit of concurrency; throughput to c=8
        return _level(level.value, 100.0 * min(level.value, 8), 2.0 * level.value)

    # start within the budget: doubles from there, then bisects (3 levels instead of 5 from 1)
    best, levels = find_max(measure, 13.0, start=4, refine=1)
    assert [r.level.value for r in levels] == [4, 8, 6] and best is not None and best.level.value == 6
    # start over the budget: halves until one fits, then bisects between that and the last bad one
    best, levels = find_max(measure, 13.0, start=16, refine=1)
    assert [r.level.value for r in levels] == [16, 8, 4, 6] and best is not None and best.level.value == 6
    # nothing fits at any level: every halving down to 1 is tried, no answer
    best, levels = find_max(measure, 1.0, start=8, refine=1)
    assert best is None and [r.level.value for r in levels] == [8, 4, 2, 1]
