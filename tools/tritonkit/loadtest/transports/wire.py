"""The gRPC transport: unary ``ModelInfer`` calls framed by hand on one HTTP/2 connection.

Why by hand: a general HTTP/2 state machine (the ``h2`` library) costs about twice the HTTP
user's CPU per request in pure Python; a gRPC client needs a small, fixed subset of HTTP/2
(RFC 9113) and that subset is cheap: header blocks are built once per connection and timeout and
only the stream id changes; answers are three frames whose 9-byte headers are read with
``struct``. Header blocks are decoded by ``hpack``, with the decoded fields cached while a block
consists of indexed fields only, which cannot change the decoder's table (RFC 7541 §6.1): after
the first answers Triton's headers and trailers are exactly that. The cache is dropped whenever a
block with literals (which may change the table) is decoded.

What is implemented (RFC 9113): the connection preface and SETTINGS (acknowledged;
MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE and MAX_FRAME_SIZE honoured, also when a later
SETTINGS changes them: calls beyond the peer's stream limit wait in a queue and open as streams
close, §5.1.2); flow control both ways (a 2^31-1 receive window, replenished; request bodies split
into frames no larger than the peer's MAX_FRAME_SIZE and held back while its windows are short);
frame-size checks (a frame over our 16,384-byte limit, or a fixed-size frame of the wrong size,
is a FRAME_SIZE_ERROR connection error, §4.2); PING answers; RST_STREAM (the call fails with the
gRPC status gRPC maps the error code to; REFUSED_STREAM is sent again); GOAWAY (§6.8): the
connection takes no new calls, streams up to the last-stream-id finish, streams above it and calls
still queued were never processed and are sent again on a fresh connection; a GOAWAY with an error
code fails the streams still open, as the server closes right after it); CONTINUATION frames,
padding, the PRIORITY flag; the ``grpc-timeout`` header (gRPC's ``PROTOCOL-HTTP2.md``); ``close()``
queues its GOAWAY behind the frames already queued. Not implemented (not used by a unary client):
server push (disabled in our SETTINGS), priorities, stream ids beyond 2^31 (the connection is
replaced before that).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import ClassVar

import hpack
from gevent.hub import Waiter

from tritonkit.client.protocol import GRPC_INFER_PATH, grpc_timeout, http2_error_name
from tritonkit.errors import LoadTestError
from tritonkit.loadtest.transports.hub import (
    CANCELLED,
    INTERNAL,
    PERMISSION_DENIED,
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
    GrpcResult,
    HubConnection,
    Stream,
)

__all__ = ["WireGrpcConnection", "WireGrpcError"]

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_FRAME = struct.Struct(">HBBBL")  # length (24 bits as 16 + 8), type, flags, stream id
_DATA, _HEADERS, _PRIORITY_FRAME, _RST_STREAM, _SETTINGS = 0, 1, 2, 3, 4
_PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = 6, 7, 8, 9
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_MAX_WINDOW = (1 << 31) - 1
_DEFAULT_WINDOW = 65_535
_MAX_STREAM_ID = (1 << 31) - 1
#: the largest frame we accept: we never raise SETTINGS_MAX_FRAME_SIZE from its initial value
_OUR_MAX_FRAME = 16_384
#: frame types whose payload has one fixed size (§6.3, 6.4, 6.7, 6.9)
_FIXED_SIZE = {_PRIORITY_FRAME: 5, _RST_STREAM: 4, _PING: 8, _WINDOW_UPDATE: 4}
_PROTOCOL_ERROR, _FLOW_CONTROL_ERROR, _FRAME_SIZE_ERROR, _REFUSED_STREAM, _CANCEL = 1, 3, 6, 7, 8
#: RST_STREAM error code → gRPC status (gRPC's ``PROTOCOL-HTTP2.md``); others are INTERNAL
_RST_STATUS = {
    _CANCEL: CANCELLED,
    11: RESOURCE_EXHAUSTED,
    12: PERMISSION_DENIED,
    _REFUSED_STREAM: UNAVAILABLE,
}
#: times one call is sent again after the server declined it unprocessed
_RESENDS = 3


class WireGrpcError(LoadTestError):
    """The HTTP/2 connection to Triton's gRPC endpoint failed or closed, or a call timed out."""


