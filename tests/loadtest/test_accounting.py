"""Load-test accounting: Triton counter resets (a server restart mid-run) are summed per segment as
Prometheus ``increase()`` does, never negative, and the report says the server restarted; throughput
counts successes only."""

from __future__ import annotations

import csv
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient

from tritonkit.client import ModelStatistics
from tritonkit.loadtest.report.metrics import Counters, batch_stats, increase
from tritonkit.loadtest.report.summary import markdown
from tritonkit.loadtest.run import LoadTestOptions, parse_model, run
from tritonkit.loadtest.slo import SLO, Totals
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions
from tritonkit_bench.probe_model import write_probe_model


def _c(success: float, failure: float = 0.0, inferences: float | None = None) -> Counters:
    n = success + failure if inferences is None else inferences
    return {"m:1": {"success": success, "failure": failure, "inferences": n, "executions": n / 2}}


def test_increase_without_restart_is_last_minus_first() -> None:
    total = increase([(0.0, _c(100)), (1.0, _c(250, 5)), (2.0, _c(400, 7))])["m:1"]
    assert total.get("success") == 300 and total.get("failure") == 7 and total.restarts == 0
    assert total.seconds == 2.0


def test_increase_sums_segments_over_a_restart() -> None:
    # 100 -> 3,000 (old process), restart, 0 -> 500 -> 1,200 (new process): 2,900 + 500 + 700.
    samples = [(0.0, _c(100)), (1.0, _c(3000)), (2.0, _c(500, 2)), (3.0, _c(1200, 2))]
    total = increase(samples)["m:1"]
    assert total.get("success") == 2900 + 500 + 700
    assert total.get("failure") == 2
    assert total.restarts == 1
    assert total.requests > 0 and total.to_json()["restarts"] == 1


def test_one_counter_going_down_resets_the_whole_version() -> None:
    # failures went 9 -> 1 while successes grew past their old value: still a restart
    total = increase([(0.0, _c(100, 9)), (1.0, _c(150, 1))])["m:1"]
    assert total.get("success") == 150 and total.get("failure") == 1 and total.restarts == 1


def _stats(inferences: int, executions: int, sizes: dict[int, int]) -> ModelStatistics:
    return ModelStatistics("m", "1", inferences, executions, inferences, 0, 0, 0, 0, 0, 0, 0, sizes)


def test_batch_stats_after_a_restart_are_the_new_process_counts() -> None:
    before = {"m:1": _stats(4000, 1000, {4: 1000})}
    after = {"m:1": _stats(248, 60, {4: 60, 8: 1})}
    got = batch_stats(before, after)
    assert got is not None
    assert got["m:1"] == {
        "inferences": 248,
        "executions": 60,
        "batch_sizes": {"4": 60, "8": 1},
        "restarted": True,
    }
    assert all(n > 0 for n in got["m:1"]["batch_sizes"].values())


def test_throughput_is_successes_per_second() -> None:
    totals = Totals(requests=2500, failures=2355, seconds=1.0, p50_ms=1.0, p95_ms=1.0, p99_ms=1.0)
    assert totals.rps == 145.0 and totals.failures_per_s == 2355.0


# --- against the real server --------------------------------------------------------------------
#: connection errors one user may make in 3 s against a dead server: delays of at least 5, 10, 20,
#: 40, 80, 160, 320 ms then 500 ms each (half of the doubled delay, jittered) give about 12;
#: without back-off a user makes thousands.
DEAD_ERRORS_PER_USER = 25


def _wait_for_requests(server: EmbeddedServer, model: str, *, deadline_s: float) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            stats = client.get_inference_statistics(model)["model_stats"]
            if any(int(s["inference_stats"]["success"]["count"]) for s in stats):
                return
            time.sleep(0.1)
    finally:
        client.close()
    raise AssertionError(f"{model} answered no request within {deadline_s} s")


