"""The wrk cross-check (skipped, with the reason, where wrk is missing) and the /metrics parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonkit.loadtest.payloads import fetch_model_spec
from tritonkit.loadtest.report.metrics import parse_metrics, scrape
from tritonkit.loadtest.wrk import LUA_SCRIPT, cross_check, parse_wrk_output, wrk_available
from tritonkit.serve.embedded import EmbeddedServer

from .conftest import triton_requests

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_wrk_posts_the_http_users_request(server: EmbeddedServer, tmp_path: Path) -> None:
    if wrk_available() is None:
        pytest.skip("needs `wrk` (Debian package; `make tools` installs it)")
    spec = fetch_model_spec(server.http_url, "probe_add")
    before = triton_requests(server)
    result = cross_check(server.http_url, spec, connections=4, duration=1, report_dir=tmp_path)
    assert result["rps"] > 0 and result["non_2xx"] == 0
    # wrk's own count, plus connections still in flight when it stopped, reached the model.
    assert 0 <= triton_requests(server) - before - result["requests"] <= result["connections"]
    assert (tmp_path / "wrk_post.lua").read_text() == LUA_SCRIPT


def test_shipped_lua_script_is_the_one_used() -> None:
    assert 'wrk.method = "POST"' in LUA_SCRIPT


def test_parse_wrk_output() -> None:
    text = """Running 5s test @ http://127.0.0.1:8000/v2/models/m/infer
  2 threads and 16 connections
  Latency Distribution
     50%  830.00us
     75%    1.20ms
     90%    2.10ms
     99%    9.50ms
  62827 requests in 5.01s, 14.92MB read
  Non-2xx or 3xx responses: 3
Requests/sec:  12544.92
"""
    got = parse_wrk_output(text)
    assert got["rps"] == 12544.92 and got["requests"] == 62827 and got["non_2xx"] == 3
    assert got["p50_ms"] == 0.83 and got["p99_ms"] == 9.5


def test_parse_metrics_from_a_real_server(server: EmbeddedServer) -> None:
    counters = scrape(server.metrics_url)
    assert {"probe_add:1", "probe_nan:1", "probe_error:1"} <= set(counters)
    assert {"success", "failure", "executions", "queue_us"} <= set(counters["probe_add:1"])


def test_parse_metrics_sums_failure_reasons() -> None:
    text = (
        "# TYPE nv_inference_request_failure counter\n"
        'nv_inference_request_failure{model="m",reason="OTHER",version="2"} 3\n'
        'nv_inference_request_failure{model="m",reason="REJECTED",version="2"} 4\n'
        'nv_inference_request_success{model="m",version="2"} 10\n'
        'nv_gpu_utilization{gpu_uuid="x"} 0.5\n'
    )
    assert parse_metrics(text) == {"m:2": {"failure": 7.0, "success": 10.0}}
