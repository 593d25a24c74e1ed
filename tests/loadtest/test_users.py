"""The HTTP and gRPC users against a real embedded Triton: events, validation, failures, accounting.

Each run is a real Locust child process for about two seconds; what is checked comes from the
files Locust writes (request type and name per row, failure texts) and Triton's own counters.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tritonkit_bench.probe_model import ERROR_TEXT

#: (protocol, transport options): each transport of both users is checked
PROTOCOLS = [
    pytest.param("http", {"http_transport": "lean"}, id="http-lean"),
    pytest.param("http", {"http_transport": "tritonclient"}, id="http-tritonclient"),
    pytest.param("grpc", {}, id="grpc-wire"),
]


def _stats_rows(report: Path) -> list[dict[str, str]]:
    with open(report / "locust_stats.csv", newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["Name"] != "Aggregated"]


@pytest.mark.slow
@pytest.mark.parametrize(("protocol", "transport"), PROTOCOLS)
def test_user_reports_every_request_as_one_event(
    protocol: str, transport: dict[str, str], loadtest: Callable[..., Any], tmp_path: Path
) -> None:
    summary = loadtest(("probe_add",), protocol=protocol, **transport, report_dir=tmp_path / protocol)
    rows = _stats_rows(tmp_path / protocol)
    assert json.loads((tmp_path / protocol / "summary.json").read_text())["protocol"] == protocol
    assert [(r["Type"], r["Name"]) for r in rows] == [(protocol, "probe_add:1")]
    assert float(rows[0]["Average Content Size"]) > 0  # response sizes are reported
    model = summary["models"]["probe_add:1"]
    assert model["requests"] > 50 and model["failures"] == 0
    assert 0 < model["p50_ms"] <= model["p95_ms"] <= model["p99_ms"]
    acc = summary["accounting"]
    # Every request accounted for: Locust's events and Triton's own counters agree exactly.
    assert acc["sent"] == acc["succeeded"] + acc["failed"] == acc["triton_requests"]
    assert acc["matched"] is True
    assert summary.exit_code == 0


@pytest.mark.slow
@pytest.mark.parametrize(("protocol", "transport"), PROTOCOLS)
def test_wrong_answer_is_a_failure(
    protocol: str, transport: dict[str, str], loadtest: Callable[..., Any], tmp_path: Path
) -> None:
    summary = loadtest(("probe_nan",), protocol=protocol, **transport, report_dir=tmp_path / protocol)
    model = summary["models"]["probe_nan:1"]
    assert model["requests"] > 0 and model["failures"] == model["requests"]
    (error,) = model["errors"]
    assert "WrongAnswerError" in error and "non-finite values, expected all finite" in error
    # Triton counts these as successes: the failures are the client's validation, not the server's.
    assert summary["accounting"]["triton_success"] == model["requests"]
    assert summary.exit_code != 0 and any("failure ratio" in b for b in summary["slo"]["breaches"])


@pytest.mark.slow
@pytest.mark.parametrize(("protocol", "transport"), PROTOCOLS)
def test_failures_carry_tritons_text(
    protocol: str, transport: dict[str, str], loadtest: Callable[..., Any], tmp_path: Path
) -> None:
    summary = loadtest(("probe_error",), protocol=protocol, **transport, report_dir=tmp_path / protocol)
    model = summary["models"]["probe_error:1"]
    assert model["requests"] > 0 and model["failures"] == model["requests"]
    (error,) = model["errors"]
    assert "TritonInferenceError" in error and ERROR_TEXT in error
    acc = summary["accounting"]
    # Triton 2.51 counts a python-backend error response as an executed request ("success").
    assert acc["triton_requests"] == acc["sent"] == acc["failed"]


@pytest.mark.slow
def test_mixed_models_by_weight(loadtest: Callable[..., Any], tmp_path: Path) -> None:
    summary = loadtest(("probe_add@3", "probe_nan@1"), users=4, report_dir=tmp_path / "mixed")
    config = json.loads((tmp_path / "mixed" / "run_config.json").read_text())
    assert [(m["name"], m["weight"]) for m in config["models"]] == [("probe_add", 3), ("probe_nan", 1)]
    models = summary["models"]
    assert models["probe_add:1"]["requests"] > 0 and models["probe_nan:1"]["requests"] > 0
    assert models["probe_add:1"]["failures"] == 0
    assert summary["requests"] == models["probe_add:1"]["requests"] + models["probe_nan:1"]["requests"]
    assert summary["accounting"]["matched"] is True
