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

The gevent side (the socket, waiting, gRPC status) is :mod:`.grpc_hub`'s, shared with :mod:`.grpc_h2`:
every user of a process multiplexes its requests on one connection; frames queued in one loop turn
leave in one ``send``; one I/O watcher reads answers and wakes finished greenlets from the hub.
"""

from __future__ import annotations

import contextlib
import struct
from typing import ClassVar

from gevent.hub import Waiter

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.transports.hub import PATH, GrpcResult, HubConnection, Stream, grpc_body, parse_answer

__all__ = ["WireGrpcConnection", "WireGrpcError", "parse_answer"]

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
#: (seconds, response message bytes or None, error text or None)
WireResult = GrpcResult


class WireGrpcError(LoadTestError):
    """The HTTP/2 connection to Triton's gRPC endpoint failed or closed."""


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return _FRAME.pack(size >> 8, size & 0xFF, kind, flags, stream_id) + payload


class WireGrpcConnection(HubConnection):
    """One HTTP/2 connection carrying the unary ``ModelInfer`` calls of every user of a process."""

    error: ClassVar[type[LoadTestError]] = WireGrpcError

    def usable(self) -> bool:
        return self.closed is None and self._next_id <= _MAX_STREAM_ID - 2

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        import hpack

        super().__init__(url, timeout)
        # A stateless header block (never-indexed literals, static-table references): the same
        # bytes are valid for every request, whatever the server's decoder table holds.
        encoder = hpack.Encoder()
        fields = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", PATH),
            (":authority", url),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        self._header_block = encoder.encode([hpack.NeverIndexedHeaderTuple(k, v) for k, v in fields])
        self._decoder = hpack.Decoder()
        self._decoder.max_allowed_table_size = 1 << 16
        self._decoded: dict[bytes, list[tuple[bytes, bytes]]] = {}
        self._next_id = 1
        self._blocked: list[int] = []
        self._send_window = _DEFAULT_WINDOW  # connection-level, for our DATA
        self._initial_stream_window = _DEFAULT_WINDOW
        self._max_frame = 16_384
        self._received = 0  # DATA bytes received since our last connection WINDOW_UPDATE
        self._inbox = bytearray()
        self._continuation: tuple[int, int, bytearray] | None = None  # (stream, flags, block so far)
        self._outgoing += (
            _PREFACE
            + _frame(_SETTINGS, 0, 0, struct.pack(">HLHL", 0x2, 0, 0x4, _MAX_WINDOW))  # no push; open windows
            + _frame(_WINDOW_UPDATE, 0, 0, struct.pack(">L", _MAX_WINDOW - _DEFAULT_WINDOW))
        )
        self._start()

    # --- user side ---------------------------------------------------------------------------
    def infer(self, message: bytes, timeout: float | None = None) -> WireResult:
        """Send one serialized ``ModelInferRequest``; wait cooperatively for (seconds, answer, error)."""
        if self.closed is not None:
            raise WireGrpcError(self.closed)
        if self._next_id > _MAX_STREAM_ID:
            raise WireGrpcError("the HTTP/2 connection ran out of stream ids; expected a new connection")
        stream_id = self._next_id
        self._next_id += 2
        waiter: Waiter[WireResult] = Waiter()
        stream = self._streams[stream_id] = Stream(waiter, grpc_body(message), self._initial_stream_window)
        self._outgoing += _frame(_HEADERS, _END_HEADERS, stream_id, self._header_block)
        self._send_body(stream_id, stream)
        return self._wait(stream_id, waiter, timeout)

    def _cancel(self, stream_id: int) -> None:
        self._outgoing += _frame(_RST_STREAM, 0, stream_id, struct.pack(">L", 0x8))

    def close(self) -> None:
        if self.closed is None:
            with contextlib.suppress(OSError):
                self._sock.send(_frame(_GOAWAY, 0, 0, struct.pack(">LL", 0, 0)))
            self._die("the connection was closed")

    # --- sending -----------------------------------------------------------------------------
    def _send_body(self, stream_id: int, stream: Stream) -> None:
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

    # --- receiving ---------------------------------------------------------------------------
    def _on_data(self, data: bytes) -> None:
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


def _unpad(payload: bytearray, flags: int) -> bytearray:
    pad = payload[0]
    return payload[1 : len(payload) - pad]
