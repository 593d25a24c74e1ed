"""Closed-loop raw gRPC load kept for ``scripts/gpu/diagnose.py``, and :class:`Payload`, the GPU parts' inputs.

What is left of the benchmark's own generator: the benchmark's served levels are measured by the
product's generator of record (:func:`tritonkit_bench.gpu_measure.sweep`: perf_analyzer where installed,
else :mod:`tritonkit.tune.measure`); its HTTP and gRPC-stream generators are gone. :class:`Payload` names
a part's inputs (token ids and masks for the text encoders, an FP32 image for ResNet-50) and its output
(the in-process examples and the built version's output name read it; ``scripts/gpu/heldout.py`` and
``tests/support/bench_tiny.py`` too). :func:`run_load` keeps N processes with K requests in flight each,
over a raw ``grpc.aio`` channel with a pre-serialised ``ModelInferRequest``; ``scripts/gpu/diagnose.py``
still calls it (moving it onto :mod:`tritonkit.tune.measure` deletes this generator).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["BERT", "IMAGE", "PROTOCOLS", "TEXT", "LoadResult", "Payload", "pool", "request_bytes", "run_load"]

_METHOD = "/inference.GRPCInferenceService/ModelInfer"
_LIMITS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
#: the front end this load goes through (HTTP and gRPC streams went with the bench's own generator:
#: the benchmark's served levels are the product's generator's, :func:`.gpu_measure.sweep`)
PROTOCOLS = ("grpc",)


@dataclass(frozen=True)
class Payload:
    """A model's request: (name, per-row shape, fill) for each input, fill one of ``ids`` (token ids
    in the vocabulary), ``ones`` (an attention mask), ``normal`` (FP32 standard normal, an image) or
    ``normal16`` (the same in FP16), and the output asked for."""

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
            elif fill == "normal16":
                out.append(
                    (name, rng.standard_normal(size=full, dtype=np.float32).astype(np.float16), "FP16")
                )
            else:
                out.append((name, rng.standard_normal(size=full, dtype=np.float32), "FP32"))
        return out


#: MiniLM: token ids and mask of sequence 128; mean-pooled embedding.
TEXT = Payload((("input_ids", (128,), "ids"), ("attention_mask", (128,), "ones")), "EMBEDDING")
#: BERT-base: token ids and mask of sequence 128; the CLS row of the last layer.
BERT = Payload((("input_ids", (128,), "ids"), ("attention_mask", (128,), "ones")), "CLS")
#: ResNet-50: one FP32 224 x 224 RGB image per row (602 KB); logits.
IMAGE = Payload((("image", (3, 224, 224), "normal"),), "logits")
#: ResNet-50 with its image and logits FP16 on the wire (301 KB a row).
IMAGE16 = Payload((("image", (3, 224, 224), "normal16"),), "logits")


def request_bytes(model: str, payload: Payload, batch: int, seed: int) -> bytes:
    """A serialised KServe ``ModelInferRequest`` of ``batch`` rows (raw input contents)."""
    from tritonclient.grpc import service_pb2  # noqa: PLC0415 (grpc stubs load in the workers)

    request = service_pb2.ModelInferRequest(model_name=model)
    for name, data, datatype in payload.arrays(batch, seed):
        request.inputs.add(name=name, datatype=datatype, shape=list(data.shape))
        request.raw_input_contents.append(np.ascontiguousarray(data).tobytes())
    request.outputs.add(name=payload.output)
    return bytes(request.SerializeToString())


def _check(answer: bytes, payload: Payload, batch: int) -> str:
    """'' when the answer holds ``batch`` rows of the payload's output, else what is wrong."""
    from tritonclient.grpc import service_pb2  # noqa: PLC0415 (grpc stubs load in the workers)

    response = service_pb2.ModelInferResponse.FromString(answer)
    outputs = {o.name: list(o.shape) for o in response.outputs}
    shape = outputs.get(payload.output)
    if not shape or shape[0] != batch or not response.raw_output_contents:
        return f"answer lacks {batch} rows of `{payload.output}`: got {outputs}"
    return ""


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


@dataclass
class _Tally:
    """What one process counts: answers of requests sent and answered inside the window, and errors of
    requests sent inside it, whenever they fail (a request that times out fails after the window)."""

    t_measure: float
    t_end: float
    done: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    first_error: str = ""

    def record(self, t0: float, t1: float, error: str | None) -> None:
        """A request sent at ``t0`` and answered at ``t1`` (``error``: why it failed, None when it did not)."""
        if error is not None:
            self.first_error = self.first_error or error
            if self.t_measure <= t0 < self.t_end:
                self.errors += 1
        elif self.t_measure <= t0 and t1 <= self.t_end:
            self.done += 1
            if len(self.latencies) < 50000:
                self.latencies.append((t1 - t0) * 1000.0)

    def result(self, cpu: float) -> tuple[int, int, list[float], float, str]:
        return self.done, self.errors, self.latencies, cpu, self.first_error


async def start_window(start_at: float, warmup_s: float, seconds: float, first_error: str) -> _Tally:
    """Wait for ``start_at`` (every process starts together), then the tally of the window measured after
    ``warmup_s``."""
    while time.time() < start_at:
        await asyncio.sleep(0.005)
    t_measure = time.perf_counter() + warmup_s
    return _Tally(t_measure, t_measure + seconds, first_error=first_error)


