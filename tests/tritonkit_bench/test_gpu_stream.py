"""The GPU benchmark's load over gRPC streams (:mod:`tritonkit_bench.gpu_stream`) against the real
embedded server on the CPU: a sweep through Triton's ModelStreamInfer counts the answers and Triton's
own statistics like the unary one, every request Triton answered is one the generator counted or sent
outside the window, and a request the server refuses is an error with its message, never throughput."""

from __future__ import annotations

from pathlib import Path

from tests.support.bench_tiny import TINY
from tritonclient.grpc import service_pb2

from tritonkit.serve.embedded import EmbeddedServer
from tritonkit_bench.gpu_load import run_load
from tritonkit_bench.gpu_measure import server_stats, sweep
from tritonkit_bench.gpu_stream import answer_error


def test_an_answer_carrying_an_error_is_told_from_an_answer() -> None:
    good = service_pb2.ModelStreamInferResponse(infer_response=service_pb2.ModelInferResponse(model_name="m"))
    bad = service_pb2.ModelStreamInferResponse(error_message="unexpected shape\n for input X")
    assert answer_error(good.SerializeToString()) is None
    assert answer_error(bad.SerializeToString()) == "unexpected shape for input X"


def test_stream_sweep_counts_answers_and_server_statistics(tiny_repo: Path) -> None:
    rows = sweep(tiny_repo, "tiny", (1, 6), 0.5, lambda _: None, processes=1, protocol="grpc-stream")
    assert [(r["protocol"], r["in_flight"]) for r in rows] == [("grpc-stream", 1), ("grpc-stream", 6)]
    assert all(r["errors"] == 0 and not r["first_error"] for r in rows), rows
    assert all(r["samples_per_s"] > 0 and r["p50_ms"] > 0 for r in rows)
    assert all(r["avg_batch"] >= 1 and r["queue_us"] > 0 for r in rows)


def test_every_answer_counted_was_answered_by_triton(tiny_repo: Path) -> None:
    with EmbeddedServer(tiny_repo, exit_timeout=1) as server:
        import tritonclient.grpc as grpcclient  # noqa: PLC0415

        client = grpcclient.InferenceServerClient(server.grpc_url)
        before = server_stats(client, "tiny_fp16", {})
        result = run_load(server.grpc_url, "tiny_fp16", payload=TINY, batch=1, in_flight=9, processes=2,
                          warmup_s=0.2, seconds=0.6, protocol="grpc-stream")  # fmt: skip
        after = server_stats(client, "tiny_fp16", {})
        client.close()
    assert result.errors == 0 and result.requests > 0, result.first_error
    # Triton answered the window's requests and the warm-up's, the first check's and the tail's
    assert after["requests"] - before["requests"] > result.requests
    assert all(latency > 0 for latency in result.latencies_ms)


def test_refused_requests_are_errors_not_throughput(tiny_repo: Path) -> None:
    with EmbeddedServer(tiny_repo, exit_timeout=1) as server:
        result = run_load(server.grpc_url, "no_such_model", payload=TINY, batch=1, in_flight=3, processes=1,
                          warmup_s=0.1, seconds=0.3, protocol="grpc-stream")  # fmt: skip
        assert server.is_running()
    assert result.requests == 0 and result.errors > 0
    assert "no_such_model" in result.first_error
