"""SLO gates and the latency histogram they read (pure)."""

from __future__ import annotations

import math
import random

import pytest

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.report.summary import Summary
from tritonkit.loadtest.slo import SLO, Histogram, Totals, check_slo


def test_histogram_percentiles_at_microsecond_resolution() -> None:
    rng = random.Random(1)
    values = sorted(rng.uniform(0.2, 40.0) for _ in range(5000))
    hist = Histogram()
    for v in values:
        hist.add(v)
    for q in (0.5, 0.95, 0.99):
        exact = values[math.ceil(q * len(values)) - 1]
        got = hist.percentile(q)
        # exact to the µs under 10 ms, to 4 significant digits above
        assert got is not None and abs(got - exact) <= max(0.0005, exact * 0.0005)


def test_sub_millisecond_latencies_are_told_apart() -> None:
    # Locust's rounding makes all of these "1 ms"; an SLO of p99 <= 1.2 ms must see the 1.25 ms tail
    hist = Histogram()
    for _ in range(98):
        hist.add(0.7)
    for _ in range(2):
        hist.add(1.25)
    assert hist.percentile(0.5) == 0.7 and hist.percentile(0.99) == 1.25
    assert check_slo(SLO(p99_ms=1.2), Totals.from_histogram(hist, 0, 1.0))[0].measured == 1.25
    assert Histogram.bucket(1234.5678) == 1_235_000  # 4 significant digits past 10 ms
    later = hist.copy()
    later.add(3.0)
    assert later.minus(hist).counts == {3000: 1}


def test_histograms_merge_by_adding() -> None:
    a, b, both = Histogram(), Histogram(), Histogram()
    for v in (1.0, 2.0, 3.0):
        a.add(v)
        both.add(v)
    for v in (10.0, 20.0):
        b.add(v)
        both.add(v)
    a.merge(b)
    assert a.counts == both.counts and a.total == 5
    assert Histogram().percentile(0.5) is None


def _totals(p95: float = 5.0, p99: float = 8.0, requests: int = 1000, failures: int = 0) -> Totals:
    return Totals(requests=requests, failures=failures, seconds=10.0, p50_ms=2.0, p95_ms=p95, p99_ms=p99)


def test_gates_pass_within_budget() -> None:
    assert check_slo(SLO(p95_ms=10, p99_ms=20, max_failure_ratio=0.01, min_rps=50), _totals()) == []


@pytest.mark.parametrize(
    ("slo", "totals", "gate"),
    [
        (SLO(p95_ms=4), _totals(p95=5), "p95_ms"),
        (SLO(p99_ms=7), _totals(p99=8), "p99_ms"),
        (SLO(max_failure_ratio=0.01), _totals(failures=20), "failure_ratio"),
        (SLO(min_rps=200), _totals(requests=1000), "min_rps"),
    ],
)
def test_each_gate_breaks_alone(slo: SLO, totals: Totals, gate: str) -> None:
    breaches = check_slo(slo, totals, scope="m:1")
    assert [b.gate for b in breaches] == [gate]
    assert str(breaches[0]).startswith("m:1: ")


def test_ramp_steps_skip_the_throughput_gate() -> None:
    assert check_slo(SLO(min_rps=1e9), _totals(), throughput=False) == []


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"p95_ms": 0}, "SLO `p95_ms` 0: expected a positive number"),
        ({"p99_ms": -1}, "SLO `p99_ms` -1: expected a positive number"),
        ({"min_rps": float("nan")}, "SLO `min_rps` nan: expected a positive number"),
        ({"max_failure_ratio": 1.5}, "SLO `max_failure_ratio` 1.5: expected a ratio between 0 and 1"),
    ],
)
def test_bad_slo_values_are_one_line_errors(kwargs: dict[str, float], expected: str) -> None:
    with pytest.raises(LoadTestError) as info:
        SLO(**kwargs)
    assert str(info.value) == expected


def test_summary_exit_code_follows_breaches() -> None:
    assert Summary({}, []).exit_code == 0
    breach = check_slo(SLO(p95_ms=1), _totals())
    assert Summary({}, breach).exit_code == 3  # 1 is for errors: a breach must be told apart
