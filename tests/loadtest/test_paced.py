"""Paced models (a rate and a fixed number of users per model): the options' checks, before any server.

The pacing itself runs in the fleet plan's separate load test (tests/fleet/test_colocation.py), where each
model's measured throughput must be within 15 % of its planned rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.options import LoadTestOptions, ModelTarget


def _options(tmp_path: Path, *models: ModelTarget, users: int, scenario: str = "steady") -> LoadTestOptions:
    return LoadTestOptions(
        models=list(models), report_dir=tmp_path / "r", users=users, scenario=scenario, duration=5
    )


def test_paced_models_are_accepted_with_their_users_summed(tmp_path: Path) -> None:
    options = _options(
        tmp_path, ModelTarget("a", rate=20.0, users=4), ModelTarget("b", rate=5.0, users=2), users=6
    )
    options.validate()
    assert options.duration == 5.0


@pytest.mark.parametrize(
    ("models", "users", "scenario", "message"),
    [
        (
            (ModelTarget("a", rate=20.0, users=4), ModelTarget("b")),
            4,
            "steady",
            "a rate for every model or for none",
        ),
        (
            (ModelTarget("a", rate=0.0, users=4),),
            4,
            "steady",
            "expected a rate > 0 and a whole number of users >= 1",
        ),
        (
            (ModelTarget("a", rate=5.0, users=0),),
            1,
            "steady",
            "expected a rate > 0 and a whole number of users >= 1",
        ),
        (
            (ModelTarget("a", rate=5.0, users=3),),
            4,
            "steady",
            r"users = the sum of their users \(3\); got steady with 4",
        ),
        ((ModelTarget("a", rate=5.0, users=3),), 3, "ramp", r"the steady scenario .* got ramp with 3"),
    ],
)
def test_bad_pacing_is_one_line_before_any_load(
    tmp_path: Path, models: tuple[ModelTarget, ...], users: int, scenario: str, message: str
) -> None:
    with pytest.raises(LoadTestError, match=message):
        _options(tmp_path, *models, users=users, scenario=scenario).validate()
