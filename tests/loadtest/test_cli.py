"""``tritonkit loadtest`` from the command line: bad input stops before any load, SLO breaches exit
non-zero and are named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tritonkit.serve.embedded import EmbeddedServer, free_port

from .conftest import triton_requests


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tritonkit", "loadtest", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--model", "nosuch"], "model `nosuch` is not served"),
        (["--scenario", "bogus"], "scenario 'bogus': expected one of steady, ramp, spike, soak"),
        (["--duration", "ten"], "duration 'ten': expected a number"),
        (["--duration", "0s"], "expected a positive"),
        (["--slo-p95-ms", "-1"], "SLO `p95_ms` -1.0: expected a positive number"),
        (["--max-failure-ratio", "2"], "expected a ratio between 0 and 1"),
        (["--users", "0"], "users 0: expected a whole number >= 1"),
        (["--protocol", "ftp"], "protocol 'ftp': expected http or grpc"),
        (["--batch-mix", "64"], "batch 64 exceeds model `probe_add`'s max_batch_size 8"),
        (["--report", "/proc/tritonkit-report"], "report directory /proc/tritonkit-report cannot be written"),
    ],
)
def test_bad_input_is_one_line_and_sends_no_load(
    server: EmbeddedServer, tmp_path: Path, args: list[str], expected: str
) -> None:
    before = triton_requests(server)
    base = [
        "--url",
        server.http_url,
        "--model",
        "probe_add",
        "--report",
        str(tmp_path / "r"),
        "--duration",
        "2s",
    ]
    result = _cli(*base, *args)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tritonkit loadtest: error: ") and expected in lines[0], (
        lines
    )
    assert "Traceback" not in result.stderr
    assert triton_requests(server) == before  # nothing was sent
    assert not (tmp_path / "r" / "summary.json").exists()


def test_unreachable_server(tmp_path: Path) -> None:

    result = _cli("--url", f"127.0.0.1:{free_port()}", "--model", "m", "--report", str(tmp_path))
    assert result.returncode == 1
    assert "cannot reach Triton at 127.0.0.1:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_slo_breach_exits_non_zero_and_is_named(server: EmbeddedServer, tmp_path: Path) -> None:
    result = _cli(
        "--url",
        server.grpc_url,
        "--protocol",
        "grpc",
        "--http-url",
        server.http_url,
        "--metrics-url",
        server.metrics_url,
        "--model",
        "probe_add",
        "--users",
        "2",
        "--duration",
        "2s",
        "--slo-p95-ms",
        "0.001",
        "--min-rps",
        "1e9",
        "--no-plots",
        "--report",
        str(tmp_path),
    )
    assert result.returncode == 3, result.stderr
    assert "SLO breached: overall: p95 latency" in result.stderr
    assert "is below the minimum 1,000,000,000.0" in result.stderr
    md = (tmp_path / "summary.md").read_text()
    assert "BREACHED" in md and "p95 latency" in md
    assert "| probe_add:1 |" in result.stdout  # the report is printed
