"""A scripted HTTP/2 server for the ``wire`` transport's conformance tests (no tests here).

Real HTTP/2 on a loopback socket, built from ``hyperframe`` (frames) and ``hpack`` (header
blocks), a thread per accepted connection: each test scripts what the server sends and reads what
the client sent (SETTINGS and PING are answered, requests recorded per stream).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

import gevent
import hpack
from hyperframe.frame import ContinuationFrame, DataFrame, Frame, HeadersFrame, PingFrame, SettingsFrame

__all__ = ["Conn", "Peer", "grpc_message"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def grpc_message(body: bytes) -> bytes:
    assert body[0] == 0 and int.from_bytes(body[1:5], "big") == len(body) - 5
    return body[5:]


class Conn:
    """One accepted connection: reads frames (answering SETTINGS and PING), records requests."""

    def __init__(self, sock: socket.socket, index: int, settled: threading.Event) -> None:
        self.sock, self.index, self.settled = sock, index, settled
        sock.settimeout(10)
        self.buffer = b""
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.frames: list[Frame] = []  # every frame received, in order
        self.headers: dict[int, dict[bytes, bytes]] = {}
        self.bodies: dict[int, bytearray] = {}
        self.complete: list[int] = []  # streams whose request ended, not yet handed out
        self.open: set[int] = set()  # streams with a request, not answered or reset
        self.max_open = 0
        self.block = b""
        assert self._exact(24) == PREFACE

    def _exact(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def send(self, *frames: Frame | bytes) -> None:
        self.sock.sendall(b"".join(f if isinstance(f, bytes) else f.serialize() for f in frames))

    def reply(self, frame: Frame) -> None:
        """An automatic answer; the client may have closed already (the test reads on to the end)."""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send(frame)

    def start(self, **settings: int) -> None:
        self.send(
            SettingsFrame(0, settings={getattr(SettingsFrame, k.upper()): v for k, v in settings.items()})
        )

    def read(self) -> Frame | None:
        """The next frame (None at the end of the connection); bookkeeping done."""
        try:
            frame, length = Frame.parse_frame_header(memoryview(self._exact(9)))
            frame.parse_body(memoryview(self._exact(length)))
        except (EOFError, ConnectionResetError):
            return None
        self.frames.append(frame)
        sid = frame.stream_id
        if isinstance(frame, SettingsFrame):
            if "ACK" in frame.flags:
                self.settled.set()
            else:
                self.reply(SettingsFrame(0, flags=["ACK"]))
        elif isinstance(frame, PingFrame) and "ACK" not in frame.flags:
            self.reply(PingFrame(0, frame.opaque_data, flags=["ACK"]))
        elif isinstance(frame, HeadersFrame | ContinuationFrame):
            self.block += frame.data
            if "END_HEADERS" in frame.flags:
                self.headers[sid] = {bytes(k): bytes(v) for k, v in self.decoder.decode(self.block, raw=True)}
                self.block = b""
                self.bodies[sid] = bytearray()
                self.open.add(sid)
                self.max_open = max(self.max_open, len(self.open))
        elif isinstance(frame, DataFrame):
            self.bodies[sid] += frame.data
            if "END_STREAM" in frame.flags:
                self.complete.append(sid)
        return frame

    def request(self) -> int:
        """The next stream whose request is complete (in the order they completed)."""
        while not self.complete:
            assert self.read() is not None, "the client closed the connection"
        return self.complete.pop(0)

    def requests(self, count: int) -> list[int]:
        return [self.request() for _ in range(count)]

    def quiet(self, seconds: float = 0.1) -> None:
        """Read whatever the client sends within ``seconds`` (nothing more is expected)."""
        self.sock.settimeout(seconds)
        try:
            while self.read() is not None:
                pass
        except TimeoutError:
            pass
        finally:
            self.sock.settimeout(10)

    def until_eof(self) -> list[Frame]:
        start = len(self.frames)
        while self.read() is not None:
            pass
        return self.frames[start:]

    def message(self, sid: int) -> bytes:
        return grpc_message(bytes(self.bodies[sid]))

    def answer(self, sid: int, message: bytes | None = None, **trailers: str) -> None:
        """200, the message (the request's own by default) in frames of 16 kB, then the trailers."""
        message = self.message(sid) if message is None else message
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        frames: list[Frame] = [
            self.headers_frame(sid, {":status": "200", "content-type": "application/grpc"})
        ]
        frames += [DataFrame(sid, body[at : at + 16_384]) for at in range(0, len(body), 16_384)]
        fields = {"grpc-status": "0", **{k.replace("_", "-"): v for k, v in trailers.items()}}
        frames.append(self.headers_frame(sid, fields, end_stream=True))
        self.send(*frames)
        self.open.discard(sid)

    def headers_frame(self, sid: int, fields: dict[str, str], end_stream: bool = False) -> HeadersFrame:
        flags = ["END_HEADERS"] + (["END_STREAM"] if end_stream else [])
        return HeadersFrame(sid, self.encoder.encode(list(fields.items())), flags=flags)


class Peer:
    """A scripted HTTP/2 server: ``script(conn)`` runs in a thread per accepted connection."""

    def __init__(self, script: Callable[[Conn], None], connections: int = 1) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.settled = [threading.Event() for _ in range(connections)]
        self.conns: list[Conn] = []
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.script = script
        self.acceptor = threading.Thread(target=self._accept, args=(connections,), daemon=True)
        self.acceptor.start()

    def _accept(self, connections: int) -> None:
        self.listener.settimeout(20)
        for index in range(connections):
            sock, _ = self.listener.accept()
            thread = threading.Thread(target=self._serve, args=(sock, index), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket, index: int) -> None:
        try:
            conn = Conn(sock, index, self.settled[index])
            self.conns.append(conn)
            self.script(conn)
        except BaseException as exc:
            self.errors.append(exc)
        finally:  # FIN after our last frame; read what the client still sends, so the close is no RST
            try:
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(0.3)
                while sock.recv(1 << 16):
                    pass
            except OSError:
                pass
            sock.close()

    def wait_settled(self, index: int = 0) -> None:
        """Cooperatively wait until the client acknowledged connection ``index``'s SETTINGS."""
        deadline = time.monotonic() + 10
        while not self.settled[index].is_set():
            assert time.monotonic() < deadline, "the client never acknowledged our SETTINGS"
            gevent.sleep(0.005)

    def join(self) -> None:
        deadline = time.monotonic() + 20
        self.acceptor.join(20)
        for thread in self.threads:
            while thread.is_alive() and time.monotonic() < deadline:
                gevent.sleep(0.01)
            assert not thread.is_alive(), "the scripted server is still running"
        self.listener.close()
        if self.errors:
            raise self.errors[0]
