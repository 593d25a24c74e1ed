"""Report files of a real run: Locust CSV/HTML, summary.json keys, the summary.md table, valid PNGs;
the ramp's steps; Locust's distributed mode (--workers 2)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tritonkit.loadtest.report.summary import _knee
from tritonkit.loadtest.slo import SLO

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KEYS = {"requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms", "slo_passed"}


def _valid_png(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(PNG_MAGIC) and b"IEND" in data[-16:] and len(data) > 2000


@pytest.mark.slow
def test_report_files(loadtest: Callable[..., Any], tmp_path: Path) -> None:
    report = tmp_path / "steady"
    loadtest(("probe_add",), report_dir=report, plots=True, slo=SLO(p99_ms=10_000))
    for name in ("locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv", "locust.html"):
        assert (report / name).stat().st_size > 0, name
    data = json.loads((report / "summary.json").read_text())
    assert set(data) >= KEYS
    assert set(data["models"]["probe_add:1"]) >= KEYS
    assert data["slo_passed"] is True
    server = data["models"]["probe_add:1"]["server"]
    assert server["queue_us_per_request"] is not None and server["compute_us_per_request"] > 0
    assert server["avg_batch"] >= 1
    assert data["models"]["probe_add:1"]["batch_stats"]["inferences"] == server["inferences"]
    md = (report / "summary.md").read_text()
    assert (
        "| model | precision | batch | p50 ms | p95 ms | p99 ms | p99 95% CI (n) | throughput (req/s) |" in md
    )
    # the p99 comes with the number of requests it was read from and its order-statistic interval;
    # answers that arrive while Locust stops its users are counted but not timed (their time is
    # Locust's shutdown)
    model = data["models"]["probe_add:1"]
    assert 0 < model["p99_samples"] <= model["requests"]
    assert len(model["p99_ci_ms"]) == 2
    # provenance: the device, Triton, the model version's engine, precision and instances
    provenance = data["provenance"]
    assert provenance["triton_version"] == "2.51.0" and provenance["device"]["cores"] > 0
    assert [(m["name"], m["version"]) for m in provenance["models"]] == [("probe_add", "1")]
    assert md.splitlines()[2].startswith("Measured on: CPU ") and "- `probe_add` version 1: engine" in md
    assert "| probe_add:1 |" in md and "Accounting:" in md and ": match." in md and "PASSED" in md
    assert set(data["plots"]) == {"latency_over_time.png", "server_queue_compute.png"}
    for name in data["plots"]:
        assert _valid_png(report / name), name
        assert f"]({name})" in md


@pytest.mark.slow
def test_ramp_records_steps_and_plots_the_knee(loadtest: Callable[..., Any], tmp_path: Path) -> None:
    report = tmp_path / "ramp"
    summary = loadtest(
        ("probe_add",), report_dir=report, scenario="ramp", users=4, ramp_steps=2, duration="4s", plots=True
    )
    steps = summary["ramp_steps"]
    assert [s["users"] for s in steps] == [2, 4]
    assert all(s["requests"] > 0 and s["rps"] > 0 and s["p99_ms"] is not None for s in steps)
    # No latency gate and no failures: no step breaks the SLO, so the knee is the step after which
    # more users added under 5 % throughput (here the first, if the second added so little), else
    # not reached. Which of the two depends on the machine; the report must name the right one.
    assert all(s["breaches"] == [] for s in steps)
    md = (report / "summary.md").read_text()
    if steps[1]["rps"] < steps[0]["rps"] * 1.05:
        assert (summary["knee"], summary["knee_rule"]) == (steps[0], "saturation")
        assert f"Knee: 2 users, {steps[0]['rps']:,.1f} req/s: more users added under 5%" in md
    else:
        assert (summary["knee"], summary["knee_rule"]) == (None, "not reached")
        assert "Knee: not reached; throughput still rose at the last step" in md
    assert _valid_png(report / "ramp_throughput_p99.png")
    assert "Ramp steps (each from the requests completed inside the step, after a settling period" in md
    assert all(s["samples"] == s["requests"] and s["settle_s"] > 0 for s in steps)


@pytest.mark.slow
def test_workers_mode_smoke(loadtest: Callable[..., Any], tmp_path: Path) -> None:
    summary = loadtest(("probe_add",), report_dir=tmp_path / "workers", workers=2, users=4, duration="3s")
    assert summary["workers"] == 2
    assert summary["requests"] > 0 and summary["failures"] == 0
    # Both workers wrote their histograms; together they account for every request Triton saw.
    assert len(list((tmp_path / "workers" / ".latency").glob("*.json"))) == 2
    assert summary["accounting"]["matched"] is True


def _step(users: int, rps: float, breaches: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"users": users, "rps": rps, "breaches": list(breaches)}


def test_knee_rules() -> None:

    rising = [_step(2, 100), _step(4, 190), _step(6, 260)]
    assert _knee(rising) == (None, "not reached")
    flat = [_step(2, 100), _step(4, 190), _step(6, 195), _step(8, 198)]
    assert _knee(flat) == (flat[1], "saturation")
    broke = [_step(2, 100), _step(4, 190), _step(6, 260, ("p95 ...",))]
    assert _knee(broke) == (broke[1], "slo")
    # a broken gate outranks a flat step before it: the knee is the last step within the SLO
    flat_then_broke = [_step(2, 100), _step(4, 101), _step(6, 102), _step(8, 103, ("p95 ...",))]
    assert _knee(flat_then_broke) == (flat_then_broke[2], "slo")
    assert _knee([_step(2, 100, ("p95 ...",))]) == (None, "slo")
    assert _knee([]) == (None, None)
