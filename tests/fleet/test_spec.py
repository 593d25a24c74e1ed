"""The fleet file: read strictly, every error one line; bad files through `tritonkit plan --fleet` write nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.fleet.conftest import tune_report, write_fleet

from tritonkit.cli import main
from tritonkit.errors import TritonKitError
from tritonkit.fleet.capacity import read_tuned
from tritonkit.fleet.spec import FleetFileError, load_fleet


def _fleet(repo: Path, **over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "gpus": [{"type": "cpu", "price_per_hour": 0.1}, {"type": "t4", "price_per_hour": 0.526}],
        "models": [
            {"name": "light", "repository": str(repo), "rate": 20, "p99_ms": 50, "batch_mix": "1:0.8,4:0.2"},
            {"name": "heavy", "repository": str(repo), "rate": 10, "p99_ms": 80, "batch_mix": {1: 1}},
        ],
    }
    data.update(over)
    return data


def test_a_good_file_is_read_with_its_defaults(tmp_path: Path, repo: Path) -> None:
    fleet = load_fleet(write_fleet(tmp_path / "fleet.yaml", _fleet(repo)))
    assert [g.type for g in fleet.gpus] == ["cpu", "T4"]  # the known spelling
    assert fleet.gpu("T4").memory_gb == 16.0  # NVIDIA's published T4 memory
    assert (fleet.headroom, fleet.min_replicas, fleet.objective) == (0.3, 2, "cost")
    assert (fleet.node.gpus_per_node, fleet.node.memory_fraction) == (1, 0.9)
    light = fleet.model("light")
    assert light.batch_mix == {1: 0.8, 4: 0.2} and light.dominant_batch == 1
    assert light.config.max_batch_size == 8 and fleet.model("heavy").batch_mix == {1: 1.0}
    unpriced = load_fleet(write_fleet(tmp_path / "f2.yaml", _fleet(repo, gpus=[{"type": "cpu"}])))
    assert unpriced.objective == "gpus"  # no price: capacity without cost


def _problems(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    with pytest.raises(FleetFileError) as caught:
        load_fleet(write_fleet(tmp_path / "bad.yaml", data))
    assert all("\n" not in line for line in caught.value.problems)
    return caught.value.problems


def test_unknown_model_names_the_repository_and_what_it_has(tmp_path: Path, repo: Path) -> None:
    data = _fleet(repo)
    data["models"][0]["name"] = "nope"
    [line] = _problems(tmp_path, data)
    assert "models[0] (nope): unknown model `nope`" in line and "expected one of: heavy, light" in line


def test_every_schema_error_is_its_own_line(tmp_path: Path, repo: Path) -> None:
    data = _fleet(repo, headroom=-1, surprise=1)
    data["gpus"].append({"type": "X9000"})
    data["models"][0].update(rate=0, p99=5, batch_mix="16", tune={"L4": "somewhere"})
    lines = _problems(tmp_path, data)
    expected = [
        "(root): unknown key `surprise`",
        "gpus[2]: unknown GPU type `X9000`",
        "models[0] (light): unknown key `p99`",
        "models[0] (light).rate: expected a number > 0, got 0",
        "models[0] (light).batch_mix: batch 16 exceeds `light`'s max_batch_size 8",
        "models[0] (light).tune.L4: GPU type `L4` is not in `gpus` (expected one of: cpu, T4)",
        "headroom: expected a number >= 0 and <= 10, got -1",
    ]
    for part in expected:
        assert sum(part in line for line in lines) == 1, (part, lines)
    assert len(lines) == len(expected)


def test_duplicate_keys_and_models_are_refused(tmp_path: Path, repo: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(
        f"gpus: [{{type: cpu}}]\ngpus: [{{type: T4}}]\nmodels: [{{name: light, repository: {repo}, rate: 1, p99_ms: 5}}]\n"
    )
    with pytest.raises(FleetFileError, match="key `gpus` given twice"):
        load_fleet(path)
    data = _fleet(repo)
    data["models"].append(dict(data["models"][0]))
    assert _problems(tmp_path, data) == [
        f"{tmp_path / 'bad.yaml'}: models[2]: model `light` listed twice (expected each model once)"
    ]


def test_a_price_missing_with_objective_cost_is_one_line(tmp_path: Path, repo: Path) -> None:
    data = _fleet(repo, objective="cost")
    del data["gpus"][1]["price_per_hour"]
    [line] = _problems(tmp_path, data)
    assert "gpus (T4): price_per_hour missing" in line and "tritonkit assumes none" in line


def test_a_budget_no_config_meets(tmp_path: Path, repo: Path) -> None:
    report = tune_report(tmp_path / "t", repo, "light", budget_ms=50, throughput=400, p99_ms=20)
    with pytest.raises(
        TritonKitError, match=r"no config of .* meets p99 <= 5 ms \(the lowest p99 measured is 10\.00 ms\)"
    ):
        read_tuned("light", "cpu", report, 5.0)
    looser = read_tuned(
        "light", "cpu", report, 15.0
    )  # a level of the tune fits a tighter budget than its own
    assert (looser.capacity_rps, looser.basis) == (200.0, "level")
    tighter = read_tuned("light", "cpu", report, 60.0)
    assert (tighter.capacity_rps, tighter.basis, tighter.instances) == (400.0, "searched", 1)


def test_a_tune_measured_on_another_device_is_refused(tmp_path: Path, repo: Path) -> None:
    report = tune_report(
        tmp_path / "t", repo, "light", budget_ms=50, throughput=400, p99_ms=20, device="NVIDIA H100 80GB HBM3"
    )
    assert read_tuned("light", "H100", report, 50).device == "NVIDIA H100 80GB HBM3"
    with pytest.raises(
        TritonKitError, match="was measured on NVIDIA H100 80GB HBM3; expected a tune run on T4"
    ):
        read_tuned("light", "T4", report, 50)
    with pytest.raises(
        TritonKitError, match="was measured on NVIDIA H100 80GB HBM3; expected a tune run on cpu"
    ):
        read_tuned("light", "cpu", report, 50)
    on_cpu = tune_report(tmp_path / "c", repo, "light", budget_ms=50, throughput=400, p99_ms=20, device="cpu")
    assert read_tuned("light", "cpu", on_cpu, 50).device == "CPU AMD EPYC, 16 cores"
    # a tune that kept the model's own config (its winner did not beat it beyond the spread) plans with that
    data = json.loads((report / "tune.json").read_text())
    data["baseline"] = {**data["winner"], "throughput": 300.0, "confirmed_throughput": 290.0}
    data["chosen"] = {"key": "own", "own_config": True}
    (report / "tune.json").write_text(json.dumps(data))
    kept = read_tuned("light", "H100", report, 50)
    assert (kept.capacity_rps, kept.basis) == (290.0, "confirmed")


def _cli(tmp_path: Path, data: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    out = tmp_path / "plan"
    fleet = write_fleet(tmp_path / "fleet.yaml", data)
    code = main(["plan", "--fleet", str(fleet), "--out", str(out), "--no-plots"])
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".plan")], (
        "something was written"
    )
    return code, err


def test_bad_fleet_files_through_the_command_write_nothing(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _fleet(repo)
    data["models"][1]["name"] = "ghost"
    code, err = _cli(tmp_path, data, capsys)
    assert (
        code == 1
        and len(err) == 1
        and err[0].startswith("tritonkit plan: error: ")
        and "unknown model `ghost`" in err[0]
    )

    t4 = tune_report(
        tmp_path / "t4", repo, "light", budget_ms=50, throughput=400, p99_ms=20, device="Tesla T4"
    )
    tight = {"gpus": [{"type": "T4", "price_per_hour": 0.5}],
             "models": [{"name": "light", "repository": str(repo), "rate": 5, "p99_ms": 5, "tune": {"T4": str(t4)}}]}  # fmt: skip
    code, err = _cli(tmp_path, tight, capsys)
    assert code == 1 and len(err) == 1 and "no config of" in err[0] and "meets p99 <= 5 ms" in err[0]

    l4 = tune_report(
        tmp_path / "l4", repo, "light", budget_ms=50, throughput=900, p99_ms=20, device="NVIDIA L4"
    )
    huge = {"gpus": [{"type": "T4", "price_per_hour": 0.5}, {"type": "L4"}],
            "models": [{"name": "light", "repository": str(repo), "rate": 5, "p99_ms": 50,
                        "tune": {"T4": str(t4), "L4": str(l4)}, "memory_mb": {"T4": 20000, "L4": 30000}}]}  # fmt: skip
    code, err = _cli(tmp_path, huge, capsys)
    assert code == 1 and len(err) == 1
    assert (
        "model `light` fits no GPU type's memory (T4 20,000 MB > 16 GB x 0.9, L4 30,000 MB > 24 GB x 0.9)"
        in err[0]
    )

    priced = {**huge, "objective": "cost"}
    code, err = _cli(tmp_path, priced, capsys)
    assert code == 1 and len(err) == 1 and "gpus (L4): price_per_hour missing" in err[0]


def test_plan_without_a_tune_report_or_a_fleet_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--target-rps", "5"]) == 1
    assert capsys.readouterr().err.strip() == (
        "tritonkit plan: error: expected --tune-report DIR and --target-rps N (one model), or --fleet FLEET.yaml"
    )
