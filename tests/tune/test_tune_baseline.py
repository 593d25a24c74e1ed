"""The model's own config as the tune's baseline, measured exactly as it stands, and the write-back that
only a winner beating it beyond the spread of their repeated measurements gets.

The model sleeps 20 ms per execution (not per request): with dynamic batching it serves about eight times
what it serves without at eight requests in flight, a difference set by the sleep, not by the machine's
tail. The grid is narrowed so that it does not hold the model's own config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.slow_model import slow_repository

from tritonkit.cli import main
from tritonkit.config import from_pbtxt, to_dict
from tritonkit.measure.levels import MeasureOptions
from tritonkit.measure.loadgen import WindowSpec
from tritonkit.measure.stats import StabilityRule
from tritonkit.tune.space import base_point, describe
from tritonkit.tune.trial_log import load_baselines
from tritonkit.tune.tuner import TuneOptions, tune


def slow_options(repo: Path, report: Path, name: str = "slow", **extra: object) -> TuneOptions:
    values: dict[str, object] = {
        "repo": repo,
        "search": "brute",
        "max_concurrency": 8,
        "refine": 0,
        "instances": (1,),
        "max_batch_sizes": (8,),
        "preferred": False,
        "queue": False,
        "require_stable": False,
        "finalists": 2,
        "final_rounds": 2,
        "plots": False,
        "measure": MeasureOptions(window=WindowSpec(0.2), stability=StabilityRule(2, 0.5), max_windows=2),
    }
    values.update(extra)
    return TuneOptions(name, 1000.0, report, **values)  # type: ignore[arg-type]


def test_a_grid_without_the_model_s_config_still_measures_that_config_as_the_baseline_and_keeps_it(
    tmp_path: Path,
) -> None:
    repo = slow_repository(tmp_path, batching=True)
    config_path = repo / "slow" / "config.pbtxt"
    before = config_path.read_text()
    own = describe(base_point(from_pbtxt(before)))  # delay_us=500: not on a grid of delay `off` only
    report = tmp_path / "report"
    result = tune(slow_options(repo, report, delays_us=("off",)))
    data = json.loads((report / "tune.json").read_text())
    baseline = data["baseline"]
    assert baseline["key"] == own and "delay_us=500" in own and baseline["on_grid"] is False
    assert baseline["config"] == json.loads(json.dumps(to_dict(from_pbtxt(before))))  # exactly as it stood
    assert [row["key"] for row in load_baselines(report)] == [own]  # logged apart from the grid's trials
    assert [t["key"] for t in data["trials"]] == ["delay_us=off instances=1 kind=KIND_CPU max_batch_size=8"]
    # measured in the same finals rounds as the winner, and reported as exactly the model's config
    finals = {f["key"]: f for f in data["finals"]}
    assert len(finals[own]["figures"]) == 2 and finals[own]["own_config"]
    text = (report / "report.md").read_text()
    assert f"**Baseline**: the model's own config as it stood, `{own}` (not on the grid" in text
    # a batcher at 8 in flight serves about 8x the sleeping model without one: the winner (no batcher)
    # does not beat it, so nothing is written; the verdict stands on the rounds the tune measured
    verdict = data["verdict"]
    assert verdict["method"] == "finals" and verdict["baseline"]["figures"] == [
        round(x, 3) for x in finals[own]["figures"]
    ]
    assert not verdict["write"] and verdict["winner"]["min"] <= verdict["baseline"]["max"]
    assert config_path.read_text() == before and result.diff == "" and result.written_to == ""
    assert "**NOT written**" in text and data["chosen"] == {"key": own, "own_config": True}


@pytest.mark.parametrize(
    ("write", "extra", "message"),
    [
        ("spec", ["--delays-us", "off,500"], "a build spec cannot say 'no dynamic batcher'"),
        ("spec", [], "build specs in"),  # no *.yaml in the repository builds `slow`
        ("spec:{tmp}/missing.yaml", [], "no such file; expected the build spec of `slow`"),
        ("spec:{tmp}/other.yaml", [], "that spec does not build `slow`"),
        ("bogus", [], "expected config, none, model:NAME, spec or spec:PATH"),
    ],
)
def test_bad_write_spec_requests_get_one_line_and_change_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], write: str, extra: list[str], message: str
) -> None:
    repo = slow_repository(tmp_path, batching=True)
    (tmp_path / "other.yaml").write_text("name: other\nsource:\n  onnx: x.onnx\n")
    before = (repo / "slow" / "config.pbtxt").read_text()
    args = ["tune", "--model", "slow", "--latency-budget-ms", "100", "--repo", str(repo),
            "--report", str(tmp_path / "r"), "--write", write.format(tmp=tmp_path), *extra]  # fmt: skip
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err
    assert (repo / "slow" / "config.pbtxt").read_text() == before and not (tmp_path / "r").exists()
