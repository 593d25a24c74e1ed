"""``report.md`` and ``pareto.png`` of a tune from a ``tune.json``-shaped record (pure: no server): the
provenance, the model's own config as the baseline, the finals median as the headline with its spread, the
verdict, and the plot with labels, finals, winner and baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritonkit.tune.report import markdown, short_label, write_report

POINT = {"instances": 2, "kind": "KIND_CPU", "max_batch_size": 8, "delay_us": 500, "preferred": "max"}
OWN = {"instances": 1, "kind": "KIND_CPU", "max_batch_size": 64, "delay_us": 2000}


def _trial(key: str, point: dict[str, Any], throughput: float, p99: float) -> dict[str, Any]:
    best = {
        "window_throughputs": [throughput - 2, throughput + 2],
        "p99_ci_ms": [p99 - 1, None],
        "p99_samples": 300,
        "queue_us": 10.0,
        "compute_input_us": 1.0,
        "compute_infer_us": 100.0,
        "compute_output_us": 1.0,
        "average_batch": 1.5,
    }
    return {"key": key, "point": point, "throughput": throughput, "p99_ms": p99, "p50_ms": 1.0, "concurrency": 4,
            "feasible": True, "stable": True, "best": best}  # fmt: skip


def _data(write: bool) -> dict[str, Any]:
    winner = {
        **_trial("w", POINT, 120.0, 30.0),
        "final_figures": [110.0, 112.0, 118.0],
        "confirmed_throughput": 112.0,
    }
    baseline = {**_trial("own", OWN, 100.0, 20.0), "on_grid": False, "final_figures": [99.0, 101.0, 100.0],
                "confirmed_throughput": 100.0}  # fmt: skip
    return {
        "model": "m", "latency_budget_ms": 50.0, "search": "quick", "measurements": 9,
        "trials": [winner, _trial("x", {**POINT, "instances": 1}, 90.0, 10.0)], "winner": winner,
        "baseline": baseline,
        "finals": [
            {"key": "w", "searched": 120.0, "figures": [110.0, 112.0, 118.0], "concurrencies": [4, 4, 4],
             "median": 112.0, "min": 110.0, "max": 118.0, "own_config": False, "finalist": True},
            {"key": "own", "searched": 100.0, "figures": [99.0, 101.0, 100.0], "concurrencies": [4, 4, 4],
             "median": 100.0, "min": 99.0, "max": 101.0, "own_config": True, "finalist": False},
        ],
        "verdict": {"write": write, "reason": "because", "method": "finals", "gain": 0.12},
        "written": {"mode": "config", "where": "repo/m/config.pbtxt" if write else "", "spec": None, "notes": []},
        "provenance": None,
    }  # fmt: skip


def test_the_headline_is_the_finals_median_against_the_model_s_own_config() -> None:
    text = markdown(_data(write=True))
    assert (
        "**Baseline**: the model's own config as it stood, `own` (not on the grid: measured on its own): "
        "100.0 req/s (finals median of 3 rounds, 99.0-101.0)." in text
    )
    assert "**Winner**: `w`: 112.0 req/s (finals median of 3 rounds, 110.0-118.0) at concurrency 4" in text
    assert "its search measurement 120.0 req/s" in text
    assert (
        "**Verdict**: +12.0% against the baseline (finals medians); written to repo/m/config.pbtxt: because."
        in text
    )
    assert (
        "| `own` (model's own config) | 100.0 | 99.0 (c=4) | 101.0 (c=4) | 100.0 (c=4) | 100.0 | 99.0-101.0 |"
        in text
    )
    assert "| 1 | `w` | yes | 120.0 | 118.0-122.0 |" in text and "[29.00, >max] (300)" in text
    assert "**NOT written**: config.pbtxt is unchanged: because." in markdown(_data(write=False))
    # a level the generator limited ends the tune (GeneratorLimitedError): no finals figure is a lower bound
    text = markdown(_data(write=True))
    assert "| `w` | 120.0 | 110.0 (c=4) | 112.0 (c=4) | 118.0 (c=4) | 112.0 |" in text
    assert "never a figure: it ends the tune" in text
    assert "lower bound" not in text and "--workers" not in text and "†" not in text


def test_pareto_plot_labels_configs_and_marks_winner_finals_and_baseline(tmp_path: Path) -> None:
    assert short_label(POINT) == "i2 b8 d500 p" and short_label({**OWN, "delay_us": "off"}) == "i1 b64 d-"
    written = write_report(tmp_path, _data(write=True))
    assert [p.name for p in written] == ["tune.json", "report.md", "pareto.png"]
    assert (tmp_path / "pareto.png").read_bytes().startswith(b"\x89PNG") and (
        tmp_path / "pareto.png"
    ).stat().st_size > 20_000
