"""Overload against a queue policy: a slow python model with ``max_queue_size`` and a default queue
timeout (written through tritonkit.config) takes many more concurrent users than it can serve;
rejections must be fast and counted, accepted requests answered inside the queue timeout, Triton's
failure counter must move, and the server's memory must come back within 1.5× of before."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tritonkit.config.model_config import QueuePolicy
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

from .conftest import Record, Scale
from .support import grpc_good_request, grpc_stub, write_add_one

pytestmark = pytest.mark.faults

QUEUE_SIZE = 16
QUEUE_TIMEOUT_S = 1.0
USERS = 48


def _rss(pid: int) -> int:
    process = psutil.Process(pid)
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def _counter(metrics_url: str, name: str) -> int:
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    match = re.search(rf'{name}\{{model="add_one",version="1"\}} (\d+)', text)
    return int(match.group(1)) if match else -1


@dataclasses.dataclass
class _Outcomes:
    """The calls of an overload: accepted and rejected ones' seconds, other errors as lines."""

    accepted: list[float] = dataclasses.field(default_factory=list)
    rejected: list[float] = dataclasses.field(default_factory=list)
    other: list[str] = dataclasses.field(default_factory=list)


def _overload(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, request: service_pb2.ModelInferRequest, seconds: float
) -> _Outcomes:
    """``USERS`` threads calling ``stub`` back to back for ``seconds``: every call's outcome."""
    outcomes = _Outcomes()
    lock = threading.Lock()
    stop = threading.Event()

    def user() -> None:
        while not stop.is_set():
            start = time.monotonic()
            try:
                stub.ModelInfer(request, timeout=30)
                with lock:
                    outcomes.accepted.append(time.monotonic() - start)
            except grpc.RpcError as exc:
                elapsed = time.monotonic() - start
                details = (exc.details() or "").lower()  # type: ignore[attr-defined]
                with lock:
                    if "queue" in details or "timeout" in details:
                        outcomes.rejected.append(elapsed)
                    else:
                        outcomes.other.append(f"{exc.code().name}: {details[:60]}")  # type: ignore[attr-defined]

    threads = [threading.Thread(target=user, daemon=True) for _ in range(USERS)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(40)
    return outcomes


def test_overload_with_a_queue_policy(tmp_path: Path, fault_scale: Scale, record: Record) -> None:
    repo = tmp_path / "repo"
    policy = QueuePolicy(max_queue_size=QUEUE_SIZE, default_timeout_microseconds=int(QUEUE_TIMEOUT_S * 1e6))
    write_add_one(repo, seconds=0.05, queue=policy)
    assert "max_queue_size: 16" in (repo / "add_one" / "config.pbtxt").read_text()
    with EmbeddedServer(repo, ServerOptions(exit_timeout=2)) as server:
        assert server.pid is not None
        channel, stub = grpc_stub(server.grpc_url)
        request = grpc_good_request()
        for _ in range(20):
            stub.ModelInfer(request, timeout=10)
        time.sleep(0.5)
        rss_before = _rss(server.pid)
        failures_before = _counter(server.metrics_url, "nv_inference_request_failure")
        outcomes = _overload(stub, request, fault_scale.overload_s)
        time.sleep(2.0)
        rss_after = _rss(server.pid)
        failures_after = _counter(server.metrics_url, "nv_inference_request_failure")
        stub.ModelInfer(request, timeout=10)
        channel.close()

    accepted, rejected, other = outcomes.accepted, outcomes.rejected, outcomes.other
    p99 = float(np.percentile(accepted, 99)) if accepted else float("nan")
    rejected_p50 = float(np.percentile(rejected, 50)) if rejected else float("nan")
    triton_failures = failures_after - failures_before
    ratio = rss_after / rss_before
    passed = (
        bool(rejected) and rejected_p50 < 0.1 and p99 <= QUEUE_TIMEOUT_S + 0.2 and ratio <= 1.5 and not other
    )
    record(
        "overload",
        f"{USERS} users, max_queue_size {QUEUE_SIZE}, queue timeout {QUEUE_TIMEOUT_S} s, {fault_scale.overload_s} s",
        passed,
        accepted=len(accepted),
        rejected=len(rejected),
        other_errors=len(other),
        rejected_p50_ms=round(rejected_p50 * 1000, 1),
        accepted_p99_s=round(p99, 3),
        triton_failure_counter=triton_failures,
        rss_before_mb=round(rss_before / 2**20),
        rss_after_mb=round(rss_after / 2**20),
        rss_ratio=round(ratio, 2),
        first_other="; ".join(other[:2]),
    )
    assert rejected, "no request was rejected: the queue policy did not act"
    assert rejected_p50 < 0.1, f"rejections took {rejected_p50:.3f} s (p50)"
    assert p99 <= QUEUE_TIMEOUT_S + 0.2, (
        f"accepted p99 {p99:.3f} s over the queue timeout {QUEUE_TIMEOUT_S} s"
    )
    assert ratio <= 1.5, f"RSS {rss_before / 2**20:.0f} MB -> {rss_after / 2**20:.0f} MB"
    assert not other, other[:3]
    # Triton 2.51's nv_inference_request_failure does not count queue rejections (recorded above, not
    # asserted): tritonkit's reports count them from the client side, never as throughput.
