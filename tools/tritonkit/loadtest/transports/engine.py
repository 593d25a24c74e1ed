"""The gRPC engine: a plain (gevent-free) process that carries a Locust process's gRPC requests.

Why a separate process: Locust monkey-patches ``threading``, so every Python thread gRPC starts
(the channel spin thread, a stream's request-consumer thread) becomes a greenlet that blocks the
hub inside gRPC's C core; the quick designs measured in ``shared/docs/ENVIRONMENT.md`` therefore
topped out at 0.4x the HTTP user. Here gRPC runs unpatched with its own GIL, and the Locust side
only writes and reads small fixed-size frames (:mod:`.engine_protocol`), many per system call.

How: ``grpc.aio`` unary ``ModelInfer`` calls on one asyncio loop, one task per request, so as
many requests are in flight as Locust users wait on. Measured on the 2-core machine against a
trivial model, in-process: aio unary 87 µs CPU per request, the sync API's futures 129 µs,
aio bidirectional streaming 188 µs, the sync stream with its consumer thread ~220 µs. Request
bodies are serialized once per payload (identity serializers); the answer is parsed, validated
(:func:`.validation.check_outputs`) and written back as one result frame; latency is measured
here, around the gRPC round trip. stdin is read by a loop reader callback and results leave in
one ``write`` per loop iteration.

Run as ``python -m tritonkit.loadtest.transports.engine HOST:PORT`` with pipes on stdin/stdout.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import time
from typing import Any

from tritonkit.loadtest.transports import engine_protocol as frames
from tritonkit.loadtest.validation import OutputCheck, check_outputs

_METHOD = "/inference.GRPCInferenceService/ModelInfer"
_MAX_MESSAGE = 1 << 30
_MAX_ERROR = 60000


class _Engine:
    def __init__(self, url: str, in_fd: int, out_fd: int) -> None:
        import grpc
        from tritonclient.grpc import service_pb2

        self._grpc = grpc
        self._parse = service_pb2.ModelInferResponse.FromString
        self._loop = asyncio.get_running_loop()
        self._in_fd, self._out_fd = in_fd, out_fd
        self._inbox = bytearray()
        self._outbox: list[bytes] = []
        self._flush_scheduled = False
        self._bodies: dict[int, bytes] = {}
        self._checks: dict[int, list[OutputCheck]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.done = asyncio.Event()
        self._cpu_start: float | None = None
        options = [
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
        ]
        self._channel = grpc.aio.insecure_channel(url, options=options)
        self._call = self._channel.unary_unary(_METHOD, request_serializer=None, response_deserializer=None)
        os.set_blocking(in_fd, False)
        self._loop.add_reader(in_fd, self._on_readable)

    # --- requests in -------------------------------------------------------------------------
    def _on_readable(self) -> None:
        try:
            chunk = os.read(self._in_fd, 1 << 20)
        except BlockingIOError:
            return
        if not chunk:  # the Locust side closed the pipe: finish
            self._loop.remove_reader(self._in_fd)
            self.done.set()
            return
        self._inbox += chunk
        self._parse_inbox()

    def _parse_inbox(self) -> None:
        data, offset, size = self._inbox, 0, len(self._inbox)
        request_size = frames.REQUEST_FRAME.size
        unpack = frames.REQUEST_FRAME.unpack_from
        while offset < size:
            kind = data[offset : offset + 1]
            if kind == frames.REQUEST:
                if size - offset < request_size:
                    break
                _, request_id, payload_id = unpack(data, offset)
                offset += request_size
                self._start(request_id, payload_id)
            elif kind == frames.PAYLOAD:
                if size - offset < frames.PAYLOAD_HEAD.size:
                    break
                _, payload_id, spec_len, body_len = frames.PAYLOAD_HEAD.unpack_from(data, offset)
                start = offset + frames.PAYLOAD_HEAD.size
                if size - start < spec_len + body_len:
                    break
                spec = json.loads(bytes(data[start : start + spec_len]))
                self._checks[payload_id] = [OutputCheck.from_json(item) for item in spec["outputs"]]
                self._bodies[payload_id] = bytes(data[start + spec_len : start + spec_len + body_len])
                offset = start + spec_len + body_len
            else:
                self.fatal(f"gRPC engine got an unknown frame {bytes(kind)!r}; expected P or R")
                return
        del data[:offset]

    def _start(self, request_id: int, payload_id: int) -> None:
        if self._cpu_start is None:
            self._cpu_start = time.process_time()
        call = self._call(self._bodies[payload_id])
        start = time.perf_counter()
        # grpc.aio runs each unary call in its own task; hooking that task's completion settles the
        # request without a second task of ours per request (a third of the engine's cost). If a
        # future grpcio renames the attribute, the plain ``await`` path takes over.
        task = getattr(call, "_invocation_task", None)
        if isinstance(task, asyncio.Task):
            task.add_done_callback(functools.partial(self._done, request_id, payload_id, start, call))
        else:
            self._spawn(self._await(request_id, payload_id, start, call))

    def _spawn(self, coroutine: Any) -> None:
        task = self._loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _done(
        self, request_id: int, payload_id: int, start: float, call: Any, task: asyncio.Task[Any]
    ) -> None:
        seconds = time.perf_counter() - start
        try:
            message = task.result()
        except BaseException:  # cancelled or broken: the status says why
            message = None
        if isinstance(message, bytes):
            try:
                error = self._check(self._parse(message), payload_id)
            except Exception as exc:  # a garbled answer is a failed request, never a dead engine
                error = f"{type(exc).__name__}: {exc}"
            self._result(request_id, len(message), seconds, error)
        else:  # error status: reading it needs the loop; errors are rare, a task is fine
            self._spawn(self._await(request_id, payload_id, start, call, seconds))

    async def _await(
        self, request_id: int, payload_id: int, start: float, call: Any, seconds: float | None = None
    ) -> None:
        length = 0
        try:
            message = await call
            length = len(message)
            error = self._check(self._parse(message), payload_id)
        except self._grpc.aio.AioRpcError as exc:
            error = exc.details() or exc.code().name
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        self._result(
            request_id, length, seconds if seconds is not None else time.perf_counter() - start, error
        )

    def _check(self, response: Any, payload_id: int) -> str | None:
        got = {
            output.name: (output.datatype, tuple(output.shape), response.raw_output_contents[i])
            for i, output in enumerate(response.outputs)
        }
        return check_outputs(self._checks[payload_id], got)

    # --- results out -------------------------------------------------------------------------
    def _result(self, request_id: int, length: int, seconds: float, error: str | None) -> None:
        text = error.encode()[:_MAX_ERROR] if error else b""
        self._outbox.append(
            frames.RESULT_HEAD.pack(frames.RESULT, request_id, length, seconds, len(text)) + text
        )
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        data, self._outbox = b"".join(self._outbox), []
        self._write(data)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # stdout stays blocking: the Locust side drains it at least as fast as we write
            view = view[os.write(self._out_fd, view) :]

    def fatal(self, text: str) -> None:
        data = text.encode()[:_MAX_ERROR]
        try:
            self._flush()
            self._write(frames.FATAL_HEAD.pack(frames.FATAL, len(data)) + data)
        finally:
            os._exit(3)

    async def close(self) -> None:
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)
        self._flush()
        await self._channel.close()
        if self._cpu_start is not None:
            self._write(frames.CPU_FRAME.pack(frames.CPU, time.process_time() - self._cpu_start))


async def _serve(url: str) -> None:
    engine = _Engine(url, sys.stdin.fileno(), sys.stdout.fileno())
    await engine.done.wait()
    await engine.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tritonkit.loadtest.transports.engine HOST:PORT", file=sys.stderr)
        return 2
    asyncio.run(_serve(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
