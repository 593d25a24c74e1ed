"""The wrk cross-check (skipped, with the reason, where wrk is missing) and the /metrics parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.report.metrics import parse_metrics, scrape
from tritonkit.loadtest.wrk import LUA_SCRIPT, cross_check, parse_wrk_output, wrk_available
from tritonkit.measure.payloads import fetch_model_spec
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


def test_parse_metrics_reads_label_values_holding_braces_and_quotes() -> None:
    # A model name or failure reason may hold "}", "," or an escaped quote: the value still counts,
    # under the right model (a `[^}]*` label pattern stopped at the first "}" and lost the line).
    text = (
        "# TYPE nv_inference_request_failure counter\n"
        'nv_inference_request_failure{model="m}x",reason="bad } input, \\"quoted\\"",version="1"} 3\n'
        'nv_inference_request_failure{model="m}x",reason="OTHER",version="1"} 4\n'
        "# TYPE nv_inference_request_success counter\n"
        'nv_inference_request_success{model="m}x",version="1"} 10\n'
    )
    assert parse_metrics(text) == {"m}x:1": {"failure": 7.0, "success": 10.0}}


def test_parse_metrics_takes_counter_values_only() -> None:
    # A `_total` counter name, its `_created` timestamp, and the histogram and summary families
    # Triton can export beside the counters: only the counters' values are summed.
    text = (
        "# HELP nv_inference_count_total Number of inferences performed\n"
        "# TYPE nv_inference_count_total counter\n"
        'nv_inference_count_total{model="m",version="1"} 12\n'
        'nv_inference_count_created{model="m",version="1"} 1.7e9\n'
        "# HELP nv_inference_exec_count Number of model executions performed\n"
        "# TYPE nv_inference_exec_count counter\n"
        'nv_inference_exec_count{model="m",version="1"} 4\n'
        "# TYPE nv_inference_queue_duration_us counter\n"
        'nv_inference_queue_duration_us{model="m",version="1"} 250\n'
        "# TYPE nv_inference_first_response_histogram_ms histogram\n"
        'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="1"} 3\n'
        'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="+Inf"} 4\n'
        'nv_inference_first_response_histogram_ms_count{model="m",version="1"} 4\n'
        'nv_inference_first_response_histogram_ms_sum{model="m",version="1"} 9.5\n'
        "# TYPE nv_inference_queue_summary_us summary\n"
        'nv_inference_queue_summary_us{model="m",version="1",quantile="0.5"} 60\n'
        'nv_inference_queue_summary_us_count{model="m",version="1"} 4\n'
        'nv_inference_queue_summary_us_sum{model="m",version="1"} 250\n'
    )
    assert parse_metrics(text) == {"m:1": {"inferences": 12.0, "executions": 4.0, "queue_us": 250.0}}


def test_parse_metrics_rejects_text_that_is_not_prometheus() -> None:
    with pytest.raises(LoadTestError, match="not in the Prometheus text format"):
        parse_metrics('nv_inference_count{model="m",version="1"} many\n')
