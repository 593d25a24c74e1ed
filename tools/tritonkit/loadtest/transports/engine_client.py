"""The Locust side of the gRPC engine: one engine process per Locust process, shared by its users.

A user greenlet queues a 9-byte request frame and parks on a :class:`gevent.hub.Waiter`; frames
queued during one turn of the event loop leave in one ``write`` (a ``run_callback`` flush). The
engine's answers are read by one I/O watcher on the pipe, which wakes every finished greenlet
from the hub in one pass: one system call and one wake-up per batch of answers, never a thread
hand-off per request. See :mod:`.grpc_engine` for why gRPC itself lives in another process.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import ClassVar

import gevent
from gevent.hub import Waiter, get_hub

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.transports import engine_protocol as frames
from tritonkit.loadtest.validation import OutputCheck

__all__ = ["GrpcEngineClient", "GrpcEngineError", "GrpcResult"]

#: (seconds, response bytes, error text or None)
GrpcResult = tuple[float, int, str | None]


class GrpcEngineError(LoadTestError):
    """The gRPC engine process could not start or died; the message carries its last words."""


class GrpcEngineClient:
    """Send inference requests over gRPC through a private engine process; gevent-cooperative."""

    _shared: ClassVar[dict[tuple[str, int], GrpcEngineClient]] = {}
    _handed_out: ClassVar[int] = 0

    @classmethod
    def shared(cls, url: str, engines: int = 1) -> GrpcEngineClient:
        """One of this Locust process's ``engines`` clients (and engine processes) for ``url``.

        Users are spread over the engines round-robin.
        """
        index = cls._handed_out % max(1, engines)
        cls._handed_out += 1
        client = cls._shared.get((url, index))
        if client is None or client.closed:
            client = cls._shared[(url, index)] = cls(url)
        return client

    @classmethod
    def close_all(cls) -> float | None:
        """Stop every engine of this process; the CPU seconds they spent on requests (None if unknown)."""
        total: float | None = 0.0
        for client in list(cls._shared.values()):
            cpu = client.close()
            total = None if total is None or cpu is None else total + cpu
        cls._shared.clear()
        return total

    def __init__(self, url: str) -> None:
        self.url = url
        self.closed = False
        self._fatal: str | None = None
        # A plain child process: it must not inherit gevent's patches (it imports no Locust).
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tritonkit.loadtest.transports.engine", url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        self._in_fd = self._process.stdin.fileno()
        self._out_fd = self._process.stdout.fileno()
        os.set_blocking(self._out_fd, False)
        self._ids = itertools.count(1)
        self._payload_ids = itertools.count(0)
        self._waiters: dict[int, Waiter[GrpcResult]] = {}
        self._pending: list[bytes] = []
        self._flush_scheduled = False
        self._buffer = bytearray()
        self._hub = get_hub()
        self._watcher = self._hub.loop.io(self._out_fd, 1)
        self._watcher.start(self._on_readable)

    # --- public --------------------------------------------------------------------------
    def add_payload(self, body: bytes, outputs: Sequence[OutputCheck]) -> int:
        """Register a serialized ``ModelInferRequest`` (no ``id``) and how its answer must look."""
        payload_id = next(self._payload_ids)
        spec = json.dumps({"outputs": [check.to_json() for check in outputs]}).encode()
        self._send(frames.PAYLOAD_HEAD.pack(frames.PAYLOAD, payload_id, len(spec), len(body)) + spec + body)
        return payload_id

    def infer(self, payload_id: int, timeout: float | None = None) -> GrpcResult:
        """Send one request of payload ``payload_id`` and wait (cooperatively) for its result."""
        if self._fatal is not None:
            raise GrpcEngineError(self._fatal)
        request_id = next(self._ids) & 0xFFFFFFFF
        waiter: Waiter[GrpcResult] = Waiter()
        self._waiters[request_id] = waiter
        self._pending.append(frames.REQUEST_FRAME.pack(frames.REQUEST, request_id, payload_id))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._hub.loop.run_callback(self._flush)
        try:
            with gevent.Timeout(
                timeout, GrpcEngineError(f"no answer from the gRPC engine within {timeout} s")
            ):
                result: GrpcResult = waiter.get()
                return result
        finally:
            self._waiters.pop(request_id, None)

    def close(self) -> float | None:
        """Stop the engine; returns the CPU seconds it spent since its first request, if it said."""
        if self.closed:
            return None
        self.closed = True
        self._watcher.stop()
        with contextlib.suppress(OSError):
            self._process.stdin.close()  # type: ignore[union-attr]
        rest = b""
        with contextlib.suppress(Exception):
            os.set_blocking(self._out_fd, True)
            while chunk := os.read(self._out_fd, 1 << 16):  # the engine's last frames, up to EOF
                rest += chunk
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._fail_all("the gRPC engine was closed")
        tail = (bytes(self._buffer) + rest)[-frames.CPU_FRAME.size :]  # the CPU frame is the engine's last
        if len(tail) == frames.CPU_FRAME.size and tail[:1] == frames.CPU:
            return float(frames.CPU_FRAME.unpack(tail)[1])
        return None

    # --- hub side ------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._in_fd, view) :]
        except OSError as exc:
            self._die(f"the gRPC engine stopped reading requests ({exc.strerror})")

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self._send(data)

    def _on_readable(self) -> None:
        while True:
            try:
                chunk = os.read(self._out_fd, 1 << 20)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                chunk = b""
            if not chunk:
                self._die(self._last_words())
                return
            self._buffer += chunk
            if len(chunk) < 1 << 20:
                break
        self._parse()

    def _parse(self) -> None:
        buffer, offset, size = self._buffer, 0, len(self._buffer)
        head_size = frames.RESULT_HEAD.size
        unpack = frames.RESULT_HEAD.unpack_from
        waiters = self._waiters
        while size - offset >= frames.FATAL_HEAD.size:
            kind = buffer[offset : offset + 1]
            if kind == frames.RESULT:
                if size - offset < head_size:
                    break
                _, request_id, length, seconds, error_len = unpack(buffer, offset)
                end = offset + head_size + error_len
                if end > size:
                    break
                error = buffer[offset + head_size : end].decode(errors="replace") if error_len else None
                offset = end
                waiter = waiters.pop(request_id, None)
                if waiter is not None:
                    waiter.switch((seconds, length, error))
            elif kind == frames.FATAL:
                _, text_len = frames.FATAL_HEAD.unpack_from(buffer, offset)
                if size - offset - frames.FATAL_HEAD.size < text_len:
                    break
                start = offset + frames.FATAL_HEAD.size
                self._die(buffer[start : start + text_len].decode(errors="replace"))
                return
            else:
                self._die(f"the gRPC engine sent an unknown frame {bytes(kind)!r}")
                return
        del buffer[:offset]

    def _last_words(self) -> str:
        code = self._process.poll()
        err = b""
        with contextlib.suppress(Exception):
            if self._process.stderr is not None:
                os.set_blocking(self._process.stderr.fileno(), False)
                err = self._process.stderr.read() or b""
        lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        tail = lines[-1].strip() if lines else "no output"
        return f"the gRPC engine exited (code {code}): {tail}"

    def _die(self, reason: str) -> None:
        if self._fatal is None:
            self._fatal = reason
        self._watcher.stop()
        self.closed = True
        self._fail_all(reason)

    def _fail_all(self, reason: str) -> None:
        waiters, self._waiters = self._waiters, {}

        def throw() -> None:  # Waiter.throw is only allowed from the hub
            for waiter in waiters.values():
                waiter.throw(GrpcEngineError(reason))

        self._hub.loop.run_callback(throw)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if self._process.poll() is None:
                self._process.kill()
