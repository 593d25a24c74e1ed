"""The lean gRPC transport: unary ``ModelInfer`` calls framed by hand on one HTTP/2 connection.

Why by hand: the ``h2`` state machine (:mod:`.grpc_h2`) is general and costs about twice the
HTTP user's CPU per request in pure Python; a gRPC client needs a small, fixed subset of HTTP/2
(RFC 9113) and that subset is cheap: request frames are built once per payload and only the
stream id changes; answers are three frames whose 9-byte headers are read with ``struct``. Header
blocks are decoded by ``hpack`` (the library ``h2`` uses), with the decoded fields cached while a
block consists of indexed fields only, which cannot change the decoder's table (RFC 7541 §6.1):
after the first answers Triton's headers and trailers are exactly that. The cache is dropped
whenever a block with literals (which may change the table) is decoded.

What is implemented: the connection preface and SETTINGS (acknowledged; INITIAL_WINDOW_SIZE and
MAX_FRAME_SIZE honoured), flow control both ways (a 2^31-1 receive window, replenished; request
bodies split into frames and held back while the server's windows are short), PING answers,
RST_STREAM and GOAWAY as failures, CONTINUATION frames, padding. Not implemented (not used by a
unary client): server push (disabled in our SETTINGS), priorities, stream ids beyond 2^31 (the
connection is replaced before that).

The gevent side is the one of :mod:`.grpc_h2`: every user of a process multiplexes its requests
on one connection; frames queued in one loop turn leave in one ``send``; one I/O watcher reads
answers and wakes finished greenlets from the hub.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import urllib.parse
from typing import Any, ClassVar

from gevent.hub import Waiter, get_hub

from tritonkit.errors import LoadTestError

__all__ = ["WireGrpcConnection", "WireGrpcError"]

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_FRAME = struct.Struct(">HBBBL")  # length (24 bits as 16 + 8), type, flags, stream id
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = (
    0,
    1,
    3,
    4,
    6,
    7,
    8,
    9,
)
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_MAX_WINDOW = (1 << 31) - 1
_DEFAULT_WINDOW = 65_535
_MAX_STREAM_ID = (1 << 31) - 1
_PATH = "/inference.GRPCInferenceService/ModelInfer"
_STATUS_NAMES = {
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    8: "RESOURCE_EXHAUSTED",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
}

#: (seconds, response message bytes or None, error text or None)
WireResult = tuple[float, bytes | None, str | None]


class WireGrpcError(LoadTestError):
    """The HTTP/2 connection to Triton's gRPC endpoint failed or closed."""


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return _FRAME.pack(size >> 8, size & 0xFF, kind, flags, stream_id) + payload


class _Stream:
    __slots__ = ("body", "data", "headers", "start", "waiter", "window")

    def __init__(self, waiter: Waiter[WireResult], body: bytes, window: int) -> None:
        self.waiter = waiter
        self.body = body  # request bytes not sent yet (flow control may hold them back)
        self.window = window  # how much more the server lets us send on this stream
        self.data = bytearray()
        self.headers: dict[bytes, bytes] = {}
        self.start = time.perf_counter()


