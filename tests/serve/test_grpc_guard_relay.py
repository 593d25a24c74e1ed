"""The gRPC guard's reading of DATA as slices of each read (serve/grpc_relay.py), against a stand-in for
Triton that records what reaches it: a request cut into frames of any size (padded ones too), written
in pieces that cut frame headers and payloads anywhere, reaches Triton byte for byte, whole, after its
check; a refused one never reaches it whole."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import hpack
import pytest
from tritonclient.grpc import service_pb2

from tritonkit.serve import grpc_guard, grpc_relay
from tritonkit.serve.grpc_guard import GrpcGuard

_FRAME = struct.Struct(">HBBBL")
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_BIG = 4 << 20


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return _FRAME.pack(len(payload) >> 8, len(payload) & 0xFF, kind, flags, stream_id) + payload


def _frames(data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    while len(data) >= 9:
        high, low, kind, flags, stream_id = _FRAME.unpack_from(data)
        length = (high << 8) | low
        if len(data) < 9 + length:
            return
        yield kind, flags, stream_id, data[9 : 9 + length]
        data = data[9 + length :]


class _Triton:
    """Accepts the guard's connection, grants it 4 MiB windows and frames, and keeps what it is sent."""

    def __init__(self) -> None:
        self.got = bytearray()
        self.transports: list[asyncio.BaseTransport] = []
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(self.loop.create_server(self._protocol, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def _protocol(self) -> asyncio.Protocol:
        triton = self

        class Side(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                settings = struct.pack(">HIHI", 4, _BIG, 5, _BIG)
                update = _frame(8, 0, 0, struct.pack(">I", _BIG))
                assert isinstance(transport, asyncio.Transport)
                triton.transports.append(transport)
                transport.write(_frame(4, 0, 0, settings) + update)

            def data_received(self, data: bytes) -> None:
                triton.got += data

        return Side()

    def stream_data(self, stream_id: int) -> tuple[bytes, bool]:
        """(the DATA payload Triton got on the stream, whether it was reset)."""
        body = bytes(self.got)[len(_PREFACE) :]
        data = b"".join(p for kind, _, sid, p in _frames(body) if kind == 0 and sid == stream_id)
        reset = any(kind == 3 and sid == stream_id for kind, _, sid, _ in _frames(body))
        return data, reset

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        for transport in self.transports:
            transport.close()
        self.server.close()
        self.loop.run_until_complete(self.server.wait_closed())
        self.loop.close()


@contextlib.contextmanager
def _guard_before_triton() -> Iterator[tuple[GrpcGuard, _Triton]]:
    """A guard on a free port in front of the recording stand-in for Triton."""
    triton = _Triton()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    guard = GrpcGuard("127.0.0.1", port, triton.port, max_message_bytes=8 << 20)
    guard.start()
    try:
        yield guard, triton
    finally:
        guard.close()
        triton.close()


@pytest.fixture
def guarded() -> Iterator[tuple[GrpcGuard, _Triton]]:
    with _guard_before_triton() as pair:
        yield pair


def _infer_headers() -> bytes:
    """The header block of a ModelInfer call."""
    return hpack.Encoder().encode(
        [(":method", "POST"), (":scheme", "http"), (":path", "/inference.GRPCInferenceService/ModelInfer"),
         (":authority", "x"), ("content-type", "application/grpc"), ("te", "trailers")]
    )  # fmt: skip


def _message(shape: list[int], size: int) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="X", datatype="FP32", shape=shape)
    request.raw_input_contents.append(bytes(random.Random(size).randbytes(size)))
    body = request.SerializeToString()
    return struct.pack(">BI", 0, len(body)) + body


def _send(port: int, message: bytes, seed: int) -> socket.socket:
    """The call, its message in DATA frames of random sizes (some padded), written in random pieces."""
    rng = random.Random(seed)
    frames = [_frame(1, 4, 1, _infer_headers())]
    at = 0
    while at < len(message):
        size = rng.choice([1, 4, 5, 9, 100, 16_384, 200_000, 1 << 20])
        piece, at = message[at : at + size], at + size
        end = 1 if at >= len(message) else 0
        if rng.random() < 0.2:
            pad = rng.randrange(0, 20)
            frames.append(_frame(0, end | 0x8, 1, bytes([pad]) + piece + b"\0" * pad))
        else:
            frames.append(_frame(0, end, 1, piece))
    wire = b"".join(frames)
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(_PREFACE + _frame(4, 0, 0))
    _read_until(sock, lambda kind, flags, sid: kind == 4 and not flags & 1)  # Triton's 4 MiB frames
    at = 0
    while at < len(wire):
        size = rng.choice([1, 3, 8, 9, 10, 4096, 65_536, 300_000])
        sock.sendall(wire[at : at + size])
        at += size
        if rng.random() < 0.05:
            time.sleep(0.002)  # so that the guard reads it in pieces
    return sock


def _read_until(sock: socket.socket, wanted: Callable[[int, int, int], bool]) -> bytes:
    """Read frames until one that ``wanted(kind, flags, stream_id)``; returns all read."""
    got = b""
    while not any(wanted(kind, flags, sid) for kind, flags, sid, _ in _frames(got)):
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        got += chunk
    return got


def _wait(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("seed", range(6))
def test_a_request_cut_anywhere_reaches_triton_whole(guarded: tuple[GrpcGuard, _Triton], seed: int) -> None:
    guard, triton = guarded
    message = _message([1, 3, 224, 224], 602_112) if seed % 2 else _message([1, 4], 16)
    with _send(guard.port, message, seed):
        assert _wait(lambda: len(triton.stream_data(1)[0]) >= len(message))
        data, reset = triton.stream_data(1)
        assert data == message and not reset
        assert _wait(lambda: guard.buffered == 0)


def test_a_refused_request_never_reaches_triton_whole(guarded: tuple[GrpcGuard, _Triton]) -> None:
    guard, triton = guarded
    message = _message([1, -4, -4], 602_112)
    with _send(guard.port, message, 7) as sock:
        answer = _read_until(sock, lambda kind, flags, sid: kind == 1 and sid == 1)
        assert b"grpc-status" in answer or b"negative" in answer
        assert _wait(lambda: triton.stream_data(1)[1])  # Triton was told to forget the stream
        data, _ = triton.stream_data(1)
        assert len(data) < len(message)
        assert guard.refused == 1 and _wait(lambda: guard.buffered == 0)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_what_comes_before_tritons_connection_is_up_reaches_it(
    loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's preface and first call, sent the moment it connects, while the guard's connection to
    Triton is still coming up (held back here by 0.3 s): uvloop hands the guard that first read although
    the guard paused reading in ``connection_made``. Once dropped, so perf_analyzer's first call on a
    16-core host (its preface before the guard's link) ended 'Socket closed'."""
    uvloop = pytest.importorskip("uvloop", reason="uvloop is in the dev extra") if loop == "uvloop" else None
    monkeypatch.setattr(
        grpc_guard, "_event_loop", uvloop.new_event_loop if uvloop is not None else asyncio.new_event_loop
    )
    connect = grpc_relay.ClientSide._connect

    async def slow_connect(self: grpc_relay.ClientSide) -> None:
        await asyncio.sleep(0.3)
        await connect(self)

    monkeypatch.setattr(grpc_relay.ClientSide, "_connect", slow_connect)
    with _guard_before_triton() as (guard, triton):
        assert isinstance(guard._loop, uvloop.Loop) if uvloop is not None else True
        message = _message([1, 4], 16)
        call = _frame(1, 4, 1, _infer_headers()) + _frame(0, 1, 1, message)
        with socket.create_connection(("127.0.0.1", guard.port), timeout=10) as sock:
            sock.sendall(_PREFACE + _frame(4, 0, 0) + call)
            assert _wait(lambda: len(triton.stream_data(1)[0]) >= len(message))
            assert bytes(triton.got).startswith(_PREFACE + _frame(4, 0, 0))
            assert triton.stream_data(1) == (message, False)
