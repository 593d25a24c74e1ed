"""The lone request's gRPC transport: blocking ``ModelInfer`` calls on a socket that speaks HTTP/2 itself.

Why: one request in flight through grpcio's stub paid about 0.2 ms more than perf_analyzer's C++
client on the same server (a python add_one model on a 2-core host: p50 0.69 against 0.48 ms), and
pre-serialized bytes through grpcio were no faster: the cost is grpcio's Python call path (its
completion queue, call objects and thread hand-offs), not the message. A unary gRPC call on a
connection of its own needs a small, fixed part of HTTP/2 (RFC 9113) that costs little in Python:

- the connection preface and SETTINGS are exchanged once per connection (our SETTINGS: no push, the
  largest windows and frames, so answers come in few frames and never wait on our window);
- each pool entry's HEADERS (HPACK-encoded once, with :func:`~tritonkit.serve.grpc_wire.encode_block`:
  static-table references and literals that leave the server's table alone) and DATA frames are
  built once, split by the peer's ``MAX_FRAME_SIZE``; a send patches the stream id into them and
  writes them in one ``sendall``. A request larger than the peer's windows is sent frame by frame as
  its WINDOW_UPDATEs arrive (frames built as they go);
- the answer's frames are read until the trailers: ``grpc-status`` is checked (a non-zero one raises
  :class:`LoneGrpcError`, the ``tritonclient`` exception :class:`~tritonkit.client.transport.GrpcTransport`
  raises, with ``grpc-message`` and the status as ``grpc.StatusCode`` names it); the message is read
  by :func:`~tritonkit.client.codec.grpc_answer` (every output checked, views of the answer's bytes);
- header blocks are decoded in order by one ``hpack`` decoder (:class:`~tritonkit.serve.grpc_wire.BlockDecoder`);
  received DATA is given back by WINDOW_UPDATE; PING and SETTINGS are answered; GOAWAY retires the
  connection (a stream above its last-stream-id was never processed and is sent again on a fresh
  one, as is a call whose reused connection closed before any answer: a server restart);
  RST_STREAM fails the call (REFUSED_STREAM: sent again).

The caller's headers go as gRPC metadata (:func:`~tritonkit.client.protocol.grpc_headers`: the admin
key's restricted twin too) and its timeout both as ``grpc-timeout`` and as the socket's deadline; a
call that runs out of time raises DEADLINE_EXCEEDED and drops its connection. Not implemented (a lone
unary client needs none): TLS, compression (no ``grpc-accept-encoding`` is sent, so Triton answers
uncompressed), several streams at once. Not thread-safe: one sender thread, as the generator's
lone-request path has.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import grpc
from numpy.typing import NDArray
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from tritonkit.client.codec import grpc_answer
from tritonkit.client.protocol import (
    GRPC_INFER_PATH,
    NETWORK_TIMEOUT_S,
    grpc_headers,
    grpc_timeout,
    http2_error_name,
)
from tritonkit.errors import TritonKitError
from tritonkit.serve.grpc_wire import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    BlockDecoder,
    encode_block,
    frame,
    header_fragment,
)

__all__ = ["LoneGrpcError", "LoneGrpcTransport"]

_MAX_WINDOW = (1 << 31) - 1
_DEFAULT_WINDOW = 65_535
#: the frames we take (SETTINGS_MAX_FRAME_SIZE's largest value): a large answer in few DATA frames
_OUR_MAX_FRAME = (1 << 24) - 1
_MAX_STREAM_ID = (1 << 31) - 1
_REFUSED_STREAM = 7
#: times one call is sent again after the server declined it unprocessed
_RESENDS = 3
#: pool entries whose frames are kept (the generator's pools are far smaller)
_PREPARED_ENTRIES = 256
_RECV = 1 << 18
#: grpc-status number -> the status as grpcio names it
_STATUS = {code.value[0]: code for code in grpc.StatusCode}
#: an answer's HTTP status that is not 200 -> gRPC status (gRPC's ``http-grpc-status-mapping.md``)
_HTTP_STATUS = {400: 13, 401: 16, 403: 7, 404: 12, 429: 14, 502: 14, 503: 14, 504: 14}
_CONTROL = {RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE}


class LoneGrpcError(InferenceServerException, TritonKitError):  # type: ignore[misc]  # tritonclient is untyped
    """A failed call, as ``tritonclient.grpc`` reports one: ``[StatusCode.NAME] message``."""

    def __init__(self, code: int, message: str) -> None:
        status = _STATUS.get(code, grpc.StatusCode.UNKNOWN)
        InferenceServerException.__init__(self, msg=message, status=str(status))
        self.code = status


class _ResendError(Exception):
    """The call was never processed (GOAWAY above it, REFUSED_STREAM, a reused connection closed)."""


def _address(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise LoneGrpcError(3, f"gRPC url `{url}`: expected host:port")
    return host.strip("[]"), int(port)


class _Prepared:
    """One request's frames for one header block and frame size: HEADERS (+ CONTINUATION), then DATA,
    laid out once; ``ids`` are the offsets of every frame's stream id, patched per send."""

    __slots__ = ("block", "body", "head", "ids", "max_frame", "request", "wire")

    def __init__(self, request: Any, body: bytes, block: bytes, max_frame: int) -> None:
        self.request, self.body, self.block, self.max_frame = request, body, block, max_frame
        wire, ids = bytearray(), []
        chunks = [block[at : at + max_frame] for at in range(0, len(block), max_frame)] or [b""]
        for index, chunk in enumerate(chunks):
            ids.append(len(wire) + 5)
            last = END_HEADERS if index == len(chunks) - 1 else 0
            wire += frame(HEADERS if index == 0 else CONTINUATION, last, 0, chunk)
        self.head = len(wire)
        for at in range(0, len(body), max_frame):
            ids.append(len(wire) + 5)
            wire += frame(
                DATA, END_STREAM if at + max_frame >= len(body) else 0, 0, body[at : at + max_frame]
            )
        self.wire, self.ids = wire, ids

    def patched(self, stream_id: int) -> bytearray:
        wire, pack = self.wire, struct.pack_into
        for at in self.ids:
            pack(">L", wire, at, stream_id)
        return wire


class _Connection:
    """One HTTP/2 connection carrying one stream at a time."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = BlockDecoder(1 << 20)
        self.inbox = bytearray()
        self.next_id = 1
        self.used = False  # a call was answered on it: a close before the next answer may be a restart
        self.retiring = False
        self.last_id = _MAX_STREAM_ID
        self.send_window = _DEFAULT_WINDOW
        self.initial_window = _DEFAULT_WINDOW
        self.max_frame = 16_384
        self.received = 0
        self.settled = False  # the peer's first SETTINGS read
        self._continuation: tuple[int, int, bytearray] | None = None
        self._stream = 0
        self._window = 0
        self._head: list[tuple[bytes, bytes]] | None = None
        self._parts: list[bytes] = []
        self._tail: list[tuple[bytes, bytes]] | None = None
        self._reset: int | None = None
        try:
            settings = struct.pack(">HLHLHL", 0x2, 0, 0x4, _MAX_WINDOW, 0x5, _OUR_MAX_FRAME)
            self.sock.sendall(
                PREFACE
                + frame(SETTINGS, 0, 0, settings)
                + frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", _MAX_WINDOW - _DEFAULT_WINDOW))
            )
            deadline = time.perf_counter() + timeout
            while not self.settled:  # the peer's SETTINGS: its frame size and windows
                self._pump(deadline)
        except BaseException:
            self.sock.close()
            raise

    def usable(self) -> bool:
        return not self.retiring and self.next_id <= _MAX_STREAM_ID

    def close(self) -> None:
        try:
            self.sock.sendall(frame(GOAWAY, 0, 0, struct.pack(">LL", 0, 0)))
        except OSError:
            pass
        finally:
            self.sock.close()

    # -- one call --------------------------------------------------------------------------------
    def call(self, prepared: _Prepared, deadline: float | None) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """Send ``prepared`` on a new stream; (trailers, the answer's body) once its trailers came."""
        stream_id, self.next_id = self.next_id, self.next_id + 2
        self._stream, self._window = stream_id, self.initial_window
        self._head, self._parts, self._tail, self._reset = None, [], None, None
        size = len(prepared.body)
        self._settimeout(deadline)
        try:
            if size <= self.send_window and size <= self._window:
                self.send_window -= size
                self._window -= size
                self.sock.sendall(prepared.patched(stream_id))
            else:
                self._send_slowly(prepared, stream_id, deadline)
            while self._tail is None and self._reset is None:
                self._pump(deadline)
        except TimeoutError:
            raise
        except (OSError, EOFError) as exc:
            self.retiring = True
            if self._head is None and (self.used or stream_id > self.last_id):
                raise _ResendError from None
            raise LoneGrpcError(
                14, f"the connection to Triton closed ({exc or type(exc).__name__})"
            ) from None
        if self._reset is not None:
            if self._reset == _REFUSED_STREAM or stream_id > self.last_id:
                raise _ResendError
            raise LoneGrpcError(13, f"Triton reset the stream (HTTP/2 {http2_error_name(self._reset)})")
        self.used = True
        return self._answer()

    def _answer(self) -> tuple[list[tuple[bytes, bytes]], bytes]:
        head, tail = self._head or [], self._tail or []
        status = dict(head).get(b":status", b"")
        if status != b"200":
            code = _HTTP_STATUS.get(int(status) if status.isdigit() else 0, 2)
            raise LoneGrpcError(code, f"Triton answered HTTP status {status.decode(errors='replace')}")
        parts = self._parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return tail, body

    def _send_slowly(self, prepared: _Prepared, stream_id: int, deadline: float | None) -> None:
        """HEADERS, then DATA as the peer's windows allow (frames made as they go)."""
        self.sock.sendall(prepared.patched(stream_id)[: prepared.head])
        view, at, size = memoryview(prepared.body), 0, len(prepared.body)
        while at < size:
            room = min(self.send_window, self._window, self.max_frame, size - at)
            if room <= 0:
                if self._tail is not None or self._reset is not None:
                    return  # answered (an error) before the whole request went
                self._pump(deadline)
                continue
            self.send_window -= room
            self._window -= room
            end = at + room
            flags = END_STREAM if end >= size else 0
            self.sock.sendall(FRAME.pack(room >> 8, room & 0xFF, DATA, flags, stream_id))
            self.sock.sendall(view[at:end])
            at = end

    def _settimeout(self, deadline: float | None) -> None:
        if deadline is None:
            self.sock.settimeout(None)
            return
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)

    # -- reading ---------------------------------------------------------------------------------
    def _pump(self, deadline: float | None) -> None:
        """Read once and handle every whole frame read so far; answer what needs an answer."""
        inbox = self.inbox
        chunk = self.sock.recv(_RECV)
        if not chunk:
            raise EOFError("closed by the server")
        inbox += chunk
        offset, size, out = 0, len(inbox), bytearray()
        view = memoryview(inbox)
        try:
            while size - offset >= 9:
                high, low, kind, flags, stream_id = FRAME.unpack_from(inbox, offset)
                length = (high << 8) | low
                if length > _OUR_MAX_FRAME:
                    raise self._protocol_error(f"a frame of {length} bytes")
                end = offset + 9 + length
                if end > size:
                    break
                self._frame(kind, flags, stream_id & _MAX_STREAM_ID, view[offset + 9 : end], out)
                offset = end
        finally:
            view.release()
        del inbox[:offset]
        if self.received > _MAX_WINDOW // 2:
            out += frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", self.received))
            self.received = 0
        if out:
            self.sock.sendall(out)
        if self._tail is None and self._reset is None and deadline is not None:
            self._settimeout(deadline)

    def _frame(self, kind: int, flags: int, stream_id: int, payload: memoryview, out: bytearray) -> None:
        """Handle one frame: DATA and HEADERS here, CONTINUATION and the control frames by their own methods."""
        if self._continuation is not None and kind != CONTINUATION:
            raise self._protocol_error(f"frame type {kind} inside a header block")
        if kind == DATA:
            self.received += len(payload)
            if stream_id == self._stream and self._head is not None:
                if flags & PADDED:
                    payload = self._unpadded(payload)
                self._parts.append(payload.tobytes())
                if flags & END_STREAM:  # trailers missing
                    self._tail = []
            return
        if kind == HEADERS:
            try:
                block = header_fragment(flags, payload.tobytes())
            except ValueError as exc:
                raise self._protocol_error(str(exc)) from None
            if flags & END_HEADERS:
                self._headers(stream_id, flags, block)
            else:
                self._continuation = (stream_id, flags, bytearray(block))
            return
        if kind == CONTINUATION:
            self._continued(flags, stream_id, payload)
            return
        if kind in _CONTROL:
            self._control(kind, flags, stream_id, payload, out)

    def _unpadded(self, payload: memoryview) -> memoryview:
        """A PADDED DATA frame's data, without its pad length and padding (§6.1)."""
        pad = payload[0] if payload else 0
        if not payload or pad >= len(payload):
            raise self._protocol_error("DATA padding as long as the frame")
        return payload[1 : len(payload) - pad]

    def _continued(self, flags: int, stream_id: int, payload: memoryview) -> None:
        """The rest of a header block (§6.10); its last piece hands the whole block on."""
        if self._continuation is None or self._continuation[0] != stream_id:
            raise self._protocol_error("CONTINUATION without a HEADERS frame before it")
        self._continuation[2].extend(payload)
        if flags & END_HEADERS:
            first_stream, first_flags, whole = self._continuation
            self._continuation = None
            self._headers(first_stream, first_flags, bytes(whole))

    def _control(self, kind: int, flags: int, stream_id: int, payload: memoryview, out: bytearray) -> None:
        if kind == SETTINGS:
            if not flags & ACK:
                self._settings(payload)
                out += frame(SETTINGS, ACK, 0)
                self.settled = True
        elif kind == PING:
            if not flags & ACK:
                out += frame(PING, ACK, 0, payload.tobytes())
        elif kind == WINDOW_UPDATE and len(payload) == 4:
            (increment,) = struct.unpack_from(">L", payload)
            if stream_id == 0:
                self.send_window += increment & _MAX_WINDOW
            elif stream_id == self._stream:
                self._window += increment & _MAX_WINDOW
        elif kind == RST_STREAM and len(payload) == 4:
            if stream_id == self._stream and self._tail is None:
                (self._reset,) = struct.unpack_from(">L", payload)
        elif kind == GOAWAY and len(payload) >= 8:
            last_id, code = struct.unpack_from(">LL", payload)
            self.retiring, self.last_id = True, min(self.last_id, last_id & _MAX_STREAM_ID)
            if self._stream > self.last_id and self._tail is None:
                raise _ResendError
            if code and self._tail is None:
                detail = payload[8:].tobytes().decode(errors="replace")
                raise LoneGrpcError(
                    14, f"Triton ended the connection (GOAWAY {http2_error_name(code)}) {detail}".strip()
                )

    def _settings(self, payload: memoryview) -> None:
        if len(payload) % 6:
            raise self._protocol_error(f"SETTINGS of {len(payload)} bytes")
        for at in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HL", payload, at)
            if key == 0x4 and value <= _MAX_WINDOW:  # INITIAL_WINDOW_SIZE: open streams too (§6.9.2)
                self._window += value - self.initial_window
                self.initial_window = value
            elif key == 0x5 and 16_384 <= value < 1 << 24:
                self.max_frame = value

    def _headers(self, stream_id: int, flags: int, block: bytes) -> None:
        try:
            fields = self.decoder.decode(block)  # every block, in order: the table follows the server's
        except Exception as exc:
            raise self._protocol_error(f"a header block hpack cannot read ({exc})") from None
        if stream_id != self._stream:
            return
        if self._head is None:
            self._head = fields
            if flags & END_STREAM:  # trailers-only: an answer that is only its status
                self._tail = fields
        else:
            self._tail = fields

    def _protocol_error(self, reason: str) -> LoneGrpcError:
        self.retiring = True
        return LoneGrpcError(13, f"HTTP/2 protocol error reading Triton's answer: {reason}")


