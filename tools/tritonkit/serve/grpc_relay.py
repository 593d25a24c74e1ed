"""One client connection of the gRPC guard and its own HTTP/2 connection to Triton (loopback).

Frames pass between the two with their stream ids unchanged. From Triton to the client every frame is
relayed as bytes (DATA payloads as slices of what was read, never decoded) except header blocks,
written anew (:mod:`.grpc_wire`) so that the guard may add a refusal's trailers or drop a refused
stream's answer. From the client to Triton every frame is relayed as it came except DATA, taken as
slices of each read (never gathered into one buffer; a frame a read cuts goes on in the next): a
stream's messages are taken one at a time (:mod:`.grpc_stream`), each capped by its 5-byte prefix
before its bytes are read (and reserved against the connection's and the guard's budgets then),
gathered whole (Triton 2.51 parses a message it holds only part of: a partial message must never reach
it), inflated within the cap where compressed, and checked where it is a ``ModelInferRequest``
(:mod:`.grpc_checks`, which reads the pieces where they lie) before any of it goes. All goes within
Triton's flow-control windows (the guard is the receiver the client's windows count against; it
grants them as messages are taken). A refused call is answered with its
gRPC status and reset towards Triton; the connection carries on.
"""

from __future__ import annotations

import asyncio
import functools
import struct
import time
from typing import cast

import hpack

from tritonkit.serve import grpc_wire as w
from tritonkit.serve.grpc_checks import (
    INVALID_ARGUMENT,
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
    CallRefusedError,
    check_infer,
)
from tritonkit.serve.grpc_stream import ConfigMissingError, GrpcGuard, Piece, Stream, inflate, open_message
from tritonkit.serve.grpc_upstream import UpstreamSide as _UpstreamSide

__all__ = ["ClientSide", "ConfigMissingError"]

_SERVICE = b"/inference.GRPCInferenceService/"
_CHECKED = {_SERVICE + b"ModelInfer", _SERVICE + b"ModelStreamInfer"}
_U32 = struct.Struct(">I")
_SETTING = struct.Struct(">HI")
_CANCEL, _REFUSED_STREAM, _PROTOCOL_ERROR, _FRAME_SIZE, _CALM = 0x8, 0x7, 0x1, 0x6, 0xB
_MAX_BLOCK = 64 << 10
_REFUSED_KEPT = 4096
_SMALL = 16 << 10  # a message body this small goes to Triton with its prefix, one DATA frame
_DEFAULT_WINDOW = 65_535
#: the stream window the client is kept at, above what a message still needs
_STREAM_ROOM = 1 << 20


