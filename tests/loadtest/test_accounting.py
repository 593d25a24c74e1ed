"""Load-test accounting: Triton counter resets (a server restart mid-run) are summed per segment as
Prometheus ``increase()`` does, never negative, and the report says the server restarted; throughput
counts successes only."""

from __future__ import annotations

from tritonkit.client import ModelStatistics
from tritonkit.loadtest.report.metrics import Counters, batch_stats, increase
from tritonkit.loadtest.slo import Totals


def _c(success: float, failure: float = 0.0, inferences: float | None = None) -> Counters:
    n = success + failure if inferences is None else inferences
    return {"m:1": {"success": success, "failure": failure, "inferences": n, "executions": n / 2}}


def test_increase_without_restart_is_last_minus_first() -> None:
    total = increase([(0.0, _c(100)), (1.0, _c(250, 5)), (2.0, _c(400, 7))])["m:1"]
    assert total.get("success") == 300 and total.get("failure") == 7 and total.restarts == 0
    assert total.seconds == 2.0


def test_increase_sums_segments_over_a_restart() -> None:
    # 100 -> 3,000 (old process), restart, 0 -> 500 -> 1,200 (new process): 2,900 + 500 + 700.
    samples = [(0.0, _c(100)), (1.0, _c(3000)), (2.0, _c(500, 2)), (3.0, _c(1200, 2))]
    total = increase(samples)["m:1"]
    assert total.get("success") == 2900 + 500 + 700
    assert total.get("failure") == 2
    assert total.restarts == 1
    assert total.requests > 0 and total.to_json()["restarts"] == 1


def test_one_counter_going_down_resets_the_whole_version() -> None:
    # failures went 9 -> 1 while successes grew past their old value: still a restart
    total = increase([(0.0, _c(100, 9)), (1.0, _c(150, 1))])["m:1"]
    assert total.get("success") == 150 and total.get("failure") == 1 and total.restarts == 1


def _stats(inferences: int, executions: int, sizes: dict[int, int]) -> ModelStatistics:
    return ModelStatistics("m", "1", inferences, executions, inferences, 0, 0, 0, 0, 0, 0, 0, sizes)


def test_batch_stats_after_a_restart_are_the_new_process_counts() -> None:
    before = {"m:1": _stats(4000, 1000, {4: 1000})}
    after = {"m:1": _stats(248, 60, {4: 60, 8: 1})}
    got = batch_stats(before, after)
    assert got is not None
    assert got["m:1"] == {
        "inferences": 248,
        "executions": 60,
        "batch_sizes": {"4": 60, "8": 1},
        "restarted": True,
    }
    assert all(n > 0 for n in got["m:1"]["batch_sizes"].values())


def test_throughput_is_successes_per_second() -> None:
    totals = Totals(requests=2500, failures=2355, seconds=1.0, p50_ms=1.0, p95_ms=1.0, p99_ms=1.0)
    assert totals.rps == 145.0 and totals.failures_per_s == 2355.0
