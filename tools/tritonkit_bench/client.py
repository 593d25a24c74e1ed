"""Client benchmark for ``make bench``: what the client layer costs over raw ``tritonclient``.

Against one embedded server and a tiny model (ONNX ``Y = X + 1`` on [1, 4] FP32, imported with the
portable runner, no queue delay), in one run:

1. Latency, per protocol: raw ``tritonclient`` calls and :class:`~tritonkit.client.Client` calls
   interleaved in alternating blocks (ABBA order, so drift and warm-up hit both sides alike);
   median and p99 per side and the overhead of the medians (target: <= 2 %).
2. Throughput at concurrency 32, per protocol: raw ``tritonclient.*.aio`` vs
   :class:`~tritonkit.client.AsyncClient`, alternating timed rounds, requests per second; the
   ratio is the median of the per-round-pair ratios (target: AsyncClient >= raw).

Both sides do the same work per call: build the request from a NumPy array, send it, and turn the
answer into NumPy. Raw tritonclient does it the documented way (``InferInput``, ``infer``,
``as_numpy``); the client validates the request against the model, encodes it with
:mod:`tritonkit.client.codec`, sends it on tritonclient's connection, and adds error mapping and retry
bookkeeping.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from onnx import TensorProto, helper

from tritonkit.client.aio import AsyncClient
from tritonkit.client.sync import Client
from tritonkit.convert.onnx_import import import_onnx
from tritonkit.machine import cpu_model
from tritonkit.serve.endpoint import endpoint

__all__ = ["run"]

MODEL = "bench_add"
CONCURRENCY = 32


def _model_repo(root: Path) -> Path:

    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"])],
        MODEL,
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])],
        [one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = root / "bench_add.onnx"
    onnx.save(model, path)
    repo = root / "repo"
    import_onnx(path, repo, MODEL, max_batch_size=CONCURRENCY, max_queue_delay_us=0)
    return repo


def machine() -> str:
    cpu = cpu_model() or platform.processor() or "unknown CPU"
    return f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def _raw_call(module: Any, client: Any, x: np.ndarray[Any, Any]) -> Callable[[], Any]:
    def call() -> Any:
        item = module.InferInput("X", x.shape, "FP32")
        item.set_data_from_numpy(x)
        return client.infer(MODEL, [item]).as_numpy("Y")

    return call


def _latencies(
    calls: dict[str, Callable[[], Any]], total: int, block: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per-call seconds for each side, in ABBA-ordered alternating blocks, and each side's mean
    client-process CPU seconds per call."""
    out: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, float] = dict.fromkeys(calls, 0.0)
    names = list(calls)
    for name in names:  # warm-up: connections, metadata cache, server-side first-call costs
        for _ in range(100):
            calls[name]()
    rounds = max(1, total // block)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            fn, sink = calls[name], out[name]
            c0 = time.process_time()
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                sink.append(time.perf_counter() - t0)
            cpu[name] += time.process_time() - c0
    return out, {name: cpu[name] / len(out[name]) for name in calls}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _throughput(make_call: Callable[[], Awaitable[Any]], seconds: float) -> tuple[int, float, float]:
    """(requests done, wall seconds, this process's CPU seconds) of CONCURRENCY tasks for ``seconds``."""
    done = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await make_call()
            done += 1

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return done, time.perf_counter() - t0, time.process_time() - c0


async def _async_rounds(
    protocol: str, url: str, rounds: int, seconds: float
) -> tuple[dict[str, tuple[float, float]], float]:
    """Per side: (requests per second, client-process CPU microseconds per request); and the
    median of the per-round-pair ratios AsyncClient / raw."""
    x = np.ones((1, 4), np.float32)
    raw: Any = (
        httpaio.InferenceServerClient(url) if protocol == "http" else grpcaio.InferenceServerClient(url)
    )
    module: Any = httpclient if protocol == "http" else grpcclient

    async def raw_call() -> Any:
        item = module.InferInput("X", x.shape, "FP32")
        item.set_data_from_numpy(x)
        return (await raw.infer(MODEL, [item])).as_numpy("Y")

    ours = AsyncClient(url, protocol)

    async def our_call() -> Any:
        return (await ours.infer(MODEL, {"X": x}))["Y"]

    sides: dict[str, Callable[[], Awaitable[Any]]] = {"raw": raw_call, "client": our_call}
    totals = {name: [0.0, 0.0, 0.0] for name in sides}
    per_round: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for fn in sides.values():  # warm-up: connections, metadata cache
            await _throughput(fn, 0.5)
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for name in order:
                done, wall, cpu = await _throughput(sides[name], seconds)
                per_round[name].append(done / wall)
                for i, v in enumerate((done, wall, cpu)):
                    totals[name][i] += v
    finally:
        await ours.close()
        await raw.close()
    # The ratio of each round pair (adjacent in time), then their median: a burst of load from
    # elsewhere on the machine spoils one pair, not the figure.
    ratio = statistics.median(c / r for c, r in zip(per_round["client"], per_round["raw"], strict=True))
    return {name: (n / wall, cpu / n * 1e6) for name, (n, wall, cpu) in totals.items()}, ratio


def run(quick: bool = False) -> str:
    """Run the benchmark; return its Markdown section (``quick``: < 30 s, for the smoke test)."""

    # Short alternating blocks pair the sides in time, so load from other processes hits both alike.
    total, block = (400, 10) if quick else (4000, 10)
    # Many short alternating rounds: on a shared machine, load from other processes then falls on
    # both sides alike instead of on whichever side ran during a burst.
    rounds, seconds = (4, 0.5) if quick else (16, 1.5)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    x = np.ones((1, 4), np.float32)
    latency_rows = []
    throughput_rows = []
    with tempfile.TemporaryDirectory(prefix="tritonkit-bench-") as tmp:
        repo = _model_repo(Path(tmp))
        with endpoint(repo=repo, exit_timeout=1) as server:
            for protocol in ("http", "grpc"):
                url = server.url(protocol)
                module: Any = httpclient if protocol == "http" else grpcclient
                raw = module.InferenceServerClient(url)
                ours = Client(url, protocol)
                try:

                    def our_call(c: Client = ours) -> Any:
                        return c.infer(MODEL, {"X": x})["Y"]

                    lat, cpu = _latencies(
                        {"raw": _raw_call(module, raw, x), "client": our_call}, total, block
                    )
                finally:
                    ours.close()
                    raw.close()
                med_raw, med_ours = statistics.median(lat["raw"]), statistics.median(lat["client"])
                latency_rows.append(
                    f"| {protocol} | {len(lat['raw'])} | {med_raw * 1e6:,.0f} | {_pct(lat['raw'], 0.99) * 1e6:,.0f} "
                    f"| {med_ours * 1e6:,.0f} | {_pct(lat['client'], 0.99) * 1e6:,.0f} "
                    f"| {(med_ours / med_raw - 1) * 100:+.1f} % | {cpu['raw'] * 1e6:,.0f} | {cpu['client'] * 1e6:,.0f} |"
                )
                rates, ratio = asyncio.run(_async_rounds(protocol, url, rounds, seconds))
                (raw_rate, raw_cpu), (our_rate, our_cpu) = rates["raw"], rates["client"]
                throughput_rows.append(
                    f"| {protocol} | {CONCURRENCY} | {raw_rate:,.0f} | {our_rate:,.0f} | {ratio:.2f} "
                    f"| {our_rate / raw_rate:.2f} | {raw_cpu:,.0f} | {our_cpu:,.0f} |"
                )
    mode = "quick" if quick else "full"
    return "\n".join(
        [
            "## Client overhead over raw tritonclient",
            "",
            f"Machine: {machine()}. Run: {started}, {mode} mode, one process (client and the embedded "
            f"tritonserver 2.51 share the cores). Model: `{MODEL}` (ONNX `Y = X + 1`, [1, 4] FP32, portable "
            "python-backend runner, no queue delay). Figures are from this one run; read the ratios.",
            "",
            "Sides: raw tritonclient the documented way (`InferInput`, `infer`, `as_numpy`) against "
            "`Client`/`AsyncClient`, which validate each request against the model, encode it themselves "
            "(`tritonkit.client.codec`) and send it on tritonclient's own connection.",
            "",
            f"Latency: {total} calls per side in alternating blocks of {block} (ABBA), after a warm-up. "
            "Target: overhead of the median <= 2 %. CPU columns: the client process's CPU time per call "
            "(the client layer's own cost shows there, less disturbed by other load than wall time).",
            "",
            "| protocol | calls/side | raw median µs | raw p99 µs | Client median µs | Client p99 µs | overhead "
            "| raw CPU µs/call | Client CPU µs/call |",
            "|---|---|---|---|---|---|---|---|---|",
            *latency_rows,
            "",
            f"Throughput: {CONCURRENCY} concurrent asyncio tasks, {rounds} alternating rounds of {seconds:g} s per "
            "side (ABBA). Target: AsyncClient / raw >= 1, read as the median of the per-round-pair ratios "
            "(a burst of other load spoils one pair, not the figure); the ratio of the totals is shown too. "
            "The CPU columns are the client process's CPU time per request, which other load on the machine "
            "disturbs less than req/s.",
            "",
            "| protocol | concurrency | raw aio req/s | AsyncClient req/s | ratio (median of pairs) "
            "| ratio of totals | raw CPU µs/req | AsyncClient CPU µs/req |",
            "|---|---|---|---|---|---|---|---|",
            *throughput_rows,
            "",
        ]
    )


if __name__ == "__main__":  # pragma: no cover - `python -m tritonkit_bench.client [--full]`
    import sys

    print(run(quick="--full" not in sys.argv))