class ClientSide(asyncio.Protocol):
    """The client's connection; owns its link to Triton (:class:`_UpstreamSide`)."""

    def __init__(self, guard: GrpcGuard) -> None:
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self._connecting: asyncio.Future[None] | None = None
        self.up: _UpstreamSide | None = None
        self.buf = bytearray()  # the start of a frame the last read cut (but a DATA frame's payload)
        self.chunk = 0  # the size of the read being taken
        self.passing = 0  # payload bytes of the DATA frame begun that are still to come
        self.data_stream: Stream | None = None  # that frame's stream (None: its bytes are dropped)
        self.data_flags = 0
        self.preface = False
        self.streams: dict[int, Stream] = {}
        self.refused: dict[int, None] = {}
        self.last_id = 0
        self.block: bytearray | None = None  # a request header block being gathered (HEADERS + CONTINUATION)
        self.block_stream = 0
        self.block_flags = 0
        self.decoder = w.BlockDecoder(_MAX_BLOCK)
        self.table_size: int | None = None  # the client's SETTINGS_HEADER_TABLE_SIZE, for Triton's answers
        self.reserved = 0
        self.up_window = _DEFAULT_WINDOW  # Triton's connection window for our DATA
        self.up_initial = _DEFAULT_WINDOW  # Triton's SETTINGS_INITIAL_WINDOW_SIZE
        self.up_frame = 16_384  # Triton's SETTINGS_MAX_FRAME_SIZE
        self.granted = _DEFAULT_WINDOW  # the client's connection window as the guard sees it
        self.blocked: dict[int, None] = {}  # streams with bytes waiting for windows
        self.to_up: list[bytes | memoryview] = []
        self.to_client: list[bytes] = []
        self.up_paused = False
        self.closed = False
        self.draining = False

    # --- life cycle ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.guard.connections.add(self)
        if self.guard.draining or self.guard.held or len(self.guard.connections) > self.guard.max_connections:
            self.abort()
            return
        # until Triton's connection is up; uvloop still delivers the first read (its pause, made in
        # connection_made, precedes its start of reading), which _flush keeps until then
        self.transport.pause_reading()
        self._connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, up = await loop.create_connection(
                lambda: _UpstreamSide(self), "127.0.0.1", self.guard.upstream
            )
        except OSError:
            self.abort()
            return
        if self.closed:
            up.transport.close() if up.transport is not None else None
            return
        self.up = up
        if self.table_size is not None:  # the client's SETTINGS came first
            up.decoder.decoder.max_allowed_table_size = self.table_size
        assert self.transport is not None
        self._flush()  # what came before Triton's connection was up (uvloop reads despite the pause)
        self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.guard.connections.discard(self)
        for stream in list(self.streams.values()):
            self._forget(stream)
        if self.up is not None and self.up.transport is not None:
            self.up.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        if self.up is not None and self.up.transport is not None:
            self.up.transport.abort()

    def close_from_upstream(self) -> None:
        if not self.closed and self.transport is not None:
            self.transport.close()  # what was written still goes out

    def goaway(self, code: int, reason: bytes = b"") -> None:
        """Tell the client no stream past the last it opened is served, and why (draining: code 0)."""
        if self.transport is not None and not self.closed:
            self.transport.write(w.frame(w.GOAWAY, 0, 0, _U32.pack(self.last_id) + _U32.pack(code) + reason))
            self.draining = True

    def pause_writing(self) -> None:  # the client reads slowly: stop reading Triton's answers
        if self.up is not None and self.up.transport is not None:
            self.up.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.up is not None and self.up.transport is not None:
            self.up.transport.resume_reading()

    # --- frames from the client ---------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if not self.preface:
            buf = self.buf
            buf += data
            if len(buf) < len(w.PREFACE):
                if not w.PREFACE.startswith(bytes(buf)):
                    self.abort()
                return
            if not buf.startswith(w.PREFACE):
                self.abort()
                return
            self.preface = True
            self.to_up.append(w.PREFACE)
            self._grant_connection()
            data = bytes(buf[len(w.PREFACE) :])
            buf.clear()
        try:
            self._frames(data)
        except _ConnectionError as exc:
            self._fail(exc.code, exc.reason)
            return
        self._flush()

    def _frames(self, data: bytes) -> None:
        """The frames in one read; DATA payloads are taken as slices of it (a frame cut by the read's
        end goes on in the next), any other frame cut so is gathered in ``buf``."""
        view, pos, end, limit = memoryview(data), 0, len(data), self.up_frame
        self.chunk = end
        if self.passing:
            take = min(self.passing, end)
            self.passing -= take
            self._data_part(view[:take], not self.passing)
            pos = take
        elif self.buf:
            pos = self._gathered(view, limit)
        while end - pos >= 9:
            length = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2]
            if length > limit:
                raise _ConnectionError(_FRAME_SIZE, "frame over the peer's SETTINGS_MAX_FRAME_SIZE")
            kind, flags = data[pos + 3], data[pos + 4]
            stream_id = _U32.unpack_from(data, pos + 5)[0] & 0x7FFFFFFF
            if end - pos < 9 + length:
                if kind == w.DATA and not flags & w.PADDED:  # the rest comes in the next reads
                    self._data_start(flags, stream_id, length)
                    self.passing = length - (end - pos - 9)
                    self._data_part(view[pos + 9 :], False)
                    return
                break
            if kind == w.DATA and not flags & w.PADDED:
                self._data_start(flags, stream_id, length)
                self._data_part(view[pos + 9 : pos + 9 + length], True)
            else:
                self._frame(kind, flags, stream_id, view, pos, length)
            pos += 9 + length
        if pos < end:
            self.buf += view[pos:]

    def _gathered(self, view: memoryview, limit: int) -> int:
        """Go on with the frame ``buf`` holds the start of; returns the bytes of ``view`` it took."""
        buf, pos, end = self.buf, 0, len(view)
        if len(buf) < 9:
            pos = min(9 - len(buf), end)
            buf += view[:pos]
            if len(buf) < 9:
                return pos
        length = (buf[0] << 16) | (buf[1] << 8) | buf[2]
        if length > limit:
            raise _ConnectionError(_FRAME_SIZE, "frame over the peer's SETTINGS_MAX_FRAME_SIZE")
        kind, flags, stream_id = buf[3], buf[4], _U32.unpack_from(buf, 5)[0] & 0x7FFFFFFF
        if kind == w.DATA and not flags & w.PADDED:
            buf.clear()
            self._data_start(flags, stream_id, length)
            take = min(length, end - pos)
            self.passing = length - take
            self._data_part(view[pos : pos + take], not self.passing)
            return pos + take
        take = min(9 + length - len(buf), end - pos)
        buf += view[pos : pos + take]
        if len(buf) < 9 + length:
            return pos + take
        whole = bytes(buf)
        buf.clear()
        self.chunk = len(whole)
        self._frame(kind, flags, stream_id, memoryview(whole), 0, length)
        self.chunk = end
        return pos + take

    def _frame(
        self, kind: int, flags: int, stream_id: int, source: memoryview, pos: int, length: int
    ) -> None:
        if self.block is not None and kind != w.CONTINUATION:
            raise _ConnectionError(_PROTOCOL_ERROR, "a header block interrupted")
        if kind == w.DATA:  # a padded one (the others go by _data_start and _data_part)
            self._data(flags, stream_id, source[pos + 9 : pos + 9 + length])
            return
        whole = bytes(source[pos : pos + 9 + length])
        if kind in (w.HEADERS, w.CONTINUATION):
            self._header_frame(kind, flags, stream_id, whole)
        else:
            self._control_frame(kind, flags, stream_id, whole)

    def _header_frame(self, kind: int, flags: int, stream_id: int, whole: bytes) -> None:
        """A HEADERS or CONTINUATION frame: its fragment gathered into the block, the frame sent on."""
        if kind == w.HEADERS:
            self._headers_start(flags, stream_id, whole[9:])
            self.to_up.append(whole)
            if self.block is not None and flags & w.END_HEADERS:
                self._headers_end()
            return
        if self.block is None or stream_id != self.block_stream:
            raise _ConnectionError(_PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        self.block += whole[9:]
        if len(self.block) > _MAX_BLOCK:
            raise _ConnectionError(_CALM, "a header block over 64 KiB")
        self.to_up.append(whole)
        if flags & w.END_HEADERS:
            self._headers_end()

    def _control_frame(self, kind: int, flags: int, stream_id: int, whole: bytes) -> None:
        """SETTINGS (the header table size Triton's answers may use), WINDOW_UPDATE and RST_STREAM (not
        for a refused stream), PING, GOAWAY, PRIORITY: sent on. Other frame types (PUSH_PROMISE from a
        client, unknown extensions) are dropped (§4.1, §8.4)."""
        if kind == w.SETTINGS:
            if not flags & w.ACK:
                for at in range(9, len(whole) - 5, 6):
                    key, value = _SETTING.unpack_from(whole, at)
                    if key == 1:
                        self.table_size = value
                        if self.up is not None:
                            self.up.decoder.decoder.max_allowed_table_size = value
            self.to_up.append(whole)
        elif kind in (w.WINDOW_UPDATE, w.RST_STREAM):
            if stream_id in self.refused:
                return
            if kind == w.RST_STREAM and (stream := self.streams.get(stream_id)) is not None:
                self._forget(stream)
            self.to_up.append(whole)
        elif kind in (w.PING, w.GOAWAY, w.PRIORITY):
            self.to_up.append(whole)

    def _headers_start(self, flags: int, stream_id: int, payload: bytes) -> None:
        try:
            fragment = w.header_fragment(flags, payload)
        except ValueError as exc:
            raise _ConnectionError(_PROTOCOL_ERROR, str(exc)) from None
        self.block, self.block_stream, self.block_flags = bytearray(fragment), stream_id, flags
        if not flags & w.END_HEADERS and len(fragment) > _MAX_BLOCK:
            raise _ConnectionError(_CALM, "a header block over 64 KiB")

    def _headers_end(self) -> None:
        assert self.block is not None
        block, stream_id, flags = bytes(self.block), self.block_stream, self.block_flags
        self.block = None
        try:
            fields = self.decoder.decode(block)
        except hpack.HPACKError:
            raise _ConnectionError(0x9, "a header block HPACK cannot decode") from None
        if stream_id in self.refused:
            return
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from a client: not part of gRPC's requests
            self._refuse(stream, INVALID_ARGUMENT, "request trailers are not served")
            return
        if stream_id <= self.last_id or not stream_id & 1:
            raise _ConnectionError(_PROTOCOL_ERROR, "a stream id that is not new and odd")
        self.last_id = stream_id
        path = encoding = b""
        for name, value in fields:
            if name == b":path":
                path = value
            elif name == b"grpc-encoding":
                encoding = value
        stream = Stream(stream_id, path in _CHECKED, encoding, self.up_initial)
        self.streams[stream_id] = stream
        self.guard.in_flight += 1
        if flags & w.END_STREAM:
            stream.end_in = stream.end_sent = True
        if self.draining or self.guard.held:
            reason = self.guard.held or "the server is stopping"
            self._refuse(stream, UNAVAILABLE, reason, reset=_REFUSED_STREAM if self.draining else None)

    def _data(self, flags: int, stream_id: int, payload: memoryview) -> None:
        """A padded DATA frame, whole."""
        pad = payload[0] if len(payload) else 0
        if pad >= len(payload):
            raise _ConnectionError(_PROTOCOL_ERROR, "DATA padding past the frame")
        self._data_start(flags, stream_id, len(payload))
        self._data_part(payload[1 : len(payload) - pad], True)

    def _data_start(self, flags: int, stream_id: int, length: int) -> None:
        """A DATA frame of ``length`` payload bytes begins (flow control counts them all now)."""
        if self.block is not None:
            raise _ConnectionError(_PROTOCOL_ERROR, "a header block interrupted")
        self.granted -= length
        stream = self.streams.get(stream_id)
        if stream is None or stream.end_in:
            if stream_id > self.last_id:
                raise _ConnectionError(_PROTOCOL_ERROR, "DATA on a stream never opened")
            stream = None  # a refused or finished stream: its bytes are dropped (the window given back)
        else:
            stream.cwin -= length
        self.data_stream, self.data_flags = stream, flags

    def _data_part(self, body: memoryview, last: bool) -> None:
        """Bytes of the DATA frame begun (``last``: its end)."""
        stream = self.data_stream
        if stream is None:
            return
        if self.streams.get(stream.id) is not stream:  # refused by an earlier part
            self.data_stream = None
            return
        try:
            self._take(stream, body)
            if last and self.data_flags & w.END_STREAM:
                stream.end_in = True
                if stream.message is not None or stream.head:
                    raise CallRefusedError(INVALID_ARGUMENT, "the request ended inside a gRPC message")
        except CallRefusedError as exc:
            self.data_stream = None
            self._refuse(stream, exc.code, exc.message)
            return
        if last and not stream.end_in and stream.cwin < stream.need + _STREAM_ROOM // 2:
            grant = stream.need + _STREAM_ROOM - stream.cwin
            stream.cwin += grant
            self.to_client.append(w.frame(w.WINDOW_UPDATE, 0, stream.id, _U32.pack(grant)))
        self._send(stream)

    def _take(self, stream: Stream, body: memoryview) -> None:
        """Gather ``body`` into the stream's messages (as slices of what was read: one of under half its
        read is copied, so that a slice never holds much more than itself); each whole one is checked
        and queued for Triton."""
        at, size = 0, len(body)
        while at < size:
            if stream.message is None:
                take = min(5 - len(stream.head), size - at)
                stream.head += body[at : at + take]
                at += take
                if len(stream.head) < 5:
                    return
                self._open_message(stream)
                if stream.need:
                    continue
            else:
                take = min(stream.need, size - at)
                part = body[at : at + take]
                stream.message.append(part if 2 * take >= self.chunk else bytes(part))
                stream.need -= take
                at += take
            if not stream.need:
                assert stream.message is not None
                stream.pending.append(stream.message)
                stream.message = None
                self._deliver(stream)

    def _open_message(self, stream: Stream) -> None:
        _, length = open_message(stream.head, stream.encoding, self.guard.max_message_bytes)
        self._reserve(stream, length + 5)
        stream.message, stream.need, stream.head = [memoryview(bytes(stream.head))], length, bytearray()
        stream.started = time.monotonic()

    def _reserve(self, stream: Stream, size: int) -> None:
        if self.reserved + size > self.guard.max_connection_bytes:
            raise CallRefusedError(
                RESOURCE_EXHAUSTED,
                f"messages in flight on this connection hold over {self.guard.max_connection_bytes} bytes",
            )
        self.guard.take(size)
        self.reserved += size
        stream.reserved += size

    def _release(self, stream: Stream, size: int) -> None:
        size = min(size, stream.reserved)
        stream.reserved -= size
        self.reserved -= size
        self.guard.give(size)

    def _deliver(self, stream: Stream) -> None:
        """Check the stream's whole messages in order (a config fetch may hold them) and queue them."""
        while stream.pending and not stream.waiting:
            message = stream.pending[0]
            if stream.checked:
                try:
                    self._check(stream, message)
                except ConfigMissingError as missing:
                    stream.waiting = True
                    self.guard.fetch_config(missing.key, functools.partial(self._resume, stream))
                    return
            stream.pending.pop(0)
            if len(message) == 2 and len(message[1]) < _SMALL:  # the prefix and a small body: one frame
                stream.out.append(b"".join(message))
            else:
                stream.out.extend(message)
        if stream.end_in and not stream.pending:
            self._send(stream)

    def _resume(self, stream: Stream) -> None:
        stream.waiting = False
        if self.streams.get(stream.id) is not stream:
            return
        try:
            self._deliver(stream)
        except CallRefusedError as exc:
            self._refuse(stream, exc.code, exc.message)
        self._send(stream)
        self._flush()

    def _check(self, stream: Stream, message: list[Piece]) -> None:
        if message[0][0]:
            limit = self.guard.max_message_bytes
            reserve, release = (
                functools.partial(self._reserve, stream),
                functools.partial(self._release, stream),
            )
            check_infer(
                inflate(b"".join(message[1:]), stream.encoding, limit, reserve, release), self.guard.max_batch
            )
        else:
            check_infer(message[1:], self.guard.max_batch)

    # --- towards Triton -------------------------------------------------------------------------
    def _send(self, stream: Stream) -> None:
        """Queue what Triton's windows let through; END_STREAM once the client ended and all went."""
        if self.up_paused:
            self.blocked[stream.id] = None
            return
        out, to_up, frame_size = stream.out, self.to_up, self.up_frame
        done = stream.end_in and not stream.pending and not stream.waiting
        while out:
            room = min(self.up_window, stream.uwin, frame_size)
            if room <= 0:
                self.blocked[stream.id] = None
                return
            piece = out[0]
            size = len(piece)
            whole = size <= room
            chunk = piece if whole else piece[:room]
            sent = size if whole else room
            end = done and whole and len(out) == 1
            to_up.append(w.FRAME.pack(sent >> 8, sent & 0xFF, w.DATA, int(end), stream.id))
            to_up.append(chunk)
            self.up_window -= sent
            stream.uwin -= sent
            self._release(stream, sent)
            if whole:
                out.pop(0)
            else:
                out[0] = piece[room:]
            if end:
                stream.end_sent = True
        if done and not stream.end_sent:
            to_up.append(w.frame(w.DATA, w.END_STREAM, stream.id))
            stream.end_sent = True
        self.blocked.pop(stream.id, None)

    def unblock(self) -> None:
        for stream_id in list(self.blocked):
            stream = self.streams.get(stream_id)
            self.blocked.pop(stream_id, None)
            if stream is not None:
                self._send(stream)
        self._flush()

    def _grant_connection(self) -> None:
        target = self.guard.max_connection_bytes + _STREAM_ROOM
        if self.granted < target // 2:
            self.to_client.append(w.frame(w.WINDOW_UPDATE, 0, 0, _U32.pack(target - self.granted)))
            self.granted = target

    def _flush(self) -> None:
        self._grant_connection()
        if self.up is None or self.up.transport is None:
            return  # Triton's connection is not up yet: kept for _connect's flush
        if self.to_up:
            self.up.transport.writelines(self.to_up)
            self.to_up = []
        if self.to_client and self.transport is not None and self.up is not None and self.up.can_inject:
            self.transport.writelines(self.to_client)
            self.to_client = []

    # --- refusals -------------------------------------------------------------------------------
    def _refuse(self, stream: Stream, code: int, message: str, *, reset: int | None = None) -> None:
        """Answer the call with its status (or RST_STREAM ``reset``), reset it towards Triton, forget it."""
        self.guard.refused += 1
        if reset is not None:
            self.to_client.append(w.frame(w.RST_STREAM, 0, stream.id, _U32.pack(reset)))
        else:
            block = w.trailers(code, message, with_head=not stream.answered)
            self.to_client.append(w.frame(w.HEADERS, w.END_HEADERS | w.END_STREAM, stream.id, block))
        self.to_up.append(w.frame(w.RST_STREAM, 0, stream.id, _U32.pack(_CANCEL)))
        self._forget(stream)
        self.refused[stream.id] = None
        if len(self.refused) > _REFUSED_KEPT:
            del self.refused[next(iter(self.refused))]

    def _forget(self, stream: Stream) -> None:
        if self.streams.pop(stream.id, None) is not None:
            self.guard.in_flight -= 1
        self._release(stream, stream.reserved)
        stream.out, stream.pending, stream.message = [], [], None
        self.blocked.pop(stream.id, None)

    def answered(self, stream_id: int, ended: bool) -> bool:
        """Triton sent a header block on the stream; False where the guard refused it (drop the block)."""
        if stream_id in self.refused:
            return False
        stream = self.streams.get(stream_id)
        if stream is not None:
            stream.answered = True
            if ended:
                self._forget(stream)
        return True

    def ended_by_upstream(self, stream_id: int) -> bool:
        """Triton reset the stream; False where the guard refused it already."""
        if stream_id in self.refused:
            return False
        if (stream := self.streams.get(stream_id)) is not None:
            self._forget(stream)
        return True

    def sweep(self, now: float, timeout: float) -> None:
        """Refuse the calls whose message has not come whole within ``timeout`` seconds of its first byte."""
        for stream in list(self.streams.values()):
            if stream.message is not None and now - stream.started > timeout:
                self._refuse(
                    stream, RESOURCE_EXHAUSTED, f"a gRPC message did not arrive whole within {timeout:g} s"
                )
        self._flush()

    def _fail(self, code: int, reason: str) -> None:
        self.goaway(code, reason.encode())
        self._flush()
        if self.transport is not None:
            self.transport.close()


class _ConnectionError(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason
