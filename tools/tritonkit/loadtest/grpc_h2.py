"""The in-process gRPC transport: gRPC's wire protocol spoken over one HTTP/2 connection with ``h2``.

Why not ``grpcio`` here: Locust monkey-patches ``threading``, so grpcio's Python threads become
greenlets that block the hub (``shared/docs/ENVIRONMENT.md``), and running ``grpc.aio`` on a
native thread of a patched process crashed in ``AioChannel`` (measured here). gRPC is plain
HTTP/2 underneath, and ``h2`` (python-hyper's sans-I/O HTTP/2 state machine) lets the gevent hub
own the socket: every user of the process multiplexes its requests as streams of one
connection, request frames queued during one loop turn leave in one ``send``, and one I/O
watcher reads answers and wakes the finished greenlets from the hub. No threads, no extra
process, no per-request protobuf encoding (bodies are serialized once per payload).

The gRPC framing used (``PROTOCOL-HTTP2.md``): ``POST /inference.GRPCInferenceService/ModelInfer``
with ``content-type: application/grpc`` and ``te: trailers``; the body is a 5-byte prefix
(compressed flag, big-endian length) and the serialized ``ModelInferRequest``; the status comes
in ``grpc-status`` / ``grpc-message`` (percent-encoded) trailers, or in the headers of a
trailers-only answer.
"""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.parse
from typing import Any, ClassVar

from gevent.hub import Waiter, get_hub

from tritonkit.errors import LoadTestError

__all__ = ["H2GrpcConnection", "H2GrpcError"]

_PATH = b"/inference.GRPCInferenceService/ModelInfer"
_WINDOW = (1 << 31) - 1 - 65535  # open the receive window wide once: answers never wait for credit
_GRPC_STATUS = {
    "1": "CANCELLED",
    "2": "UNKNOWN",
    "3": "INVALID_ARGUMENT",
    "4": "DEADLINE_EXCEEDED",
    "5": "NOT_FOUND",
    "8": "RESOURCE_EXHAUSTED",
    "12": "UNIMPLEMENTED",
    "13": "INTERNAL",
    "14": "UNAVAILABLE",
}

#: (seconds, response message bytes or None, error text or None)
H2Result = tuple[float, bytes | None, str | None]


class H2GrpcError(LoadTestError):
    """The HTTP/2 connection to Triton's gRPC endpoint failed or closed."""


class _Stream:
    __slots__ = ("body", "data", "headers", "start", "waiter")

    def __init__(self, waiter: Waiter[H2Result], body: bytes) -> None:
        self.waiter = waiter
        self.body = body  # what is left to send (flow control may hold part of it back)
        self.data = bytearray()
        self.headers: dict[bytes, bytes] = {}
        self.start = time.perf_counter()


