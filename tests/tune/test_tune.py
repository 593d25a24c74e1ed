"""``tritonkit tune`` on a tiny ONNX model with the real server: configs applied through the repository API,
the trial log kept across an interruption, the winner written atomically, and a named server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.measure_server import build_repository

from tritonkit.cli import main
from tritonkit.config import ModelConfig, from_pbtxt, to_pbtxt
from tritonkit.errors import OptionError, TritonKitError
from tritonkit.measure.levels import MeasureOptions
from tritonkit.measure.loadgen import WindowSpec
from tritonkit.measure.stats import StabilityRule
from tritonkit.serve.embedded import EmbeddedServer, free_port
from tritonkit.tune.apply import RepositoryApi, read_config, write_as_model, write_config
from tritonkit.tune.space import apply_point
from tritonkit.tune.tuner import TuneOptions, load_finals, load_trials, tune


def _options(repo: Path, report: Path, **extra: object) -> TuneOptions:
    defaults: dict[str, object] = {
        "repo": repo,
        "search": "brute",
        "max_concurrency": 1,
        "refine": 0,
        "instances": (1, 2),
        "delays_us": ("off", 500),
        "max_batch_sizes": (8,),
        "preferred": False,
        "queue": False,
        "require_stable": False,  # 8 helpers share 2 cores: stability is not this test's subject
        "finalists": 0,  # the finals have their own test
        # the generator's own limit is tests/measure/test_capacity.py's subject: on 2 shared cores a fast ONNX
        # model keeps one Python generator busy, so no window here is judged by it (a share of 1.5 cores)
        "measure": MeasureOptions(
            window=WindowSpec(0.1), stability=StabilityRule(3, 0.5), max_windows=3, max_generator_cpu=1.5
        ),
    }
    defaults.update(extra)
    budget = float(defaults.pop("latency_budget_ms", 1000.0))  # type: ignore[arg-type]
    return TuneOptions("add", budget, report, **defaults)  # type: ignore[arg-type]


def test_tune_survives_an_interruption_resumes_and_writes_the_winner(tmp_path: Path) -> None:
    repo = build_repository(tmp_path)
    config_path = repo / "add" / "config.pbtxt"
    before = config_path.read_text()
    report = tmp_path / "report"
    with pytest.raises(KeyboardInterrupt):
        tune(_options(repo, report), interrupt_after=2)
    assert config_path.read_text() == before  # nothing written by an interrupted tune
    header, done = load_trials(report)
    assert header is not None and header["model"] == "add" and len(done) == 2
    assert all(t["levels"] and t["config"]["name"] == "add" for t in done)

    result = tune(_options(repo, report, resume=True))
    assert (report / "server.log.1").is_file()  # the interrupted run's server log, kept beside the new one
    _, trials = load_trials(report)
    assert len(trials) == 4 == result.evaluations  # the two finished trials were not measured again
    assert [t["key"] for t in trials[:2]] == [t["key"] for t in done]
    assert result.winner is not None and result.winner["concurrency"] == 1
    # the winner is the model's config now when it beat the model's own config beyond the spread of
    # their windows (what the verdict computed from them), and the diff says what changed
    data = json.loads((report / "tune.json").read_text())
    verdict = data["verdict"]
    assert verdict == result.verdict and verdict["method"] == "windows"  # no finals in this test
    assert verdict["write"] == (
        verdict["winner"]["min"] > verdict["baseline"]["max"]
        and not verdict["reason"].startswith("the winner is the model's own")
    )
    expected = apply_point(read_config_from_text(before), result.winner["point"])
    assert config_path.read_text() == (to_pbtxt(expected) if verdict["write"] else before)
    assert (result.diff == "") == (config_path.read_text() == before)
    assert len(data["trials"]) == 4 and data["winner"]["key"] == result.winner["key"]
    assert all(
        {"config", "throughput", "p50_ms", "p99_ms", "stable", "levels"} <= set(t) for t in data["trials"]
    )
    text = (report / "report.md").read_text()
    assert "| rank | config |" in text and "queue / in / infer / out" in text
    assert (report / "pareto.png").stat().st_size > 1000
    assert (
        "successfully loaded 'add'" in (report / "server.log").read_text()
    )  # the embedded server's log, kept
    # a resume with another budget is refused
    with pytest.raises(TritonKitError, match="expected the same model, budget, generator and grid"):
        tune(_options(repo, report, resume=True, latency_budget_ms=5.0))


def test_quick_search_starts_each_config_where_the_best_one_peaked(tmp_path: Path) -> None:
    repo = build_repository(tmp_path)
    options = _options(repo, tmp_path / "quick", search="quick", max_concurrency=4, write="none", plots=False)
    result = tune(options)
    trials = result.trials
    assert trials[0]["start_concurrency"] == 1 and trials[0]["levels"][0]["level"] == 1
    for n, t in enumerate(trials[1:], start=1):
        feasible = [p for p in trials[:n] if p["feasible"]]
        incumbent = max(feasible, key=lambda p: (p["throughput"], -p["p99_ms"]))
        assert t["start_concurrency"] == incumbent["concurrency"]
        assert t["levels"][0]["level"] == t["start_concurrency"]
    assert any(t["start_concurrency"] > 1 for t in trials[1:])  # the budget of 1 s fits 4 in flight
    cold = tune(_options(repo, tmp_path / "cold", search="quick", max_concurrency=4, write="none",
                         plots=False, warm_start=False))  # fmt: skip
    assert all(t["start_concurrency"] == 1 for t in cold.trials)


def test_finals_measure_the_leaders_again_survive_an_interruption_and_crown_the_best_median(
    tmp_path: Path,
) -> None:
    repo = build_repository(tmp_path)
    report = tmp_path / "finals"
    finals = {"finalists": 4, "final_rounds": 2, "finals_within": 1.0, "write": "none", "plots": False}
    with pytest.raises(KeyboardInterrupt):
        tune(_options(repo, report, **finals), interrupt_after=6)  # 4 trials, then 2 of 8 finals
    first = load_finals(report)
    assert [f["round"] for f in first] == [0, 0] and all(f["levels"] for f in first)

    result = tune(_options(repo, report, resume=True, **finals))
    rows = load_finals(report)
    assert rows[:2] == first and len(rows) == 8  # the two finished finals were not measured again
    assert sorted((f["key"], f["round"]) for f in rows) == sorted(
        (t["key"], r) for t in result.trials for r in (0, 1)
    )
    assert all(f["start_concurrency"] == 1 and f["levels"][0]["level"] == 1 for f in rows)
    data = json.loads((report / "tune.json").read_text())
    table = {f["key"]: f for f in data["finals"]}
    assert len(table) == 4 and all(len(f["figures"]) == 2 for f in table.values())
    for f in table.values():  # the figures are the logged rounds' throughputs
        logged = sorted((r for r in rows if r["key"] == f["key"]), key=lambda r: r["round"])
        assert f["figures"] == [r["throughput"] for r in logged]
    crowned = max(table.values(), key=lambda f: f["median"])
    assert result.winner is not None and result.winner["key"] == crowned["key"]
    assert result.winner["confirmed_throughput"] == crowned["median"]
    levels = sum(len(t["levels"]) for t in result.trials) + sum(len(f["levels"]) for f in rows)
    assert result.measurements == data["measurements"] == levels  # the finals' levels are counted
    assert "Finals:" in (report / "report.md").read_text()


def read_config_from_text(text: str) -> ModelConfig:

    return from_pbtxt(text)


def test_a_failed_write_leaves_the_old_config(tmp_path: Path) -> None:
    repo = build_repository(tmp_path)
    model_dir = repo / "add"
    before = (model_dir / "config.pbtxt").read_text()
    bad = read_config(model_dir)
    bad.max_batch_size = 2
    assert bad.dynamic_batching is not None
    bad.dynamic_batching.preferred_batch_size = [8]  # above max_batch_size: invalid
    with pytest.raises(TritonKitError, match="not valid"):
        write_config(model_dir, bad)
    assert (model_dir / "config.pbtxt").read_text() == before
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "config.pbtxt"]  # no temporary file left
    good = apply_point(
        read_config(model_dir), {"instances": 2, "kind": "KIND_CPU", "max_batch_size": 4, "delay_us": 100}
    )
    target, diff = write_as_model(model_dir, "add_tuned", good)
    assert (target / "1").is_dir() and 'name: "add_tuned"' in (target / "config.pbtxt").read_text()
    assert "+  count: 2" in diff and (model_dir / "config.pbtxt").read_text() == before
    with pytest.raises(TritonKitError, match="already exists"):
        write_as_model(model_dir, "add_tuned", good)


def test_tune_a_named_server_through_its_repository_api(
    explicit_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    api = RepositoryApi(explicit_server.http_url, {"tritonkit-admin-key": "wrong"})
    with pytest.raises(TritonKitError, match="loading model `add`"):
        api.load("add")
    RepositoryApi(explicit_server.http_url, explicit_server.admin_headers).load("add")
    args = [
        "tune", "--model", "add", "--latency-budget-ms", "1000", "--url", explicit_server.http_url,
        f"--admin-key={explicit_server.admin_key}", "--report", str(tmp_path / "r"), "--write", "none",
        "--instances", "1,2", "--delays-us", "off", "--max-batch-sizes", "8", "--no-preferred",
        "--no-queue-policy", "--max-concurrency", "1", "--window-s", "0.2", "--max-windows", "3",
        "--accept-unstable", "--repo", str(explicit_server.repo), "--no-plots",
        "--finalists", "0",  # the finals have their own test
    ]  # fmt: skip
    before = (explicit_server.repo / "add" / "config.pbtxt").read_text()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "winner: " in out and "2 configs" in out
    assert (explicit_server.repo / "add" / "config.pbtxt").read_text() == before  # --write none
    assert not (tmp_path / "r" / "server.log").exists()  # a named server keeps its own log


def test_a_server_that_stops_answering_is_one_line_naming_its_log(tmp_path: Path) -> None:
    api = RepositoryApi(f"127.0.0.1:{free_port()}", log=tmp_path / "server.log")  # nothing listens there
    with pytest.raises(TritonKitError) as raised:
        api.load("add")
    message = str(raised.value)
    assert "loading model `add`" in message and "the server did not answer" in message
    assert message.endswith(f"; see {tmp_path / 'server.log'}") and "\n" not in message


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("latency_budget_ms", 0.0, "`latency_budget_ms` 0.0: expected a positive number of ms"),
        ("search", "random", "`search` 'random': expected quick or brute"),
        ("final_rounds", -2, "`final_rounds` -2: expected a whole number >= 0"),
        ("url", "127.0.0.1:1", "`admin_key` not given: expected the key"),
    ],
)
def test_tune_options_name_the_option_not_a_flag(
    tmp_path: Path, field: str, value: object, expected: str
) -> None:
    """The library speaks of its options; only the command turns them into flags (next test)."""
    (tmp_path / "add").mkdir()
    options = _options(tmp_path, tmp_path / "r", **{field: value})
    with pytest.raises(OptionError) as caught:
        options.validate()
    assert str(caught.value).startswith(expected) and "--" not in str(caught.value)


@pytest.mark.parametrize("flag", [["--finalists", "-1"], ["--final-rounds", "-2"]])
def test_bad_finals_flags_get_one_line_and_change_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str]
) -> None:
    repo = build_repository(tmp_path)
    before = (repo / "add" / "config.pbtxt").read_text()
    args = [
        "tune",
        "--model",
        "add",
        "--latency-budget-ms",
        "100",
        "--repo",
        str(repo),
        "--report",
        str(tmp_path / "r"),
    ]
    assert main([*args, *flag]) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"tritonkit tune: error: {flag[0]} {flag[1]}: expected a whole number >= 0"]
    assert (repo / "add" / "config.pbtxt").read_text() == before and not (
        tmp_path / "r" / "trials.jsonl"
    ).exists()
