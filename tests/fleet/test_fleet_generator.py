"""``tritonkit plan --fleet --tune --generator perf_analyzer``: the tunes a fleet runs now measured by the real
perf_analyzer against the real embedded tritonserver (the open-loop levels stay tritonkit's), and the one-line
refusals. Without the binary the test that runs it skips with the reason (``tests/support/perf_analyzer_binary.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fleet.conftest import write_fleet
from tests.support.perf_analyzer_binary import find

from tritonkit.cli import main
from tritonkit.fleet.openloop import MeasureSettings
from tritonkit.fleet.planner import PlanOptions
from tritonkit.fleet.run import FleetRunOptions, run_fleet
from tritonkit.measure import perf_analyzer as pa
from tritonkit.measure.levels import MeasureOptions
from tritonkit.measure.loadgen import WindowSpec
from tritonkit.measure.stats import StabilityRule
from tritonkit.tune.trial_log import load_rows

SEARCH = MeasureSettings(warmup_s=0.25, min_seconds=0.75, max_seconds=1.5, min_samples=30, window_s=0.25)


def test_a_fleet_tunes_now_with_perf_analyzer_and_its_trials_are_perf_analyzer_s_rows(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = find()
    if isinstance(found, str):
        pytest.skip(f"perf_analyzer: {found}")
    monkeypatch.setenv(pa.ENV, found.path)
    fleet = write_fleet(
        tmp_path / "fleet.yaml",
        {
            "gpus": [{"type": "cpu"}],
            "models": [{"name": "light", "repository": str(repo), "rate": 20, "p99_ms": 200}],
        },
    )
    grid = {
        "instances": [1], "max_batch_sizes": [8], "delays_us": ["off"], "preferred": False, "queue": False,
        "max_concurrency": 2, "finalists": 0, "require_stable": False, "generator": "perf_analyzer",
        "measure": MeasureOptions(window=WindowSpec(0.5), stability=StabilityRule(3, 9.99), max_windows=10),
    }  # fmt: skip
    plan = PlanOptions(
        tune=True,
        tune_overrides=grid,
        settings=SEARCH,
        search={"max_levels": 2, "refine": 0},
        local_type="cpu",
    )
    data, code = run_fleet(FleetRunOptions(fleet, tmp_path / "out", plan, plots=False))
    assert code == 0
    report = tmp_path / "out" / "tune" / "cpu" / "light"
    tuned = json.loads((report / "tune.json").read_text())
    assert tuned["method"]["generator_of_record"] == f"perf_analyzer ({found.version})"
    header, rows = load_rows(report)
    assert header is not None and header["generator"] == "perf_analyzer"
    for level in (level for row in rows for level in row["levels"] if level["stable"]):
        (csv_row,) = pa.parse_csv((report / level["source"]).read_text())
        assert level["throughput"] == round(csv_row["Inferences/Second"], 3)
        assert level["p99_ms"] == round(csv_row["p99 latency"] / 1000.0, 4)
    assert any("measured with perf_analyzer" in note for note in data["notes"])


def test_the_fleet_s_generator_flag_is_one_line_without_tune_or_without_the_binary(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = write_fleet(
        tmp_path / "fleet.yaml",
        {
            "gpus": [{"type": "cpu"}],
            "models": [{"name": "light", "repository": str(repo), "rate": 20, "p99_ms": 200}],
        },
    )
    out = tmp_path / "out"
    base = ["plan", "--fleet", str(fleet), "--out", str(out), "--generator", "perf_analyzer"]
    code = main(base)
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "--generator perf_analyzer: expected --tune" in err
    monkeypatch.setenv(pa.ENV, str(tmp_path / "absent"))
    code = main([*base, "--tune"])
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "--generator perf_analyzer: not installed" in err
    assert not out.exists()  # refused before anything was measured or written
