"""A resumed tune replays its log and never trades a finals median for a search figure; the spec gets a
config the first run already wrote; the time budget ends a tune as a partial one (real server).

The model sleeps 20 ms per execution: with a 500 µs batcher at eight in flight it serves several times
what its own config (no batcher) serves, so the first run's winner beats the baseline and is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.support.slow_model import slow_repository

from tritonkit.cli import main
from tritonkit.tune.trial_log import LOG, load_rows

from .test_tune_baseline import slow_options

SPEC = "name: slow\nsource:\n  onnx: slow.onnx  # the exported model\nbatching:\n  max_batch_size: 8\n"


def _lines(report: Path) -> int:
    return len((report / LOG).read_text().splitlines())


def test_resume_with_write_spec_keeps_the_finals_median_and_writes_the_applied_winner(tmp_path: Path) -> None:
    repo = slow_repository(tmp_path, batching=False)
    spec = tmp_path / "slow.yaml"
    spec.write_text(SPEC)
    report = tmp_path / "report"
    # one grid point (delay 500): a finalist alone, measured in the finals beside the model's own config
    options = {"delays_us": (500,), "finals_within": 0.10}
    from tritonkit.tune.tuner import tune  # noqa: PLC0415 (kept beside the options it reads)

    first = tune(slow_options(repo, report, **options))
    assert first.verdict is not None and first.verdict["write"], first.verdict  # written to config.pbtxt
    before = json.loads((report / "tune.json").read_text())
    confirmed = before["winner"]["confirmed_throughput"]
    assert len(before["winner"]["final_figures"]) == 2 and before["chosen"]["own_config"] is False
    written = (repo / "slow" / "config.pbtxt").read_text()
    assert "max_queue_delay_microseconds: 500" in written
    lines = _lines(report)

    # config.pbtxt is the winner now: a resume replays from the config the log began with
    second = tune(slow_options(repo, report, resume=True, write=f"spec:{spec}", **options))
    assert _lines(report) == lines  # nothing measured again
    after = json.loads((report / "tune.json").read_text())
    assert after["winner"]["key"] == before["winner"]["key"]
    assert after["winner"]["confirmed_throughput"] == confirmed  # the finals median, not a search figure
    assert after["winner"]["final_figures"] == before["winner"]["final_figures"]
    assert after["chosen"] == before["chosen"] and after["baseline"]["key"] == before["baseline"]["key"]
    # the applied winner goes into the spec; config.pbtxt is already it
    assert second.written_to.endswith("config.pbtxt") and second.diff == "" and second.spec_path == str(spec)
    data = yaml.safe_load(spec.read_text())
    assert data["batching"]["max_queue_delay_us"] == 500 and "# the exported model" in spec.read_text()
    assert (repo / "slow" / "config.pbtxt").read_text() == written
    # `plan` prices the finals median
    assert main(["plan", "--tune-report", str(report), "--target-rps", "100", "--pod-hour-price", "0.1"]) == 0
    plan = json.loads((report / "plan.json").read_text())
    assert plan["measured_rps"] == confirmed


def test_a_spent_time_budget_ends_the_tune_as_a_partial_one_and_resume_finishes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = slow_repository(tmp_path, batching=True)
    before = (repo / "slow" / "config.pbtxt").read_text()
    report = tmp_path / "report"
    args = ["tune", "--model", "slow", "--latency-budget-ms", "1000", "--repo", str(repo), "--report",
            str(report), "--search", "brute", "--instances", "1,2", "--delays-us", "0,500",
            "--max-batch-sizes", "8", "--no-preferred", "--no-queue-policy", "--max-concurrency", "2",
            "--window-s", "0.2", "--accept-unstable", "--no-plots", "--time-budget", "0.5"]  # fmt: skip
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "PARTIAL: the time budget (0.5 s) ended the tune in its search after 1 config(s)" in captured.err
    assert "nothing written" in captured.err
    data = json.loads((report / "tune.json").read_text())
    partial = data["partial"]
    assert (partial["time_budget_s"], partial["stopped"], partial["configs_measured"]) == (0.5, "search", 1)
    assert len(data["trials"]) == 1 and data["verdict"]["write"] is False
    assert (
        data["verdict"]["method"] == "partial"
        and "a partial tune writes nothing" in data["verdict"]["reason"]
    )
    assert (repo / "slow" / "config.pbtxt").read_text() == before
    assert "**PARTIAL TUNE**" in (report / "report.md").read_text()
    # a resume without a budget goes on from the log: the first trial is not measured again
    first = [r for r in load_rows(report)[1] if r.get("kind") == "trial"]
    assert main([*args[:-2], "--resume", "--write", "none"]) == 0
    rows = [r for r in load_rows(report)[1] if r.get("kind") == "trial"]
    assert rows[:1] == first and len(rows) == 4
    assert json.loads((report / "tune.json").read_text())["partial"] is None
    # a budget that is no number of seconds is one line
    capsys.readouterr()
    assert main([*args[:-1], "0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--time-budget" in err[0] and "positive number of seconds" in err[0]
