"""The GPU benchmark's HTTP load (:mod:`tritonkit_bench.gpu_http`) against the real embedded server on
the CPU: the pre-built request is a valid KServe v2 binary request, a sweep through Triton's HTTP front
end counts answers and Triton's own statistics like the gRPC one, and a request the server refuses is
an error with its status, never throughput."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.bench_tiny import TINY

from tritonkit_bench.gpu_http import answer_problem, http_request
from tritonkit_bench.gpu_load import BERT, run_load
from tritonkit_bench.gpu_measure import sweep


def test_request_is_kserve_v2_binary() -> None:
    raw = http_request("127.0.0.1:8000", "bert_fp16", BERT, 2, seed=1)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v2/models/bert_fp16/infer HTTP/1.1"
    fields = dict(line.split(": ", 1) for line in lines[1:])
    size = int(fields["Inference-Header-Content-Length"])
    assert int(fields["Content-Length"]) == len(body) == size + 2 * 2 * 128 * 8
    header = json.loads(body[:size])
    assert [
        (i["name"], i["shape"], i["datatype"], i["parameters"]["binary_data_size"]) for i in header["inputs"]
    ] == [
        ("input_ids", [2, 128], "INT64", 2048),
        ("attention_mask", [2, 128], "INT64", 2048),
    ]
    assert header["outputs"] == [{"name": "CLS", "parameters": {"binary_data": True}}]


def test_answer_check_names_what_is_wrong() -> None:
    header = json.dumps({"outputs": [{"name": "CLS", "shape": [1, 768]}]}).encode()
    head = {"inference-header-content-length": str(len(header))}
    good = header + b"\0" * 8
    assert answer_problem(200, head, good, BERT, 1) == ""
    assert "lacks 2 rows" in answer_problem(200, head, good, BERT, 2)
    assert answer_problem(400, {}, b'{"error":"unexpected shape"}', BERT, 1).startswith("HTTP 400: ")


@pytest.mark.parametrize(
    "protocol", ["http", "http-burst"]
)  # connections opened under load, or all before it
def test_http_sweep_counts_answers_and_server_statistics(tiny_repo: Path, protocol: str) -> None:
    rows = sweep(tiny_repo, "tiny", (1, 4), 0.5, lambda _: None, processes=1, protocol=protocol,
                 server_args=("--http-thread-count=2",))  # fmt: skip
    assert [(r["protocol"], r["in_flight"]) for r in rows] == [(protocol, 1), (protocol, 4)]
    assert all(r["errors"] == 0 and not r["first_error"] for r in rows), rows
    assert all(r["samples_per_s"] > 0 and r["p50_ms"] > 0 for r in rows)
    # Triton's own statistics cover the level: every answered request went through its queue
    assert all(r["avg_batch"] >= 1 and r["queue_us"] > 0 for r in rows)


def test_refused_requests_are_errors_not_throughput(tiny_repo: Path) -> None:
    from tritonkit.serve.embedded import EmbeddedServer  # noqa: PLC0415

    with EmbeddedServer(tiny_repo, exit_timeout=1) as server:
        result = run_load(server.http_url, "no_such_model", payload=TINY, batch=1, in_flight=2, processes=1,
                          warmup_s=0.1, seconds=0.3, protocol="http")  # fmt: skip
    assert result.requests == 0 and result.errors > 0
    assert result.first_error.startswith("HTTP 4") and "no_such_model" in result.first_error


def test_a_request_sent_in_the_window_that_fails_later_is_an_error() -> None:
    from tritonkit_bench.gpu_load import _Tally  # noqa: PLC0415

    tally = _Tally(10.0, 20.0)
    tally.record(12.0, 13.0, None)  # answered inside: counted
    tally.record(19.0, 49.0, "TimeoutError: ")  # sent inside, timed out after the window: an error
    tally.record(19.5, 20.5, None)  # answered after the window: neither
    tally.record(5.0, 11.0, "HTTP 500")  # sent before the window: neither
    done, errors, latencies, _, first = tally.result(0.0)
    assert (done, errors, first) == (1, 1, "TimeoutError: ") and latencies == [1000.0]