class H2GrpcConnection:
    """One HTTP/2 connection carrying the unary ``ModelInfer`` calls of every user of a process."""

    _shared: ClassVar[dict[str, H2GrpcConnection]] = {}

    @classmethod
    def shared(cls, url: str) -> H2GrpcConnection:
        connection = cls._shared.get(url)
        if connection is None or connection.closed is not None:
            connection = cls._shared[url] = cls(url)
        return connection

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        import h2.config
        import h2.connection
        import h2.events

        self._events = h2.events
        host, _, port = url.rpartition(":")
        try:
            self._sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout)
        except (OSError, ValueError) as exc:
            raise H2GrpcError(f"cannot connect to Triton's gRPC endpoint {url}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.setblocking(False)
        self.closed: str | None = None
        self._headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", _PATH),
            (b":authority", url.encode()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        # Header validation and normalization are for untrusted peers and free-form headers; ours
        # are six constants and Triton's answers are gRPC's: skipping them saves a fifth of the cost.
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
            normalize_inbound_headers=False,
        )
        self._conn = h2.connection.H2Connection(config=config)
        self._conn.initiate_connection()
        self._conn.increment_flow_control_window(_WINDOW)
        self._streams: dict[int, _Stream] = {}
        self._blocked: list[int] = []  # streams whose body waits for send credit
        self._outgoing = bytearray()
        self._flush_scheduled = False
        self._hub = get_hub()
        self._reader = self._hub.loop.io(self._sock.fileno(), 1)
        self._reader.start(self._on_readable)
        self._writer = self._hub.loop.io(self._sock.fileno(), 2)
        self._schedule_flush()

    # --- user side ---------------------------------------------------------------------------
    def infer(self, message: bytes, timeout: float | None = None) -> H2Result:
        """Send one serialized ``ModelInferRequest``; wait cooperatively for (seconds, answer, error)."""
        import gevent

        if self.closed is not None:
            raise H2GrpcError(self.closed)
        stream_id = self._conn.get_next_available_stream_id()
        waiter: Waiter[H2Result] = Waiter()
        stream = self._streams[stream_id] = _Stream(
            waiter, b"\x00" + len(message).to_bytes(4, "big") + message
        )
        try:
            self._conn.send_headers(stream_id, self._headers)
        except Exception as exc:  # e.g. too many concurrent streams: the request fails, not the user
            del self._streams[stream_id]
            raise H2GrpcError(
                f"cannot open an HTTP/2 stream to Triton: {type(exc).__name__}: {exc}"
            ) from None
        self._send_body(stream_id, stream)
        self._schedule_flush()
        try:
            with gevent.Timeout(timeout, H2GrpcError(f"no answer from Triton within {timeout} s")):
                result: H2Result = waiter.get()
                return result
        finally:
            if self._streams.pop(stream_id, None) is not None and self.closed is None:
                with contextlib.suppress(Exception):  # given up (timeout, user stopped): tell the server
                    self._conn.reset_stream(stream_id)
                    self._schedule_flush()

    def close(self) -> None:
        if self.closed is None:
            with contextlib.suppress(Exception):
                self._conn.close_connection()
                self._sock.send(self._conn.data_to_send())
            self._die("the connection was closed")

    # --- hub side ----------------------------------------------------------------------------
    def _send_body(self, stream_id: int, stream: _Stream) -> None:
        conn = self._conn
        while stream.body:
            room = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if room <= 0:
                self._blocked.append(stream_id)
                return
            chunk, stream.body = stream.body[:room], stream.body[room:]
            conn.send_data(stream_id, chunk, end_stream=not stream.body)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._hub.loop.run_callback(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed is not None:
            return
        self._outgoing += self._conn.data_to_send()
        if not self._outgoing:
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
        try:
            events = self._conn.receive_data(data)
        except Exception as exc:
            self._die(f"HTTP/2 protocol error from Triton: {type(exc).__name__}: {exc}")
            return
        ev = self._events
        streams = self._streams
        event: Any
        for event in events:
            kind = type(event)
            if kind is ev.DataReceived:
                stream = streams.get(event.stream_id)
                if stream is not None:
                    stream.data += event.data
                if event.flow_controlled_length:
                    self._conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif kind is ev.ResponseReceived or kind is ev.TrailersReceived:
                stream = streams.get(event.stream_id)
                if stream is not None:
                    stream.headers.update(event.headers)
            elif kind is ev.StreamEnded:
                self._finish(event.stream_id)
            elif kind is ev.StreamReset:
                self._fail(event.stream_id, f"Triton reset the stream (HTTP/2 error {event.error_code})")
            elif kind is ev.WindowUpdated:
                blocked, self._blocked = self._blocked, []
                for stream_id in blocked:
                    if (stream := streams.get(stream_id)) is not None:
                        self._send_body(stream_id, stream)
            elif kind is ev.ConnectionTerminated:
                self._die(f"Triton ended the HTTP/2 connection (error {event.error_code})")
                return
        self._schedule_flush()

    def _finish(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        seconds = time.perf_counter() - stream.start
        headers = stream.headers
        status = headers.get(b"grpc-status", b"").decode()
        if status == "0":
            data = stream.data
            if len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
                stream.waiter.switch(
                    (seconds, None, "malformed gRPC answer (expected one uncompressed message)")
                )
            else:
                stream.waiter.switch((seconds, bytes(data[5:]), None))
            return
        message = urllib.parse.unquote(headers.get(b"grpc-message", b"").decode(errors="replace"))
        if not status:
            http_status = headers.get(b":status", b"?").decode()
            message = message or f"no grpc-status in Triton's answer (HTTP status {http_status})"
        stream.waiter.switch((seconds, None, message or _GRPC_STATUS.get(status, f"gRPC status {status}")))

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

        def fail() -> None:  # Waiter.switch only from the hub
            for stream in streams.values():
                stream.waiter.throw(H2GrpcError(reason))

        self._hub.loop.run_callback(fail)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._sock.close()


def parse_answer(message: bytes) -> Any:
    """The ``ModelInferResponse`` in an answer's bytes."""
    from tritonclient.grpc import service_pb2

    return service_pb2.ModelInferResponse.FromString(message)
