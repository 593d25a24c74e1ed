"""``tritonkit profile`` and ``tritonkit compare`` end to end against the real embedded server."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tritonkit.cli import main
from tritonkit.serve.embedded import EmbeddedServer

FAST = ["--window-s", "0.25", "--stability-pct", "60", "--max-windows", "4", "--timeout-s", "10"]


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
    out = capsys.readouterr().out
    assert "c1" in out and "c2" in out


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
        ["compare", "add", "work", "--url", server.http_url, f"--admin-key={server.admin_key}", "--concurrency", "2", "--rounds", "2", *FAST,
         "--json", str(tmp_path / "c.json")]
    )  # fmt: skip
    assert code == 0
    summary = json.loads((tmp_path / "c.json").read_text())
    assert summary["reference"] == "add" and summary["rounds"] == 2
    ref, other = summary["targets"]["add"], summary["targets"]["work"]
    assert ref["throughput_ratio"]["median"] == pytest.approx(1.0)
    # work sleeps 1 ms per execution, add does not: slower in every round
    assert other["throughput_ratio"]["median"] < 1.0 and other["p99_ratio"]["median"] > 1.0
    assert (
        other["throughput_ratio"]["q1"]
        <= other["throughput_ratio"]["median"]
        <= other["throughput_ratio"]["q3"]
    )
    assert "| `work` |" in capsys.readouterr().out
