"""What the report says is what happened, against the real server: batch sizes formed from Triton's
statistics API (not from averages), precision never named after the backend, notes that name what
was tried when ``/metrics`` or the statistics cannot be read, ramp steps gated on µs percentiles,
and plots with the SLO, throughput, one time axis and whole user ticks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tritonkit.loadtest.report import plots
from tritonkit.loadtest.run import LoadTestOptions, parse_model, run
from tritonkit.loadtest.slo import SLO
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions
from tritonkit_bench.probe_model import write_probe_model


def _formed(summary: Any, label: str) -> dict[str, Any]:
    stats = summary["models"][label]["batch_stats"]
    assert stats is not None, summary["notes"]
    return dict(stats)


@pytest.mark.slow
def test_no_batching_shows_batch_1_only(loadtest: Callable[..., Any], tmp_path: Path) -> None:
    summary = loadtest(("probe_nobatch",), users=6)
    stats = _formed(summary, "probe_nobatch:1")
    # the batcher is off: every execution ran one request, whatever the concurrency
    assert stats["batch_sizes"] == {"1": stats["executions"]}
    assert stats["inferences"] == stats["executions"] == summary["requests"] > 0
    md = (tmp_path / "report" / "summary.md").read_text()
    assert f"| 1: {stats['executions']:,} |" in md


@pytest.mark.slow
def test_batching_run_shows_the_real_distribution(loadtest: Callable[..., Any]) -> None:
    summary = loadtest(("probe_add",), users=8)
    stats = _formed(summary, "probe_add:1")
    sizes = {int(b): n for b, n in stats["batch_sizes"].items()}
    # every inference ran in exactly one execution of the size Triton formed
    assert sum(b * n for b, n in sizes.items()) == stats["inferences"] == summary["requests"]
    assert sum(sizes.values()) == stats["executions"]
    assert summary["models"]["probe_add:1"]["server"]["executions"] == stats["executions"]


@pytest.mark.slow
def test_restricted_statistics_are_said_not_invented(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A server that restricts statistics (``tritonkit serve`` leaves them open by default; a cluster may
    not): the report says so and invents no batch sizes."""
    monkeypatch.delenv("TRITONKIT_ADMIN_KEY", raising=False)
    repo = tmp_path / "repo"
    write_probe_model(repo, "probe_add", mode="add")
    apis = ("model-repository", "shared-memory", "statistics", "trace", "logging")
    with EmbeddedServer(repo, ServerOptions(restricted_apis=apis)) as restricted:
        summary = run(
            LoadTestOptions(
                models=[parse_model("probe_add")],
                report_dir=tmp_path / "report",
                url=restricted.http_url,
                http_url=restricted.http_url,
                metrics_url=restricted.metrics_url,
                admin_key=None,
                protocol="http",
                users=4,
                duration="2s",
                slo=SLO(),
                progress=False,
                plots=False,
            )
        )
    assert summary["models"]["probe_add:1"]["batch_stats"] is None
    assert any("statistics API is restricted" in n and "--admin-key" in n for n in summary["notes"])
    md = (tmp_path / "report" / "summary.md").read_text()
    assert "unavailable (see note)" in md and "--admin-key" in md


