"""A gRPC call written frame by frame (no flow control, any prefix): what a hostile client sends."""

from __future__ import annotations

import contextlib
import socket
import struct

import hpack

_FRAME = struct.Struct(">HBBBL")
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return _FRAME.pack(len(payload) >> 8, len(payload) & 0xFF, kind, flags, stream_id) + payload


def hold_call(port: int, message: bytes, declared: int) -> socket.socket:
    """A connection whose one call's message is sent in part and held open (close it to end the call)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    block = hpack.Encoder().encode(
        [(":method", "POST"), (":scheme", "http"), (":path", "/inference.GRPCInferenceService/ModelInfer"),
         (":authority", "127.0.0.1"), ("content-type", "application/grpc"), ("te", "trailers")]
    )  # fmt: skip
    body = struct.pack(">BI", 0, declared) + message
    frames = [_frame(0, 0, 1, body[at : at + 16_384]) for at in range(0, len(body), 16_384)]
    sock.sendall(b"".join([_PREFACE, _frame(4, 0, 0), _frame(1, 0x4, 1, block), *frames]))
    return sock


def raw_call(
    port: int,
    message: bytes,
    *,
    declared: int | None = None,
    compressed: bool = False,
    encoding: str | None = None,
    method: str = "ModelInfer",
    end: bool = True,
    timeout: float = 20.0,
) -> tuple[int | None, str]:
    """Send one call whose 5-byte prefix declares ``declared`` bytes (default: the message's) and return
    (grpc-status, grpc-message), (None, why) where the connection ended without a status."""
    fields = [
        (":method", "POST"), (":scheme", "http"), (":path", f"/inference.GRPCInferenceService/{method}"),
        (":authority", "127.0.0.1"), ("content-type", "application/grpc"), ("te", "trailers"),
    ]  # fmt: skip
    if encoding:
        fields.append(("grpc-encoding", encoding))
    block = hpack.Encoder().encode(fields)
    body = struct.pack(">BI", int(compressed), len(message) if declared is None else declared) + message
    out = [_PREFACE, _frame(4, 0, 0), _frame(1, 0x4, 1, block)]
    for at in range(0, len(body), 16_384):
        last = at + 16_384 >= len(body)
        out.append(_frame(0, 0x1 if last and end else 0, 1, body[at : at + 16_384]))
    decoder = hpack.Decoder()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(OSError):  # refused before all was sent: read the answer
            sock.sendall(b"".join(out))
        buf = b""
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except OSError as exc:
                return None, f"no status: {exc}"
            if not chunk:
                return None, "connection closed without a status"
            buf += chunk
            while len(buf) >= 9:
                high, low, kind, flags, stream_id = _FRAME.unpack_from(buf)
                length = (high << 8) | low
                if len(buf) < 9 + length:
                    break
                payload, buf = buf[9 : 9 + length], buf[9 + length :]
                if kind == 4 and not flags & 1:
                    sock.sendall(_frame(4, 1, 0))
                if kind == 1 and stream_id == 1:
                    headers = dict(decoder.decode(payload))
                    if "grpc-status" in headers:
                        return int(headers["grpc-status"]), headers.get("grpc-message", "")
                if kind == 3 and stream_id == 1:
                    return None, f"RST_STREAM {struct.unpack('>I', payload)[0]}"
