"""An HTTP guard in front of Triton's HTTP port: limits Triton 2.51 lacks, a real drain, true readiness.

Triton 2.51 has no option bounding an HTTP body (``--http-max-input-size`` came later) and its
own parsers die on hostile bodies: an infer whose declared shape asks for terabytes ends the
process with ``std::bad_alloc``, JSON nested 130,000 levels deep with SIGSEGV. On SIGTERM it
keeps serving new requests on open keep-alive connections while it waits for in-flight ones,
and it answers ready after a model's python stub died. The guard owns the client connections:

* a request is read whole (head ≤ 64 KiB, body ≤ ``max_body_bytes``, ``Content-Length`` only) and
  refused with 413/431/411/400 before Triton sees it when it breaks a limit: the JSON part of an
  infer must parse (Python's parser refuses deep nesting) and the bytes its shapes declare must
  stay within ``max_body_bytes`` times ``_EXPANSION``;
* ``/v2/health/ready`` and ``/v2/models/<m>[/versions/<v>]/ready`` answer 503 when ``healthy()``
  says the server cannot serve (a dead stub), or while draining;
* :meth:`Guard.drain` stops accepting, answers any new request on an open connection with 503 and
  ``Connection: close``, and waits for the requests already forwarded to complete.

Each client connection gets its own keep-alive connection to Triton (loopback). gRPC is not
guarded (an HTTP/2 proxy is out of scope): restrict it with the restricted-protocol options or do
not expose it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import resource
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Guard"]

_HEAD_LIMIT = 64 * 1024
#: Declared tensor bytes may exceed the body this many times (JSON numbers are longer than their
#: binary form the other way round; shared-memory inputs declare shape without body bytes).
_EXPANSION = 4
#: Infer bodies larger than this are checked on a worker thread, not on the event loop.
_INLINE_CHECK_BYTES = 256 * 1024
#: Seconds a body may go without a byte arriving (a Content-Length larger than what is sent must not hold
#: the connection forever).
_BODY_IDLE_S = 5.0
_DTYPE_BYTES = {
    "BOOL": 1, "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BF16": 2,
    "INT32": 4, "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8, "BYTES": 4,
}  # fmt: skip
_INFER = re.compile(rb"^/v2/models/[^/?]+(?:/versions/[^/?]+)?/infer(?:\?|$)")
_READY = re.compile(rb"^/v2/(?:health/ready|models/[^/?]+(?:/versions/[^/?]+)?/ready)(?:\?|$)")
_EXPECT = re.compile(rb"\r\nexpect:[^\r]*", re.IGNORECASE)
_REASONS = {
    400: "Bad Request",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Payload Too Large",
    431: "Header Too Large",
}


class _RefusedError(Exception):
    def __init__(self, status: int, message: str, *, count: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.count = count  # a limit refused it (not a readiness answer)


def _answer(status: int, message: str, *, close: bool) -> bytes:
    body = json.dumps({"error": message}).encode()
    reason = _REASONS.get(status, "Service Unavailable" if status == 503 else "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{'Connection: close' if close else 'Connection: keep-alive'}\r\n\r\n"
    )
    return head.encode() + body


def _headers(head: bytes) -> tuple[bytes, bytes, dict[bytes, bytes]]:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise _RefusedError(400, "malformed request line")
    fields: dict[bytes, bytes] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(b":")
            if not sep:
                raise _RefusedError(400, "malformed header line")
            fields[name.strip().lower()] = value.strip()
    return parts[0], parts[1], fields


async def _read_body(reader: asyncio.StreamReader, length: int) -> bytes:
    parts: list[bytes] = []
    remaining = length
    while remaining:
        try:
            chunk = await asyncio.wait_for(reader.read(min(remaining, 1 << 20)), _BODY_IDLE_S)
        except TimeoutError:
            raise _RefusedError(408, f"no body byte arrived for {_BODY_IDLE_S:g} s") from None
        if not chunk:
            raise asyncio.IncompleteReadError(b"".join(parts), length)
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def _flatten(data: Any, out: list[Any]) -> None:
    if isinstance(data, list):
        for element in data:
            _flatten(element, out)
    else:
        out.append(data)


def _check_data(name: str, datatype: str, shape: list[int], data: Any) -> None:
    """Inline ``data`` must hold one element per shape position, of the datatype's kind, finite."""
    elements: list[Any] = []
    _flatten(data, elements)
    if len(elements) != math.prod(shape):
        raise _RefusedError(
            400, f"input `{name}`: shape {shape} needs {math.prod(shape)} data elements; got {len(elements)}"
        )
    if datatype == "BYTES":
        kind_ok: Callable[[Any], bool] = lambda v: isinstance(v, str)  # noqa: E731
        expected = "strings"
    elif datatype == "BOOL":
        kind_ok, expected = (lambda v: isinstance(v, bool)), "true/false"
    elif datatype.startswith(("FP", "BF")):
        kind_ok = lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
        expected = "finite numbers"
    else:
        kind_ok, expected = (lambda v: isinstance(v, int) and not isinstance(v, bool)), "integers"
    bad = next((i for i, v in enumerate(elements) if not kind_ok(v)), None)
    if bad is not None:
        raise _RefusedError(
            400, f"input `{name}` ({datatype}): expected {expected}; element {bad} is {elements[bad]!r}"[:300]
        )