@pytest.mark.slow
def test_dead_server_sees_a_bounded_request_rate(tmp_path: Path) -> None:
    """A server that dies 1 s into a 4 s run: the users' connection errors over the ~3 s left stay
    within what the back-off allows."""
    repo = tmp_path / "repo"
    write_probe_model(repo, "probe_add", mode="add")
    users = 4
    result: dict[str, Any] = {}
    with EmbeddedServer(repo) as doomed:
        options = LoadTestOptions(
            models=[parse_model("probe_add")],
            report_dir=tmp_path / "report",
            url=doomed.grpc_url,
            http_url=doomed.http_url,
            metrics_url=doomed.metrics_url,
            admin_key=doomed.admin_key,
            protocol="grpc",
            users=users,
            duration="4s",
            slo=SLO(),
            progress=False,
            plots=False,
        )
        thread = threading.Thread(target=lambda: result.update(summary=run(options)))
        thread.start()
        # Kill once the server has answered some of the load (Locust's start takes longer on a loaded
        # machine): Triton's own request counter, read through the open statistics API.
        _wait_for_requests(doomed, "probe_add", deadline_s=60.0)
        time.sleep(0.5)
        # Gone at once (a graceful stop drains for seconds on a loaded machine and may outlast the run).
        assert doomed.pid is not None
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.stop()
    thread.join(timeout=120)
    summary = result["summary"]
    assert summary["succeeded"] > 0
    # While it shuts down the server still answers ("not at ready state"), fast: those are answers,
    # not connection errors. Only what was refused once it was gone is bounded by the back-off.
    with open(tmp_path / "report" / "locust_failures.csv", newline="") as handle:
        refused = sum(
            int(r["Occurrences"]) for r in csv.DictReader(handle) if "Connection refused" in r["Error"]
        )
    assert 0 < refused < users * DEAD_ERRORS_PER_USER, refused


@pytest.mark.slow
def test_throughput_counts_only_successes_against_the_real_server(loadtest: Callable[..., Any]) -> None:
    summary = loadtest(("probe_add", "probe_error"), duration="2s")
    assert summary["failures"] > 0 and summary["succeeded"] > 0
    assert summary["rps"] == pytest.approx(summary["succeeded"] / summary["measured_s"], rel=0.01)
    assert summary["failures_per_s"] == pytest.approx(summary["failures"] / summary["measured_s"], rel=0.01)
    for model in summary["models"].values():
        assert model["rps"] * summary["measured_s"] == pytest.approx(model["succeeded"], rel=0.01, abs=1)
    # no restart in this run, and the report says so only when there was one
    assert summary["accounting"]["server_restarts"] == 0
    assert "server restarted" not in markdown(summary)
    summary.data["accounting"]["server_restarts"] = 1
    assert "The server restarted during the run (1 restart(s) seen)" in markdown(summary)


@pytest.mark.slow
def test_restart_mid_run_is_counted_per_segment(tmp_path: Path) -> None:
    """The server stops and a new one starts on the same ports during the run: Triton's counters
    restart from 0, and the report sums them per segment (never negative) and says so."""
    repo = tmp_path / "repo"
    write_probe_model(repo, "probe_add", mode="add")
    result: dict[str, Any] = {}
    first = EmbeddedServer(repo, ServerOptions(admin_key="restart-test-key")).start()
    options = LoadTestOptions(
        models=[parse_model("probe_add")],
        report_dir=tmp_path / "report",
        url=first.http_url,
        metrics_url=first.metrics_url,
        admin_key="restart-test-key",
        protocol="http",
        users=2,
        duration="9s",
        slo=SLO(),
        progress=False,
        plots=False,
    )
    thread = threading.Thread(target=lambda: result.update(summary=run(options)))
    thread.start()
    try:
        time.sleep(3.0)
        # kill -9: a crash, not a drain (a draining server keeps serving open keep-alive connections)
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        first.stop()
        with EmbeddedServer(
            repo,
            ServerOptions(
                admin_key="restart-test-key",
                http_port=first.http_port,
                grpc_port=first.grpc_port,
                metrics_port=first.metrics_port,
            ),
        ):
            thread.join(timeout=120)
    finally:
        first.stop()
    summary = result["summary"]
    accounting = summary["accounting"]
    assert accounting["server_restarts"] >= 1
    assert accounting["triton_requests"] > 0 and accounting["triton_success"] > 0
    server = summary["models"]["probe_add:1"]["server"]
    assert all(server[k] >= 0 for k in ("requests", "success", "failure", "inferences", "executions"))
    formed = summary["models"]["probe_add:1"]["batch_stats"]
    assert formed is None or all(n > 0 for n in formed["batch_sizes"].values())
    assert "The server restarted during the run" in markdown(summary)