class _ConnectionError(Exception):
    """An HTTP/2 connection error (§5.4.1): the code our GOAWAY carries, and why."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return _FRAME.pack(size >> 8, size & 0xFF, kind, flags, stream_id) + payload


class WireGrpcConnection(HubConnection):
    """One HTTP/2 connection carrying the unary ``ModelInfer`` calls of every user of a process."""

    error: ClassVar[type[LoadTestError]] = WireGrpcError

    def usable(self) -> bool:
        return self.closed is None and not self._retiring and self._next_id <= _MAX_STREAM_ID - 2

    def __init__(self, url: str, timeout: float = 10.0) -> None:

        super().__init__(url, timeout)
        self._fields = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", GRPC_INFER_PATH),
            (":authority", url),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        self._blocks: dict[float | None, bytes] = {}
        self._decoder = hpack.Decoder()
        self._decoder.max_allowed_table_size = 1 << 16
        self._decoded: dict[bytes, list[tuple[bytes, bytes]]] = {}
        self._next_id = 1
        self._max_streams = 1 << 32  # SETTINGS_MAX_CONCURRENT_STREAMS: unlimited until told
        self._blocked: list[Stream] = []  # streams whose body waits for window
        self._send_window = _DEFAULT_WINDOW  # connection-level, for our DATA
        self._initial_stream_window = _DEFAULT_WINDOW
        self._max_frame = 16_384  # the peer's SETTINGS_MAX_FRAME_SIZE
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
    def infer(self, message: bytes, timeout: float | None = None) -> GrpcResult:
        """Send one serialized ``ModelInferRequest``; wait cooperatively for its :class:`GrpcResult`.

        A call the server declined unprocessed (GOAWAY above its last-stream-id, REFUSED_STREAM)
        is sent again on the process's fresh connection, within the same timeout.
        """
        body = b"\x00" + len(message).to_bytes(4, "big") + message  # one uncompressed gRPC message
        result = self._call(body, timeout, self._blocks.get(timeout) or self._block(timeout))
        if not isinstance(result, float):
            return result
        start = result  # rare: the server went away before processing the call
        for _ in range(_RESENDS):
            left = None if timeout is None else timeout - (time.perf_counter() - start)
            if left is not None and left <= 0:
                raise WireGrpcError(f"no answer from Triton within {timeout} s")
            connection = type(self).shared(self.url)
            result = connection._call(body, left, connection._block(left, cache=False))
            if not isinstance(result, float):
                return result._replace(seconds=time.perf_counter() - start)
        raise WireGrpcError(
            f"Triton declined the call unprocessed {_RESENDS + 1} times (GOAWAY or REFUSED_STREAM)"
        )

    def _block(self, timeout: float | None, cache: bool = True) -> bytes:
        """The request's header block: never-indexed literals and static-table references, valid
        whatever the server's decoder table holds; cached per timeout."""
        block = self._blocks.get(timeout)
        if block is None:
            fields = (
                self._fields if timeout is None else [*self._fields, ("grpc-timeout", grpc_timeout(timeout))]
            )
            block = hpack.Encoder().encode([hpack.NeverIndexedHeaderTuple(k, v) for k, v in fields])
            if cache:
                self._blocks[timeout] = block
        return block

    def _call(self, body: bytes, timeout: float | None, block: bytes) -> GrpcResult | float:
        """The call's result, or when it must be sent again on a fresh connection, its start time."""
        if self.closed is not None:
            raise WireGrpcError(self.closed)
        if self._retiring or self._next_id > _MAX_STREAM_ID:
            return time.perf_counter()  # draining after GOAWAY, or out of ids: a fresh connection takes it
        waiter: Waiter[GrpcResult | None] = Waiter()
        stream = Stream(waiter, body, block)
        if len(self._streams) < self._max_streams and not self._pending:
            self._open(stream)
        else:
            self._pending.append(stream)
        result = self._wait(stream, timeout)
        return stream.start if result is None else result

    def _open(self, stream: Stream) -> None:
        stream_id = stream.id = self._next_id
        self._next_id += 2
        stream.window = self._initial_stream_window
        self._streams[stream_id] = stream
        block = stream.block
        if len(block) <= self._max_frame:
            self._outgoing += _frame(_HEADERS, _END_HEADERS, stream_id, block)
        else:  # larger than the peer's frames: HEADERS + CONTINUATION (§6.10)
            size = self._max_frame
            chunks = [block[at : at + size] for at in range(0, len(block), size)]
            self._outgoing += _frame(_HEADERS, 0, stream_id, chunks[0])
            for index, chunk in enumerate(chunks[1:], 2):
                self._outgoing += _frame(
                    _CONTINUATION, _END_HEADERS if index == len(chunks) else 0, stream_id, chunk
                )
        self._send_body(stream)

    def _open_pending(self) -> None:
        """Open queued calls while the peer's stream limit has room (§5.1.2)."""
        while self._pending and len(self._streams) < self._max_streams:
            if self._next_id > _MAX_STREAM_ID:
                self._resend(self._queued())
                break
            self._open(self._pending.popleft())
        self._schedule_flush()

    def _give_up(self, stream: Stream) -> None:
        if stream.id == 0:
            self._pending.remove(stream)
        elif self._streams.get(stream.id) is stream:
            self._forget(stream.id)
            self._outgoing += _frame(_RST_STREAM, 0, stream.id, struct.pack(">L", _CANCEL))

    def close(self) -> None:
        """Close now: queued frames leave first, then a GOAWAY; calls still waiting fail."""
        if self.closed is None:
            self._outgoing += _frame(_GOAWAY, 0, 0, struct.pack(">LL", 0, 0))
            self._die("the connection was closed", linger=True)

    # --- sending -----------------------------------------------------------------------------
    def _send_body(self, stream: Stream) -> None:
        while stream.body:
            room = min(self._send_window, stream.window, self._max_frame)
            if room <= 0:
                self._blocked.append(stream)
                return
            chunk, stream.body = stream.body[:room], stream.body[room:]
            self._send_window -= len(chunk)
            stream.window -= len(chunk)
            self._outgoing += _frame(_DATA, 0 if stream.body else _END_STREAM, stream.id, chunk)

    def _resume_blocked(self) -> None:
        blocked, self._blocked = self._blocked, []
        for stream in blocked:
            if self._streams.get(stream.id) is stream:
                self._send_body(stream)

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
                if length > _OUR_MAX_FRAME:
                    raise _ConnectionError(
                        _FRAME_SIZE_ERROR, f"a frame of {length} bytes, over the {_OUR_MAX_FRAME} allowed"
                    )
                end = offset + 9 + length
                if end > size:
                    break
                self._on_frame(kind, flags, stream_id & _MAX_STREAM_ID, inbox[offset + 9 : end])
                offset = end
                if self.closed is not None:
                    return
        except _ConnectionError as exc:
            self._connection_error(exc.code, str(exc))
            return
        except Exception as exc:  # a header block hpack cannot decode, ...
            self._connection_error(_PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}")
            return
        del inbox[:offset]
        if self._received > _MAX_WINDOW // 2:
            self._outgoing += _frame(_WINDOW_UPDATE, 0, 0, struct.pack(">L", self._received))
            self._received = 0
        if self._outgoing:
            self._schedule_flush()

    def _connection_error(self, code: int, reason: str) -> None:
        """Tell the server why in a GOAWAY (§5.4.1), then fail every call."""
        self._outgoing += _frame(_GOAWAY, 0, 0, struct.pack(">LL", 0, code))
        self._die(
            f"HTTP/2 protocol error reading Triton's answer: {http2_error_name(code)}: {reason}", linger=True
        )

    def _on_frame(self, kind: int, flags: int, stream_id: int, payload: bytearray) -> None:
        if self._continuation is not None and kind != _CONTINUATION:
            raise _ConnectionError(_PROTOCOL_ERROR, f"frame type {kind} inside a header block")
        if kind == _DATA:
            self._received += len(payload)
            stream = self._streams.get(stream_id)
            if stream is not None:
                stream.data += _unpad(payload) if flags & _PADDED else payload
            if flags & _END_STREAM:
                self._finish(stream_id)
            return
        if kind == _HEADERS:
            block = _unpad(payload) if flags & _PADDED else payload
            if flags & _PRIORITY:
                block = block[5:]
            if flags & _END_HEADERS:
                self._on_headers(stream_id, flags, bytes(block))
            else:
                self._continuation = (stream_id, flags, bytearray(block))
            return
        if kind in _FIXED_SIZE and len(payload) != _FIXED_SIZE[kind]:
            raise _ConnectionError(_FRAME_SIZE_ERROR, f"frame type {kind} of {len(payload)} bytes")
        handler = _CONTROL.get(kind)
        if handler is not None:  # other frame types are ignored (§4.1)
            handler(self, flags, stream_id, payload)

    # Frames other than DATA and HEADERS: each read by its own method, found in ``_CONTROL`` below.
    def _on_continuation(self, flags: int, stream_id: int, payload: bytearray) -> None:
        """The rest of a header block (§6.10); the last piece hands the whole block on."""
        if self._continuation is None or self._continuation[0] != stream_id:
            raise _ConnectionError(_PROTOCOL_ERROR, "CONTINUATION frame without a HEADERS frame before it")
        self._continuation[2].extend(payload)
        if flags & _END_HEADERS:
            first_stream, first_flags, block = self._continuation
            self._continuation = None
            self._on_headers(first_stream, first_flags, bytes(block))

    def _on_window_update(self, flags: int, stream_id: int, payload: bytearray) -> None:
        """More room to send, on the connection or one stream (§6.9); held-back bodies go on."""
        (increment,) = struct.unpack_from(">L", payload)
        increment &= _MAX_WINDOW
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > _MAX_WINDOW:
                raise _ConnectionError(_FLOW_CONTROL_ERROR, "connection window over 2^31-1")
        elif (stream := self._streams.get(stream_id)) is not None:
            stream.window += increment
        if self._blocked:
            self._resume_blocked()

    def _on_settings_frame(self, flags: int, stream_id: int, payload: bytearray) -> None:
        """The peer's SETTINGS (§6.5); an acknowledgement of ours carries nothing to apply."""
        if not flags & _ACK:
            self._on_settings(payload)

    def _on_ping(self, flags: int, stream_id: int, payload: bytearray) -> None:
        """A PING is answered with the same payload (§6.7); an answer to ours needs nothing."""
        if not flags & _ACK:
            self._outgoing += _frame(_PING, _ACK, 0, bytes(payload))

    def _on_rst_stream(self, flags: int, stream_id: int, payload: bytearray) -> None:
        """The server reset a stream (§6.4): sent again when refused unprocessed, else failed."""
        (code,) = struct.unpack_from(">L", payload)
        if code == _REFUSED_STREAM:  # not processed (§8.7): send it again
            stream = self._forget(stream_id)
            if stream is not None:
                self._resend([stream])
        else:
            status = _RST_STATUS.get(code, INTERNAL)
            self._fail(stream_id, status, f"Triton reset the stream (HTTP/2 {http2_error_name(code)})")

    def _on_goaway_frame(self, flags: int, stream_id: int, payload: bytearray) -> None:
        """A GOAWAY's last-stream-id, error code and debug text, handed to :meth:`_on_goaway`."""
        if len(payload) < 8:
            raise _ConnectionError(_FRAME_SIZE_ERROR, f"GOAWAY of {len(payload)} bytes")
        last_id, code = struct.unpack_from(">LL", payload)
        self._on_goaway(last_id & _MAX_STREAM_ID, code, bytes(payload[8:]).decode(errors="replace"))

    def _on_settings(self, payload: bytearray) -> None:
        if len(payload) % 6:
            raise _ConnectionError(_FRAME_SIZE_ERROR, f"SETTINGS of {len(payload)} bytes")
        for at in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HL", payload, at)
            if key == 0x3:  # MAX_CONCURRENT_STREAMS: new streams wait below it (§5.1.2)
                self._max_streams = value
            elif key == 0x4:  # INITIAL_WINDOW_SIZE: applies to open streams too (§6.9.2)
                if value > _MAX_WINDOW:
                    raise _ConnectionError(_FLOW_CONTROL_ERROR, f"INITIAL_WINDOW_SIZE {value}")
                delta = value - self._initial_stream_window
                self._initial_stream_window = value
                for stream in self._streams.values():
                    stream.window += delta
            elif key == 0x5:
                if not 16_384 <= value < 1 << 24:
                    raise _ConnectionError(_PROTOCOL_ERROR, f"MAX_FRAME_SIZE {value}")
                self._max_frame = value
        self._outgoing += _frame(_SETTINGS, _ACK, 0)
        if self._blocked:
            self._resume_blocked()
        if self._pending:
            self._open_pending()

    def _on_goaway(self, last_id: int, code: int, detail: str) -> None:
        """The server stops taking streams (§6.8): those above ``last_id`` were never processed."""
        self._retiring = True
        unprocessed = [s for sid, s in self._streams.items() if sid > last_id]
        for stream in unprocessed:
            del self._streams[stream.id]
        self._resend(unprocessed + self._queued())
        if code:  # an error: the server closes now, streams still open get no answer
            text = f": {detail}" if detail else ""
            self._die(f"Triton ended the HTTP/2 connection (GOAWAY {http2_error_name(code)}{text})")
        elif not self._streams:
            self.close()

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


#: frame type → its reader, for the frames ``_on_frame`` does not read itself
_CONTROL: dict[int, Callable[[WireGrpcConnection, int, int, bytearray], None]] = {
    _CONTINUATION: WireGrpcConnection._on_continuation,
    _WINDOW_UPDATE: WireGrpcConnection._on_window_update,
    _SETTINGS: WireGrpcConnection._on_settings_frame,
    _PING: WireGrpcConnection._on_ping,
    _RST_STREAM: WireGrpcConnection._on_rst_stream,
    _GOAWAY: WireGrpcConnection._on_goaway_frame,
}


def _unpad(payload: bytearray) -> bytearray:
    pad = payload[0] if payload else 0
    if not payload or pad >= len(payload):
        raise _ConnectionError(_PROTOCOL_ERROR, "padding as long as the frame")
    return payload[1 : len(payload) - pad]
