"""The GPU benchmark's HTTP load: Triton's KServe v2 HTTP front end driven with pre-built requests.

Each process builds its whole HTTP/1.1 request once (a JSON header naming the inputs with
``binary_data_size``, the raw tensors after it, Triton's binary tensor extension; the output asked for
in binary) and writes those bytes on keep-alive connections, one connection per request in flight; an
answer is read by its ``Content-Length`` and judged by its status line, so a request costs the client a
write and two reads (about a quarter of a raw gRPC call's client CPU on the same host). One request in
flight uses a blocking socket (no event loop on the single stream's path). The first answer is decoded
and checked like the gRPC generator's (output name, row count).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from typing import Any

import numpy as np

from tritonkit_bench.gpu_load import Payload, start_window, timed_stream

__all__ = ["HTTP_MAX_IN_FLIGHT", "answer_problem", "http_request", "worker"]

_HEAD_END = b"\r\n\r\n"
#: Most connections a level opens. tritonserver 2.51 drops answers past ~278 queued on one HTTP thread
#: (tritonkit.serve.reply_queues); the embedded server makes room for 4,096 at start
HTTP_MAX_IN_FLIGHT = 1024
#: Seconds between two connections a ramping process opens (``worker(ramp=True)``)
RAMP_GAP_S = 0.002
#: Seconds an answer may take before the level counts it as an error and that connection stops
ANSWER_TIMEOUT_S = 30.0


def http_request(host: str, model: str, payload: Payload, batch: int, seed: int) -> bytes:
    """The whole HTTP/1.1 infer request of ``batch`` rows (binary tensor extension, keep-alive)."""
    arrays = payload.arrays(batch, seed)
    header = json.dumps(
        {
            "inputs": [
                {"name": name, "shape": list(data.shape), "datatype": datatype,
                 "parameters": {"binary_data_size": data.nbytes}}
                for name, data, datatype in arrays
            ],
            "outputs": [{"name": payload.output, "parameters": {"binary_data": True}}],
        },
        separators=(",", ":"),
    ).encode()  # fmt: skip
    body = header + b"".join(np.ascontiguousarray(data).tobytes() for _, data, _ in arrays)
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: {len(header)}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    """(status, lower-cased headers) of a response head (without its blank line)."""
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers


def _length(status: int, headers: dict[str, str]) -> int:
    """The answer's body length; a chunked or unsized answer is refused (this reader cannot frame it)."""
    if "content-length" not in headers:
        raise ConnectionError(f"HTTP {status} answer without Content-Length: {headers}")
    return int(headers["content-length"])


def answer_problem(status: int, headers: dict[str, str], body: bytes, payload: Payload, batch: int) -> str:
    """'' when the answer holds ``batch`` rows of the payload's output, else what is wrong."""
    if status != 200:
        return f"HTTP {status}: {' '.join(body[:200].decode('utf-8', 'replace').split())}"
    size = int(headers.get("inference-header-content-length", len(body)))
    try:
        outputs = {o["name"]: o.get("shape") for o in json.loads(body[:size])["outputs"]}
    except (ValueError, KeyError, TypeError) as exc:
        return f"answer is not a KServe v2 infer response: {exc}"
    shape = outputs.get(payload.output)
    if not shape or shape[0] != batch or len(body) <= size:
        return f"answer lacks {batch} rows of `{payload.output}`: got {outputs}"
    return ""


def _failure(status: int, body: bytes) -> str | None:
    return (
        None if status == 200 else f"HTTP {status}: {' '.join(body[:200].decode('utf-8', 'replace').split())}"
    )