class WireGrpcConnection:
    """One HTTP/2 connection carrying the unary ``ModelInfer`` calls of every user of a process."""

    _shared: ClassVar[dict[str, WireGrpcConnection]] = {}

    @classmethod
    def shared(cls, url: str) -> WireGrpcConnection:
        connection = cls._shared.get(url)
        if connection is None or connection.closed is not None or connection._next_id > _MAX_STREAM_ID - 2:
            connection = cls._shared[url] = cls(url)
        return connection

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        import hpack

        host, _, port = url.rpartition(":")
        try:
            self._sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout)
        except (OSError, ValueError) as exc:
            raise WireGrpcError(f"cannot connect to Triton's gRPC endpoint {url}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.setblocking(False)
        self.closed: str | None = None
        # A stateless header block (never-indexed literals, static-table references): the same
        # bytes are valid for every request, whatever the server's decoder table holds.
        encoder = hpack.Encoder()
        fields = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", _PATH),
            (":authority", url),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        self._header_block = encoder.encode([hpack.NeverIndexedHeaderTuple(k, v) for k, v in fields])
        self._decoder = hpack.Decoder()
        self._decoder.max_allowed_table_size = 1 << 16
        self._decoded: dict[bytes, list[tuple[bytes, bytes]]] = {}
        self._next_id = 1
        self._streams: dict[int, _Stream] = {}
        self._blocked: list[int] = []
        self._send_window = _DEFAULT_WINDOW  # connection-level, for our DATA
        self._initial_stream_window = _DEFAULT_WINDOW
        self._max_frame = 16_384
        self._received = 0  # DATA bytes received since our last connection WINDOW_UPDATE
        self._inbox = bytearray()
        self._continuation: tuple[int, int, bytearray] | None = None  # (stream, flags, block so far)
        self._outgoing = bytearray(
            _PREFACE
            + _frame(_SETTINGS, 0, 0, struct.pack(">HLHL", 0x2, 0, 0x4, _MAX_WINDOW))  # no push; open windows
            + _frame(_WINDOW_UPDATE, 0, 0, struct.pack(">L", _MAX_WINDOW - _DEFAULT_WINDOW))
        )
        self._flush_scheduled = False
        self._hub = get_hub()
        self._reader = self._hub.loop.io(self._sock.fileno(), 1)
        self._reader.start(self._on_readable)
        self._writer = self._hub.loop.io(self._sock.fileno(), 2)
        self._schedule_flush()

    # --- user side ---------------------------------------------------------------------------
    def infer(self, message: bytes, timeout: float | None = None) -> WireResult:
        """Send one serialized ``ModelInferRequest``; wait cooperatively for (seconds, answer, error)."""
        import gevent

        if self.closed is not None:
            raise WireGrpcError(self.closed)
        if self._next_id > _MAX_STREAM_ID:
            raise WireGrpcError("the HTTP/2 connection ran out of stream ids; expected a new connection")
        stream_id = self._next_id
        self._next_id += 2
        waiter: Waiter[WireResult] = Waiter()
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        stream = self._streams[stream_id] = _Stream(waiter, body, self._initial_stream_window)
        self._outgoing += _frame(_HEADERS, _END_HEADERS, stream_id, self._header_block)
        self._send_body(stream_id, stream)
        self._schedule_flush()
        try:
            with gevent.Timeout(timeout, WireGrpcError(f"no answer from Triton within {timeout} s")):
                result: WireResult = waiter.get()
                return result
        finally:
            if self._streams.pop(stream_id, None) is not None and self.closed is None:
                # given up (timeout, user stopped): cancel the stream on the server too
                self._outgoing += _frame(_RST_STREAM, 0, stream_id, struct.pack(">L", 0x8))
                self._schedule_flush()

    def close(self) -> None:
        if self.closed is None:
            with contextlib.suppress(OSError):
                self._sock.send(_frame(_GOAWAY, 0, 0, struct.pack(">LL", 0, 0)))
            self._die("the connection was closed")

    # --- sending -----------------------------------------------------------------------------
    def _send_body(self, stream_id: int, stream: _Stream) -> None:
        while stream.body:
            room = min(self._send_window, stream.window, self._max_frame)
            if room <= 0:
                self._blocked.append(stream_id)
                return
            chunk, stream.body = stream.body[:room], stream.body[room:]
            self._send_window -= len(chunk)
            stream.window -= len(chunk)
            self._outgoing += _frame(_DATA, 0 if stream.body else _END_STREAM, stream_id, chunk)

    def _resume_blocked(self) -> None:
        blocked, self._blocked = self._blocked, []
        for stream_id in blocked:
            if (stream := self._streams.get(stream_id)) is not None:
                self._send_body(stream_id, stream)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._hub.loop.run_callback(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed is not None or not self._outgoing:
            return
        try:
            sent = self._sock.send(self._outgoing)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._die(f"the HTTP/2 connection to Triton failed: {exc}")
            return
        del self._outgoing[:sent]
        if self._outgoing and not self._writer.active:
            self._writer.start(self._on_writable)

    def _on_writable(self) -> None:
        self._writer.stop()
        self._flush()

    # --- receiving ---------------------------------------------------------------------------
    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            self._die(f"the HTTP/2 connection to Triton failed: {exc}")
            return
        if not data:
            self._die("Triton closed the HTTP/2 connection")
            return
        inbox = self._inbox
        inbox += data
        offset, size = 0, len(inbox)
        unpack = _FRAME.unpack_from
        try:
            while size - offset >= 9:
                high, low, kind, flags, stream_id = unpack(inbox, offset)
                length = (high << 8) | low
                end = offset + 9 + length
                if end > size:
                    break
                self._on_frame(kind, flags, stream_id & _MAX_STREAM_ID, inbox[offset + 9 : end])
                offset = end
                if self.closed is not None:
                    return
        except Exception as exc:  # a protocol error ends the connection, with the reason
            self._die(f"HTTP/2 protocol error reading Triton's answer: {type(exc).__name__}: {exc}")
            return
        del inbox[:offset]
        if self._received > _MAX_WINDOW // 2:
            self._outgoing += _frame(_WINDOW_UPDATE, 0, 0, struct.pack(">L", self._received))
            self._received = 0
        if self._outgoing:
            self._schedule_flush()

    def _on_frame(self, kind: int, flags: int, stream_id: int, payload: bytearray) -> None:
        if kind == _DATA:
            self._received += len(payload)
            stream = self._streams.get(stream_id)
            if stream is not None:
                stream.data += _unpad(payload, flags) if flags & _PADDED else payload
            if flags & _END_STREAM:
                self._finish(stream_id)
        elif kind == _HEADERS:
            block = _unpad(payload, flags) if flags & _PADDED else payload
            if flags & _PRIORITY:
                block = block[5:]
            if flags & _END_HEADERS:
                self._on_headers(stream_id, flags, bytes(block))
            else:
                self._continuation = (stream_id, flags, bytearray(block))
        elif kind == _CONTINUATION:
            if self._continuation is None or self._continuation[0] != stream_id:
                raise ValueError("CONTINUATION frame without a HEADERS frame before it")
            self._continuation[2].extend(payload)
            if flags & _END_HEADERS:
                first_stream, first_flags, block = self._continuation
                self._continuation = None
                self._on_headers(first_stream, first_flags, bytes(block))
        elif kind == _WINDOW_UPDATE:
            (increment,) = struct.unpack_from(">L", payload)
            increment &= _MAX_WINDOW
            if stream_id == 0:
                self._send_window += increment
            elif (stream := self._streams.get(stream_id)) is not None:
                stream.window += increment
            if self._blocked:
                self._resume_blocked()
        elif kind == _SETTINGS:
            if not flags & _ACK:
                for at in range(0, len(payload) - 5, 6):
                    key, value = struct.unpack_from(">HL", payload, at)
                    if key == 0x4:  # INITIAL_WINDOW_SIZE: applies to open streams too
                        delta = value - self._initial_stream_window
                        self._initial_stream_window = value
                        for stream in self._streams.values():
                            stream.window += delta
                    elif key == 0x5:
                        self._max_frame = value
                self._outgoing += _frame(_SETTINGS, _ACK, 0)
                if self._blocked:
                    self._resume_blocked()
        elif kind == _PING:
            if not flags & _ACK:
                self._outgoing += _frame(_PING, _ACK, 0, bytes(payload))
        elif kind == _RST_STREAM:
            (code,) = struct.unpack_from(">L", payload)
            self._fail(stream_id, f"Triton reset the stream (HTTP/2 error {code})")
        elif kind == _GOAWAY:
            _, code = struct.unpack_from(">LL", payload)
            detail = bytes(payload[8:]).decode(errors="replace")
            self._die(f"Triton ended the HTTP/2 connection (error {code}{': ' + detail if detail else ''})")

    def _on_headers(self, stream_id: int, flags: int, block: bytes) -> None:
        fields = self._decoded.get(block)
        if fields is None:
            fields = [(bytes(k), bytes(v)) for k, v in self._decoder.decode(block, raw=True)]
            if all(byte & 0x80 for byte in block):
                self._decoded[block] = fields  # indexed fields only: the table did not change
            else:
                self._decoded.clear()  # literals may have changed the table: older entries are stale
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.headers.update(fields)
        if flags & _END_STREAM:
            self._finish(stream_id)

    def _finish(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        seconds = time.perf_counter() - stream.start
        headers = stream.headers
        status = headers.get(b"grpc-status")
        if status == b"0":
            data = stream.data
            if len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
                stream.waiter.switch(
                    (seconds, None, "malformed gRPC answer (expected one uncompressed message)")
                )
            else:
                stream.waiter.switch((seconds, bytes(data[5:]), None))
            return
        message = urllib.parse.unquote(headers.get(b"grpc-message", b"").decode(errors="replace"))
        if status is None:
            http_status = headers.get(b":status", b"?").decode()
            message = message or f"no grpc-status in Triton's answer (HTTP status {http_status})"
        else:
            code = int(status) if status.isdigit() else -1
            message = message or _STATUS_NAMES.get(code, f"gRPC status {status.decode(errors='replace')}")
        stream.waiter.switch((seconds, None, message))

    def _fail(self, stream_id: int, reason: str) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            stream.waiter.switch((time.perf_counter() - stream.start, None, reason))

    def _die(self, reason: str) -> None:
        if self.closed is not None:
            return
        self.closed = reason
        self._reader.stop()
        self._writer.stop()
        with contextlib.suppress(OSError):
            self._sock.close()
        streams, self._streams = self._streams, {}

        def fail() -> None:  # Waiter.throw only from the hub
            for stream in streams.values():
                stream.waiter.throw(WireGrpcError(reason))

        self._hub.loop.run_callback(fail)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._sock.close()


def _unpad(payload: bytearray, flags: int) -> bytearray:
    pad = payload[0]
    return payload[1 : len(payload) - pad]


def parse_answer(message: bytes) -> Any:
    """The ``ModelInferResponse`` in an answer's bytes."""
    from tritonclient.grpc import service_pb2

    return service_pb2.ModelInferResponse.FromString(message)