def _check_infer(body: bytes, fields: dict[bytes, bytes], max_bytes: int) -> None:
    """Refuse an infer body whose JSON is malformed or too deep, or whose shapes ask too much."""
    json_size = fields.get(b"inference-header-content-length")
    try:
        size = int(json_size) if json_size is not None else len(body)
    except ValueError:
        raise _RefusedError(400, "Inference-Header-Content-Length is not a number") from None
    if not 0 <= size <= len(body):
        raise _RefusedError(
            400, f"Inference-Header-Content-Length {size} is outside the body of {len(body)} bytes"
        )
    try:
        request: Any = json.loads(body[:size])
    except RecursionError:
        raise _RefusedError(400, "the request JSON is nested too deeply") from None
    except ValueError as exc:
        raise _RefusedError(400, f"the request JSON does not parse: {exc}") from None
    # Triton 2.51 answers a body that parses but is not a KServe request with 500 (its own parser's
    # errors), and serves NaN/Infinity literals as data: say what was expected, as a 400, here.
    if not isinstance(request, dict):
        raise _RefusedError(400, f"the request JSON must be an object; got {type(request).__name__}")
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or not all(isinstance(item, dict) for item in inputs):
        raise _RefusedError(400, "the request JSON needs `inputs`: a list of objects")
    declared = 0
    for item in inputs:
        shape = item.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise _RefusedError(400, "every input needs a shape of non-negative integers")
        datatype = str(item.get("datatype", "")).upper()
        declared += math.prod(shape) * _DTYPE_BYTES.get(datatype, 8)
        if declared <= max_bytes * _EXPANSION and "data" in item:
            _check_data(str(item.get("name", "")), datatype, shape, item["data"])
    if declared > max_bytes * _EXPANSION:
        raise _RefusedError(
            413, f"the inputs declare {declared} bytes; at most {max_bytes * _EXPANSION} are accepted"
        )


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Let a refused client read its answer: closing with its body unread would reset the link."""
    with contextlib.suppress(Exception):
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(1.0):
            while await reader.read(1 << 16):
                pass


class Guard:
    """Listen on ``host:port`` and forward to Triton's HTTP endpoint at ``127.0.0.1:upstream``."""

    def __init__(
        self,
        host: str,
        port: int,
        upstream: int,
        *,
        max_body_bytes: int,
        healthy: Callable[[], bool] = lambda: True,
    ) -> None:
        self.host, self.port, self.upstream = host, port, upstream
        self.max_body_bytes = max_body_bytes
        self.healthy = healthy
        self.refused = 0  # requests refused by a limit
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._draining = False
        self._in_flight = 0
        self._idle: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tritonkit-guard", daemon=True)

    # --- life cycle (called from other threads) ------------------------------------------------
    def start(self) -> None:
        # One descriptor per client connection and one per forwarded one: thousands of idle
        # clients must not exhaust a low soft limit (asyncio backs off accepting when they do).
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        future.result(timeout=10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True, limit=_HEAD_LIMIT + 1024
        )

    def drain(self, timeout: float) -> int:
        """Stop accepting, close idle connections, wait for forwarded requests; returns those left."""
        if not self._thread.is_alive():
            return 0
        future = asyncio.run_coroutine_threadsafe(self._drain(timeout), self._loop)
        return future.result(timeout=timeout + 5)

    async def _drain(self, timeout: float) -> int:
        self._draining = True
        if self._server is not None:
            self._server.close()
        for task in list(self._idle):  # waiting for a next request that will not be served
            task.cancel()
        deadline = self._loop.time() + timeout
        while self._in_flight and self._loop.time() < deadline:
            await asyncio.sleep(0.02)
        return self._in_flight

    def close(self) -> None:
        """Close the listening socket and every connection, and end the guard's thread."""
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        with contextlib.suppress(RuntimeError):
            self._loop.close()

    async def _close(self) -> None:
        self._draining = True
        if self._server is not None:
            self._server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        await asyncio.sleep(0)

    # --- one client connection -----------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        task = asyncio.current_task()
        try:
            while not self._draining:
                assert task is not None
                self._idle.add(task)
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    writer.write(_answer(431, f"request head over {_HEAD_LIMIT} bytes", close=True))
                    return
                finally:
                    self._idle.discard(task)
                if self._draining:
                    writer.write(_answer(503, "the server is stopping", close=True))
                    return
                try:
                    request, close = await self._read_request(head, reader, writer)
                except _RefusedError as refused:
                    self.refused += refused.count
                    writer.write(_answer(refused.status, str(refused), close=True))
                    await _linger(reader, writer)
                    return
                if upstream is None:
                    try:
                        upstream = await asyncio.open_connection("127.0.0.1", self.upstream)
                    except OSError:  # Triton is down (crashed, or restarting)
                        writer.write(_answer(503, "the server is not running", close=True))
                        return
                self._in_flight += 1
                try:
                    upstream[1].write(request)
                    keep = await self._relay(upstream[0], writer)
                finally:
                    self._in_flight -= 1
                if not keep or close:
                    return
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            asyncio.CancelledError,
        ):
            return
        except (_RefusedError, ValueError):  # Triton's answer did not parse: drop both links
            return
        finally:
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()
            if upstream is not None:
                upstream[1].close()

    async def _read_request(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[bytes, bool]:
        """The whole request and whether the client asked to close; :class:`_RefusedError` if refused."""
        method, target, fields = _headers(head[:-4])
        if method not in (b"GET", b"POST"):  # all Triton serves; HEAD would leave a body unsent
            raise _RefusedError(
                405, f"method {method.decode(errors='replace')} is not served; expected GET or POST"
            )
        if b"transfer-encoding" in fields:
            raise _RefusedError(411, "chunked bodies are not accepted; send Content-Length")
        try:
            length = int(fields.get(b"content-length", b"0"))
        except ValueError:
            raise _RefusedError(400, "Content-Length is not a number") from None
        if length < 0:
            raise _RefusedError(400, "Content-Length is negative")
        if length > self.max_body_bytes:
            raise _RefusedError(413, f"the body of {length} bytes is over the limit of {self.max_body_bytes}")
        if fields.get(b"expect", b"").lower() == b"100-continue":
            # Answer it here (curl waits a second otherwise) and keep Triton from answering it too.
            head = _EXPECT.sub(b"", head)
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await _read_body(reader, length)
        if method == b"POST" and _INFER.match(target):
            if len(body) > _INLINE_CHECK_BYTES:  # parsing takes a while: keep other connections moving
                await asyncio.to_thread(_check_infer, body, fields, self.max_body_bytes)
            else:
                _check_infer(body, fields, self.max_body_bytes)
        if _READY.match(target) and not self.healthy():
            raise _RefusedError(
                503, "a model of this server cannot serve (see tritonkit serve's log)", count=False
            )
        return head + body, fields.get(b"connection", b"").lower() == b"close"

    async def _relay(self, upstream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Copy one response from Triton to the client; whether the connection stays open.

        Bodies come with Content-Length or, for streamed generation, chunked: chunks are passed on
        as they arrive.
        """
        head = await upstream.readuntil(b"\r\n\r\n")
        _, _, fields = _headers(b"GET / HTTP/1.1" + head[head.index(b"\r\n") : -4])
        keep = fields.get(b"connection", b"").lower() != b"close" and not self._draining
        if not keep:  # draining: this answer is the connection's last
            head = (
                head[: head.index(b"\r\n") + 2] + b"Connection: close\r\n" + head[head.index(b"\r\n") + 2 :]
            )
        writer.write(head)
        if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
            while True:
                size_line = await upstream.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                writer.write(size_line + await upstream.readexactly(size + 2) if size else size_line)
                await writer.drain()
                if size == 0:
                    while (trailer := await upstream.readuntil(b"\r\n")) != b"\r\n":
                        writer.write(trailer)
                    writer.write(b"\r\n")
                    break
        else:
            length = int(fields.get(b"content-length", b"0"))
            writer.write(await upstream.readexactly(length) if length else b"")
        await writer.drain()
        return keep