def _single(
    url: str, request: bytes, payload: Payload, batch: int, warmup_s: float, seconds: float, start_at: float
) -> tuple[int, int, list[float], float, str]:
    """One request in flight on a blocking socket (TCP_NODELAY: the request leaves in one go)."""
    host, port = url.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=ANSWER_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = sock.makefile("rb")

    def call() -> tuple[int, dict[str, str], bytes]:
        sock.sendall(request)
        lines = []
        while (line := reader.readline()) != b"\r\n":
            if not line:
                raise ConnectionError("the server closed the connection")
            lines.append(line)
        status, headers = _head(b"".join(lines).rstrip(b"\r\n"))
        return status, headers, reader.read(_length(status, headers))

    first_error = ""
    try:
        first_error = answer_problem(*call(), payload, batch)
    except (OSError, ValueError) as exc:
        first_error = f"{type(exc).__name__}: {exc}"[:200]

    def send() -> tuple[str | None, bool]:
        try:
            status, _, body = call()
        except OSError as exc:  # no answer in time, or the connection gone: an error, and the end
            return f"{type(exc).__name__}: {exc}"[:200], True
        return _failure(status, body), False

    result = timed_stream(first_error, start_at, warmup_s, seconds, send)
    reader.close()
    sock.close()
    return result


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, dict[str, str], bytes]:
    writer.write(request)
    raw = await reader.readuntil(_HEAD_END)
    status, headers = _head(raw[: -len(_HEAD_END)])
    return status, headers, await reader.readexactly(_length(status, headers))


def worker(
    url: str, model: str, payload: Payload, batch: int, in_flight: int, warmup_s: float, seconds: float,
    start_at: float, ramp: bool = False,
) -> tuple[int, int, list[float], float, str]:  # fmt: skip
    """One client process of :func:`tritonkit_bench.gpu_load.run_load` over HTTP. ``ramp``: open the
    connections one by one once the load has started, each sending as soon as it is open (as a
    connection pool grows with demand), instead of all of them before it: tritonserver 2.51 gives a new
    connection to the HTTP thread with the least queued work at that moment, so connections opened on an
    idle server all land on its first thread."""
    host, port = url.rsplit(":", 1)
    request = http_request(url, model, payload, batch, os.getpid())
    if in_flight == 1:
        return _single(url, request, payload, batch, warmup_s, seconds, start_at)

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(host, int(port))
        sock: Any = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return reader, writer

    async def main() -> tuple[int, int, list[float], float, str]:
        streams = [await connect() for _ in range(1 if ramp else in_flight)]
        first_error = ""
        try:
            first_error = answer_problem(*await _exchange(*streams[0], request), payload, batch)
        except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
            first_error = f"{type(exc).__name__}: {exc}"[:200]
        tally = await start_window(start_at, warmup_s, seconds, first_error)
        t_measure = tally.t_measure
        cpu0 = [0.0]

        async def loop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                t0 = time.perf_counter()
                if t0 >= tally.t_end:
                    return
                try:
                    status, _, body = await asyncio.wait_for(
                        _exchange(reader, writer, request), ANSWER_TIMEOUT_S
                    )
                except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                    # no answer in time, or the connection gone: an error, and this connection's end
                    tally.record(t0, time.perf_counter(), f"{type(exc).__name__}: {exc}"[:200])
                    return
                tally.record(t0, time.perf_counter(), _failure(status, body))

        async def mark_cpu() -> None:
            await asyncio.sleep(max(0.0, t_measure - time.perf_counter()))
            cpu0[0] = time.process_time()

        async def run_all() -> None:
            """Every open connection's loop; with ``ramp`` the rest opened one by one under the load."""
            tasks = [asyncio.ensure_future(loop(*stream)) for stream in streams]
            gap = min(RAMP_GAP_S, warmup_s / (2 * in_flight))  # every connection open inside the warm-up
            for _ in range(in_flight - len(streams)):
                await asyncio.sleep(gap)
                try:
                    streams.append(await connect())
                except OSError as exc:  # a connection refused is an error, not a smaller level
                    tally.errors += 1
                    tally.first_error = tally.first_error or f"{type(exc).__name__}: {exc}"[:200]
                    continue
                tasks.append(asyncio.ensure_future(loop(*streams[-1])))
            await asyncio.gather(*tasks)

        await asyncio.gather(mark_cpu(), run_all())
        cpu = time.process_time() - cpu0[0]
        for _, writer in streams:
            writer.close()
        return tally.result(cpu)

    return asyncio.run(main())