class LoneGrpcTransport:
    """KServe v2 ``ModelInfer`` over gRPC on one connection of its own (see the module's doc): ``infer``
    and ``close``, as :class:`~tritonkit.client.transport.GrpcTransport` offers them."""

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, network_timeout: float | None = None
    ) -> None:
        self.url = url
        self._host, self._port = _address(url)
        self._connect_timeout = network_timeout or NETWORK_TIMEOUT_S
        fields = [(":method", "POST"), (":scheme", "http"), (":path", GRPC_INFER_PATH), (":authority", url),
                  ("content-type", "application/grpc"), ("te", "trailers"),
                  *(grpc_headers(headers) or {}).items()]  # fmt: skip
        self._fields = [(k.encode(), v.encode()) for k, v in fields]
        self._blocks: dict[float | None, bytes] = {}
        self._prepared: dict[int, _Prepared] = {}
        self._connection: _Connection | None = None

    def _block(self, timeout: float | None) -> bytes:
        block = self._blocks.get(timeout)
        if block is None:
            extra = [] if timeout is None else [(b"grpc-timeout", grpc_timeout(timeout).encode())]
            block = self._blocks[timeout] = encode_block([*self._fields, *extra])
        return block

    def _prepare(self, request: service_pb2.ModelInferRequest, block: bytes, max_frame: int) -> _Prepared:
        prepared = self._prepared.get(id(request))
        if prepared is None or prepared.request is not request:
            message = request.SerializeToString()
            body = b"\x00" + len(message).to_bytes(4, "big") + message
        elif prepared.block is block and prepared.max_frame == max_frame:
            return prepared
        else:
            body = prepared.body
        if len(self._prepared) >= _PREPARED_ENTRIES:
            self._prepared.clear()
        prepared = self._prepared[id(request)] = _Prepared(request, body, block, max_frame)
        return prepared

    def _connect(self, deadline: float | None) -> _Connection:
        connection = self._connection
        if connection is not None and connection.usable():
            return connection
        self._drop()
        timeout = self._connect_timeout if deadline is None else max(deadline - time.perf_counter(), 1e-3)
        try:
            connection = self._connection = _Connection(self._host, self._port, timeout)
        except TimeoutError:
            raise LoneGrpcError(4, "Deadline Exceeded") from None
        except (OSError, EOFError) as exc:
            raise LoneGrpcError(14, f"cannot reach Triton's gRPC endpoint at {self.url}: {exc}") from None
        return connection

    def infer(
        self, request: service_pb2.ModelInferRequest, names: tuple[str, ...], timeout: float | None
    ) -> dict[str, NDArray[Any]]:
        """Send an encoded request; ``{name: array}`` of the answer (a failed call raises :class:`LoneGrpcError`)."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        block = self._block(timeout)
        for _ in range(_RESENDS + 1):
            connection = self._connect(deadline)
            prepared = self._prepare(request, block, connection.max_frame)
            try:
                trailers, body = connection.call(prepared, deadline)
            except _ResendError:
                self._drop()
                continue
            except TimeoutError:
                self._drop()
                raise LoneGrpcError(4, "Deadline Exceeded") from None
            except LoneGrpcError:
                if connection.retiring:
                    self._drop()
                raise
            if connection.retiring:
                self._drop()
            return _result(trailers, body, names)
        raise LoneGrpcError(14, f"Triton declined the call unprocessed {_RESENDS + 1} times (GOAWAY)")

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def close(self) -> None:
        self._drop()
        self._prepared.clear()


def _result(
    trailers: list[tuple[bytes, bytes]], body: bytes, names: tuple[str, ...]
) -> dict[str, NDArray[Any]]:
    """The answer's outputs once its trailers say OK and its body is one uncompressed message."""
    fields = dict(trailers)
    status = fields.get(b"grpc-status")
    if status is None:
        raise LoneGrpcError(13, "Triton's answer ended without a grpc-status")
    if status != b"0":
        message = unquote(fields.get(b"grpc-message", b"").decode(errors="replace"))
        raise LoneGrpcError(int(status) if status.isdigit() else 2, message)
    if len(body) < 5 or body[0] != 0 or int.from_bytes(body[1:5], "big") != len(body) - 5:
        raise LoneGrpcError(13, f"Triton's answer is not one uncompressed gRPC message ({len(body)} bytes)")
    return grpc_answer(memoryview(body)[5:], names)  # type: ignore[arg-type]  # upb reads any buffer