def _worker(
    args: tuple[str, str, Payload, int, int, float, float, float, str],
) -> tuple[int, int, list[float], float, str]:
    url, model, payload, batch, in_flight, warmup_s, seconds, start_at, _ = args
    import grpc  # noqa: PLC0415 (grpc loads in the workers)

    body = request_bytes(model, payload, batch, os.getpid())
    if in_flight == 1:
        return _single(url, body, payload, batch, warmup_s, seconds, start_at)

    async def main() -> tuple[int, int, list[float], float, str]:
        channel = grpc.aio.insecure_channel(url, options=_LIMITS)
        call = channel.unary_unary(_METHOD, request_serializer=None, response_deserializer=None)
        first_error = ""
        try:
            first_error = _check(await call(body), payload, batch)
        except grpc.aio.AioRpcError as exc:
            first_error = " ".join(str(exc.details()).split())[:200]
        tally = await start_window(start_at, warmup_s, seconds, first_error)
        t_measure = tally.t_measure
        cpu0 = [0.0]

        async def loop() -> None:
            while True:
                t0 = time.perf_counter()
                if t0 >= tally.t_end:
                    return
                error = None
                try:
                    await call(body)
                except grpc.aio.AioRpcError as exc:
                    error = " ".join(str(exc.details()).split())[:200]
                tally.record(t0, time.perf_counter(), error)

        async def mark_cpu() -> None:
            await asyncio.sleep(max(0.0, t_measure - time.perf_counter()))
            cpu0[0] = time.process_time()

        await asyncio.gather(mark_cpu(), *(loop() for _ in range(in_flight)))
        cpu = time.process_time() - cpu0[0]
        await channel.close()
        return tally.result(cpu)

    return asyncio.run(main())


def timed_stream(
    first_error: str,
    start_at: float,
    warmup_s: float,
    seconds: float,
    send: Callable[[], tuple[str | None, bool]],
) -> tuple[int, int, list[float], float, str]:
    """One blocking stream's window: from ``start_at`` (every process together), ``warmup_s`` not kept,
    then ``seconds`` of calls by ``send`` (one call: its error or None, and whether the stream ends)."""
    while time.time() < start_at:
        time.sleep(0.005)
    t_measure = time.perf_counter() + warmup_s
    tally = _Tally(t_measure, t_measure + seconds, first_error=first_error)
    cpu0 = None
    while True:
        t0 = time.perf_counter()
        if t0 >= tally.t_end:
            break
        if cpu0 is None and t0 >= t_measure:
            cpu0 = time.process_time()
        error, last = send()
        tally.record(t0, time.perf_counter(), error)
        if last:
            break
    return tally.result(time.process_time() - cpu0 if cpu0 is not None else 0.0)


def _single(
    url: str, body: bytes, payload: Payload, batch: int, warmup_s: float, seconds: float, start_at: float
) -> tuple[int, int, list[float], float, str]:
    """One request in flight: blocking calls on a plain channel (an asyncio loop adds 0.1-0.2 ms of
    client time to every call, which a single stream's latency would carry)."""
    import grpc  # noqa: PLC0415 (grpc loads in the workers)

    channel = grpc.insecure_channel(url, options=_LIMITS)
    call = channel.unary_unary(_METHOD, request_serializer=None, response_deserializer=None)
    first_error = ""
    try:
        first_error = _check(call(body), payload, batch)
    except grpc.RpcError as exc:
        first_error = " ".join(str(exc)[:200].split())

    def send() -> tuple[str | None, bool]:
        try:
            call(body)
        except grpc.RpcError as exc:
            return " ".join(str(exc)[:200].split()), False
        return None, False

    result = timed_stream(first_error, start_at, warmup_s, seconds, send)
    channel.close()
    return result


def pool(processes: int = 8) -> Any:
    """Worker processes for :func:`run_load`, to keep across levels (spawned once)."""
    return multiprocessing.get_context("spawn").Pool(processes)


def run_load(
    url: str,
    model: str,
    *,
    payload: Payload,
    batch: int,
    in_flight: int,
    processes: int = 8,
    warmup_s: float = 1.0,
    seconds: float = 3.0,
    workers: Any = None,
    protocol: str = "grpc",
) -> LoadResult:
    """``in_flight`` requests of ``batch`` rows kept in flight from ``processes`` processes (of
    ``workers``, a :func:`pool`, when given; else spawned for this run), over ``protocol`` (``url``:
    that front end's ``host:port``)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}; got {protocol!r}")
    procs = min(processes, in_flight)
    share = [in_flight // procs + (1 if i < in_flight % procs else 0) for i in range(procs)]
    start_at = time.time() + (1.0 if workers is not None else 3.0)
    jobs = [(url, model, payload, batch, k, warmup_s, seconds, start_at, protocol) for k in share]
    if workers is not None:
        parts = workers.map(_worker, jobs, chunksize=1)
    else:
        with pool(procs) as spawned:
            parts = spawned.map(_worker, jobs, chunksize=1)
    latencies = [lat for part in parts for lat in part[2]]
    return LoadResult(
        requests=sum(p[0] for p in parts),
        errors=sum(p[1] for p in parts),
        seconds=seconds,
        latencies_ms=latencies,
        client_cpu_s=sum(p[3] for p in parts),
        first_error=next((p[4] for p in parts if p[4]), ""),
    )
