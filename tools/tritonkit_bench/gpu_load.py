"""Closed-loop gRPC load for the GPU benchmark: N client processes, each keeping K requests in flight.

A :class:`Payload` names the model's inputs (token ids and masks for MiniLM, an FP32 image for
ResNet-50) and its output. Each process builds its request once (tritonclient's gRPC asyncio client), keeps ``in_flight``
coroutines calling ``infer`` back to back, and reports the requests it finished inside the measured
window, a sample of their latencies and its own CPU time, so the report can show the load
generator's headroom beside the server's figures.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcaio
from tritonclient import grpc as grpcclient

__all__ = ["IMAGE", "TEXT", "LoadResult", "Payload", "run_load"]


@dataclass(frozen=True)
class Payload:
    """A model's request: (name, per-row shape, fill) for each input, fill one of ``ids`` (token ids
    in the vocabulary), ``ones`` (an attention mask) or ``normal`` (FP32 standard normal, an
    image), and the output asked for."""

    inputs: tuple[tuple[str, tuple[int, ...], str], ...]
    output: str

    def arrays(self, batch: int, seed: int) -> list[tuple[str, np.ndarray[Any, Any], str]]:
        """(name, data, Triton datatype) for a request of ``batch`` rows."""
        rng = np.random.default_rng(seed)
        out: list[tuple[str, np.ndarray[Any, Any], str]] = []
        for name, shape, fill in self.inputs:
            full = (batch, *shape)
            if fill == "ids":
                out.append((name, rng.integers(1000, 30000, size=full, dtype=np.int64), "INT64"))
            elif fill == "ones":
                out.append((name, np.ones(full, dtype=np.int64), "INT64"))
            else:
                out.append((name, rng.standard_normal(size=full, dtype=np.float32), "FP32"))
        return out


#: MiniLM: token ids and mask of sequence 128; mean-pooled embedding.
TEXT = Payload((("input_ids", (128,), "ids"), ("attention_mask", (128,), "ones")), "EMBEDDING")
#: ResNet-50: one FP32 224 x 224 RGB image per row (602 KB); logits.
IMAGE = Payload((("image", (3, 224, 224), "normal"),), "logits")


@dataclass(frozen=True)
class LoadResult:
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    client_cpu_s: float
    first_error: str

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")


def _worker(
    args: tuple[str, str, Payload, int, int, float, float, Any],
) -> tuple[int, int, list[float], float, str]:
    url, model, payload, batch, in_flight, warmup_s, seconds, start_at = args

    inputs = []
    for name, data, datatype in payload.arrays(batch, os.getpid()):
        tensor = grpcclient.InferInput(name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    outputs = [grpcclient.InferRequestedOutput(payload.output)]

    async def main() -> tuple[int, int, list[float], float, str]:
        client = grpcaio.InferenceServerClient(url)
        while time.time() < start_at:  # all processes start together
            await asyncio.sleep(0.005)
        t_measure = time.perf_counter() + warmup_s
        t_end = t_measure + seconds
        done = 0
        errors = 0
        first_error = ""
        latencies: list[float] = []
        cpu0 = [0.0]

        async def loop() -> None:
            nonlocal done, errors, first_error
            while True:
                t0 = time.perf_counter()
                if t0 >= t_end:
                    return
                try:
                    await client.infer(model, inputs, outputs=outputs)
                    ok = True
                except Exception as exc:
                    ok = False
                    first_error = first_error or " ".join(str(exc).split())[:200]
                t1 = time.perf_counter()
                if t_measure <= t0 and t1 <= t_end:
                    if ok:
                        done += 1
                        if len(latencies) < 20000:
                            latencies.append((t1 - t0) * 1000.0)
                    else:
                        errors += 1

        async def mark_cpu() -> None:
            await asyncio.sleep(max(0.0, t_measure - time.perf_counter()))
            cpu0[0] = time.process_time()

        await asyncio.gather(mark_cpu(), *(loop() for _ in range(in_flight)))
        cpu = time.process_time() - cpu0[0]
        await client.close()
        return done, errors, latencies, cpu, first_error

    return asyncio.run(main())


def run_load(
    url: str,
    model: str,
    *,
    payload: Payload,
    batch: int,
    in_flight: int,
    processes: int = 8,
    warmup_s: float = 2.0,
    seconds: float = 8.0,
) -> LoadResult:
    """``in_flight`` requests of ``batch`` rows kept in flight from ``processes`` processes."""
    procs = min(processes, in_flight)
    share = [in_flight // procs + (1 if i < in_flight % procs else 0) for i in range(procs)]
    start_at = time.time() + 3.0
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(procs) as pool:
        parts = pool.map(
            _worker, [(url, model, payload, batch, k, warmup_s, seconds, start_at) for k in share]
        )
    latencies = [lat for part in parts for lat in part[2]]
    return LoadResult(
        requests=sum(p[0] for p in parts),
        errors=sum(p[1] for p in parts),
        seconds=seconds,
        latencies_ms=latencies,
        client_cpu_s=sum(p[3] for p in parts),
        first_error=next((p[4] for p in parts if p[4]), ""),
    )