def test_admin_key_from_the_environment(
    loadtest: Callable[..., Any], server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITONKIT_ADMIN_KEY", server.admin_key)
    summary = loadtest(("probe_add",), duration="1s", admin_key=None)
    assert _formed(summary, "probe_add:1")["inferences"] == summary["requests"]


def test_url_mode_precision_is_unknown_not_the_backend(loadtest: Callable[..., Any]) -> None:
    summary = loadtest(("probe_add",), duration="1s")
    assert summary["models"]["probe_add:1"]["precision"] == "unknown"


def test_guessed_metrics_url_note_names_what_was_tried(loadtest: Callable[..., Any], tmp_path: Path) -> None:
    summary = loadtest(("probe_add",), duration="1s", metrics_url=None)
    note = next(n for n in summary["notes"] if n.startswith("server view unavailable"))
    assert "tried http://127.0.0.1:8002/metrics" in note and "--metrics-url" in note
    # without the /metrics view, the statistics API's batch sizes are still reported
    md = (tmp_path / "report" / "summary.md").read_text()
    sizes = summary["models"]["probe_add:1"]["batch_stats"]["batch_sizes"]
    assert "Batch sizes formed (Triton's statistics, executions):" in md
    assert f"- probe_add:1: {', '.join(f'{b}: {n:,}' for b, n in sizes.items())}" in md


def _whole_us(ms: float | None) -> bool:
    return ms is not None and abs(ms * 1000 - round(ms * 1000)) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_ramp_steps_percentiles_are_microseconds(
    loadtest: Callable[..., Any], tmp_path: Path, workers: int
) -> None:
    summary = loadtest(("probe_add",), scenario="ramp", users=4, ramp_steps=2, duration="6s", workers=workers)
    steps = summary["ramp_steps"]
    assert [s["users"] for s in steps] == [2, 4]
    for step in steps:
        assert step["requests"] > 0 and step["rps"] > 0
        # the latency of a request at that rank, in whole µs; not a bucket of Locust's whole ms
        assert all(_whole_us(step[k]) for k in ("p50_ms", "p95_ms", "p99_ms")), step
        assert step["p50_ms"] <= step["p95_ms"] <= step["p99_ms"]
    # with workers, the steps see the requests the workers reported (every few seconds); each step
    # leaves out the requests of its settling period and counts them apart
    counted = sum(s["requests"] + s["settle_requests"] for s in steps)
    assert sum(s["requests"] for s in steps) <= counted <= summary["requests"]
    assert counted >= (0.5 if workers else 0.9) * summary["requests"]


@pytest.mark.slow
def test_plots_show_the_slo_throughput_one_time_axis_and_whole_users(
    loadtest: Callable[..., Any], tmp_path: Path
) -> None:
    report = tmp_path / "plots"
    summary = loadtest(
        ("probe_add",), report_dir=report, plots=True, duration="4s", slo=SLO(p95_ms=5_000, p99_ms=10_000)
    )
    assert set(summary["plots"]) == {"latency_over_time.png", "server_queue_compute.png"}
    fig = plots.latency_over_time(report, summary["slo"])
    latency, throughput, users = fig.axes
    slo_lines = {line.get_label(): list(line.get_ydata()) for line in latency.get_lines()}
    assert slo_lines["SLO p95 5000 ms"] == [5_000, 5_000] and slo_lines["SLO p99 10000 ms"] == [
        10_000,
        10_000,
    ]
    (rate,) = throughput.get_lines()
    assert max(rate.get_ydata()) > 0 and throughput.get_ylabel() == "throughput (req/s)"
    assert all(float(tick).is_integer() for tick in users.get_yticks())
    # the server plot counts seconds from the same origin as the client plot
    t0 = plots._t0(report)
    records = json.loads((report / "server_metrics.json").read_text())["probe_add:1"]
    server_lines = plots.server_queue_compute(report).axes[0].get_lines()
    assert t0 is not None and list(server_lines[0].get_xdata()) == [r["unix"] - t0 for r in records]
    ramp = plots.ramp_throughput_p99(
        [{"users": 2, "rps": 10.0, "p99_ms": 3.0, "breaches": []}], summary["slo"]
    )
    assert "SLO p99 10000 ms" in [line.get_label() for line in ramp.axes[0].get_lines()]


@pytest.mark.slow
def test_embedded_server_reads_its_own_statistics(tmp_path: Path) -> None:
    """Without --url the run starts its own server and opens the statistics with that server's key."""
    repo = tmp_path / "repo"
    write_probe_model(repo, "probe_add")
    options = LoadTestOptions(
        models=[parse_model("probe_add")],
        report_dir=tmp_path / "report",
        repo=repo,
        users=2,
        duration="2s",
        progress=False,
        plots=False,
    )
    summary = run(options)
    stats = _formed(summary, "probe_add:1")
    assert (
        sum(int(b) * n for b, n in stats["batch_sizes"].items()) == stats["inferences"] == summary["requests"]
    )
    # a version without build.json: no precision is made up from the backend's name
    assert summary["models"]["probe_add:1"]["precision"] == "unknown"
