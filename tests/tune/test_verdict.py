"""The verdict that gates a tune's write-back: the winner must beat the model's own config beyond the spread
of their repeated measurements (pure: figures in, decision out)."""

from __future__ import annotations

import pytest

from tritonkit.tune.verdict import decide, spread


def test_a_winner_whose_every_figure_beats_every_baseline_figure_is_written() -> None:
    verdict = decide([120.0, 118.0, 125.0], [100.0, 104.0, 99.0], same=False, method="finals")
    assert verdict.write and verdict.gain == pytest.approx(120.0 / 100.0 - 1)
    assert verdict.winner == spread([120.0, 118.0, 125.0]) and verdict.baseline["max"] == 104.0
    assert "beat every one" in verdict.reason and verdict.as_dict()["gain"] == 0.2


def test_a_higher_median_inside_the_spread_is_not_written() -> None:
    # the median is 8 % higher, but one round of the winner measured below the baseline's best round
    verdict = decide([108.0, 103.0, 110.0], [100.0, 104.0, 99.0], same=False, method="finals")
    assert not verdict.write and verdict.gain == pytest.approx(0.08)
    assert "does not beat the model's own config" in verdict.reason and "103.0-110.0" in verdict.reason


def test_the_own_config_as_winner_and_unknown_spreads_write_nothing() -> None:
    assert not decide([120.0, 121.0], [100.0, 101.0], same=True, method="finals").write
    unknown = decide([120.0], [100.0, 101.0], same=False, method="windows")
    assert not unknown.write and "spread is unknown" in unknown.reason


def test_an_own_config_that_met_the_budget_nowhere_loses_to_any_winner() -> None:
    verdict = decide([50.0], [], same=False, method="finals", baseline_feasible=False)
    assert verdict.write and verdict.gain is None and "no load level" in verdict.reason
