"""``tritonkit profile`` and ``tritonkit compare`` end to end against the real embedded server."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from tritonkit.cli import main
from tritonkit.serve.embedded import EmbeddedServer

FAST = ["--window-s", "0.15", "--stability-pct", "60", "--max-windows", "4", "--timeout-s", "10"]


def test_profile_sweep_writes_csv_and_json(
    server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["profile", "--model", "work", "--url", server.http_url, f"--admin-key={server.admin_key}", "--concurrency", "1,2", *FAST,
         "--csv", str(tmp_path / "p.csv"), "--json", str(tmp_path / "p.json")]
    )  # fmt: skip
    assert code == 0
    with (tmp_path / "p.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["level"] for r in rows] == ["1", "2"]
    assert all(float(r["throughput"]) > 0 and float(r["p99_ms"]) > 0 for r in rows)
    assert all(r["batches"].startswith("1:") for r in rows)  # Triton's batch_stats: no batcher, batch 1
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["model"] == "work" and len(data["levels"]) == 2
    assert data["levels"][0]["window_results"][0]["server"]["compute_infer_us"] > 0
    # each p99 comes with the requests it was read from and its interval; the run with its provenance
    assert all(r["p99_samples"] == r["successes"] and len(r["p99_ci_ms"]) == 2 for r in data["levels"])
    assert data["provenance"]["triton_version"] == "2.51.0"
    assert [(m["name"], m["instance_kind"]) for m in data["provenance"]["models"]] == [("work", "KIND_CPU")]
    out = capsys.readouterr().out
    assert "c1" in out and "c2" in out and out.startswith("Measured on: CPU ")


def test_profile_find_max_and_bad_input(
    server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["profile", "--model", "add", "--url", server.grpc_url, f"--admin-key={server.admin_key}", "--protocol", "grpc", "--find-max",
         "--latency-budget-ms", "500", "--max-level", "2", "--accept-unstable", *FAST, "--json", str(tmp_path / "m.json")]
    )  # fmt: skip
    data = json.loads((tmp_path / "m.json").read_text())
    assert code == 0 and data["best"]["level"] in (1, 2) and data["latency_budget_ms"] == 500
    assert "highest load within p99 500 ms" in capsys.readouterr().out
    assert (
        main(
            [
                "profile",
                "--model",
                "add",
                "--url",
                server.http_url,
                f"--admin-key={server.admin_key}",
                "--find-max",
            ]
        )
        == 1
    )
    assert "expected --latency-budget-ms" in capsys.readouterr().err


def test_compare_two_models_in_interleaved_rounds(
    server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["compare", "add", "work", "--url", server.http_url, f"--admin-key={server.admin_key}", "--concurrency", "2", "--rounds", "3", *FAST,
         "--json", str(tmp_path / "c.json"), "--markdown", str(tmp_path / "c.md")]
    )  # fmt: skip
    assert code == 0
    summary = json.loads((tmp_path / "c.json").read_text())
    assert summary["reference"] == "add" and summary["rounds"] == 3 and len(summary["per_round"]) == 3
    # what compare computed, checked against the rounds it measured (never how fast either model was:
    # which of two models has the higher p99 over a few hundred requests is the machine's tail)
    for name in ("add", "work"):
        row = summary["targets"][name]
        rounds = [r[name] for r in summary["per_round"]]
        assert row["throughput_median"] == pytest.approx(
            statistics.median(r["throughput"] for r in rounds), abs=1e-3
        )
        assert row["p99_ms_median"] == pytest.approx(statistics.median(r["p99_ms"] for r in rounds), abs=1e-4)
        ratios = sorted(r[name]["throughput"] / r["add"]["throughput"] for r in summary["per_round"])
        q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        assert row["throughput_ratio"] == pytest.approx(
            {"median": median, "q1": q1, "q3": q3, "iqr": q3 - q1}, abs=1e-4
        )
        assert all(r["p99_samples"] > 0 for r in rounds)
    assert summary["targets"]["add"]["throughput_ratio"]["median"] == pytest.approx(1.0)
    assert [m["name"] for m in summary["provenance"]["models"]] == ["add", "work"]
    text = (tmp_path / "c.md").read_text()
    assert text.startswith("Measured on: CPU ") and "- `work` version 1: engine python" in text
    assert "| `work` |" in capsys.readouterr().out
