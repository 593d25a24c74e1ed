"""``tritonkit tune --generator perf_analyzer``: the real perf_analyzer binary against the real embedded
tritonserver, on the tiny python-backend model ``work``; and the one-line refusals when it cannot measure.

Without the binary the tests that run it skip with the reason (``tests/support/perf_analyzer_binary.py``).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.measure_server import build_repository
from tests.support.perf_analyzer_binary import find

from tritonkit.cli import main
from tritonkit.errors import TritonKitError
from tritonkit.measure import perf_analyzer as pa
from tritonkit.measure.generators import choose
from tritonkit.measure.levels import MeasureOptions
from tritonkit.tune.trial_log import load_rows

#: one config (the grid is the model's own), concurrency up to 2, loose windows: a 2-core host shared with
#: the server and perf_analyzer; what is checked is where each figure came from, not its size
SMALL = [
    "--model", "work", "--latency-budget-ms", "1000", "--search", "brute", "--instances", "1",
    "--delays-us", "off", "--max-batch-sizes", "8", "--no-preferred", "--no-queue-policy",
    "--max-concurrency", "2", "--finalists", "0", "--write", "none", "--no-plots", "--accept-unstable",
    "--window-s", "0.5", "--stability-pct", "999", "--max-windows", "10", "--timeout-s", "10",
]  # fmt: skip


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[pa.Binary]:
    found = find()
    if isinstance(found, str):
        pytest.skip(f"perf_analyzer: {found}")
    monkeypatch.setenv(pa.ENV, found.path)
    yield found


def test_a_tune_with_perf_analyzer_writes_trials_whose_figures_are_its_csv_rows(
    tmp_path: Path, on_path: pa.Binary, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, report = build_repository(tmp_path), tmp_path / "report"
    code = main(
        ["tune", *SMALL, "--repo", str(repo), "--report", str(report), "--generator", "perf_analyzer"]
    )
    first = capsys.readouterr()
    assert code in (0, 3), first.err  # 3: no level within the budget (a busy host)
    header, rows = load_rows(report)
    assert header is not None and header["generator"] == "perf_analyzer"
    levels = [level for row in rows for level in row["levels"]]
    assert levels and all(level["source"].startswith("perf_analyzer/") for level in levels)
    sources = [level["source"] for level in levels]
    assert len(set(sources)) == len(sources)  # a level measured again has a file of its own
    stable = [level for level in levels if level["stable"]]
    assert stable, levels  # within 2x over 3 windows: at least one level perf_analyzer made stable
    for level in stable:
        (csv_row,) = pa.parse_csv((report / level["source"]).read_text())
        # the trial's figures are perf_analyzer's CSV row: its level, throughput and percentiles
        assert csv_row["Concurrency"] == level["level"]
        assert level["throughput"] == round(csv_row["Inferences/Second"], 3)
        for q in (50, 90, 95, 99):
            assert level[f"p{q}_ms"] == round(csv_row[f"p{q} latency"] / 1000.0, 4)
        assert level["queue_us"] == csv_row["Server Queue"]
        assert level["compute_infer_us"] == csv_row["Server Compute Infer"]
        assert level["p99_samples"] > 0 and len(level["window_throughputs"]) >= 3
    for level in levels:  # a level perf_analyzer could not make stable has no samples: never an answer
        assert level["stable"] or level["p99_samples"] == 0
    data = json.loads((report / "tune.json").read_text())
    assert data["method"]["generator"] == "perf_analyzer"
    assert data["method"]["generator_of_record"] == f"perf_analyzer ({on_path.version})"
    assert f"Load generator: perf_analyzer ({on_path.version})." in (report / "report.md").read_text()
    if data["winner"] is not None:  # the winner's figure is one of perf_analyzer's rows
        assert data["winner"]["throughput"] in {level["throughput"] for level in stable}

    # the log is perf_analyzer's: resuming it with tritonkit's generator is one line, nothing measured
    code = main(["tune", *SMALL, "--repo", str(repo), "--report", str(report), "--resume"])
    err = capsys.readouterr().err
    assert code != 0 and "generator perf_analyzer" in err and len(err.strip().splitlines()) == 1
    assert load_rows(report)[1] == rows


def test_tune_says_in_one_line_that_perf_analyzer_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(pa.ENV, str(tmp_path / "absent"))
    repo, report = build_repository(tmp_path), tmp_path / "report"
    code = main(
        ["tune", *SMALL, "--repo", str(repo), "--report", str(report), "--generator", "perf_analyzer"]
    )
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("tritonkit tune: error: --generator perf_analyzer: not installed")
    assert not (report / "trials.jsonl").exists()  # refused before any server started


def test_tune_refuses_in_one_line_the_flags_perf_analyzer_cannot_honour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = build_repository(tmp_path)
    for flags, said in (
        (["--stability-windows", "4"], "--stability-windows 4: perf_analyzer's rule is fixed at 3 windows"),
        (["--workers", "2"], "--workers 2: perf_analyzer sizes its own threads"),
        (["--shared-memory", "system"], "--shared-memory system: perf_analyzer would need the admin key"),
    ):
        args = [
            *SMALL,
            *flags,
            "--repo",
            str(repo),
            "--report",
            str(tmp_path / "r"),
            "--generator",
            "perf_analyzer",
        ]
        code = main(["tune", *args])
        err = capsys.readouterr().err
        assert (
            code != 0 and f"--generator perf_analyzer: {said}" in err and len(err.strip().splitlines()) == 1
        )
    assert not (tmp_path / "r" / "trials.jsonl").exists()


def test_choose_is_no_binary_for_tritonkit_and_one_line_for_an_unknown_generator() -> None:
    assert choose("tritonkit", MeasureOptions()) is None
    with pytest.raises(TritonKitError, match="--generator 'wrk': expected one of tritonkit, perf_analyzer"):
        choose("wrk", MeasureOptions())


#: the modules that measure levels, each choosing its generator through generators.choose
CHOOSERS = ("commands/profile.py", "commands/compare.py", "commands/plan_fleet.py", "tune/tuner.py",
            "tune/trial.py", "tune/plan.py")  # fmt: skip


def test_profile_compare_tune_and_fleet_choose_the_generator_through_one_function() -> None:
    package = Path(__file__).resolve().parents[2] / "tools" / "tritonkit"
    for name in CHOOSERS:
        calls = {
            node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            for node in ast.walk(ast.parse((package / name).read_text()))
            if isinstance(node, ast.Call)
        }
        assert "choose" in calls, name
        # none builds a measurer of its own (profile's perf_analyzer cross-check beside tritonkit's aside)
        assert "Measurer" not in calls, name
        assert name == "commands/profile.py" or "PerfAnalyzerMeasurer" not in calls, name
