"""Scenario plans and Locust shapes: tick sequences, ramp stop at the SLO knee (pure, no server)."""

from __future__ import annotations

import pytest

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.scenarios import Ramp, Spike, Steady, make_plan, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("1.5m", 90.0), ("1h", 3600.0), ("250ms", 0.25), (12, 12.0)],
)
def test_parse_duration(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "-5s", "0", "1e400"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(LoadTestError, match="duration"):
        parse_duration(text)


def test_steady_ticks_then_stops() -> None:
    plan = make_plan("steady", 8, 10.0)
    assert isinstance(plan, Steady)
    assert [plan.tick(t) for t in (0, 5, 9.99)] == [(8, 8.0)] * 3
    assert plan.tick(10.0) is None


def test_soak_spawns_gently() -> None:
    plan = make_plan("soak", 50, 600.0)
    tick = plan.tick(0)
    assert tick is not None and tick[0] == 50 and tick[1] < 50
    assert plan.tick(600.0) is None


def test_ramp_steps_up_to_the_peak() -> None:
    plan = make_plan("ramp", 16, 20.0, ramp_steps=4)
    assert isinstance(plan, Ramp)
    users = [plan.users_at(t) for t in range(0, 21, 5)]
    assert users == [4, 8, 12, 16, 0]
    assert plan.duration == 20.0


def test_ramp_stops_after_the_breaching_step() -> None:
    plan = make_plan("ramp", 16, 20.0, ramp_steps=4)
    assert isinstance(plan, Ramp)
    plan.breach(1)  # the SLO broke during step 1 (8 users)
    assert plan.tick(7.0) == (8, 8.0)
    assert plan.tick(10.0) is None


def test_spike_jumps_and_returns() -> None:
    plan = make_plan("spike", 20, 10.0)
    assert isinstance(plan, Spike)
    assert plan.users_at(0) == 5
    assert plan.users_at(plan.spike_at) == 20
    assert plan.users_at(plan.spike_at + plan.spike_duration) == 5
    assert plan.tick(10.0) is None


@pytest.mark.parametrize(
    ("scenario", "users", "expected"),
    [
        ("bogus", 4, "scenario 'bogus': expected one of steady, ramp, spike, soak"),
        ("steady", 0, "users 0: expected at least 1"),
    ],
)
def test_make_plan_rejects(scenario: str, users: int, expected: str) -> None:
    with pytest.raises(LoadTestError) as info:
        make_plan(scenario, users, 10.0)
    assert str(info.value) == expected
