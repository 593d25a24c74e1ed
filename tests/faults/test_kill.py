"""kill -9 and SIGTERM of the server mid-load, over HTTP (through the guard) and gRPC: every request
sent is counted as succeeded or failed, Triton's counter is read against the client's, the server is
restarted on the same ports and the time to the first good answer measured, and no process or
``/dev/shm`` region of ours is left behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

from .conftest import Record, Scale
from .load import Load
from .support import (
    grpc_ready_and_good,
    http_good,
    leaked_shm,
    own_orphans,
    shm_regions,
    wait_until,
    write_add_one,
)

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_fault_mid_load(tmp_path: Path, fault_scale: Scale, record: Record, protocol: str, how: str) -> None:
    repo = tmp_path / "repo"
    write_add_one(repo, seconds=0.02)
    shm_before = shm_regions()
    server = EmbeddedServer(repo, ServerOptions(guard=True, exit_timeout=5)).start()
    ports = {
        "http_port": server.http_port,
        "grpc_port": server.grpc_port,
        "metrics_port": server.metrics_port,
    }
    load = Load(protocol, server.http_port, server.grpc_url, server.metrics_url).start()
    time.sleep(fault_scale.load_s)
    poll = load.last_poll
    load.fault()
    stopped = threading.Event()
    if how == "kill -9":
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        time.sleep(0.5)  # the load meets a dead server
    else:
        threading.Thread(target=lambda: (server.stop(), stopped.set()), daemon=True).start()
        stopped.wait(30)
    unanswered = load.stop()
    counts = load.counts
    server.stop()

    restart_at = time.monotonic()
    again = EmbeddedServer(repo, ServerOptions(guard=True, exit_timeout=5, **ports)).start()
    try:
        if protocol == "http":
            served = wait_until(lambda: http_good(again.http_port), 30)
        else:
            served = wait_until(lambda: grpc_ready_and_good(again.grpc_url)[1], 30)
        recovery = time.monotonic() - restart_at
    finally:
        again.stop()
    orphans = own_orphans(repo)
    leaked = leaked_shm(shm_before)

    balanced = counts.sent == counts.succeeded + counts.failed + unanswered and unanswered == 0
    lost = unanswered + (counts.failed_before_fault if how == "SIGTERM" else 0)
    triton, client = poll if poll else (-1, -1)
    counters_ok = poll is not None and triton >= client
    passed = balanced and lost == 0 and counters_ok and served and not orphans and not leaked
    record(
        "kill",
        f"{how}, {protocol}",
        passed,
        sent=counts.sent,
        succeeded=counts.succeeded,
        failed=counts.failed,
        unanswered=unanswered,
        accepted_lost=lost,
        served_after_signal=counts.succeeded_after_fault,
        triton_success=triton,
        client_success_same_time=client,
        recovery_s=round(recovery, 2),
        orphans=len(orphans) + len(leaked),
        first_errors="; ".join(counts.first_errors),
    )
    assert balanced, (
        f"sent {counts.sent} != succeeded {counts.succeeded} + failed {counts.failed} + unanswered {unanswered}"
    )
    assert served, "the restarted server did not serve within 30 s"
    assert not orphans and not leaked, f"left behind: {orphans} {leaked}"
    assert counters_ok, f"Triton counted {triton} successes, the client {client}"
    assert lost == 0, f"{lost} accepted requests lost ({counts.first_errors})"
