"""A load test whose server dies is stopped there and reports what it measured, its failures outside
every latency figure; Ctrl-C writes the partial report; accounting differences are explained (real
server, real Locust)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tritonkit.loadtest.report.summary import EXIT_INTERRUPTED, EXIT_SERVER_DIED, explain_difference, markdown
from tritonkit.loadtest.run import LoadTestOptions, parse_model, run
from tritonkit.loadtest.slo import SLO
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit_bench.probe_model import write_probe_model

from .conftest import triton_requests
from .test_accounting import _wait_for_requests

#: the planned length of the runs stopped early: each must end long before it
PLANNED_S = 60.0


@pytest.mark.slow
def test_a_dead_server_stops_the_run_and_its_failures_are_no_latency(tmp_path: Path) -> None:
    """The server is killed mid-run: the run stops within seconds (not after the 60 s planned), the
    report says when the server died, and the failures stay out of the percentiles."""
    repo = tmp_path / "repo"
    write_probe_model(repo, "probe_add", mode="add")
    result: dict[str, Any] = {}
    with EmbeddedServer(repo) as doomed:
        options = LoadTestOptions(
            models=[parse_model("probe_add")], report_dir=tmp_path / "report", url=doomed.http_url,
            metrics_url=doomed.metrics_url, admin_key=doomed.admin_key, protocol="http", users=4,
            duration=f"{PLANNED_S:.0f}s", slo=SLO(), progress=False, plots=True,
        )  # fmt: skip
        thread = threading.Thread(target=lambda: result.update(summary=run(options)))
        thread.start()
        _wait_for_requests(doomed, "probe_add", deadline_s=60.0)
        time.sleep(0.5)
        assert doomed.pid is not None
        os.kill(doomed.pid, signal.SIGKILL)
        killed = time.monotonic()
        doomed.stop()
    thread.join(timeout=PLANNED_S + 120)
    summary = result["summary"]
    # stopped a few seconds after the kill: the users' stop, Locust's shutdown, the report
    assert time.monotonic() - killed < 25, time.monotonic() - killed
    stopped = summary["stopped"]
    assert stopped["reason"] == "server_died" and "connection refused" in stopped["detail"], stopped
    assert 0 < stopped["at_s"] < 30 and summary["measured_s"] < 30, (stopped, summary["measured_s"])
    assert summary.exit_code == EXIT_SERVER_DIED
    written = (tmp_path / "report" / "summary.md").read_text()
    assert (
        f"**Stopped early**: the server died {stopped['at_s']:.1f} s into the run of 60 s planned" in written
    )
    assert summary["failures"] > 0 and summary["succeeded"] > 0
    # the percentiles stand on the successes alone: every sample is a success
    assert summary["p99_samples"] == summary["succeeded"]
    acc = summary["accounting"]
    if acc["triton_requests"] is not None and not acc["matched"]:
        assert f"DIFFER by {acc['sent'] - acc['triton_requests']:+,}: " in markdown(summary)


def test_every_accounting_difference_is_explained() -> None:
    fewer = {"sent": 3150, "failed": 0, "triton_requests": 3152, "triton_failure": 0}
    assert "requests in flight at the cut" in explain_difference(fewer)
    assert explain_difference(fewer).startswith("Triton counted 2 request(s) more")
    refused = {"sent": 3500, "failed": 344, "triton_requests": 3156, "triton_failure": 0}
    assert "of its 344 failure(s), 344 are not among Triton's 0" in explain_difference(refused)
    lost = {"sent": 3500, "failed": 300, "triton_requests": 3150, "triton_failure": 0, "server_restarts": 1}
    assert "the other 50 were answered by a server process whose last counts no scrape read" in (
        explain_difference(lost)
    )


@pytest.mark.slow
def test_ctrl_c_writes_the_partial_report(server: EmbeddedServer, tmp_path: Path) -> None:
    """SIGINT to ``tritonkit loadtest`` mid-run: the users stop, the partial report is written and
    named, exit 130, no traceback."""
    report = tmp_path / "report"
    before = triton_requests(server)
    # Python turns SIGINT into KeyboardInterrupt unless it started with SIGINT ignored (a background
    # job of a non-interactive shell): set it as a terminal's Ctrl-C would find it.
    code = "import signal,sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    code += "from tritonkit.cli import main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", code, "loadtest", "--url", server.http_url, "--model", "probe_add"]
    command += ["--users", "4", "--duration", f"{PLANNED_S:.0f}s", "--no-plots", "--report", str(report)]
    command += ["--metrics-url", server.metrics_url, "--admin-key", server.admin_key or ""]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while triton_requests(server) < before + 200:
            assert time.monotonic() < end and process.poll() is None, "no load reached the server"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        out, err = process.communicate(timeout=PLANNED_S + 60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert time.monotonic() - interrupted < 25, time.monotonic() - interrupted
    assert process.returncode == EXIT_INTERRUPTED, (process.returncode, err)
    assert "Traceback" not in err, err
    summary = json.loads((report / "summary.json").read_text())
    assert summary["stopped"]["reason"] == "interrupted" and summary["succeeded"] > 0, summary["stopped"]
    assert summary["measured_s"] < 30
    assert "**Stopped early**: interrupted (Ctrl-C)" in out  # summary.md, printed
    assert f"report in {report.resolve()}/summary.md" in err, err
