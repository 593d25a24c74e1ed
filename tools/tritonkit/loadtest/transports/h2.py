"""The in-process gRPC transport: gRPC's wire protocol spoken over one HTTP/2 connection with ``h2``.

Why not ``grpcio`` here: Locust monkey-patches ``threading``, so grpcio's Python threads become
greenlets that block the hub (``shared/docs/ENVIRONMENT.md``), and running ``grpc.aio`` on a
native thread of a patched process crashed in ``AioChannel`` (measured here). gRPC is plain
HTTP/2 underneath, and ``h2`` (python-hyper's sans-I/O HTTP/2 state machine) lets the gevent hub
own the socket: every user of the process multiplexes its requests as streams of one
connection, request frames queued during one loop turn leave in one ``send``, and one I/O
watcher reads answers and wakes the finished greenlets from the hub. No threads, no extra
process, no per-request protobuf encoding (bodies are serialized once per payload). The gevent side
(the socket, waiting, gRPC status) is :mod:`.grpc_hub`'s, shared with :mod:`.grpc_wire`.

The gRPC framing used (``PROTOCOL-HTTP2.md``): ``POST /inference.GRPCInferenceService/ModelInfer``
with ``content-type: application/grpc`` and ``te: trailers``; the body is a 5-byte prefix
(compressed flag, big-endian length) and the serialized ``ModelInferRequest``; the status comes
in ``grpc-status`` / ``grpc-message`` (percent-encoded) trailers, or in the headers of a
trailers-only answer.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from gevent.hub import Waiter

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.transports.hub import PATH, GrpcResult, HubConnection, Stream, grpc_body, parse_answer

__all__ = ["H2GrpcConnection", "H2GrpcError", "parse_answer"]

_WINDOW = (1 << 31) - 1 - 65535  # open the receive window wide once: answers never wait for credit

#: (seconds, response message bytes or None, error text or None)
H2Result = GrpcResult


class H2GrpcError(LoadTestError):
    """The HTTP/2 connection to Triton's gRPC endpoint failed or closed."""


class H2GrpcConnection(HubConnection):
    """One HTTP/2 connection carrying the unary ``ModelInfer`` calls of every user of a process."""

    error: ClassVar[type[LoadTestError]] = H2GrpcError

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        import h2.config
        import h2.connection
        import h2.events

        super().__init__(url, timeout)
        self._events = h2.events
        self._headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", PATH.encode()),
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
        self._blocked: list[int] = []  # streams whose body waits for send credit
        self._start()

    # --- user side ---------------------------------------------------------------------------
    def infer(self, message: bytes, timeout: float | None = None) -> H2Result:
        """Send one serialized ``ModelInferRequest``; wait cooperatively for (seconds, answer, error)."""
        if self.closed is not None:
            raise H2GrpcError(self.closed)
        stream_id = self._conn.get_next_available_stream_id()
        waiter: Waiter[H2Result] = Waiter()
        stream = self._streams[stream_id] = Stream(waiter, grpc_body(message))
        try:
            self._conn.send_headers(stream_id, self._headers)
        except Exception as exc:  # e.g. too many concurrent streams: the request fails, not the user
            del self._streams[stream_id]
            raise H2GrpcError(
                f"cannot open an HTTP/2 stream to Triton: {type(exc).__name__}: {exc}"
            ) from None
        self._send_body(stream_id, stream)
        return self._wait(stream_id, waiter, timeout)

    def _cancel(self, stream_id: int) -> None:
        self._conn.reset_stream(stream_id)

    def close(self) -> None:
        if self.closed is None:
            with contextlib.suppress(Exception):
                self._conn.close_connection()
                self._sock.send(self._conn.data_to_send())
            self._die("the connection was closed")

    # --- hub side ----------------------------------------------------------------------------
    def _send_body(self, stream_id: int, stream: Stream) -> None:
        conn = self._conn
        while stream.body:
            room = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if room <= 0:
                self._blocked.append(stream_id)
                return
            chunk, stream.body = stream.body[:room], stream.body[room:]
            conn.send_data(stream_id, chunk, end_stream=not stream.body)

    def _flush(self) -> None:
        if self.closed is None:
            self._outgoing += self._conn.data_to_send()
        super()._flush()

    def _on_data(self, data: bytes) -> None:
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
