"""A load test whose server dies keeps its failures outside every latency figure, and accounting
differences are explained (real server, real Locust)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tritonkit.loadtest.report.summary import explain_difference, markdown
from tritonkit.loadtest.run import LoadTestOptions, parse_model, run
from tritonkit.loadtest.slo import SLO
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit_bench.probe_model import write_probe_model

from .test_accounting import _wait_for_requests


def test_a_dead_server_s_failures_are_no_latency(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_probe_model(repo, "probe_add", mode="add")
    result: dict[str, Any] = {}
    with EmbeddedServer(repo) as doomed:
        options = LoadTestOptions(
            models=[parse_model("probe_add")], report_dir=tmp_path / "report", url=doomed.http_url,
            metrics_url=doomed.metrics_url, admin_key=doomed.admin_key, protocol="http", users=4,
            duration="6s", slo=SLO(), progress=False, plots=True,
        )  # fmt: skip
        thread = threading.Thread(target=lambda: result.update(summary=run(options)))
        thread.start()
        _wait_for_requests(doomed, "probe_add", deadline_s=60.0)
        time.sleep(0.5)
        assert doomed.pid is not None
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.stop()
    thread.join(timeout=120)
    summary = result["summary"]
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
