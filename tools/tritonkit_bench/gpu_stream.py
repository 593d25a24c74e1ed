"""The GPU benchmark's load over Triton's gRPC streaming front end (``ModelStreamInfer``).

Each process opens one channel and a few bidirectional streams on it and keeps its share of the
requests in flight on them: a request is written, and every answer read lets the next request go (a
closed loop, as the unary generator of :mod:`tritonkit_bench.gpu_load`). The same pre-serialised
``ModelInferRequest`` is written again and again. For a model that is not decoupled Triton writes a
stream's answers in the order its requests came (``WriteResponseIfReady`` in
``src/grpc/infer_handler.h`` at v2.51.0), so each answer is matched to the oldest request of its stream
without an id. An answer is a ``ModelStreamInferResponse``: an error is its field 1 (``error_message``),
which protobuf writes first, so only an answer starting with that field's tag is decoded. A stream
that ends before its answers came counts each unanswered request as an error.

Why a stream: Triton 2.51's unary gRPC inference runs on two handler threads and costs each call a new
HTTP/2 stream (headers, a call object, a completion); a stream carries each request as one message.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from tritonkit_bench.gpu_load import _LIMITS, Payload, _check, request_bytes, start_window

__all__ = ["METHOD", "STREAMS_PER_PROCESS", "answer_error", "worker"]

METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
#: streams each process opens (fewer when it has fewer requests in flight)
STREAMS_PER_PROCESS = 4
_ERROR_TAG = b"\x0a"  # field 1 (error_message), length-delimited


def answer_error(answer: bytes) -> str | None:
    """The error a ``ModelStreamInferResponse`` carries, None when it carries an answer."""
    if not answer.startswith(_ERROR_TAG):
        return None
    from tritonclient.grpc import service_pb2  # noqa: PLC0415 (grpc stubs load in the workers)

    message = service_pb2.ModelStreamInferResponse.FromString(answer).error_message
    return " ".join(message.split())[:200] or "error without a message"


def _first_check(answer: bytes, payload: Payload, batch: int) -> str:
    error = answer_error(answer)
    if error is not None:
        return error
    from tritonclient.grpc import service_pb2  # noqa: PLC0415 (grpc stubs load in the workers)

    inner = service_pb2.ModelStreamInferResponse.FromString(answer).infer_response
    return _check(inner.SerializeToString(), payload, batch)


def worker(
    url: str,
    model: str,
    payload: Payload,
    batch: int,
    in_flight: int,
    warmup_s: float,
    seconds: float,
    start_at: float,
    seed: int,
) -> tuple[int, int, list[float], float, str]:
    """One process's share: ``in_flight`` requests of ``batch`` rows over up to
    :data:`STREAMS_PER_PROCESS` streams of one channel; (answered, errors, latencies ms, CPU s, first
    error) of the measured window."""
    import grpc  # noqa: PLC0415 (grpc loads in the workers)

    body = request_bytes(model, payload, batch, seed)

    async def main() -> tuple[int, int, list[float], float, str]:
        channel = grpc.aio.insecure_channel(url, options=_LIMITS)
        method = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)
        first = method()
        first_error = ""
        try:
            await first.write(body)
            answer = await first.read()
            first_error = (
                "stream ended before its answer"
                if answer is grpc.aio.EOF
                else _first_check(answer, payload, batch)
            )
            await first.done_writing()
        except grpc.aio.AioRpcError as exc:
            first_error = " ".join(str(exc.details()).split())[:200]
        tally = await start_window(start_at, warmup_s, seconds, first_error)
        t_measure = tally.t_measure
        cpu0 = [0.0]

        async def one(k: int) -> None:
            call: Any = method()
            sent: collections.deque[float] = collections.deque()
            try:
                for _ in range(k):
                    sent.append(time.perf_counter())
                    await call.write(body)
                while sent:
                    answer = await call.read()
                    if answer is grpc.aio.EOF:
                        break
                    t1 = time.perf_counter()
                    tally.record(sent.popleft(), t1, answer_error(answer))
                    if t1 < tally.t_end:
                        sent.append(time.perf_counter())
                        await call.write(body)
                await call.done_writing()
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:  # the call ended under a write
                details = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else repr(exc)
                error = " ".join(str(details).split())[:200]
                while sent:
                    tally.record(sent.popleft(), time.perf_counter(), error)
            while sent:  # the stream ended with requests unanswered
                tally.record(sent.popleft(), time.perf_counter(), "stream ended before its answer")

        async def mark_cpu() -> None:
            await asyncio.sleep(max(0.0, t_measure - time.perf_counter()))
            cpu0[0] = time.process_time()

        streams = min(in_flight, STREAMS_PER_PROCESS)
        shares = [in_flight // streams + (1 if i < in_flight % streams else 0) for i in range(streams)]
        await asyncio.gather(mark_cpu(), *(one(k) for k in shares))
        cpu = time.process_time() - cpu0[0]
        await channel.close()
        return tally.result(cpu)

    return asyncio.run(main())
