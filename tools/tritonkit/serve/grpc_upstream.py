"""The gRPC guard's connection to Triton: frames from Triton relayed to the client (:mod:`.grpc_relay`).

DATA frames go to the client as slices of what was read, their payload never gathered nor decoded; a
refused stream's are dropped and their bytes given back to Triton's connection window. Header blocks
are decoded (the guard's decoder follows Triton's encoder) and written anew without the dynamic table
(:func:`.grpc_wire.encode_block`). SETTINGS, PING and GOAWAY pass as they are; Triton's WINDOW_UPDATEs
and SETTINGS are applied to the guard's own sending (it sends the client's checked messages).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping
from typing import Protocol, cast

import hpack

from tritonkit.serve import grpc_wire as w

__all__ = ["UpstreamSide"]

_U32 = struct.Struct(">I")
_SETTING = struct.Struct(">HI")
_MAX_BLOCK = 64 << 10
_CLIENT_FRAME = 16_384  # every client takes frames this large (RFC 9113 §4.2)


class _Stream(Protocol):
    uwin: int


class _Owner(Protocol):
    transport: asyncio.Transport | None
    to_client: list[bytes]
    refused: dict[int, None]
    up_window: int
    up_initial: int
    up_frame: int
    up_paused: bool
    decoder: w.BlockDecoder

    @property
    def streams(self) -> Mapping[int, _Stream]: ...
    def answered(self, stream_id: int, ended: bool) -> bool: ...
    def ended_by_upstream(self, stream_id: int) -> bool: ...
    def unblock(self) -> None: ...
    def close_from_upstream(self) -> None: ...


class UpstreamSide(asyncio.Protocol):
    """Reads Triton's frames for one client connection (``owner``)."""

    def __init__(self, owner: _Owner) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.decoder = w.BlockDecoder(_MAX_BLOCK)
        self.head = bytearray()  # a frame header as it comes
        self.passing = 0  # payload bytes of a relayed DATA frame still to come
        self.skipping = 0  # payload bytes of a dropped DATA frame still to come
        self.control: bytearray | None = None  # the payload of another frame, gathered whole
        self.need = 0
        self.kind = self.flags = self.stream_id = 0
        self.header = b""
        self.block: bytearray | None = None
        self.block_stream = 0
        self.block_end = False
        self.settings_seen = False  # Triton's first SETTINGS went to the client: the guard may write too
        self.credit = 0

    @property
    def can_inject(self) -> bool:
        """Whether the guard's own frames may go to the client now (between Triton's frames)."""
        return self.settings_seen and not self.passing and self.block is None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.close_from_upstream()

    def pause_writing(self) -> None:  # Triton reads slowly: stop reading the client
        self.owner.up_paused = True
        if self.owner.transport is not None:
            self.owner.transport.pause_reading()

    def resume_writing(self) -> None:
        self.owner.up_paused = False
        if self.owner.transport is not None:
            self.owner.transport.resume_reading()
        self.owner.unblock()

    def _gather_control(self, out: list[bytes | memoryview], data: bytes, view: memoryview, at: int) -> int:
        """The next piece of a non-DATA frame's payload from ``data`` at ``at`` (the whole payload taken
        as one slice when this read holds it); the frame handled once whole. Returns where reading goes on."""
        assert self.control is not None
        take = min(self.need, len(data) - at)
        if not self.control and take == self.need:  # the whole payload in this read
            payload: bytes | None = data[at : at + take]
        else:
            self.control += view[at : at + take]
            payload = None
        self.need -= take
        if not self.need:
            self._control(out, payload)
        return at + take

    def _gather_head(self, out: list[bytes | memoryview], view: memoryview, at: int) -> int:
        """The next piece of a frame header cut by the end of a read; the frame begun once its 9 bytes are in."""
        take = min(9 - len(self.head), len(view) - at)
        self.head += view[at : at + take]
        if len(self.head) == 9:
            header, self.head = bytes(self.head), bytearray()
            self._frame_head(out, header)
        return at + take

    def data_received(self, data: bytes) -> None:
        view, at, size = memoryview(data), 0, len(data)
        out: list[bytes | memoryview] = []
        try:
            while at < size:
                if self.passing:
                    take = min(self.passing, size - at)
                    out.append(view[at : at + take])
                    at += take
                    self.passing -= take
                    if not self.passing:
                        self._injected(out)
                    continue
                if self.skipping:
                    take = min(self.skipping, size - at)
                    at += take
                    self.skipping -= take
                    continue
                if self.control is not None:
                    at = self._gather_control(out, data, view, at)
                    continue
                if not self.head and size - at >= 9:  # the whole frame header in this read
                    self._frame_head(out, data[at : at + 9])
                    at += 9
                    continue
                at = self._gather_head(out, view, at)
        except (hpack.HPACKError, ValueError):
            if self.transport is not None:
                self.transport.abort()
            return
        if out and self.owner.transport is not None:
            self.owner.transport.writelines(out)
        if self.credit and self.transport is not None:
            self.transport.write(w.frame(w.WINDOW_UPDATE, 0, 0, _U32.pack(self.credit)))
            self.credit = 0

    def _injected(self, out: list[bytes | memoryview]) -> None:
        if self.owner.to_client and self.can_inject:
            out.extend(self.owner.to_client)
            self.owner.to_client = []

    def _frame_head(self, out: list[bytes | memoryview], header: bytes) -> None:
        high, low, kind, flags, stream_id = w.FRAME.unpack(header)
        length, stream_id = (high << 8) | low, stream_id & 0x7FFFFFFF
        if kind == w.DATA:
            if stream_id in self.owner.refused:
                self.skipping, self.credit = length, self.credit + length
                return
            if flags & w.END_STREAM:
                self.owner.answered(stream_id, True)
            out.append(header)
            self.passing = length
            if not length:
                self._injected(out)
            return
        self.kind, self.flags, self.stream_id, self.header = kind, flags, stream_id, header
        self.control, self.need = bytearray(), length
        if not length:
            self._control(out)

    def _control(self, out: list[bytes | memoryview], payload: bytes | None = None) -> None:
        if payload is None:
            payload = bytes(self.control or b"")
        self.control = None
        kind, flags, stream_id, owner = self.kind, self.flags, self.stream_id, self.owner
        if kind in (w.HEADERS, w.CONTINUATION):
            self._header_block(out, kind, flags, stream_id, payload)
            return
        if kind == w.SETTINGS:
            if not flags & w.ACK:
                self._settings(payload)
            out.append(self.header + payload)
            if not self.settings_seen:
                self.settings_seen = True
            self._injected(out)
        elif kind == w.WINDOW_UPDATE and len(payload) == 4:
            increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
            if stream_id == 0:
                owner.up_window += increment
            elif (stream := owner.streams.get(stream_id)) is not None:
                stream.uwin += increment
            owner.unblock()
        elif kind == w.RST_STREAM:
            if owner.ended_by_upstream(stream_id):
                out.append(self.header + payload)
        elif kind in (w.PING, w.GOAWAY):
            out.append(self.header + payload)
        elif kind == w.PUSH_PROMISE:
            raise ValueError("PUSH_PROMISE from Triton")
        self._injected(out)

    def _header_block(
        self, out: list[bytes | memoryview], kind: int, flags: int, stream_id: int, payload: bytes
    ) -> None:
        """A HEADERS or CONTINUATION payload gathered into the block (at most 64 KiB), re-encoded for the
        client once the block ends."""
        if kind == w.HEADERS:
            self.block = bytearray(w.header_fragment(flags, payload))
            self.block_stream, self.block_end = stream_id, bool(flags & w.END_STREAM)
        elif self.block is None or stream_id != self.block_stream:
            raise ValueError("CONTINUATION without its HEADERS")
        else:
            self.block += payload
        if len(self.block) > _MAX_BLOCK:
            raise ValueError("a header block over 64 KiB")
        if flags & w.END_HEADERS:
            self._headers_end(out)

    def _settings(self, payload: bytes) -> None:
        owner = self.owner
        for at in range(0, len(payload) - 5, 6):
            key, value = _SETTING.unpack_from(payload, at)
            if key == 4 and value <= 0x7FFFFFFF:  # SETTINGS_INITIAL_WINDOW_SIZE: every stream's window moves
                delta, owner.up_initial = value - owner.up_initial, value
                for stream in owner.streams.values():
                    stream.uwin += delta
            elif key == 5 and 16_384 <= value < 1 << 24:
                owner.up_frame = value
            elif key == 1:  # the size the client's encoder may use (its blocks pass as they are)
                owner.decoder.decoder.max_allowed_table_size = value
        owner.unblock()

    def _headers_end(self, out: list[bytes | memoryview]) -> None:
        assert self.block is not None
        block, self.block = bytes(self.block), None
        encoded = self.decoder.recode(block)  # always: the guard's decoder must follow Triton's encoder
        stream_id, end = self.block_stream, self.block_end
        if not self.owner.answered(stream_id, end):
            return
        flags: int | None = w.END_STREAM if end else 0
        while True:
            piece, encoded = encoded[:_CLIENT_FRAME], encoded[_CLIENT_FRAME:]
            kind = w.HEADERS if flags is not None else w.CONTINUATION
            out.append(w.frame(kind, (flags or 0) | (0 if encoded else w.END_HEADERS), stream_id, piece))
            flags = None
            if not encoded:
                break
