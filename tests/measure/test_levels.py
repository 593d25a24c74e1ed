"""Measuring levels against the real embedded server: µs windows, the server split, failures, instability,
open loop, both protocols, shared memory, worker processes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.support.lone_levels import lone_levels

from tritonkit.client import AsyncClient, Client
from tritonkit.commands.measure_args import cuda_missing
from tritonkit.errors import ClientError
from tritonkit.measure import eventloop
from tritonkit.measure.levels import MeasureOptions, Measurer, find_max
from tritonkit.measure.loadgen import Level, OpenLoop, RawWindow, Target, WindowSpec, _Loop, _Session
from tritonkit.measure.stats import StabilityRule
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

QUICK = MeasureOptions(window=WindowSpec(0.25), stability=StabilityRule(3, 0.6), max_windows=4)


def _url(server: EmbeddedServer, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.http_url


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_windows_have_microsecond_percentiles_and_the_server_split(
    server: EmbeddedServer, protocol: str
) -> None:
    with Measurer(
        Target(_url(server, protocol), "work", protocol, headers=server.admin_headers), QUICK
    ) as measurer:
        result = measurer.measure(Level("concurrency", 2))
    assert result.windows, "every level keeps its windows"
    assert result.successes > 20 and result.failures == 0
    latencies = [lat for w in result.windows for lat in w.latencies_ns]
    assert any(lat % 1_000_000 for lat in latencies)  # not rounded to whole milliseconds
    assert result.percentiles["p50_us"] != round(result.percentiles["p50_us"] / 1000) * 1000
    split = result.server
    # The model sleeps 1 ms per execution: compute infer carries it, the parts fit in the total.
    assert split.compute_infer_us >= 900
    assert 0 < split.parts_us <= split.total_us * 1.01
    # Windows are cut between statistics snapshots: the server saw what the client finished, give or
    # take the requests in flight at the cuts.
    assert abs(split.requests - result.successes) <= 2 * 2 * len(result.windows)
    assert split.batches and set(split.batches) == {1}  # no dynamic batcher: every execution is batch 1
    assert split.average_batch == pytest.approx(1.0)


def test_failures_are_never_throughput(server: EmbeddedServer) -> None:
    # An open-loop rate the generator keeps up with (a closed loop on this fast model can saturate it)
    with Measurer(
        Target(server.http_url, "flaky", open_loop=OpenLoop(late_us=5000), headers=server.admin_headers),
        QUICK,
    ) as measurer:
        result = measurer.measure(Level("rate", 300.0))
    assert result.failures > 0 and result.successes > 0
    # every second request fails (the model's rule, not the machine's speed): successes and failures
    # differ by the requests in flight when the windows were cut, whatever rate was reached
    assert abs(result.successes - result.failures) <= 2 + 2 * len(result.windows[-3:])
    wall = sum(w.wall_s for w in result.windows[-3:])
    assert result.throughput == pytest.approx(result.successes / wall)
    assert "odd request refused" in result.error
    assert not result.within(budget_ms=1000.0, require_stable=False)  # failures rule a level out
    assert result.generator_limited or result.within(
        budget_ms=1000.0, max_failure_ratio=0.6, require_stable=False
    )


def test_an_unstable_level_is_reported_with_its_numbers(server: EmbeddedServer) -> None:
    options = MeasureOptions(window=WindowSpec(0.1), stability=StabilityRule(3, 0.0), max_windows=3)
    with Measurer(Target(server.http_url, "add", headers=server.admin_headers), options) as measurer:
        result = measurer.measure(Level("concurrency", 1))
    assert not result.stable
    assert len(result.windows) == 3 and result.successes > 0 and result.throughput > 0
    assert result.summary()["stable"] is False and result.summary()["p99_ms"] > 0


def test_request_rate_counts_late_sends_and_generator_cpu(server: EmbeddedServer) -> None:
    with Measurer(Target(server.http_url, "add", headers=server.admin_headers), QUICK) as measurer:
        result = measurer.measure(Level("poisson", 200.0))
        constant = measurer.measure(Level("rate", 100.0))
    # what the generator computed from what it sent, never how fast the machine was: throughput is
    # successes over the windows' time; a constant rate never sends ahead of its slots
    for level in (result, constant):
        wall = sum(w.wall_s for w in level.windows[-3:])
        assert level.throughput == pytest.approx(level.successes / wall)
        assert sum(w.sent for w in level.windows) >= sum(w.successes + w.failures for w in level.windows)
    assert all(w.sent <= 100.0 * w.wall_s + 2 for w in constant.windows)
    assert 0 <= result.late_share <= 1 and 0 < result.generator_cpu < 2


def test_count_windows_system_shared_memory_and_worker_processes(server: EmbeddedServer) -> None:
    options = MeasureOptions(
        window=WindowSpec(count=60), stability=StabilityRule(3, 0.6), max_windows=3, workers=2
    )
    target = Target(server.grpc_url, "add", "grpc", shared_memory="system", headers=server.admin_headers)
    with Measurer(target, options) as measurer:
        result = measurer.measure(Level("concurrency", 2))
    assert result.failures == 0
    assert all(w.successes >= 60 for w in result.windows)  # two workers, 30 completions each at least
    assert result.server.requests > 0


@pytest.mark.gpu
def test_cuda_shared_memory(server: EmbeddedServer) -> None:
    assert cuda_missing() is None
    with Measurer(
        Target(server.http_url, "add", shared_memory="cuda", headers=server.admin_headers), QUICK
    ) as measurer:
        result = measurer.measure(Level("concurrency", 1))
    assert result.failures == 0 and result.successes > 0


def test_find_max_stops_at_the_budget(server: EmbeddedServer) -> None:
    with Measurer(Target(server.http_url, "work", headers=server.admin_headers), QUICK) as measurer:
        best, levels = find_max(measurer.measure, 1000.0, limit=4, refine=0, require_stable=False)
        assert best is not None and [r.level.value for r in levels][:1] == [1]
        tiny, _ = find_max(measurer.measure, 0.001, limit=4, refine=0, require_stable=False)
    assert tiny is None  # nothing answers in 1 µs


def test_a_level_ends_with_its_requests_answered_not_cancelled(server: EmbeddedServer) -> None:
    """A cancelled gRPC call racing its answer crashes tritonserver 2.51's gRPC front end, so a level
    stops sending and lets the requests in flight finish: none is cancelled, every one is answered."""
    target = Target(server.grpc_url, "work", "grpc", headers=server.admin_headers)
    loop, session = _Loop(target, time.process_time), _Session(target)
    windows: list[RawWindow] = []
    client = grpcclient.InferenceServerClient(server.grpc_url)

    def successes() -> int:
        return int(client.get_inference_statistics("work").model_stats[0].inference_stats.success.count)

    async def level() -> None:
        await session.ready()
        before = successes()
        try:
            await loop.run(
                session, Level("concurrency", 8), WindowSpec(0.2), windows.append, lambda: len(windows) >= 2
            )
        finally:
            await session.close()
        counted = sum(len(w.latencies_ns) for w in windows)
        assert successes() - before >= counted + 7  # the 8 in flight at the last cut were answered too

    asyncio.run(level())
    assert len(windows) == 2 and sum(w.failures for w in windows) == 0
    assert loop.in_flight == 0 and loop.abandoned == 0


def test_the_first_window_after_a_config_load_is_not_kept(server: EmbeddedServer) -> None:
    target = Target(server.grpc_url, "work", "grpc", headers=server.admin_headers)
    with Measurer(target, QUICK) as measurer:
        measurer.loaded()
        first = measurer.measure(Level("concurrency", 2))
        assert measurer.discarded == 1
        second = measurer.measure(Level("concurrency", 2))
        assert measurer.discarded == 1  # only the level right after a load loses a window
    for result in (first, second):
        # the server's split covers the kept windows only: the window sent first is not in it
        assert abs(result.server.requests - result.successes) <= 2 * 2 * len(result.windows)
        assert result.successes > 20


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_one_request_in_flight_runs_on_blocking_calls_cut_between_requests(
    server: EmbeddedServer, protocol: str
) -> None:
    """At one request in flight the loop sends with a blocking client (no asyncio round per request)
    and cuts its windows between requests: every request a window sent is answered in it, failures
    are counted apart and never timed, and a window by count holds exactly that many answers."""
    target = Target(_url(server, protocol), "flaky", protocol, headers=server.admin_headers)
    loop, windows, blocking = lone_levels(target, [(WindowSpec(count=10), 3), (WindowSpec(0.1), 5)])
    assert blocking  # the levels ran on the blocking client
    assert all(w.wall_s >= 0.1 for w in windows[3:])  # a time window ends at its first answer past 0.1 s
    assert len(windows) == 5 and all(w.sent == len(w.latencies_ns) + w.failures == 10 for w in windows[:3])
    for w in windows:
        assert w.sent == len(w.latencies_ns) + w.failures  # nothing in flight at a cut
        assert abs(len(w.latencies_ns) - w.failures) <= 1 and w.failures > 0  # every second one refused
    assert "odd request refused" in windows[0].error
    assert loop.in_flight == 0


def test_the_lone_request_client_is_warmed_before_any_window(server: EmbeddedServer) -> None:
    """The blocking client of a one-request level opens its connection with a request no window times
    (as the session's own client does), so a window's first latency is not a connection's set-up."""
    target = Target(server.http_url, "work", headers=server.admin_headers)
    stats = grpcclient.InferenceServerClient(server.grpc_url)

    def answered() -> int:
        return int(stats.get_inference_statistics("work").model_stats[0].inference_stats.success.count)

    before = answered()
    _, windows, _ = lone_levels(target, [(WindowSpec(count=5), 2)])
    # the session's warm-up, the blocking client's warm-up, then the windows' requests (Triton may count
    # the last one a moment after its answer left)
    deadline = time.monotonic() + 5
    while answered() - before < 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert answered() - before == 2 + sum(w.sent for w in windows) == 12
    stats.close()


@pytest.fixture(scope="module")
def stallable(repo: Path) -> Iterator[EmbeddedServer]:
    """A server of this module's own, to be stopped (SIGSTOP) and resumed."""
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as srv:
        yield srv


@contextlib.contextmanager
def stopped(server: EmbeddedServer) -> Iterator[None]:
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


def _regions(server: EmbeddedServer) -> list[str]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        return [r["name"] for r in client.get_system_shared_memory_status(headers=server.admin_headers)]
    finally:
        client.close()


def test_closing_a_lone_level_client_on_a_stalled_server_leaves_the_load_loop_free(
    stallable: EmbeddedServer,
) -> None:
    """The blocking client of one request in flight unregisters its shared-memory regions at close; on
    a server that stopped answering that waits. It waits off the load loop: the close's own deadline
    passes, the loop runs the next coroutine at once, and the close still ends once the server answers."""
    target = Target(
        stallable.http_url, "add", shared_memory="system", headers=stallable.admin_headers, timeout_s=4
    )
    session = _Session(target)
    _, inputs = eventloop.run(session.ready(), timeout=30)
    session.blocking(inputs)
    assert len(_regions(stallable)) >= 4  # both clients' input and output regions
    with stopped(stallable):
        with pytest.raises(concurrent.futures.TimeoutError):
            eventloop.run(session.close(), timeout=1, cancel=False)
        started = time.monotonic()
        eventloop.run(asyncio.sleep(0), timeout=2)
        assert time.monotonic() - started < 0.5, "the load loop waited for the blocking close"
    deadline = time.monotonic() + 10
    while _regions(stallable) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _regions(stallable) == [], "the close stopped half way: regions left registered"


def test_a_grpc_clients_close_on_a_stalled_server_ends_within_its_timeouts(stallable: EmbeddedServer) -> None:
    """Unregistering a region is a call like any other: within the client's timeout (gRPC had none)."""
    client = Client(
        stallable.grpc_url, "grpc", timeout=1, shared_memory="system", headers=stallable.admin_headers
    )
    client.infer("add", {"X": np.ones((1, 4), dtype=np.float32)})
    failures: list[Exception] = []

    def close() -> None:
        try:
            client.close()
        except Exception as exc:
            failures.append(exc)

    closing = threading.Thread(target=close, daemon=True)
    with stopped(stallable):
        closing.start()
        closing.join(8)  # two regions, one timeout each, and room
        assert not closing.is_alive(), "the close waited on the stopped server past its timeouts"
    assert len(failures) == 1 and isinstance(failures[0], ClientError)
    assert "could not release 2 shared-memory region(s)" in str(failures[0])


def test_an_async_http_clients_close_on_a_stalled_server_names_its_timeout(stallable: EmbeddedServer) -> None:
    """The same through the asyncio HTTP client, whose timeout error has no text of its own."""

    async def close_on_stopped() -> str:
        client = AsyncClient(
            stallable.http_url, "http", timeout=1, shared_memory="system", headers=stallable.admin_headers
        )
        await client.infer("add", {"X": np.ones((1, 4), dtype=np.float32)})
        with stopped(stallable), pytest.raises(ClientError) as err:
            await asyncio.wait_for(client.close(), 8)
        return str(err.value)

    assert asyncio.run(close_on_stopped()).endswith(
        "could not release 2 shared-memory region(s): TimeoutError"
    )
